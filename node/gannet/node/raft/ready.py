"""``Ready``: everything the driver must do for the core, and in which order.

Returned by ``RaftCore.ready()``; the driver executes it and calls ``RaftCore.advance(ready)``
before stepping the core again. Shaped after etcd-io/raft's ``Ready`` with the Gannet log
model: the log is byte ranges of the commit log, so appends are ``AppendRange`` values and a
divergent suffix is cut with ``truncate_to``.

The driver's loop, in order:

0. ``log_reset``: a follower told (``ResetLogStart``) to start at the leader's retention start:
   wipe the commit log and everything derived from it and restart it empty at that offset.
1. ``truncate_to``: cut the commit log (and the leader-epoch file, consume queues, index) to
   that offset. Never below the commit offset (the core checks this).
2. ``entries``: write the ranges at their offsets (page cache is enough here); a range whose
   term differs from the last epoch starts a new line ``(term, start_offset)`` in the
   leader-epoch file.
3. ``hard_state``: if set, persist term and vote durably (write temp, fsync, rename, fsync
   directory). ``must_sync`` is true exactly then; messages must not leave before it is done,
   because they may announce a vote or a term.
4. ``messages``: send (fill ``AppendEntries.payload`` from the commit log first).
5. ``committed_offset``: if set, dispatch up to it and answer producers whose records end at
   or below it.
6. ``advance(ready)``.

Whenever an fsync of the commit log completes (possibly much later, batching many Readies),
the driver calls ``RaftCore.report_durable(offset)``: only durable bytes count toward the commit
offset, on followers and on the leader itself. A report must describe an fsync that started
after the last truncation the driver executed (bytes cut and rewritten are new bytes).

Further rules: no input (``step``, ``tick``, ``propose``, ``report_durable``, …) between
``ready()`` and ``advance()`` — queue incoming messages meanwhile; an ``AppendEntries`` names
only bytes of Readies already advanced, so the driver can always read them; on a follower, an
``AppendRange`` with an empty payload means "the bytes of the ``AppendEntries`` just stepped,
from ``start_offset - prev_offset``", for drivers that keep payloads out of the core. On
restart, ``config.InitialState`` gives the recovered term, vote, epochs and log end (all of it
durable).

A minimal synchronous loop::

    while core.has_ready():
        rd = core.ready()
        if rd.truncate_to is not None:
            log.truncate(rd.truncate_to)
        for entry in rd.entries:
            log.write(entry.start_offset, entry.payload, entry.term)
        if rd.hard_state is not None:
            state_file.save_durably(rd.hard_state)
        for message in rd.messages:
            network.send(with_payload_from(log, message))
        if rd.committed_offset is not None:
            store.set_commit_offset(rd.committed_offset)
        core.advance(rd)
    # later, from the flush task:
    core.report_durable(log.sync())
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gannet.node.raft.membership import MembershipEntry
from gannet.node.raft.messages import NO_NODE, ZERO_TERM, ByteOffset, Message, NodeId, Term


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class HardState:
    """What must survive a crash before any message depending on it is sent."""

    term: Term = ZERO_TERM
    vote: NodeId = NO_NODE


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile, for the driver's routing and status: who leads, and our role."""

    role: Role
    leader_id: NodeId
    term: Term


@dataclass(frozen=True, slots=True)
class AppendRange:
    """Bytes ``[start_offset, end_offset)`` of ``term`` to write at ``start_offset``.

    ``payload`` is the bytes themselves when the core was given them (a proposal, a no-op, or
    an ``AppendEntries`` whose payload the driver filled); it is empty when the driver keeps
    the bytes aside. ``noop`` marks the leader's election record.
    """

    start_offset: ByteOffset
    end_offset: ByteOffset
    term: Term
    payload: bytes = b""
    noop: bool = False

    @property
    def length_bytes(self) -> int:
        return self.end_offset - self.start_offset


@dataclass(frozen=True, slots=True)
class LogReset:
    """Discard the whole local log (commit log, consume queues, index, timers) and restart it
    empty at ``start_offset``; the byte before it was written in ``start_term`` (keep both so
    that a restart knows the term at the log start)."""

    start_offset: ByteOffset
    start_term: Term


@dataclass(frozen=True, slots=True)
class Ready:
    hard_state: HardState | None
    truncate_to: ByteOffset | None
    entries: tuple[AppendRange, ...]
    messages: tuple[Message, ...]
    committed_offset: ByteOffset | None
    soft_state: SoftState | None
    log_reset: LogReset | None = None
    """Executed first, before ``truncate_to`` (see the loop above)."""
    memberships: tuple[MembershipEntry, ...] | None = None
    """When set, the node's configuration entries changed (an entry appended, cut off, or a
    reset): persist the whole tuple durably before writing ``entries`` (after ``truncate_to``
    and ``log_reset``). On restart, entries that end beyond the recovered log end are dropped
    (``InitialState.memberships``)."""

    @property
    def must_sync(self) -> bool:
        """True when ``hard_state`` must be fsynced before ``messages`` are sent."""
        return self.hard_state is not None

    def is_empty(self) -> bool:
        return (
            self.hard_state is None
            and self.truncate_to is None
            and not self.entries
            and not self.messages
            and self.committed_offset is None
            and self.soft_state is None
            and self.log_reset is None
            and self.memberships is None
        )
