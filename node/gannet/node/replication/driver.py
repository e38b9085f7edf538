"""``ReplicationNode``: the asyncio driver of one node's Raft core, over the real store.

Created and started by the broker (:mod:`gannet.node.broker.serving`) when its config has a
``replication`` section; the v2 servicer asks it whether this node leads, proposes what it
appended and waits for the commit; the admin servicer reads its status and asks for transfers.
Everything runs on the broker's event loop; the core is only touched there. This module is
the IO part; what it decides with is pure in :mod:`driver_state`, the log edits are
:mod:`log_io`, fsync reports :mod:`durability`, its errors :mod:`errors`.

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
import contextlib
import dataclasses
import logging
import random
from collections.abc import Callable

from gannet.node.raft.config import InitialState
from gannet.node.raft.core import RaftCore
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
)
from gannet.node.raft.ready import Ready, Role
from gannet.node.replication import driver_state, members, noop, removal
from gannet.node.replication.config import PeerSpec, ReplicationConfig
from gannet.node.replication.config_log import ConfigLog
from gannet.node.replication.driver_state import CommitWaiters, DriverState, NodeStatus, RoleChange
from gannet.node.replication.durability import FlushReports
from gannet.node.replication.errors import (
    CommitUncertain,
    NotLeaderError,
    ReplicationBusy,
    ReplicationError,
)
from gannet.node.replication.log_io import StoreLog
from gannet.node.replication.state_files import RaftStateFiles
from gannet.node.replication.transport import PeerTransport
from gannet.node.store import steady_clock
from gannet.node.store.config import FlushMode
from gannet.node.store.log import records
from gannet.node.store.message_store import MessageStore

log = logging.getLogger(__name__)

TRANSFER_TIMEOUT_S = 5.0
DISPATCH_WAIT_WARN_S = 10.0
"""A new leader waiting for its dispatch to reach the election's log end warns this often."""


