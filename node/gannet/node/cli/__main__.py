"""``python -m gannet.node.cli``: the ``gannet`` command (tests and harnesses start brokers so)."""

from __future__ import annotations

from gannet.node.cli.root import main

if __name__ == "__main__":
    main()
