"""The replication driver's state, apart from its IO.

Owned by :class:`~gannet.node.replication.driver.ReplicationNode`, which does the IO (the event
loop, the store, the state files, the transport) and keeps here what it decides with:

* :func:`initial_state`: the core's restart state from what the files and the commit log hold;
* :func:`core_config`: the core's limits from the replication config;
* :func:`suspect`: whether a lone peer message must not reach the core;
* :class:`DriverState`: bookkeeping between Readies — the leader's own proposals already in
  the store, which flush rounds count after a truncation, the durable offset reported, the
  terms this node led and caught up in, counters;
* :class:`CommitWaiters`: producers waiting for the commit offset to reach their records;
* :func:`node_status`: the status row for ``gannet status`` and ``/metrics``.

Pure (no IO, no clock, no randomness) except that commit waiters hold asyncio futures.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gannet.node.invariants import invariant
from gannet.node.raft.config import Config, InitialState, NoopPayload, RecordEnd, Status
from gannet.node.raft.core import RaftCore
from gannet.node.raft.epochs import Epoch
from gannet.node.raft.messages import (
    NO_NODE,
    AppendEntries,
    ByteOffset,
    Heartbeat,
    Message,
    NodeId,
    ResetLogStart,
    Term,
    TimeoutNow,
)
from gannet.node.raft.ready import HardState, Role
from gannet.node.replication import members
from gannet.node.replication.config import PeerSpec, ReplicationConfig
from gannet.node.replication.errors import CommitUncertain

FLUSH_ROUNDS_SKIPPED = 2
"""After a truncation, the flush round in progress and the next may have started before it."""


@dataclass(frozen=True, slots=True)
class PeerStatus:
    node_id: int
    peer_endpoint: str
    client_endpoint: str
    match_offset: int
    """The leader's view; -1 when this node does not lead."""
    lag_bytes: int
    reachable: bool


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node_id: int
    role: str
    term: int
    leader_id: int
    leader_client_endpoint: str
    commit_offset: int
    last_offset: int
    durable_offset: int
    peers: tuple[PeerStatus, ...]
    elections_total: int
    leader_changes_total: int


def initial_state(
    hard: HardState,
    epochs: Iterable[Epoch],
    *,
    start_offset: int,
    last_offset: int,
    log_start: tuple[ByteOffset, Term] | None,
) -> tuple[InitialState, bool]:
    """The core's restart state: ``hard`` and ``epochs`` as the state files hold them, the
    commit log's ``[start_offset, last_offset)``, ``log_start`` from a past ``ResetLogStart``.
    The flag says a store written before replication was configured adopted term 1 (the
    caller persists the raised hard state)."""
    invariant(start_offset <= last_offset, "commit log start beyond its end")
    start, last = start_offset, last_offset
    before = [e for e in epochs if e.start_offset < start]
    kept = [e for e in epochs if start <= e.start_offset < last]
    start_term = before[-1].term if before else Term(0)
    if not before and log_start is not None and log_start[0] == start:
        start_term = log_start[1]  # the log was reset to start here (ResetLogStart)
    if before and (not kept or kept[0].start_offset > start) and last > start:
        kept.insert(0, Epoch(before[-1].term, ByteOffset(start)))
    adopted = not kept and last > start
    if adopted:
        kept = [Epoch(Term(1), ByteOffset(start))]
        if hard.term < 1:
            hard = HardState(Term(1), NO_NODE)
    state = InitialState(
        hard_state=hard,
        epochs=tuple(kept),
        last_offset=ByteOffset(last),
        start_offset=ByteOffset(start),
        start_term=start_term,
    )
    return state, adopted


def core_config(
    config: ReplicationConfig,
    random_ticks: Callable[[int], int],
    noop_payload: NoopPayload,
    record_end: RecordEnd,
) -> Config:
    """The core's configuration for this node: bootstrap voters and limits from ``config``;
    ``record_end`` finds record boundaries in the commit log, so that every ``AppendEntries``
    carries whole records (what ``members.memberships_in`` reads on the follower)."""
    return Config(
        node_id=NodeId(config.node_id),
        voters=tuple(NodeId(p.node_id) for p in config.peers),
        random_ticks=random_ticks,
        noop_payload=noop_payload,
        record_end=record_end,
        memberships_in=members.memberships_in,
        election_timeout_ticks=config.election_timeout_ticks,
        heartbeat_interval_ticks=config.heartbeat_interval_ticks,
        append_bytes_max=config.append_bytes_max,
        inflight_messages_max=config.inflight_messages_max,
        inflight_bytes_max=config.inflight_bytes_max,
        uncommitted_bytes_max=config.uncommitted_bytes_max,
    )


