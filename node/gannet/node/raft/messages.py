"""The messages Raft peers exchange (the identifier types, from :mod:`ids`, re-exported).

Built by ``core.RaftCore`` (outgoing, in ``Ready.messages``) and given back to it by the driver
(``RaftCore.step``). Every message is a frozen dataclass carrying ``sender``, ``target`` and the
sender's ``term``; the driver maps them onto the ``gannet.raft.v1.Peer`` gRPC service.

Log positions are commit-log byte offsets (``ByteOffset``). ``AppendEntries`` describes the
byte range ``[prev_offset, end_offset)`` of one term; the driver reads those bytes from its
commit log and puts them in ``payload`` before sending (the core leaves it empty on the leader
and hands it back untouched, sliced, on the follower). An ``AppendEntries`` with
``end_offset == prev_offset`` is a probe: it only checks log matching.

Also here: the outcomes of ``RaftCore.propose`` and ``RaftCore.transfer_leadership``, which
are values, not exceptions, because "not the leader" is an operating condition.
"""

from __future__ import annotations

from dataclasses import dataclass

from gannet.node.raft.ids import NO_NODE, ZERO_OFFSET, ZERO_TERM, ByteOffset, NodeId, Term
from gannet.node.raft.membership import MembershipEntry

__all__ = [
    "NO_NODE",
    "ZERO_OFFSET",
    "ZERO_TERM",
    "AppendEntries",
    "AppendResponse",
    "Busy",
    "ByteOffset",
    "Heartbeat",
    "HeartbeatResponse",
    "Message",
    "NodeId",
    "NotLeader",
    "PreVoteRequest",
    "PreVoteResponse",
    "Proposed",
    "ResetLogStart",
    "Term",
    "TimeoutNow",
    "TransferStarted",
    "VoteRequest",
    "VoteResponse",
]


@dataclass(frozen=True, slots=True)
class PreVoteRequest:
    """Would you vote for me in ``term`` (my term + 1)? Does not change anyone's term."""

    sender: NodeId
    target: NodeId
    term: Term
    last_term: Term
    last_offset: ByteOffset


@dataclass(frozen=True, slots=True)
class PreVoteResponse:
    """``term`` is the proposed term when granted, the voter's own term when refused."""

    sender: NodeId
    target: NodeId
    term: Term
    granted: bool


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A real election. ``transfer`` marks a campaign ordered by ``TimeoutNow``: voters then
    ignore their leader lease (the current leader asked for it)."""

    sender: NodeId
    target: NodeId
    term: Term
    last_term: Term
    last_offset: ByteOffset
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    sender: NodeId
    target: NodeId
    term: Term
    granted: bool


@dataclass(frozen=True, slots=True)
class AppendEntries:
    """Bytes ``[prev_offset, end_offset)``, all written in ``entries_term``.

    The receiver accepts them only if its log holds ``prev_offset`` bytes and the byte just
    before ``prev_offset`` was written in ``prev_term`` (0 at the log start).
    """

    sender: NodeId
    target: NodeId
    term: Term
    prev_offset: ByteOffset
    prev_term: Term
    end_offset: ByteOffset
    entries_term: Term
    leader_commit: ByteOffset
    payload: bytes = b""
    leader_clock_ms: int = 0
    """The leader's lease clock when sent (the driver stamps it; 0: not stamped)."""


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """Answer to ``AppendEntries``, also sent unprompted when the follower's disk syncs.

    Success: the follower's log equals the leader's up to ``match_offset``, and up to
    ``durable_offset`` (≤ ``match_offset``) those bytes are on its stable storage.
    Refusal: ``rejected_prev_offset`` repeats the refused message's ``prev_offset``; the
    follower's largest epoch with a term ≤ that message's ``prev_term`` is ``hint_term`` and it
    holds that epoch's bytes up to ``hint_offset`` (Kafka's divergence search).
    """

    sender: NodeId
    target: NodeId
    term: Term
    success: bool
    match_offset: ByteOffset = ZERO_OFFSET
    durable_offset: ByteOffset = ZERO_OFFSET
    rejected_prev_offset: ByteOffset = ZERO_OFFSET
    hint_term: Term = ZERO_TERM
    hint_offset: ByteOffset = ZERO_OFFSET


@dataclass(frozen=True, slots=True)
class Heartbeat:
    sender: NodeId
    target: NodeId
    term: Term
    leader_commit: ByteOffset
    leader_clock_ms: int = 0
    """The leader's lease clock when sent (the driver stamps it; 0: not stamped)."""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    """Carries the follower's matched and durable offsets in the current term."""

    sender: NodeId
    target: NodeId
    term: Term
    match_offset: ByteOffset
    durable_offset: ByteOffset


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer: the leader tells an up-to-date follower to campaign at once."""

    sender: NodeId
    target: NodeId
    term: Term


@dataclass(frozen=True, slots=True)
class ResetLogStart:
    """Catch-up below the leader's retention: the follower needs bytes before the leader's
    ``log.start_offset`` (deleted), so it discards its whole log and restarts it empty at
    ``start_offset``, whose preceding byte was written in ``start_term``. The bytes before it
    are committed (retention deletes only committed bytes), hence identical on every replica
    that holds them. Answered with an ``AppendResponse`` (``match_offset == start_offset``)."""

    sender: NodeId
    target: NodeId
    term: Term
    start_offset: ByteOffset
    start_term: Term
    leader_commit: ByteOffset
    membership: MembershipEntry | None = None
    """The configuration in force at ``start_offset`` (the follower's log restarts there)."""


Message = (
    PreVoteRequest
    | PreVoteResponse
    | VoteRequest
    | VoteResponse
    | AppendEntries
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | TimeoutNow
    | ResetLogStart
)


@dataclass(frozen=True, slots=True)
class Proposed:
    """The proposal occupies ``[start_offset, end_offset)`` in ``term``; it is committed once
    ``Ready.committed_offset >= end_offset`` on a node whose log still holds it."""

    start_offset: ByteOffset
    end_offset: ByteOffset
    term: Term


@dataclass(frozen=True, slots=True)
class NotLeader:
    """This node cannot take the request; ``leader_hint`` is the leader it knows (or 0)."""

    leader_hint: NodeId


@dataclass(frozen=True, slots=True)
class Busy:
    """A limit is reached (uncommitted bytes, or a leadership transfer fences writes)."""

    reason: str


@dataclass(frozen=True, slots=True)
class TransferStarted:
    target: NodeId
