"""The ``invariant`` helper: crash on a broken internal rule.

Used by every module of ``gannet.node.raft``. A plain ``assert`` disappears under
``python -O``; a broken Raft invariant must never be silently skipped, so this raises
``InvariantViolation`` instead, which callers must not catch: no ``except`` around a Raft call
may swallow it, so a broken invariant always stops the node.
"""

from __future__ import annotations


class InvariantViolation(AssertionError):
    """A programmer error inside the Raft core or in the way the driver calls it."""


def invariant(condition: bool, message: str) -> None:
    """Raise ``InvariantViolation(message)`` unless ``condition`` holds."""
    if not condition:
        raise InvariantViolation(message)