def suspect(core: RaftCore, message: Message) -> str | None:
    """Why a lone message must not reach the core (None: it may).

    ``TimeoutNow`` starts an election at once, past every lease: only this node's leader sends
    it, in its own term (a leadership transfer). A leader's message (heartbeat, entries, log
    reset) from a later term while this follower hears from a live leader would move a healthy
    group's term: a new leader is elected only once a majority stopped hearing from the old one
    (check-quorum), so this node will hear from it again after its own lease ends.
    """
    if isinstance(message, TimeoutNow):
        if message.sender != core.leader_id or message.term != core.term:
            return "timeout_now_not_from_leader"
        return None
    if (
        isinstance(message, AppendEntries | Heartbeat | ResetLogStart)
        and message.term > core.term
        and message.sender != core.leader_id
        and core.follows_live_leader()
    ):
        return "term_jump"
    return None


def admitted_members(core: RaftCore, specs: Iterable[PeerSpec]) -> tuple[PeerSpec, ...]:
    """The members the transport admits, by node id: those of the configuration in force
    (``specs``) and, until its entry commits, those of the committed one before it (a leader
    that removed itself leads until its removal commits)."""
    admitted = {p.node_id: p for p in specs}
    committed = core.members.committed(core.committed_offset).membership
    for m in members.members_of(committed, admitted):
        admitted.setdefault(m.spec.node_id, m.spec)
    return tuple(admitted[n] for n in sorted(admitted))


def most_caught_up_voter(core: RaftCore) -> int | None:
    """The voting follower with the highest match offset (this leader's view); None when
    this node is the only voter."""
    voters = core.members.current.voters
    rows = [row for row in core.status().progress if row[0] in voters]
    return max(rows, key=lambda row: row[3])[0] if rows else None


class RoleChange(enum.Enum):
    NONE = "none"
    GAINED = "gained"
    LOST = "lost"


class DriverState:
    """What the driver remembers between Readies.

    Invariant: ``local_ranges`` are this leader's proposals in log order, not yet in a Ready.
    Invariant: ``valid_flush_round`` and ``commit_offset`` never decrease.
    """

    def __init__(self, *, written_is_durable: bool) -> None:
        self.written_is_durable = written_is_durable
        """ASYNC_FLUSH: bytes in the page cache count as durable (the flush mode's trade)."""
        self.persisted_epochs: tuple[Epoch, ...] = ()
        self.local_ranges: collections.deque[tuple[int, int]] = collections.deque()
        self.valid_flush_round = 0
        self.last_durable = 0
        self.commit_offset = 0
        """The commit offset given to the store (dispatch, hence consumers, stop there)."""
        self.role = Role.FOLLOWER
        self.led_term = -1
        """The last term this node led."""
        self.caught_up_term = -1
        """The term in which this leader applied everything before its election."""
        self.snapshot_offset = -1
        """Where this leader's latest config snapshot ends (-1: none in this term)."""
        self.membership_settled = True
        """The latest configuration entry is known committed."""
        self.elections_total = 0
        self.leader_changes_total = 0
        self.log_resets_total = 0

    def proposed(self, start: int, end: int) -> None:
        """This leader proposed its own bytes ``[start, end)``, already in the store."""
        invariant(not self.local_ranges or self.local_ranges[-1][1] <= start, "ranges overlap")
        self.local_ranges.append((start, end))

    def take_own_range(self, start: int, end: int) -> bool:
        """Whether a Ready's entry is this leader's own proposal (then not written again)."""
        if self.local_ranges and self.local_ranges[0] == (start, end):
            self.local_ranges.popleft()
            return True
        return False

    def cut(self, offset: int, flush_count: int) -> None:
        """The log was truncated or reset at ``offset`` while ``flush_count`` fsyncs ran."""
        self.valid_flush_round = max(self.valid_flush_round, flush_count + FLUSH_ROUNDS_SKIPPED)
        self.last_durable = min(self.last_durable, offset)
        self.local_ranges.clear()

    def counts(self, flush_round: int) -> bool:
        """Whether an fsync of round ``flush_round`` surely started after the last cut."""
        return flush_round >= self.valid_flush_round

    def durable(self, offset: int) -> None:
        self.last_durable = max(self.last_durable, offset)

    def committed(self, offset: int) -> None:
        """The store is given commit ``offset`` to apply (dispatch) up to: never less than
        before in this process (a restart recovers it from the leader)."""
        invariant(offset >= self.commit_offset, f"commit {self.commit_offset} -> {offset}")
        self.commit_offset = offset

    def role_changed(self, role: Role, term: int) -> RoleChange:
        """The core's role is now ``role`` in ``term``: count it and say what changed."""
        was, self.role = self.role, role
        if role is Role.CANDIDATE:
            self.elections_total += 1
        if role is Role.LEADER and was is not Role.LEADER:
            self.led_term = term
            self.leader_changes_total += 1
            self.snapshot_offset = -1
            return RoleChange.GAINED
        if was is Role.LEADER and role is not Role.LEADER:
            return RoleChange.LOST
        return RoleChange.NONE

    def offsets_are_ours(self, role: Role, term: int) -> bool:
        """Still the term this node led (a removed leader steps down in the Ready that commits
        its removal): no other leader wrote in it, so committed offsets answer our writers."""
        return role is Role.LEADER or term == self.led_term


