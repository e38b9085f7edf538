"""Majority arithmetic for a static voter set.

Called by ``core.RaftCore`` to count votes and to compute the commit offset. Kept apart so
the rule "the commit offset is the highest offset durable on a majority" is one short,
separately readable function.
"""

from __future__ import annotations

from collections.abc import Sequence

from gannet.node.invariants import invariant
from gannet.node.raft.messages import ByteOffset


def majority(voter_count: int) -> int:
    """How many voters form a quorum: more than half."""
    invariant(voter_count >= 1, "a group has at least one voter")
    return voter_count // 2 + 1


def quorum_offset(durable_offsets: Sequence[ByteOffset]) -> ByteOffset:
    """The highest offset that at least a majority of the given voters hold durably.

    ``durable_offsets`` has one value per voter (the leader's own durable offset included).
    Sorted descending, the value at position ``majority - 1`` is held by that many voters.
    """
    invariant(len(durable_offsets) >= 1, "one durable offset per voter")
    ordered = sorted(durable_offsets, reverse=True)
    return ordered[majority(len(ordered)) - 1]
