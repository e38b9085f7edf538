"""``python -m gannet.node`` / ``gannet-node``: start a broker node (``gannet broker run``)."""

from __future__ import annotations

import sys

from gannet.node.cli.root import main as cli_main


def main() -> None:
    cli_main(["broker", "run", *sys.argv[1:]])


if __name__ == "__main__":
    main()