class CommitWaiters:
    """Producers waiting for the commit offset to reach the end of their records, by offset.

    Invariant: at most ``waiters_max`` are pending (a bound on memory; the v2 servicer's own
    in-flight limits keep it far below)."""

    def __init__(self, waiters_max: int = 1 << 20) -> None:
        self.waiters_max = waiters_max
        self._heap: list[tuple[int, int, asyncio.Future[int]]] = []
        self._sequence = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def futures(self) -> list[asyncio.Future[int]]:
        return [future for _, _, future in self._heap]

    def add(self, end_offset: int, future: asyncio.Future[int]) -> None:
        invariant(len(self._heap) < self.waiters_max, "too many commit waiters")
        heapq.heappush(self._heap, (end_offset, next(self._sequence), future))

    def release(self, committed: int) -> None:
        """Answer every waiter whose records end at or below ``committed``."""
        while self._heap and self._heap[0][0] <= committed:
            _, _, future = heapq.heappop(self._heap)
            if not future.done():
                future.set_result(committed)

    def fail(self, reason: str) -> None:
        """Fail every waiter: their records may or may not survive."""
        waiters, self._heap = self._heap, []
        for _, _, future in waiters:
            if not future.done():
                future.set_exception(
                    CommitUncertain(f"{reason}; the message may or may not survive")
                )


def node_status(
    core_status: Status,
    specs: Iterable[PeerSpec],
    reachable: Callable[[int], bool],
    leader: PeerSpec | None,
    state: DriverState,
) -> NodeStatus:
    """The status row of this node: the core's view, each other member's progress."""
    progress = {row[0]: row for row in core_status.progress}
    peers = []
    for p in specs:
        if p.node_id == core_status.node_id:
            continue
        row = progress.get(NodeId(p.node_id))
        match = row[3] if row is not None else -1
        peers.append(
            PeerStatus(
                node_id=p.node_id,
                peer_endpoint=p.peer_endpoint,
                client_endpoint=p.client_endpoint,
                match_offset=match,
                lag_bytes=core_status.last_offset - match if match >= 0 else -1,
                reachable=reachable(p.node_id),
            )
        )
    return NodeStatus(
        node_id=core_status.node_id,
        role=core_status.role.value,
        term=core_status.term,
        leader_id=core_status.leader_id,
        leader_client_endpoint=leader.client_endpoint if leader is not None else "",
        commit_offset=core_status.committed_offset,
        last_offset=core_status.last_offset,
        durable_offset=core_status.durable_offset,
        peers=tuple(peers),
        elections_total=state.elections_total,
        leader_changes_total=state.leader_changes_total,
    )
