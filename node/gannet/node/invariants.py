"""The one ``invariant`` helper of the broker: crash on a broken internal rule.

Used by the Raft core, the store (records written and read back, consume-queue units, timers),
Pop checkpoints and replication. A plain ``assert`` disappears under ``python -O``; a broken
invariant must never be silently skipped, so this raises ``InvariantViolation`` instead, which
callers must not catch: no ``except`` may swallow it, so a broken invariant always stops the
operation (and, inside Raft, the node). The message must name what was wrong and the values
seen. Checks must be cheap: no IO, no extra pass over the data. On a hot path, where building
the message would cost on every call, write ``if not CONDITION: raise InvariantViolation(...)``:
the same check, its message built only when it fails.
"""

from __future__ import annotations


class InvariantViolation(AssertionError):
    """A programmer error: an internal rule of the broker does not hold."""


def invariant(condition: bool, message: str) -> None:
    """Raise ``InvariantViolation(message)`` unless ``condition`` holds."""
    if not condition:
        raise InvariantViolation(message)
