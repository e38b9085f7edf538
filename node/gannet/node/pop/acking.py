"""Ack, batch ack, change invisible time and forward-to-DLQ of popped messages
(RocketMQ ``AckMessageProcessor`` / ``ChangeInvisibleTimeProcessor``;
``docs/formats/pop.md`` §3–§4, ``docs/protocol.md`` §7).

Checks, in this order, each raising before anything is written: the handle parses (every field
a plain decimal within its Java type, :mod:`receipts`); it names this broker; its queue offset
lies in ``[minOffset, maxOffset)`` of the real topic (the retry topic when the flag says so);
its invisible time has not elapsed (``now < popTime + invisibleTime``); its pop time is not in
the future, its revive queue exists, and its commit-log offset is the one the consume queue
holds for that queue offset; and the checkpoint it names: when still tracked in memory, it
belongs to this group, the offset is one of its messages, and that message is not acked yet;
when not tracked, the handle must predate the tracking (a restart or a leadership change:
every checkpoint made since is tracked until its revive time), else it names no checkpoint.

An ack of a tracked checkpoint that is still only in memory just sets its bit; otherwise an ACK
message (a batch ACK when several offsets of one checkpoint are acked together) is written to
the checkpoint's revive queue, delivered at ``popTime + invisibleTime``. A handle whose
checkpoint is no longer tracked (after a restart, or evicted) is acked by a written ACK only;
duplicates are then harmless to revive.

Change invisible time first writes a new one-message checkpoint (never only buffered: the old
ack may let the message be forgotten) — popTime = the old pop time + 1 ms, so the two
checkpoints never share a revive key, and an invisible time that ends at max(now, popTime) +
the requested time; in the old revive queue unless it was retired — and then acks the old
handle. Its key depends on the old handle only, so a second run of the same change (a call
routed again to a new leader that has the first run's records, fault seed 630) finds the first
run's checkpoint (tracked, or by its unique key in the store's index) and answers with its
handle instead of writing another checkpoint that no ack would cover. Orderly handles (revive
queue 999) are delegated to :mod:`ordering`.

Called by :class:`gannet.node.pop.service.PopBroker`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gannet.node.pop import checkpoints, receipts, retrying, revive_log
from gannet.node.pop.acks import AckMsg
from gannet.node.pop.checkpoints import PopCheckPoint
from gannet.node.pop.context import PopContext
from gannet.node.pop.errors import (
    AlreadyAcked,
    PopError,
    ReceiptHandleExpired,
    ReceiptHandleForeign,
    ReceiptHandleUnknown,
)
from gannet.node.pop.merging import Inflight
from gannet.node.pop.receipts import InvisibleTimeChange, ReceiptHandle
from gannet.node.store.log import records
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.consume_queues import ConsumeQueue

CLOCK_MARGIN_MS = 10_000
"""Slack for clocks of Raft members: a handle a former leader made may carry a pop time a
little ahead of this broker's clock."""


@dataclass(frozen=True, slots=True)
class AckTarget:
    """A validated ack: the handle, its real topic and, if tracked, its in-flight entry."""

    group: str
    topic: str
    handle: ReceiptHandle
    entry: Inflight | None
    bit: int

    def ack_msg(self) -> AckMsg:
        h = self.handle
        return AckMsg(
            h.queue_offset,
            h.ck_queue_offset,
            self.group,
            self.topic,
            h.queue_id,
            h.pop_time_ms,
            h.broker_name,
        )


AckJob = tuple[str, str, list[str | ReceiptHandle]]
"""(group, topic, handles) of one AckMessage request."""

RUN_UNITS_MAX = 32
"""Consume-queue units a :class:`StoreView` reads at once (a checkpoint holds at most 32)."""


