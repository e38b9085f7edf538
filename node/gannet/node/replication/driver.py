"""``ReplicationNode``: the asyncio driver of one node's Raft core, over the real store.

Created and started by the broker (:mod:`gannet.node.broker.serving`) when its config has a
``replication`` section; the v2 servicer asks it whether this node leads, proposes what it
appended and waits for the commit; the admin servicer reads its status and asks for transfers.
Everything runs on the broker's event loop; the core is only touched there.

The loop follows ``raft/ready.py``. For each ``Ready``:

0. ``log_reset``: :meth:`MessageStore.reset_to` (the whole log discarded, restarted empty at
   the leader's log start) and ``raft/log-start`` written (:mod:`state_files`);
1. ``truncate_to``: :meth:`MessageStore.truncate` (commit log, consume queues, index, timers).
2. the leader-epoch file is rewritten if the core's epoch list changed (before any byte of a new
   term is written: every byte on disk has an epoch);
3. ``entries``: a follower writes the leader's exact bytes with
   :meth:`MessageStore.append_replicated`; a leader's own proposals are already in the store and
   are skipped; a leader's no-op record (:mod:`noop`) is written like a follower's bytes;
4. ``hard_state``: term and vote written durably (:mod:`state_files`) before any message;
5. ``messages``: AppendEntries get their payload from the commit log
   (:meth:`MessageStore.read_replicated`, file after file), then go to :mod:`transport`;
6. ``committed_offset``: :meth:`MessageStore.set_commit_offset` (dispatch, hence consumers, stop
   there), and producers waiting for an offset at or below it are answered;
7. ``soft_state``: role changes start/stop the store's timer service (only a leader appends
   delayed messages), fail the commit waiters of a deposed leader (their bytes may be cut) and
   tell :attr:`ReplicationNode.role_listeners` (the broker pauses Pop's revive on followers).

Configuration (:mod:`config_log`): topic/group configs and consumer offsets changed on the
leader become records of ``rmq_sys_GANNET_CONFIG`` applied on dispatch by every replica; a new
leader appends a snapshot of its tables once everything before its election is applied.

Durability: in ASYNC_FLUSH, bytes written to the commit log (page cache) count as durable — the
flush mode's own trade, as Kafka's acks=all without fsync: a commit then means written on a
majority. In SYNC_FLUSH a flush listener on the store posts every fsync result to the loop and
the core is told with ``report_durable`` — only fsyncs that started after the last truncation
count (flush rounds are numbered; a round that may have started before a truncation is ignored
and replaced by an fsync of our own).

Leader appends: any store append (a producer's send, a timer firing, a Pop checkpoint) lands in
the commit log first; :meth:`propose_local` proposes the bytes between the core's log end and the
store's end. Senders call it at once; the tick calls it for appends made by store threads.
Bytes appended on a node that is not leader (a stray timer write) are cut before the next
append of the leader's bytes. Catch-up of an empty or far-behind follower is the ordinary
pipeline: ``AppendEntries`` of up to ``append_bytes_max`` read straight from the segment files,
``inflight_messages_max`` of them in flight.

Membership (:mod:`members`): the configuration in force is the latest configuration record
in the log (``rmq_sys_GANNET_RAFT_MEMBERS``), persisted in ``raft/membership`` before the
entries of each Ready; ``--peers`` only bootstraps a brand-new group. The transport admits and
streams to the live members (:meth:`PeerTransport.set_members`); :meth:`change_membership`
appends a configuration record on the leader (see :mod:`membership_changes` for add/remove).

Below the leader's retention (``tests/replication/test_log_reset.py``): every tick the core is
told where the store's commit log starts (``compact_log``); a follower that needs deleted bytes
gets ``ResetLogStart`` from the core, and when this leader sends one it appends a fresh config
snapshot (unless this term's last snapshot already lies past the start), so the reset member
gets whole tables.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import heapq
import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from gannet.node.raft.config import Config, InitialState
from gannet.node.raft.core import RaftCore
from gannet.node.raft.epochs import Epoch
from gannet.node.raft.membership import MembershipEntry, MembershipLog
from gannet.node.raft.messages import (
    NO_NODE,
    AppendEntries,
    Busy,
    ByteOffset,
    Heartbeat,
    Message,
    NodeId,
    NotLeader,
    Proposed,
    ResetLogStart,
    Term,
    TimeoutNow,
)
from gannet.node.raft.ready import HardState, LogReset, Ready, Role
from gannet.node.replication import members, noop
from gannet.node.replication.config import PeerSpec, ReplicationConfig
from gannet.node.replication.config_log import ConfigLog
from gannet.node.replication.state_files import RaftStateFiles
from gannet.node.replication.transport import PeerTransport
from gannet.node.store.config import FlushMode
from gannet.node.store.log import records
from gannet.node.store.message_store import MessageStore

log = logging.getLogger(__name__)

TRANSFER_TIMEOUT_S = 5.0


class ReplicationError(Exception):
    """Base of what the driver answers instead of accepting a write."""


class NotLeaderError(ReplicationError):
    """This node does not lead; ``leader`` is the member it believes does (None: unknown)."""

    def __init__(self, node_id: int, leader: PeerSpec | None) -> None:
        self.leader = leader
        where = (
            f"node {leader.node_id} at {leader.client_endpoint}"
            if leader is not None
            else "not known yet (election in progress)"
        )
        super().__init__(f"node {node_id} is not the Raft leader; the leader is {where}")


class ReplicationBusy(ReplicationError):
    """The leader refuses writes for now (transfer in progress, uncommitted bytes limit)."""


class CommitUncertain(ReplicationError):
    """Written on the leader but not known committed: leadership was lost or time ran out."""


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


class ReplicationNode:
    """One node's Raft driver. Invariant: the core is only touched on the loop thread."""

    def __init__(self, store: MessageStore, config: ReplicationConfig) -> None:
        self.store = store
        self.config = config
        self.files = RaftStateFiles(store.config.root_dir / "raft")
        self.membership_file = members.MembershipFile(self.files.directory / "membership")
        self.member_table = members.MemberTable(config.peers)
        self.transport = PeerTransport(config, self._on_message)
        self.core: RaftCore | None = None
        self.elections_total = 0
        self.leader_changes_total = 0
        self.fatal_error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tick_task: asyncio.Task[None] | None = None
        self._persisted_epochs: tuple[Epoch, ...] = ()
        self._local_ranges: collections.deque[tuple[int, int]] = collections.deque()
        self._waiters: list[tuple[int, int, asyncio.Future[int]]] = []
        self._waiter_seq = itertools.count()
        self._leader_changed = asyncio.Event()
        self._valid_flush_round = 0
        self._own_fsync_running = False
        self._last_durable = 0
        self._written_is_durable = store.config.flush_mode is FlushMode.ASYNC_FLUSH
        self._processing = False
        self._stopped = False
        self._role = Role.FOLLOWER
        self._watchers: list[asyncio.Future[None]] = []
        self.config_log = ConfigLog(store, config.node_id, self.is_leader)
        self.role_listeners: list[Callable[[bool], None]] = []
        """Called on the loop with True once this node leads and has applied the previous
        terms' log (:meth:`is_serving_leader`), False when it stops leading."""
        self._snapshot_task: asyncio.Task[None] | None = None
        self._caught_up_term = -1
        """The term in which this leader applied everything before its election."""
        self._snapshot_offset = -1
        """Where this leader's latest config snapshot ends (-1: none in this term)."""
        self._reset_snapshot_task: asyncio.Task[None] | None = None
        self.log_resets_total = 0
        self._led_term = -1
        """The last term this node led."""
        self._membership_settled = True
        """The latest configuration entry is known committed (see _apply_membership)."""

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Recover term, vote and epochs; build the core; serve peers; start ticking."""
        self._loop = asyncio.get_running_loop()
        flush = self.store.flush
        if flush is None:
            raise ReplicationError("open the store before starting replication")
        seed = (
            self.config.seed
            if self.config.seed is not None
            else random.SystemRandom().getrandbits(32)
        )
        log.info("raft node %d: election jitter seed %d", self.config.node_id, seed)
        rng = random.Random(seed)
        initial = dataclasses.replace(self._initial_state(), memberships=self._load_membership())
        core_config = Config(
            node_id=NodeId(self.config.node_id),
            voters=tuple(NodeId(p.node_id) for p in self.config.peers),
            random_ticks=rng.randrange,
            noop_payload=self._noop_payload,
            memberships_in=members.memberships_in,
            election_timeout_ticks=self.config.election_timeout_ticks,
            heartbeat_interval_ticks=self.config.heartbeat_interval_ticks,
            append_bytes_max=self.config.append_bytes_max,
            inflight_messages_max=self.config.inflight_messages_max,
            inflight_bytes_max=self.config.inflight_bytes_max,
            uncommitted_bytes_max=self.config.uncommitted_bytes_max,
        )
        self.core = RaftCore(core_config, initial)
        self._apply_membership()
        current = members.members_of(self.core.members.current, {})
        differs = members.disagreement(self.config.peers, current)
        if differs is not None and not self.config.join and initial.last_offset > 0:
            log.warning(
                "raft node %d: %s; following the log (--peers only bootstraps a new group)",
                self.config.node_id,
                differs,
            )
        self._persisted_epochs = self.core.log.epochs
        if self._persisted_epochs != tuple(self.files.load_epochs()):
            self.files.save_epochs(self._persisted_epochs)
        self._last_durable = initial.last_offset
        await asyncio.to_thread(self.config_log.install)
        # Only a leader appends on its own: delayed messages wait until this node leads.
        await asyncio.to_thread(self.store.timers.stop)
        flush.listeners.append(self._on_flushed_thread)
        await self.transport.start()
        if self.core.members.current.voters == {NodeId(self.config.node_id)}:
            self.core.campaign()  # a group of one elects itself at once
        self._process()
        self._tick_task = asyncio.create_task(self._tick_loop(), name="raft-tick")

    async def stop(self) -> None:
        """Stop ticking and serving peers; fail whoever still waits for a commit."""
        self._stopped = True
        if self._tick_task is not None:
            self._tick_task.cancel()
            await asyncio.gather(self._tick_task, return_exceptions=True)
            self._tick_task = None
        if self._snapshot_task is not None:
            self._snapshot_task.cancel()
            await asyncio.gather(self._snapshot_task, return_exceptions=True)
        self.config_log.uninstall()
        flush = self.store.flush
        if flush is not None and self._on_flushed_thread in flush.listeners:
            flush.listeners.remove(self._on_flushed_thread)
        await self.transport.stop()
        self._fail_waiters("the node is stopping")

    def _initial_state(self) -> InitialState:
        hard = self.files.load_hard_state()
        epochs = self.files.load_epochs()
        last = self.store.commitlog.max_offset()
        start = self.store.commitlog.min_offset() if last > 0 else 0
        before = [e for e in epochs if e.start_offset < start]
        kept = [e for e in epochs if e.start_offset >= start and e.start_offset < last]
        start_term = before[-1].term if before else Term(0)
        reset = self.files.load_log_start()
        if not before and reset is not None and reset[0] == start:
            start_term = reset[1]  # the log was reset to start here (ResetLogStart)
        if before and (not kept or kept[0].start_offset > start) and last > start:
            kept.insert(0, Epoch(before[-1].term, ByteOffset(start)))
        if not kept and last > start:
            # A store written before replication was configured: its bytes become term 1.
            log.warning(
                "commit log [%d, %d) has no leader-epoch file; adopting it as term 1", start, last
            )
            kept = [Epoch(Term(1), ByteOffset(start))]
            if hard.term < 1:
                hard = HardState(Term(1), NO_NODE)
                self.files.save_hard_state(hard)
        return InitialState(
            hard_state=hard,
            epochs=tuple(kept),
            last_offset=ByteOffset(last),
            start_offset=ByteOffset(start),
            start_term=start_term,
        )

    def _load_membership(self) -> tuple[MembershipEntry, ...]:
        """The persisted configuration entries; a brand-new node writes its bootstrap (the
        members of ``--peers``, or none with ``--join``) first."""
        entries = self.membership_file.load()
        if entries:
            return entries
        voters = () if self.config.join else tuple(NodeId(p.node_id) for p in self.config.peers)
        bootstrap = MembershipLog.bootstrap(voters).entries()
        if not self.config.join:
            body = members.encode_body([members.Member(p, True) for p in self.config.peers])
            first = bootstrap[0]
            bootstrap = (
                dataclasses.replace(
                    first, membership=dataclasses.replace(first.membership, body=body)
                ),
            )
        self.membership_file.save(bootstrap)
        return bootstrap

    def _apply_membership(self) -> None:
        """The configuration in force changed, or its entry committed (or the node starts):
        update the addresses and the transport's members. Until an entry commits, the members
        of the committed configuration before it stay admitted too: a leader that removed
        itself leads until its removal commits."""
        core = self._core()
        current = core.members.current
        committed = core.members.committed(core.committed_offset).membership
        self.member_table.update(current)
        specs = {p.node_id: p for p in self.member_table.specs()}
        for m in members.members_of(committed, specs):
            specs.setdefault(m.spec.node_id, m.spec)
        self._membership_settled = core.members.latest().end_offset <= core.committed_offset
        self.transport.set_members(
            tuple(specs[n] for n in sorted(specs)), accept_strangers=not current.members()
        )

    def _noop_payload(self, offset: ByteOffset, term: Term) -> bytes:
        return noop.encode_noop(self.store, offset, term, self.config.node_id)

    # ------------------------------------------------------------------ inputs
    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        interval_s = self.config.tick_interval_s
        next_at = loop.time()
        while True:
            next_at += interval_s
            delay_s = next_at - loop.time()
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            else:
                next_at = loop.time()
            if not self._usable():
                continue
            core = self._core()
            if core.role is Role.LEADER:
                self._propose_pending()
            self._compact_to_store_start()
            core.tick()
            self._process()

    def _on_message(self, message: Message) -> None:
        if not self._usable():
            return
        core = self._core()
        reason = _suspect(core, message)
        if reason is not None:
            self.transport.refusals.count(reason)
            log.warning(
                "raft node %d: dropped %s from node %d (term %d, ours %d): %s",
                self.config.node_id,
                type(message).__name__,
                message.sender,
                message.term,
                core.term,
                reason,
            )
            return
        core.step(message)
        self._process()

    def _on_flushed_thread(self, offset: int) -> None:
        """Flush thread: hand the fsync result (and its round number) to the loop."""
        loop, flush = self._loop, self.store.flush
        if loop is None or flush is None or self._stopped:
            return
        round_number = flush.flush_count
        with contextlib.suppress(RuntimeError):  # the loop closed during shutdown
            loop.call_soon_threadsafe(self._on_flushed, offset, round_number)

    def _on_flushed(self, offset: int, round_number: int) -> None:
        if not self._usable():
            return
        if round_number < self._valid_flush_round:
            self._start_own_fsync()
            return
        self._report_durable(offset)

    def _report_durable(self, offset: int) -> None:
        self._last_durable = max(self._last_durable, offset)
        self._core().report_durable(ByteOffset(offset))
        self._process()

    def _start_own_fsync(self) -> None:
        """After a truncation: an fsync that certainly started after it."""
        if self._own_fsync_running:
            return
        self._own_fsync_running = True
        valid_from = self._valid_flush_round

        async def run() -> None:
            try:
                offset = await asyncio.to_thread(self.store.commitlog.files.flush, 0)
            finally:
                self._own_fsync_running = False
            if valid_from == self._valid_flush_round and self._usable():
                self._report_durable(offset)
            elif self._usable():
                self._start_own_fsync()

        asyncio.get_running_loop().create_task(run())

    # ------------------------------------------------------------------ the Ready loop
    def _process(self) -> None:
        core = self._core()
        if self._processing:
            return
        self._processing = True
        try:
            while core.has_ready():
                ready = core.ready()
                try:
                    self._execute(ready)
                except BaseException as exc:
                    self.fatal_error = exc
                    log.critical("raft node %d stops: %s", self.config.node_id, exc, exc_info=True)
                    self._fail_waiters(f"replication stopped after an error: {exc}")
                    raise
                core.advance(ready)
                if ready.entries and self._written_is_durable:
                    self._report_durable(self.store.commitlog.max_offset())
        finally:
            self._processing = False
        watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            if not watcher.done():
                watcher.set_result(None)

    def _execute(self, ready: Ready) -> None:
        core = self._core()
        if ready.log_reset is not None:
            self._reset_log(ready.log_reset)
        if ready.truncate_to is not None:
            self._truncate(ready.truncate_to)
        if core.log.epochs != self._persisted_epochs:
            self.files.save_epochs(core.log.epochs)
            self._persisted_epochs = core.log.epochs
        if ready.memberships is not None:
            self.membership_file.save(ready.memberships)
            self._apply_membership()
        for entry in ready.entries:
            if self._local_ranges and self._local_ranges[0] == (
                entry.start_offset,
                entry.end_offset,
            ):
                self._local_ranges.popleft()  # our own proposal: already in the store
                continue
            self._write(entry.start_offset, entry.payload)
        if ready.hard_state is not None:
            self.files.save_hard_state(ready.hard_state)
        for message in ready.messages:
            self._send(message)
        if ready.committed_offset is not None:
            self.store.set_commit_offset(ready.committed_offset)
            if not self._membership_settled:
                self._apply_membership()  # drop members of the configuration before it
            if core.role is Role.LEADER or core.term == self._led_term:
                # Still the term this node led (a removed leader steps down in the Ready that
                # commits its removal): no other leader wrote in it, the offsets are ours.
                self._release_waiters(ready.committed_offset)
        if ready.soft_state is not None:
            self._on_soft_state(ready.soft_state.role)

    def _truncate(self, offset: int) -> None:
        log.warning(
            "raft node %d: cutting a divergent suffix at %d (log end %d)",
            self.config.node_id,
            offset,
            self.store.commitlog.max_offset(),
        )
        self.store.truncate(offset)
        flush = self.store.flush
        # A flush round in progress may have started before the cut: skip it and the next.
        self._valid_flush_round = (flush.flush_count if flush is not None else 0) + 2
        self._last_durable = min(self._last_durable, offset)
        self._local_ranges.clear()
        self.config_log.after_truncate()

    def _reset_log(self, reset: LogReset) -> None:
        """Catch-up below the leader's retention: restart the store's log empty at the leader's
        log start; the leader's config snapshot (appended after it) replaces the tables."""
        log.warning(
            "raft node %d: the leader's log starts at %d, past what this node holds (log end "
            "%d): discarding the local log and restarting it there",
            self.config.node_id,
            reset.start_offset,
            self.store.commitlog.max_offset(),
        )
        self.store.reset_to(reset.start_offset)
        self.files.save_log_start(reset.start_offset, reset.start_term)
        flush = self.store.flush
        self._valid_flush_round = (flush.flush_count if flush is not None else 0) + 2
        self._last_durable = reset.start_offset
        self._local_ranges.clear()
        self.config_log.after_truncate()
        self.log_resets_total += 1

    def _compact_to_store_start(self) -> None:
        """Retention deleted commit-log files: tell the core where the log starts now."""
        core = self._core()
        if self.store.commitlog.max_offset() <= 0:
            return
        start = self.store.commitlog.min_offset()
        if start > core.log.start_offset:
            core.compact_log(ByteOffset(start))

    def _write(self, start: int, payload: bytes) -> None:
        end = self.store.commitlog.max_offset()
        if end > start:
            # Bytes appended here while not leading (or proposals refused): never acknowledged.
            self._truncate(start)
        elif end < start:
            raise ReplicationError(f"asked to write at {start} but the commit log ends at {end}")
        if not payload:
            raise ReplicationError(f"range at {start} came without its bytes")
        self.store.append_replicated(start, payload)

    def _send(self, message: Message) -> None:
        if isinstance(message, ResetLogStart):
            self._snapshot_for_reset(message.start_offset)
        if (
            isinstance(message, AppendEntries)
            and message.end_offset > message.prev_offset
            and not message.payload
        ):
            try:
                payload = self._read(message.prev_offset, message.end_offset)
            except ReplicationError as exc:
                log.warning("raft node %d: %s", self.config.node_id, exc)
                return
            message = dataclasses.replace(message, payload=payload)
        self.transport.send(message)

    def _read(self, start: int, end: int) -> bytes:
        """Commit-log bytes ``[start, end)``, read file after file."""
        parts: list[bytes] = []
        position = start
        while position < end:
            chunk = self.store.read_replicated(position, end - position)
            if not chunk:
                raise ReplicationError(
                    f"the commit log holds no bytes at {position} (wanted [{start}, {end})): "
                    "deleted by retention? a follower this far behind needs a fresh copy"
                )
            parts.append(chunk)
            position += len(chunk)
        return b"".join(parts)

    def _on_soft_state(self, role: Role) -> None:
        was = self._role
        self._role = role
        if role is Role.CANDIDATE:
            self.elections_total += 1
        self._leader_changed.set()
        self._leader_changed = asyncio.Event()
        if role is Role.LEADER and was is not Role.LEADER:
            self._led_term = self._core().term
            self.leader_changes_total += 1
            self._snapshot_offset = -1
            log.info("raft node %d leads term %d", self.config.node_id, self._core().term)
            self.store.timers.start()
            self._snapshot_task = asyncio.get_running_loop().create_task(
                self._snapshot_when_caught_up(self._core().term)
            )
        elif was is Role.LEADER and role is not Role.LEADER:
            log.info("raft node %d no longer leads", self.config.node_id)
            self._fail_waiters("leadership was lost before the write committed")
            asyncio.get_running_loop().create_task(asyncio.to_thread(self.store.timers.stop))
            self._tell_role(False)

    def _tell_role(self, leading: bool) -> None:
        for listener in list(self.role_listeners):
            try:
                listener(leading)
            except Exception:  # a listener must never stop the Ready loop
                log.exception("raft role listener failed")

    async def _snapshot_when_caught_up(self, term: int) -> None:
        """New leader: once everything before the election is committed and applied, append a
        snapshot of the config tables (replicas replace theirs with it)."""
        core = self._core()
        target = core.log.last_offset
        try:
            await self.wait_until(
                lambda: core.term != term or core.committed_offset >= target,
                self.config.commit_timeout_s * 4,
            )
            if core.term != term or not self.is_leader():
                return
            if not await asyncio.to_thread(self.store.wait_dispatched, target, 10.0):
                log.warning(
                    "raft node %d: dispatch did not reach %d; no config snapshot",
                    self.config.node_id,
                    target,
                )
                self._caught_up_term = term
                self._tell_role(True)
                return
            if core.term != term or not self.is_leader():
                return
            self._caught_up_term = term
            self._tell_role(True)
            self._process()  # wake wait_until watchers
            end = await asyncio.to_thread(self.config_log.append_snapshot)
            self._snapshot_offset = end
            self._propose_pending()
        except TimeoutError:
            log.warning(
                "raft node %d: term %d did not commit its start; no config snapshot",
                self.config.node_id,
                term,
            )
        except Exception:
            log.exception("raft node %d: config snapshot failed", self.config.node_id)

    def _snapshot_for_reset(self, start_offset: int) -> None:
        """A follower restarts at ``start_offset``: make sure a config snapshot follows it in
        the log (the records before it are gone), appending a fresh one unless this term's
        last snapshot is already at or past it."""
        if self._snapshot_offset >= start_offset or self._reset_snapshot_task is not None:
            return
        if not self.is_serving_leader():
            return  # the election snapshot, still to come, is past the start
        term = self._core().term

        async def append() -> None:
            try:
                end = await asyncio.to_thread(self.config_log.append_snapshot)
                if self._usable() and self._core().term == term:
                    self._snapshot_offset = end
                    self._propose_pending()
            except Exception:
                log.exception(
                    "raft node %d: config snapshot for a reset failed", self.config.node_id
                )
            finally:
                self._reset_snapshot_task = None

        self._reset_snapshot_task = asyncio.get_running_loop().create_task(append())

    async def commit_pending(self, timeout_s: float | None = None) -> int:
        """Propose what this leader appended, wait until it is committed and dispatched (so
        config records are applied everywhere up to it); returns the offset waited for.
        Raises :class:`NotLeaderError`, :class:`ReplicationBusy` or :class:`CommitUncertain`."""
        end = self.propose_local()
        await self.wait_committed(end, timeout_s)
        wait_s = self.config.commit_timeout_s if timeout_s is None else timeout_s
        if not await asyncio.to_thread(self.store.wait_dispatched, end, wait_s):
            raise CommitUncertain(f"committed up to {end} but not applied within {wait_s:.1f} s")
        return end

    # ------------------------------------------------------------------ the broker's side
    def _usable(self) -> bool:
        return self.core is not None and self.fatal_error is None and not self._stopped

    def _core(self) -> RaftCore:
        if self.core is None:
            raise ReplicationError("replication is not started")
        return self.core

    def is_leader(self) -> bool:
        return self._usable() and self._core().role is Role.LEADER

    def leader(self) -> PeerSpec | None:
        """The member this node believes leads (itself included), or None."""
        if self.core is None or self.core.leader_id == NO_NODE:
            return None
        return self.member_table.spec(self.core.leader_id)

    def route_members(self) -> list[PeerSpec]:
        """The voters of the configuration in force (learners are still catching up: clients
        are not sent to them), by node id."""
        table = self.member_table.members
        return [table[n].spec for n in sorted(table) if table[n].voter]

    def is_serving_leader(self) -> bool:
        """Leads and has applied every config record of the terms before its election (until
        then Pop could hand out messages whose acks are not applied here yet)."""
        return self.is_leader() and self._caught_up_term == self._core().term

    def check_leader(self) -> None:
        """Raise :class:`NotLeaderError` unless this node leads and accepts writes
        (:class:`ReplicationBusy` while a new leader still applies the previous terms)."""
        if self.fatal_error is not None:
            raise ReplicationBusy(f"replication stopped after an error: {self.fatal_error}")
        if not self.is_leader():
            raise NotLeaderError(self.config.node_id, self.leader())
        if self._caught_up_term != self._core().term:
            raise ReplicationBusy(
                f"node {self.config.node_id} was just elected and still applies the log of the "
                "previous terms; retry in a moment"
            )

    def propose_local(self) -> int:
        """Propose the store's bytes past the core's log end; returns where they end.

        Called by the send path right after ``put_messages_nowait``; raises
        :class:`NotLeaderError` or :class:`ReplicationBusy` (the bytes then stay local and are
        proposed by a later call, or cut when another node leads).
        """
        self.check_leader()
        core = self._core()
        end = self.store.commitlog.max_offset()
        start = core.log.last_offset
        if end <= start:
            return start
        # The bytes of the append just made are still at hand: no read back from the file.
        payload = self.store.commitlog.appended_bytes(start, end) or self._read(start, end)
        outcome = core.propose(payload)
        if isinstance(outcome, NotLeader):
            raise NotLeaderError(self.config.node_id, self.leader())
        if isinstance(outcome, Busy):
            raise ReplicationBusy(f"the leader refuses writes for now: {outcome.reason}")
        self._local_ranges.append((outcome.start_offset, outcome.end_offset))
        self._process()
        # The fsync of these bytes may already have been reported (and clamped to the written
        # end, which the Ready just executed raised): repeat it.
        core.report_durable(ByteOffset(self._last_durable))
        self._process()
        return outcome.end_offset

    def _propose_pending(self) -> None:
        try:
            self.propose_local()
        except ReplicationError as exc:
            log.debug("pending local bytes not proposed: %s", exc)

    async def change_membership(
        self, new_members: list[members.Member], timeout_s: float | None = None
    ) -> int:
        """Leader: append the configuration record that makes ``new_members`` the group and
        wait until it commits; returns the record's offset. Raises :class:`NotLeaderError`,
        :class:`ReplicationBusy` (the core's refusal: a change in flight, no commit in this
        term yet, more than one voter changed) or :class:`CommitUncertain`."""
        core = self._core()
        self.propose_local()  # everything appended so far goes first
        membership = members.membership_of(new_members)
        refusal = core.membership_refusal(membership)
        if isinstance(refusal, NotLeader):
            raise NotLeaderError(self.config.node_id, self.leader())
        if isinstance(refusal, Busy):
            raise ReplicationBusy(refusal.reason)
        message = records.Message(topic=members.MEMBERS_TOPIC, body=membership.body)
        results, _ = self.store.put_messages_nowait([message])
        record = (ByteOffset(results[-1].wrote_offset), ByteOffset(results[-1].end_offset))
        start, end = core.log.last_offset, self.store.commitlog.max_offset()
        outcome = core.propose_membership(self._read(start, end), membership, record)
        if not isinstance(outcome, Proposed):  # nothing ran between the check and here
            self._truncate(start)
            raise ReplicationBusy(f"configuration change refused: {outcome}")
        self._local_ranges.append((outcome.start_offset, outcome.end_offset))
        self._process()
        core.report_durable(ByteOffset(self._last_durable))
        self._process()
        log.info(
            "raft node %d: configuration at %d: %s",
            self.config.node_id,
            record[0],
            members.describe(new_members),
        )
        # The record's end, not the payload's: a removed leader steps down as soon as its
        # removal commits, possibly before bytes appended after the record.
        await self.wait_committed(record[1], timeout_s)
        return record[0]

    async def wait_committed(self, end_offset: int, timeout_s: float | None = None) -> None:
        """Return once the commit offset reaches ``end_offset`` in this leader's term."""
        loop = asyncio.get_running_loop()
        core = self._core()
        if core.committed_offset >= end_offset and (
            core.role is Role.LEADER or core.term == self._led_term
        ):
            return
        future: asyncio.Future[int] = loop.create_future()
        heapq.heappush(self._waiters, (end_offset, next(self._waiter_seq), future))
        wait_s = self.config.commit_timeout_s if timeout_s is None else timeout_s
        try:
            await asyncio.wait_for(asyncio.shield(future), wait_s)
        except TimeoutError:
            raise CommitUncertain(
                f"written at the leader but not committed by a majority within {wait_s:.1f} s; "
                "the message may or may not survive"
            ) from None
        finally:
            # Also when the caller is cancelled (its client went away): a waiter nobody awaits
            # any more must not be failed later ("Future exception was never retrieved").
            if not future.done():
                future.cancel()

    def _release_waiters(self, committed: int) -> None:
        while self._waiters and self._waiters[0][0] <= committed:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(committed)

    def _fail_waiters(self, reason: str) -> None:
        waiters, self._waiters = self._waiters, []
        for _, _, future in waiters:
            if not future.done():
                future.set_exception(
                    CommitUncertain(f"{reason}; the message may or may not survive")
                )

    async def transfer_leadership(self, target: int | None, timeout_s: float | None) -> int:
        """Hand leadership to ``target`` (None: the most caught-up follower); returns the new
        leader's id once it leads (as this node sees it)."""
        core = self._core()
        self.check_leader()
        if target is None:
            voters = core.members.current.voters
            rows = tuple(row for row in core.status().progress if row[0] in voters)
            if not rows:
                return self.config.node_id  # a group of one: nothing to hand over
            target = max(rows, key=lambda row: row[3])[0]
        if target == self.config.node_id:
            return target
        outcome = core.transfer_leadership(NodeId(target))
        if isinstance(outcome, NotLeader):
            raise NotLeaderError(self.config.node_id, self.leader())
        if isinstance(outcome, Busy):
            raise ReplicationBusy(outcome.reason)
        self._process()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (TRANSFER_TIMEOUT_S if timeout_s is None else timeout_s)
        while core.leader_id != target:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ReplicationBusy(
                    f"node {target} did not take leadership in time; leader is {core.leader_id}"
                )
            try:
                await asyncio.wait_for(self._leader_changed.wait(), remaining)
            except TimeoutError:
                continue
        return target

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this node runs on (tests and tools submit coroutines to it)."""
        if self._loop is None:
            raise ReplicationError("replication is not started")
        return self._loop

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Return once ``predicate()`` holds, re-checked after every executed Ready; raises
        TimeoutError after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"raft node {self.config.node_id}: condition not met")
            watcher: asyncio.Future[None] = loop.create_future()
            self._watchers.append(watcher)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher, min(remaining, self.config.tick_interval_s * 5))

    def status(self) -> NodeStatus:
        core = self._core()
        s = core.status()
        progress = {row[0]: row for row in s.progress}
        peers = []
        others = [p for p in self.member_table.specs() if p.node_id != self.config.node_id]
        others = [p for p in others if p.node_id in self.member_table.members]
        for p in others:
            row = progress.get(NodeId(p.node_id))
            match = row[3] if row is not None else -1
            peers.append(
                PeerStatus(
                    node_id=p.node_id,
                    peer_endpoint=p.peer_endpoint,
                    client_endpoint=p.client_endpoint,
                    match_offset=match,
                    lag_bytes=s.last_offset - match if match >= 0 else -1,
                    reachable=self.transport.reachable(p.node_id),
                )
            )
        leader = self.leader()
        return NodeStatus(
            node_id=self.config.node_id,
            role=s.role.value,
            term=s.term,
            leader_id=s.leader_id,
            leader_client_endpoint=leader.client_endpoint if leader is not None else "",
            commit_offset=s.committed_offset,
            last_offset=s.last_offset,
            durable_offset=s.durable_offset,
            peers=tuple(peers),
            elections_total=self.elections_total,
            leader_changes_total=self.leader_changes_total,
        )


def _suspect(core: RaftCore, message: Message) -> str | None:
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
