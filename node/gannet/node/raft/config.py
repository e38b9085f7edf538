"""Configuration and restart state of ``core.RaftCore``, and its status snapshot.

Built by the replication driver from the node's configuration (``gannet.node.config``) and from
what recovery found on disk; read by ``RaftCore``. Every limit is named with its unit. The
callables are the core's only windows on the outside world: seeded randomness for election
jitter, the encoder of the no-op record, and record boundaries in the local commit log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gannet.node.invariants import invariant
from gannet.node.raft.epochs import Epoch
from gannet.node.raft.membership import MembershipEntry
from gannet.node.raft.messages import NO_NODE, ZERO_OFFSET, ZERO_TERM, ByteOffset, NodeId, Term
from gannet.node.raft.ready import HardState, Role

RandomTicks = Callable[[int], int]
"""``random_ticks(n)`` returns an integer in ``[0, n)``; seeded by the driver."""

NoopPayload = Callable[[ByteOffset, Term], bytes]
"""Encodes the leader's election no-op record for ``(offset, term)``; never empty."""

RecordEnd = Callable[[ByteOffset, ByteOffset], ByteOffset]
"""``record_end(start, cap)``: the largest record boundary ``b`` with ``start < b <= cap`` in
the local log, or the end of the record that starts at ``start`` if it alone exceeds ``cap``.
Lets the leader cut ``AppendEntries`` at record boundaries without holding the records."""

MembershipsIn = Callable[[ByteOffset, bytes], tuple[MembershipEntry, ...]]
"""``memberships_in(start, payload)``: the configuration records among the whole records of
``payload`` (written at ``start``), decoded; a follower calls it on what it is about to append.
Raises ``UnreadablePayload`` when it cannot tell (the payload is not whole records, or a
configuration record does not decode): the follower then appends nothing of the message."""


class UnreadablePayload(ValueError):
    """``memberships_in`` could not read a payload: appending it could lose a configuration
    record, so the follower refuses the message (``NodeState.refused_payload`` says why)."""


@dataclass(frozen=True, slots=True)
class Config:
    node_id: NodeId
    voters: tuple[NodeId, ...]
    """The bootstrap configuration (before the first configuration entry of the log); empty
    for a node that joins an existing group (it waits to be added)."""
    random_ticks: RandomTicks
    noop_payload: NoopPayload
    record_end: RecordEnd | None = None
    memberships_in: MembershipsIn | None = None
    election_timeout_ticks: int = 10
    heartbeat_interval_ticks: int = 1
    append_bytes_max: int = 1 << 20
    inflight_messages_max: int = 64
    inflight_bytes_max: int = 8 << 20
    uncommitted_bytes_max: int = 64 << 20
    pre_vote: bool = True
    check_quorum: bool = True

    def __post_init__(self) -> None:
        invariant(len(set(self.voters)) == len(self.voters), "duplicate voter")
        invariant(NO_NODE not in self.voters, "node id 0 is reserved")
        invariant(self.heartbeat_interval_ticks >= 1, "heartbeat every tick at most")
        invariant(
            self.election_timeout_ticks > self.heartbeat_interval_ticks,
            "the election timeout must exceed the heartbeat interval",
        )
        invariant(self.append_bytes_max >= 1, "append_bytes_max must be positive")


@dataclass(frozen=True, slots=True)
class InitialState:
    """What the driver recovered from disk: term and vote, the epoch file, the log end (all
    bytes below it durable) and, if it keeps one, the last known commit offset."""

    hard_state: HardState = field(default_factory=HardState)
    epochs: tuple[Epoch, ...] = ()
    last_offset: ByteOffset = ZERO_OFFSET
    committed_offset: ByteOffset = ZERO_OFFSET
    start_offset: ByteOffset = ZERO_OFFSET
    start_term: Term = ZERO_TERM
    memberships: tuple[MembershipEntry, ...] = ()
    """The persisted configuration entries (``Ready.memberships``); empty: the bootstrap."""


@dataclass(frozen=True, slots=True)
class Status:
    """A snapshot for ``gannet status`` and the tests."""

    node_id: NodeId
    role: Role
    term: Term
    vote: NodeId
    leader_id: NodeId
    last_offset: ByteOffset
    last_term: Term
    durable_offset: ByteOffset
    committed_offset: ByteOffset
    progress: tuple[tuple[NodeId, str, ByteOffset, ByteOffset, ByteOffset], ...]
    membership: MembershipEntry | None = None
    """The configuration entry in force (the latest in the log)."""
    membership_committed: bool = True