class StoreView:
    """What :meth:`AckService.resolve` reads of the store for one pass over a batch of handles:
    each queue's bounds once, and the commit offsets of its units in runs of up to
    ``run_units`` from the first offset asked (the handles of one checkpoint name nearby
    offsets), instead of per handle. Used under the buffer lock for one batch; the store only
    appends meanwhile, and a handle cannot name a unit written after its pop."""

    def __init__(self, store: MessageStore, run_units: int = 1) -> None:
        self.store = store
        self.run_units = max(1, min(run_units, RUN_UNITS_MAX))
        self._bounds: dict[tuple[str, int], tuple[ConsumeQueue | None, int, int]] = {}
        self._commit_offsets: dict[tuple[str, int, int], int] = {}

    def bounds(self, topic: str, queue_id: int) -> tuple[ConsumeQueue | None, int, int]:
        """The queue (None if it does not exist) and its ``[min, max)`` offsets (0, 0 then)."""
        key = (topic, queue_id)
        got = self._bounds.get(key)
        if got is None:
            queue = self.store.queues.get(topic, queue_id)
            if queue is None:
                got = (None, 0, 0)
            else:
                got = (queue, queue.min_offset_in_queue(), queue.max_offset_in_queue())
            self._bounds[key] = got
        return got

    def commit_offset(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        """The commit-log offset of the unit at ``queue_offset`` (None when unreadable)."""
        key = (topic, queue_id, queue_offset)
        found = self._commit_offsets.get(key)
        if found is None:
            queue, _, hi = self.bounds(topic, queue_id)
            if queue is None:
                return None
            count = max(1, min(self.run_units, hi - queue_offset))
            for unit in queue.read_units(queue_offset, count):
                self._commit_offsets[(topic, queue_id, unit.queue_offset)] = unit.commit_offset
            found = self._commit_offsets.get(key)
        return found


class AckService:
    def __init__(self, ctx: PopContext) -> None:
        self.ctx = ctx

    def resolve(
        self,
        group: str,
        topic: str,
        handle: str | ReceiptHandle,
        now_ms: int,
        view: StoreView | None = None,
    ) -> AckTarget:
        """Validate a handle for ``group``; call with ``ctx.buffer.lock`` held to act on it.
        ``view``: the batch's reads of the store (a fresh one by default)."""
        h = receipts.parse(handle) if isinstance(handle, str) else handle
        if h.broker_name != self.ctx.broker_name:
            raise ReceiptHandleUnknown(
                f"receipt handle names broker {h.broker_name!r}; this is {self.ctx.broker_name!r}"
            )
        real = receipts.real_topic(h.flag, group, topic)
        if view is None:
            view = StoreView(self.ctx.store)
        _, lo, hi = view.bounds(real, h.queue_id)
        if not lo <= h.queue_offset < hi:
            raise ReceiptHandleUnknown(
                f"receipt handle names offset {h.queue_offset} of {real!r} queue {h.queue_id}, "
                f"which holds offsets [{lo}, {hi})"
            )
        if now_ms >= h.next_visible_time_ms:
            raise ReceiptHandleExpired(
                f"receipt handle expired at {h.next_visible_time_ms} (now {now_ms}); the "
                "message may have been delivered again"
            )
        self._check_names_stored_message(real, h, now_ms, view)
        if h.is_order:
            return AckTarget(group, real, h, None, 0)
        key = checkpoints.revive_key(
            real, group, h.queue_id, h.ck_queue_offset, h.pop_time_ms, h.broker_name
        )
        entry = self.ctx.buffer.find(key)
        if entry is None or entry.ck is None:
            owner = self.ctx.buffer.owner_of(
                real, h.queue_id, h.ck_queue_offset, h.pop_time_ms, h.broker_name
            )
            if owner is not None and owner != group:
                raise ReceiptHandleForeign(
                    f"receipt handle belongs to group {owner!r}, not {group!r}"
                )
            if h.pop_time_ms >= self.ctx.buffer.start_tracking(now_ms):
                # Every checkpoint made since tracking began stays tracked until its revive
                # time, which this handle has not reached: it names no checkpoint.
                raise ReceiptHandleUnknown(
                    f"receipt handle names a checkpoint at offset {h.ck_queue_offset} of "
                    f"{real!r} queue {h.queue_id} popped at {h.pop_time_ms} by {group!r}, "
                    "which this broker did not make"
                )
            return AckTarget(group, real, h, None, 0)
        index = entry.ck.index_of(h.queue_offset)
        if index < 0:
            raise ReceiptHandleUnknown(
                f"offset {h.queue_offset} is not part of the checkpoint at {h.ck_queue_offset}"
            )
        if entry.acked_bits >> index & 1:
            raise AlreadyAcked(f"the message at offset {h.queue_offset} was already acked")
        return AckTarget(group, real, h, entry, 1 << index)

    def _check_names_stored_message(
        self, real: str, h: ReceiptHandle, now_ms: int, view: StoreView
    ) -> None:
        """The handle's pop time, revive queue and commit-log offset agree with the store."""
        if h.pop_time_ms > now_ms + CLOCK_MARGIN_MS:
            raise ReceiptHandleUnknown(
                f"receipt handle's pop time {h.pop_time_ms} lies in the future (now {now_ms})"
            )
        # Below the queues written now, it is below the revive topic's count as well.
        if not h.is_order and h.revive_qid >= self.ctx.revive_write_queues:
            revive = self.ctx.store.topic_configs.get(revive_log.revive_topic(self.ctx.store))
            count = 0 if revive is None else max(revive.read_queue_nums, revive.write_queue_nums)
            if h.revive_qid >= max(count, self.ctx.revive_write_queues):
                raise ReceiptHandleUnknown(
                    f"receipt handle names revive queue {h.revive_qid}; there are {count}"
                )
        if h.commit_offset < 0:
            return
        stored_at = view.commit_offset(real, h.queue_id, h.queue_offset)
        if stored_at != h.commit_offset:
            raise ReceiptHandleUnknown(
                f"receipt handle names commit-log offset {h.commit_offset} for offset "
                f"{h.queue_offset} of {real!r} queue {h.queue_id}; the message there is at "
                f"{stored_at}"
            )

    # --- ack ---
    def ack(self, group: str, topic: str, handle: str | ReceiptHandle, now_ms: int) -> None:
        """Acknowledge one message; raises a :class:`PopError` with nothing changed."""
        error = self.ack_many(group, topic, [handle], now_ms)[0]
        if error is not None:
            raise error

    def ack_many(
        self, group: str, topic: str, handles: list[str | ReceiptHandle], now_ms: int
    ) -> list[PopError | None]:
        """Acknowledge several messages (v2 AckMessage entries); one result per handle.

        Acks of stored checkpoints are written together, one batch ACK per checkpoint."""
        return self.ack_jobs([(group, topic, handles)], now_ms)[0]

    def ack_jobs(self, jobs: list[AckJob], now_ms: int) -> list[list[PopError | None]]:
        """:meth:`ack_many` of several requests at once (concurrent AckMessage calls): one
        result list per job, each as if the jobs had run one after another in this order, with
        one hold of the buffer lock, one append of every ACK record (so one Raft proposal) and
        one offset commit. A store error on the append raises for all of them, with no bit of a
        stored checkpoint set."""
        out: list[list[PopError | None]] = []
        runs: list[list[AckTarget]] = []  # per job and checkpoint: the offsets acked
        claimed: set[tuple[int, int]] = set()  # (id of a tracked entry, queue offset)
        with self.ctx.buffer.lock:
            view = StoreView(self.ctx.store, max((len(h) for _, _, h in jobs), default=1))
            for group, topic, handles in jobs:
                results: list[PopError | None] = []
                job_writes: dict[tuple[str, int, int, int, int], list[AckTarget]] = {}
                for handle in handles:
                    try:
                        target = self.resolve(group, topic, handle, now_ms, view)
                        # An earlier job of this call may have claimed it: the bit of a stored
                        # checkpoint is set only after the write, so resolve cannot see it.
                        mark = (id(target.entry), target.handle.queue_offset)
                        if target.entry is not None and mark in claimed:
                            raise AlreadyAcked(
                                f"the message at offset {target.handle.queue_offset} was "
                                "already acked"
                            )
                        self._claim(target, job_writes)
                        if target.entry is not None:
                            claimed.add(mark)
                        results.append(None)
                    except PopError as exc:
                        results.append(exc)
                out.append(results)
                runs.extend(job_writes.values())
            durable_at = self._write_acks(runs)
            for run in runs:
                for t in run:
                    if t.entry is not None:
                        self.ctx.buffer.mark_acked(t.entry, t.bit)
        self.ctx.wait_durable(durable_at)
        self.ctx.commit_offsets()
        return out

    def _claim(
        self, target: AckTarget, to_write: dict[tuple[str, int, int, int, int], list[AckTarget]]
    ) -> None:
        h = target.handle
        if h.is_order:
            raise ReceiptHandleUnknown("orderly handles are acked through the order service")
        entry = target.entry
        if entry is not None and not entry.stored and not entry.storing:
            self.ctx.buffer.mark_acked(entry, target.bit)  # the CK will carry the bit
            return
        key = (target.topic, h.queue_id, h.ck_queue_offset, h.pop_time_ms, h.revive_qid)
        pending = to_write.setdefault(key, [])
        if any(p.handle.queue_offset == h.queue_offset for p in pending):
            raise AlreadyAcked(f"offset {h.queue_offset} is acked twice in one request")
        pending.append(target)

    def _write_acks(self, runs: list[list[AckTarget]]) -> int | None:
        """One ACK record per run (offsets of one checkpoint acked by one request), a batch
        ACK when it has several offsets; all appended in one write."""
        out = []
        for run in runs:
            first = run[0]
            h = first.handle
            ack = first.ack_msg()
            if len(run) > 1:
                offsets = tuple(t.handle.queue_offset for t in run)
                ack = replace(ack, ack_offset=-1, ack_offsets=offsets)
            out.append((ack, h.revive_qid, h.next_visible_time_ms))
        return self.ctx.write_acks_nowait(out)

    # --- change invisible time ---
    def change_invisible_time(self, change: InvisibleTimeChange) -> ReceiptHandle:
        """New checkpoint for the message, then ack of the old handle; returns the new handle."""
        group, topic, now_ms = change.group, change.topic, change.now_ms
        invisible_time_ms = change.invisible_time_ms
        self.ctx.check_invisible_time(invisible_time_ms)
        with self.ctx.buffer.lock:
            target = self.resolve(group, topic, change.handle, now_ms)
            h = target.handle
            if h.is_order:
                raise ReceiptHandleUnknown("orderly handles are changed through the order service")
            revive_qid = h.revive_qid
            if revive_qid >= self.ctx.revive_write_queues:
                revive_qid = self.ctx.next_revive_qid()
            # The new CK must not share the revive key (topic, group, queue, start offset,
            # pop time, broker) of the old one, or revive could match the old ack to it; and a
            # second run of this change must make the same key (below). So its pop time is the
            # old one + 1 ms, and its invisible time runs from there to max(now, that) + the
            # requested time (the message is visible again when it was before).
            pop_time_ms = h.pop_time_ms + 1
            ck = PopCheckPoint(
                start_offset=h.queue_offset,
                pop_time_ms=pop_time_ms,
                invisible_time_ms=max(now_ms, pop_time_ms) + invisible_time_ms - pop_time_ms,
                num=1,
                queue_id=h.queue_id,
                topic=target.topic,
                cid=group,
                broker_name=h.broker_name,
                offset_diffs=(0,),
            )
            # Never buffered: acking the old handle may let its pop's offset be committed (or
            # writes an ACK record), so only a stored new CK keeps the message from being lost
            # in a crash (found by the simulation, seed 39).
            # Run before? (a call routed again to a new leader, which has the stopped leader's
            # records: fault seed 630) Then answer with that run's CK: a second one would get
            # no ACK from a client that holds the handle of only one, and come back.
            earlier = self._earlier_change(ck) if target.entry is None else None
            if earlier is None:
                ck_durable_at = self.ctx.write_cks_nowait([(ck, revive_qid)])
            else:
                (ck, revive_qid), ck_durable_at = earlier, None
            if self.ctx.buffer.find(checkpoints.ck_revive_key(ck)) is None:
                self.ctx.buffer.add(None, Inflight(ck, revive_qid, 0, True))
            to_write: dict[tuple[str, int, int, int, int], list[AckTarget]] = {}
            self._claim(target, to_write)
            # Appended after the new CK, so its durability covers the CK's as well.
            ack_durable_at = self._write_acks(list(to_write.values()))
            if target.entry is not None:
                self.ctx.buffer.mark_acked(target.entry, target.bit)
        self.ctx.wait_durable(ack_durable_at if ack_durable_at is not None else ck_durable_at)
        self.ctx.commit_offsets()
        return ReceiptHandle(
            ck_queue_offset=h.queue_offset,
            pop_time_ms=pop_time_ms,
            invisible_time_ms=ck.invisible_time_ms,
            revive_qid=revive_qid,
            flag=h.flag,
            broker_name=h.broker_name,
            queue_id=h.queue_id,
            queue_offset=h.queue_offset,
            commit_offset=h.commit_offset,
        )

    def _earlier_change(self, ck: PopCheckPoint) -> tuple[PopCheckPoint, int] | None:
        """The CK (and its revive queue) an earlier run of the same change wrote: tracked
        here, or found in the log (``revive_log.find_ck``); None when there is none."""
        entry = self.ctx.buffer.find(checkpoints.ck_revive_key(ck))
        if entry is not None and entry.ck is not None and entry.ck.num == 1:
            return entry.ck, entry.revive_qid
        return revive_log.find_ck(self.ctx.store, ck)

    # --- forward to DLQ ---
    def forward_to_dlq(
        self,
        group: str,
        topic: str,
        handle: str | ReceiptHandle,
        now_ms: int,
        ack: Callable[[ReceiptHandle], None] | None = None,
    ) -> None:
        """v2 ForwardMessageToDeadLetterQueue: copy the message to ``%DLQ%<group>``, then ack
        it (with ``ack`` when given, e.g. the orderly ack)."""
        with self.ctx.buffer.lock:
            target = self.resolve(group, topic, handle, now_ms)
            h = target.handle
            store = self.ctx.store
            got = store.get_messages(target.topic, h.queue_id, h.queue_offset, 1)
            if not got.messages or got.messages[0].queue_offset != h.queue_offset:
                raise ReceiptHandleUnknown(f"message at offset {h.queue_offset} is gone")
            original = records.decode(got.messages[0].data)
            dlq = retrying.dlq_message(original, group, retrying.original_topic_of(group, topic))
            retrying.ensure_system_topic(store, dlq.topic, None)
            store.put_messages([dlq])
            if ack is not None:
                ack(h)
            else:
                self.ack(group, topic, h, now_ms)