class ReplicationNode:
    """One node's Raft driver. Invariant: the core is only touched on the loop thread."""

    def __init__(self, store: MessageStore, config: ReplicationConfig) -> None:
        self.store = store
        store.write_permit = self.is_leader  # a follower's log takes the leader's bytes only
        self.config = config
        self.files = RaftStateFiles(store.config.root_dir / "raft")
        self.membership_file = members.MembershipFile(self.files.directory / "membership")
        self.member_table = members.MemberTable(config.peers)
        self.standing = removal.Standing(NodeId(config.node_id))
        """Whether the group still counts this member (:mod:`removal`)."""
        self.transport = PeerTransport(config, self._on_message)
        self.core: RaftCore | None = None
        self.state = DriverState(
            written_is_durable=store.config.flush_mode is FlushMode.ASYNC_FLUSH
        )
        self.waiters = CommitWaiters()
        self.fatal_error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tick_task: asyncio.Task[None] | None = None
        self._leader_changed = asyncio.Event()
        self.flush_reports = FlushReports(store, self.state, self._report_durable, self._usable)
        self._processing = False
        self._stopped = False
        self._watchers: list[asyncio.Future[None]] = []
        self.config_log = ConfigLog(store, config.node_id, self.is_leader)
        self.store_log = StoreLog(store, self.files, self.state, self.config_log, config.node_id)
        self.role_listeners: list[Callable[[bool], None]] = []
        """Called on the loop with True once this node leads and has applied the previous
        terms' log (:meth:`is_serving_leader`), False when it stops leading."""
        self._snapshot_task: asyncio.Task[None] | None = None
        self.lease_clock = steady_clock.CLOCK
        """The clock this node stamps on what it sends as leader, sets from what its leaders
        send and takes at its elections (the process's; tests give each in-process member its
        own)."""
        self._clock_term = 0
        """The last term whose lease clock this node took as its leader (:meth:`_lead_clock`)."""
        self._reset_snapshot_task: asyncio.Task[None] | None = None

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
        initial = dataclasses.replace(
            self._initial_state(),
            memberships=members.load_or_bootstrap(self.membership_file, self.config),
        )
        core_config = driver_state.core_config(
            self.config, rng.randrange, self._noop_payload, self._record_end
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
        self.state.persisted_epochs = self.core.log.epochs
        if self.state.persisted_epochs != tuple(self.files.load_epochs()):
            self.files.save_epochs(self.state.persisted_epochs)
        self.state.last_durable = initial.last_offset
        await asyncio.to_thread(self.config_log.install)
        # Only a leader appends on its own: delayed messages wait until this node leads.
        await asyncio.to_thread(self.store.timers.stop)
        self.flush_reports.attach(self._loop)
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
        self.flush_reports.detach()
        await self.transport.stop()
        self.waiters.fail("the node is stopping")

    def _initial_state(self) -> InitialState:
        last = self.store.commitlog.max_offset()
        initial, adopted = driver_state.initial_state(
            self.files.load_hard_state(),
            self.files.load_epochs(),
            start_offset=self.store.commitlog.min_offset() if last > 0 else 0,
            last_offset=last,
            log_start=self.files.load_log_start(),
        )
        if adopted:
            log.warning(
                "commit log [%d, %d) has no leader-epoch file; adopting it as term 1",
                initial.start_offset,
                last,
            )
            self.files.save_hard_state(initial.hard_state)
        return initial

    def _apply_membership(self) -> None:
        """The configuration in force changed, or its entry committed (or the node starts):
        update the addresses and the transport's members. Until an entry commits, the members
        of the committed configuration before it stay admitted too: a leader that removed
        itself leads until its removal commits."""
        core = self._core()
        self.member_table.update(core.members.current)
        admitted = driver_state.admitted_members(core, self.member_table.specs())
        self.state.membership_settled = core.members.latest().end_offset <= core.committed_offset
        self.transport.set_members(admitted, accept_strangers=not core.members.current.members())

    def _noop_payload(self, offset: ByteOffset, term: Term) -> bytes:
        return noop.encode_noop(self.store, offset, term, self.config.node_id)

    def _record_end(self, start: ByteOffset, cap: ByteOffset) -> ByteOffset:
        """``raft.config.RecordEnd`` over the commit log. No record at ``start`` (a bug of
        the core's bookkeeping): the range is cut at ``cap`` as bytes, logged; a follower
        refuses such a range when it holds a configuration record it cannot read whole."""
        end = self.store.commitlog.record_end(start, cap)
        if end is None:
            log.error(
                "raft node %d: no record begins at %d in the commit log; shipping [%d, %d) "
                "without cutting it at a record boundary",
                self.config.node_id,
                start,
                start,
                cap,
            )
            return cap
        return ByteOffset(end)

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
        reason = driver_state.suspect(core, message)
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
        if (
            isinstance(message, AppendEntries | Heartbeat | ResetLogStart)
            and core.leader_id == message.sender
        ):
            self.standing.heard_from_leader()
            if not isinstance(message, ResetLogStart) and message.leader_clock_ms > 0:
                self.lease_clock.observe(message.term, message.leader_clock_ms)
        if core.refused_payload is not None:
            log.error("raft node %d: %s", self.config.node_id, core.refused_payload)
            core.refused_payload = None
        self._process()

    def _report_durable(self, offset: int) -> None:
        self.state.durable(offset)
        self._core().report_durable(ByteOffset(offset))
        self._process()

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
                    self.waiters.fail(f"replication stopped after an error: {exc}")
                    raise
                core.advance(ready)
                if ready.entries and self.state.written_is_durable:
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
            self.store_log.reset(ready.log_reset)
        if ready.truncate_to is not None:
            self.store_log.truncate(ready.truncate_to)
        if core.log.epochs != self.state.persisted_epochs:
            self.files.save_epochs(core.log.epochs)
            self.state.persisted_epochs = core.log.epochs
        if ready.memberships is not None:
            self.membership_file.save(ready.memberships)
            self._apply_membership()
        for entry in ready.entries:
            if not self.state.take_own_range(entry.start_offset, entry.end_offset):
                self.store_log.write(entry.start_offset, entry.payload)
        if ready.hard_state is not None:
            self.files.save_hard_state(ready.hard_state)
        for message in ready.messages:
            self._send(message)
        if ready.committed_offset is not None:
            self.state.committed(ready.committed_offset)
            self.store.set_commit_offset(ready.committed_offset)
            if not self.state.membership_settled:
                self._apply_membership()  # drop members of the configuration before it
            if self.state.offsets_are_ours(core.role, core.term):
                self.waiters.release(ready.committed_offset)
        if ready.soft_state is not None:
            self._on_soft_state(ready.soft_state.role)

    def _compact_to_store_start(self) -> None:
        """Retention deleted commit-log files: tell the core where the log starts now."""
        core = self._core()
        if self.store.commitlog.max_offset() <= 0:
            return
        start = self.store.commitlog.min_offset()
        if start > core.log.start_offset:
            core.compact_log(ByteOffset(start))

    def _send(self, message: Message) -> None:
        if isinstance(message, ResetLogStart):
            self._snapshot_for_reset(message.start_offset)
        if isinstance(message, AppendEntries):
            payload = message.payload
            if message.end_offset > message.prev_offset and not payload:
                try:
                    payload = self.store_log.read(message.prev_offset, message.end_offset)
                except ReplicationError as exc:
                    log.warning("raft node %d: %s", self.config.node_id, exc)
                    return
            self._lead_clock(message.term)
            message = dataclasses.replace(
                message, payload=payload, leader_clock_ms=self.lease_clock.now_ms()
            )
        elif isinstance(message, Heartbeat):
            self._lead_clock(message.term)
            message = dataclasses.replace(message, leader_clock_ms=self.lease_clock.now_ms())
        self.transport.send(message)

    def _lead_clock(self, term: int) -> None:
        """Take ``term``'s lease clock (:mod:`steady_clock`) before this node, its leader, sends
        or stamps anything with it: the wall clock, kept from running ahead of the former
        leader's (fault seed 1210)."""
        if term == self._clock_term:
            return
        self._clock_term = term
        behind_ms = self.lease_clock.anchor(term)
        if behind_ms > steady_clock.AHEAD_OF_FORMER_LEADER_MAX_MS:
            log.warning(
                "raft node %d: term %d's lease clock starts %d ms behind this member's wall "
                "clock, at the former leader's clock: is the wall clock stepped ahead?",
                self.config.node_id,
                term,
                behind_ms,
            )

    def _on_soft_state(self, role: Role) -> None:
        change = self.state.role_changed(role, self._core().term)
        self._leader_changed.set()
        self._leader_changed = asyncio.Event()
        if change is RoleChange.GAINED:
            log.info("raft node %d leads term %d", self.config.node_id, self._core().term)
            self._lead_clock(self._core().term)  # before the timers read it
            self.store.timers.start()
            self._snapshot_task = asyncio.get_running_loop().create_task(
                self._snapshot_when_caught_up(self._core().term)
            )
        elif change is RoleChange.LOST:
            log.info("raft node %d no longer leads", self.config.node_id)
            self.waiters.fail("leadership was lost before the write committed")
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
            # Serve only once dispatch applied every record before the election: a leader
            # whose dispatch lags (or failed and retries: a full disk) would hand out Pop
            # messages whose acks it has not applied yet (seed 702).
            while not await asyncio.to_thread(
                self.store.wait_dispatched, target, DISPATCH_WAIT_WARN_S
            ):
                if core.term != term or not self.is_leader():
                    return
                log.warning(
                    "raft node %d: dispatch has not reached %d yet (at %d); not serving as "
                    "leader until it does",
                    self.config.node_id,
                    target,
                    self.store.dispatch.reput_from,
                )
            if core.term != term or not self.is_leader():
                return
            self.state.caught_up_term = term
            self._tell_role(True)
            self._process()  # wake wait_until watchers
            end = await asyncio.to_thread(self.config_log.append_snapshot)
            self.state.snapshot_offset = end
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
        if self.state.snapshot_offset >= start_offset or self._reset_snapshot_task is not None:
            return
        if not self.is_serving_leader():
            return  # the election snapshot, still to come, is past the start
        term = self._core().term

        async def append() -> None:
            try:
                end = await asyncio.to_thread(self.config_log.append_snapshot)
                if self._usable() and self._core().term == term:
                    self.state.snapshot_offset = end
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
        """The member this node believes leads (itself included), or None — also while it
        knows it is removed (:meth:`knows_removed`: no leader counts it)."""
        if self.core is None or self.core.leader_id == NO_NODE or self.knows_removed():
            return None
        return self.member_table.spec(self.core.leader_id)

    def knows_removed(self) -> bool:
        """Whether this member knows its group no longer counts it (:mod:`removal`): its
        leader refused it as not a member, or it knows no leader and its committed
        configuration no longer names it."""
        core = self.core
        if core is None:
            return False
        latest = core.members.latest()
        return self.standing.knows_removed(
            followed=core.leader_id,
            term=core.term,
            committed=core.members.committed(core.committed_offset).membership,
            settled=latest.end_offset <= core.committed_offset,
        )

    def leader_refused_me(self, leader_id: int) -> None:
        """Member ``leader_id`` refused this member's forwarded call as from a non-member
        (:mod:`gannet.node.api.forwarding`): if it is the leader this member follows, take it
        as no leader for this member until a leader streams to it again (:mod:`removal`)."""
        core = self.core
        if core is None:
            return
        if self.standing.leader_refused(NodeId(leader_id), followed=core.leader_id, term=core.term):
            log.warning(
                "raft node %d: the leader, node %d, refused it as not a member of the group "
                "(removed): no leader for this member in term %d; clients are let go",
                self.config.node_id,
                leader_id,
                core.term,
            )
            self.wake_waiters()

    def route_members(self) -> list[PeerSpec]:
        """The voters of the configuration in force (learners are still catching up: clients
        are not sent to them), by node id."""
        table = self.member_table.members
        return [table[n].spec for n in sorted(table) if table[n].voter]

    def is_serving_leader(self) -> bool:
        """Leads and has applied every config record of the terms before its election (until
        then Pop could hand out messages whose acks are not applied here yet)."""
        return self.is_leader() and self.state.caught_up_term == self._core().term

    def check_leader(self) -> None:
        """Raise :class:`NotLeaderError` unless this node leads and accepts writes
        (:class:`ReplicationBusy` while a new leader still applies the previous terms)."""
        if self.fatal_error is not None:
            raise ReplicationBusy(f"replication stopped after an error: {self.fatal_error}")
        if not self.is_leader():
            raise NotLeaderError(self.config.node_id, self.leader())
        if self.state.caught_up_term != self._core().term:
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
        payload = self.store.commitlog.appended_bytes(start, end) or self.store_log.read(start, end)
        outcome = core.propose(payload)
        if isinstance(outcome, NotLeader):
            raise NotLeaderError(self.config.node_id, self.leader())
        if isinstance(outcome, Busy):
            raise ReplicationBusy(f"the leader refuses writes for now: {outcome.reason}")
        self.state.proposed(outcome.start_offset, outcome.end_offset)
        self._process()
        # The fsync of these bytes may already have been reported (and clamped to the written
        # end, which the Ready just executed raised): repeat it.
        core.report_durable(ByteOffset(self.state.last_durable))
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
        outcome = core.propose_membership(self.store_log.read(start, end), membership, record)
        if not isinstance(outcome, Proposed):  # nothing ran between the check and here
            self.store_log.truncate(start)
            raise ReplicationBusy(f"configuration change refused: {outcome}")
        self.state.proposed(outcome.start_offset, outcome.end_offset)
        self._process()
        core.report_durable(ByteOffset(self.state.last_durable))
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
        if core.committed_offset >= end_offset and self.state.offsets_are_ours(
            core.role, core.term
        ):
            return
        future: asyncio.Future[int] = loop.create_future()
        self.waiters.add(end_offset, future)
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

    async def transfer_leadership(self, target: int | None, timeout_s: float | None) -> int:
        """Hand leadership to ``target`` (None: the most caught-up follower); returns the new
        leader's id once it leads (as this node sees it)."""
        core = self._core()
        self.check_leader()
        if target is None:
            target = driver_state.most_caught_up_voter(core)
        if target in (None, self.config.node_id):  # None: a group of one, nothing to hand over
            return self.config.node_id
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

    def wake_waiters(self) -> None:
        """Re-check every :meth:`wait_until` predicate now (something outside Raft changed)."""
        watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            if not watcher.done():
                watcher.set_result(None)

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
        specs = [p for p in self.member_table.specs() if p.node_id in self.member_table.members]
        return driver_state.node_status(
            self._core().status(), specs, self.transport.reachable, self.leader(), self.state
        )
