"""The Pop broker facade: one object per store that the v2 gRPC service calls.

* :meth:`PopBroker.pop` — ReceiveMessage; when it finds nothing, wait on
  :attr:`PopBroker.waiters` (:class:`polling.PollWaiters`, already attached to the store);
* :meth:`PopBroker.ack` / :meth:`PopBroker.ack_many` / :meth:`PopBroker.ack_jobs` — AckMessage
  (``ack_jobs``: several concurrent requests in one pass);
* :meth:`PopBroker.change_invisible_time` — ChangeInvisibleDuration (returns the new handle);
* :meth:`PopBroker.forward_to_dlq` — ForwardMessageToDeadLetterQueue;
* :meth:`PopBroker.set_revive_queue_count` — admin / operator;
* :meth:`PopBroker.tick` — the periodic work, with an explicit ``now_ms``: flush the in-flight
  buffer, run one revive pass per revive queue. :meth:`start` runs it on a thread with the
  broker's clock (wall by default); tests call it with virtual time. The thread does not poll:
  it sleeps (:class:`waking.WakeSchedule`) until the earliest long-poll expiry, buffer work
  (a checkpoint's store time, offsets to commit) or revive pass, and is woken earlier by a
  waiter registered or a checkpoint buffered or acked. Passes stay at least
  ``buffer_scan_interval_ms`` apart (RocketMQ's fixed scan), so a deadline is met at its
  millisecond when the thread was idle and at most that interval late under load, as before.

Raft: only the leader writes on its own. :meth:`PopBroker.set_leading` (False on a follower,
wired by :mod:`gannet.node.api.receiving` to the replication node's role) pauses the thread's
buffer flush, revive passes and revive-queue shrinking, and :meth:`close` then writes nothing;
True (a leader that applied the previous terms' log) resumes them.

Orderly groups (``consume_message_orderly``) are routed to :mod:`ordering`. Lifecycle:
construct after ``store.open()``, :meth:`close` before ``store.close()`` (it writes every
buffered checkpoint so that the committed offsets stay behind un-acked messages only through
stored checkpoints).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from gannet.node.pop import ordering, receipts, revive_log
from gannet.node.pop.acking import CLOCK_MARGIN_MS, AckJob, AckService
from gannet.node.pop.config import PopConfig
from gannet.node.pop.context import DurableWait, PopContext
from gannet.node.pop.errors import PopError
from gannet.node.pop.filtering import MATCH_ALL, MessageFilter
from gannet.node.pop.polling import PollWaiters
from gannet.node.pop.popping import InitMode, PopRequest, PopResult, PopService
from gannet.node.pop.receipts import ReceiptHandle
from gannet.node.pop.reviving import RevivePass, ReviveService
from gannet.node.pop.waking import NEVER_MS, Wait, WakeSchedule
from gannet.node.store import steady_clock
from gannet.node.store.config import FlushMode
from gannet.node.store.errors import NotLeading
from gannet.node.store.message_store import MessageStore

log = logging.getLogger(__name__)

T = TypeVar("T")


Runner = Callable[[Callable[[], PopResult]], Awaitable[PopResult]]
"""Runs a blocking pop for an async caller, e.g. ``loop.run_in_executor`` wrapped."""


def _wall_ms() -> int:
    return steady_clock.now_ms()


@dataclass(frozen=True, slots=True)
class PopStatistics:
    """A snapshot for metrics and the admin API."""

    tracked_checkpoints: int
    buffered_checkpoints: int
    offset_queues: int
    checkpoints_dropped_without_write_total: int
    poll_waiters: int
    revive_queues: int
    revive_write_queues: int
    revived_total: int
    dead_lettered_total: int
    re_put_total: int


class PopBroker:
    def __init__(
        self,
        store: MessageStore,
        config: PopConfig | None = None,
        *,
        wait_durable: DurableWait,
        rng: random.Random | None = None,
        clock_ms: Callable[[], int] = _wall_ms,
        wait: Wait | None = None,
    ) -> None:
        """``wait_durable``: how a revive-log write waits for the flush mode
        (``gannet.node.domain.committing.blocking_flush_wait``). ``clock_ms`` and ``wait``
        drive the thread (:meth:`start`); tests pass virtual ones (:class:`waking.WakeSchedule`)."""
        self.config = config or PopConfig()
        self.ctx = PopContext(store, self.config, rng or random.Random(), wait_durable)
        self.popper = PopService(self.ctx)
        self.acker = AckService(self.ctx)
        self.orders = ordering.OrderService(self.ctx, self.popper)
        self.waiters = PollWaiters(self.config)
        self.waiters.attach(store)
        self._revivers: dict[int, ReviveService] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leading = threading.Event()
        self._leading.set()
        self._clock_ms = clock_ms
        interval_ms = self.config.revive_interval_ms
        self.schedule = WakeSchedule(clock_ms, interval_ms, wait)
        self.passes_total = 0
        """Passes of the thread (for tests: an idle broker makes one per revive interval)."""
        self._last_pass_ms = 0
        self.waiters.on_register = self._work_due
        self.ctx.buffer.on_work = self._work_due

    @property
    def leading(self) -> bool:
        """False while paused as a Raft follower (see the module docstring)."""
        return self._leading.is_set()

    def set_leading(self, leading: bool) -> None:
        if leading:
            if not self._leading.is_set():
                # The former leader's pops are not tracked here; its clock may run a little
                # ahead of this one. (The term's clock was taken at the election: the driver.)
                now = steady_clock.now_ms()
                self.ctx.buffer.tracking_since_ms = now + CLOCK_MARGIN_MS
            self._leading.set()
            self.schedule.request(0)
        else:
            self._leading.clear()

    @property
    def store(self) -> MessageStore:
        return self.ctx.store

    # --- requests ---
    def pop(
        self,
        group: str,
        topic: str,
        *,
        queue_id: int = -1,
        max_msgs: int = 32,
        invisible_time_ms: int,
        now_ms: int,
        init_mode: InitMode = InitMode.MIN,
        tag_filter: MessageFilter = MATCH_ALL,
        order: bool | None = None,
        attempt_id: str | None = None,
    ) -> PopResult:
        """Pop up to ``max_msgs``; orderly when asked or when the group is FIFO."""
        if order is None:
            config = self.store.group_configs.get(group)
            order = config is not None and config.consume_message_orderly
        req = PopRequest(
            group, topic, queue_id, max_msgs, invisible_time_ms, now_ms, init_mode,
            tag_filter, order, attempt_id,
        )  # fmt: skip
        if order:
            return self.orders.pop(req)
        return self.popper.pop(req)

    async def pop_long_polling(
        self,
        group: str,
        topic: str,
        *,
        poll_time_ms: int,
        queue_id: int = -1,
        max_msgs: int = 32,
        invisible_time_ms: int,
        init_mode: InitMode = InitMode.MIN,
        tag_filter: MessageFilter = MATCH_ALL,
        attempt_id: str | None = None,
        clock_ms: Callable[[], int] = _wall_ms,
        run: Runner | None = None,
    ) -> PopResult:
        """ReceiveMessage with long polling: pop; if nothing was found, wait (at most
        ``poll_time_ms``) until a message of the topic or its retry topic arrives, then pop
        again. ``run`` executes the blocking pop (e.g. in a thread pool); by default inline.
        Expired waits are woken by :meth:`tick` / the broker thread. Raises :class:`PopBusy`
        when too many pops wait."""
        deadline_ms = clock_ms() + poll_time_ms

        def attempt() -> PopResult:
            return self.pop(
                group, topic, queue_id=queue_id, max_msgs=max_msgs,
                invisible_time_ms=invisible_time_ms, now_ms=clock_ms(), init_mode=init_mode,
                tag_filter=tag_filter, attempt_id=attempt_id,
            )  # fmt: skip

        async def inline(work: Callable[[], PopResult]) -> PopResult:
            return work()

        runner = run or inline
        while True:
            waiter = self.waiters.register(topic, group, queue_id, deadline_ms, clock_ms())
            try:
                result = await runner(attempt)
            except BaseException:
                if waiter is not None:
                    self.waiters.cancel(waiter)
                raise
            if result.found or waiter is None:
                if waiter is not None:
                    self.waiters.cancel(waiter)
                return result
            await waiter.wait_async()
            if waiter.expired:
                return await runner(attempt)

    def ack(self, group: str, topic: str, handle: str | ReceiptHandle, *, now_ms: int) -> None:
        if self._is_order(handle):
            self.orders.ack(group, topic, handle, now_ms)
            return
        self.acker.ack(group, topic, handle, now_ms)

    def ack_many(
        self, group: str, topic: str, handles: list[str | ReceiptHandle], *, now_ms: int
    ) -> list[PopError | None]:
        return self.ack_jobs([(group, topic, handles)], now_ms=now_ms)[0]

    def ack_jobs(self, jobs: list[AckJob], *, now_ms: int) -> list[list[PopError | None]]:
        """:meth:`ack_many` of several AckMessage requests in one pass
        (:meth:`AckService.ack_jobs`: one lock hold, one append); orderly handles are acked
        one by one through the order service."""
        if all(
            isinstance(h, ReceiptHandle) and not h.is_order for _, _, hs in jobs for h in hs
        ):  # the usual case (parsed plain handles): no order result to interleave
            return self.acker.ack_jobs(jobs, now_ms)
        out: list[list[PopError | None]] = []
        plain_jobs: list[AckJob] = []
        slots: list[list[int]] = []
        for group, topic, handles in jobs:
            results: list[PopError | None] = []
            plain: list[str | ReceiptHandle] = []
            job_slots: list[int] = []
            for h in handles:
                if self._is_order(h):
                    try:
                        self.orders.ack(group, topic, h, now_ms)
                        results.append(None)
                    except PopError as exc:
                        results.append(exc)
                else:
                    job_slots.append(len(results))
                    results.append(None)
                    plain.append(h)
            out.append(results)
            plain_jobs.append((group, topic, plain))
            slots.append(job_slots)
        for results, job_slots, acked in zip(
            out, slots, self.acker.ack_jobs(plain_jobs, now_ms), strict=True
        ):
            for slot, result in zip(job_slots, acked, strict=True):
                results[slot] = result
        return out

    def ack_jobs_now(
        self, jobs: list[AckJob], *, now_ms: int
    ) -> list[list[PopError | None]] | None:
        """:meth:`ack_jobs` if it can run without waiting (:meth:`now_or_none`), else None
        (nothing done; run :meth:`ack_jobs` where blocking is allowed). For an event loop: an
        ack costs tens of µs of CPU, less than a worker-thread hop."""
        return self.now_or_none(lambda: self.ack_jobs(jobs, now_ms=now_ms))

    def now_or_none(self, work: Callable[[], T]) -> T | None:
        """``work()`` (a pop or an ack of this broker) if it can run without waiting, else None
        with nothing done. It cannot when another thread holds the order infos' or the buffer's
        lock (taken here without blocking, in the order a FIFO pop takes them, and held through
        ``work``; queue locks are try-locks already) or when SYNC_FLUSH would wait for the disk.
        ``work`` must not return None."""
        if self.store.config.flush_mode is FlushMode.SYNC_FLUSH:
            return None
        infos_lock, buffer_lock = self.orders.infos.lock, self.ctx.buffer.lock
        if not infos_lock.acquire(blocking=False):
            return None
        try:
            if not buffer_lock.acquire(blocking=False):
                return None
            try:
                return work()
            finally:
                buffer_lock.release()
        finally:
            infos_lock.release()

    def change_invisible_time(
        self,
        group: str,
        topic: str,
        handle: str | ReceiptHandle,
        *,
        invisible_time_ms: int,
        now_ms: int,
    ) -> ReceiptHandle:
        change = receipts.InvisibleTimeChange(group, topic, handle, invisible_time_ms, now_ms)
        if self._is_order(handle):
            return self.orders.change_invisible_time(change)
        return self.acker.change_invisible_time(change)

    def forward_to_dlq(
        self, group: str, topic: str, handle: str | ReceiptHandle, *, now_ms: int
    ) -> None:
        def ack(h: ReceiptHandle) -> None:
            self.ack(group, topic, h, now_ms=now_ms)

        if not self._is_order(handle):
            self.acker.forward_to_dlq(group, topic, handle, now_ms, ack)
            return
        # An orderly pop takes the order infos' lock, then the buffer's; the forward holds the
        # buffer's while its ack takes the order infos'. Taking the order infos' lock first keeps
        # one order, so a forward and a FIFO pop of the same group cannot deadlock.
        with self.orders.infos.lock:
            self.acker.forward_to_dlq(group, topic, handle, now_ms, ack)

    @staticmethod
    def _is_order(handle: str | ReceiptHandle) -> bool:
        if isinstance(handle, ReceiptHandle):
            return handle.is_order
        return receipts.parse(handle).is_order

    # --- revive queues ---
    def set_revive_queue_count(self, count: int) -> None:
        self.ctx.set_revive_queue_count(count)

    def revive_queue_ids(self) -> list[int]:
        """Every revive queue still read: the current ones and retired ones."""
        config = revive_log.ensure_revive_topic(self.store, self.ctx.revive_write_queues)
        return list(range(config.read_queue_nums))

    def reviver(self, revive_qid: int) -> ReviveService:
        service = self._revivers.get(revive_qid)
        if service is None:
            service = self._revivers[revive_qid] = ReviveService(self.ctx, revive_qid)
        return service

    def revivers(self) -> dict[int, ReviveService]:
        """The revive services created so far, by revive queue id (a copy, for metrics)."""
        return dict(self._revivers)

    def revive(self, now_ms: int) -> list[RevivePass]:
        return [self.reviver(q).revive_once(now_ms) for q in self.revive_queue_ids()]

    def retired_queues_drained(self, now_ms: int) -> bool:
        """True when revive queues beyond the current count hold nothing unhandled, neither
        in the queue nor parked in the timer (then the operator may shrink the read count)."""
        return all(
            self.reviver(q).drained(now_ms)
            for q in self.revive_queue_ids()
            if q >= self.ctx.revive_write_queues
        )

    def shrink_drained_revive_queues(self, now_ms: int) -> bool:
        """Stop reading retired revive queues once drained; True when the read count shrank."""
        if not self.retired_queues_drained(now_ms):
            return False
        current = self.store.topic_configs.get(revive_log.revive_topic(self.store))
        if current is None or current.read_queue_nums == self.ctx.revive_write_queues:
            return False
        self.store.topic_configs.put(
            dataclasses.replace(current, read_queue_nums=self.ctx.revive_write_queues)
        )
        return True

    def statistics(self) -> PopStatistics:
        buffer = self.ctx.buffer.statistics()
        revivers = list(self._revivers.values())
        return PopStatistics(
            tracked_checkpoints=buffer.tracked,
            buffered_checkpoints=buffer.buffered,
            offset_queues=buffer.offset_queues,
            checkpoints_dropped_without_write_total=buffer.dropped_without_write_total,
            poll_waiters=self.waiters.waiting(),
            revive_queues=len(self.revive_queue_ids()),
            revive_write_queues=self.ctx.revive_write_queues,
            revived_total=sum(r.revived_total for r in revivers),
            dead_lettered_total=sum(r.dead_lettered_total for r in revivers),
            re_put_total=sum(r.re_put_total for r in revivers),
        )

    # --- periodic work ---
    def tick(self, now_ms: int) -> list[RevivePass]:
        """Flush the in-flight buffer, then one revive pass per revive queue."""
        self.ctx.flush_buffer(now_ms)
        self.waiters.expire(now_ms)
        self.orders.sweep(now_ms)
        return self.revive(now_ms)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gannet-pop", daemon=True)
        self._thread.start()

    def _work_due(self, due_ms: int) -> None:
        """A waiter registered or a checkpoint buffered/acked: wake for it (see the module
        docstring for the least gap between passes)."""
        self.schedule.request(max(due_ms, self._last_pass_ms + self.config.buffer_scan_interval_ms))

    def _run(self) -> None:
        last_revive = 0
        interval_ms = self.config.buffer_scan_interval_ms
        while not self._stop.is_set():
            self.schedule.begin_pass()
            now = self._last_pass_ms = self._clock_ms()
            next_ms = NEVER_MS  # a Raft follower: the leader revives and writes checkpoints
            if self._leading.is_set():
                try:
                    self.ctx.flush_buffer(now)
                    self.waiters.expire(now)
                    if now - last_revive >= self.config.revive_interval_ms:
                        last_revive = now
                        self.revive(now)
                        self.orders.sweep(now)
                        self.shrink_drained_revive_queues(now)
                    next_ms = self._next_work_ms(now, last_revive)
                except Exception:
                    log.exception("pop housekeeping failed")
                    next_ms = now + interval_ms
            self.passes_total += 1
            self.schedule.sleep(next_ms, self._stop)

    def _next_work_ms(self, now_ms: int, last_revive_ms: int) -> int:
        """The earliest of the next revive pass, long-poll expiry and buffer work, but not
        sooner than one scan interval after this pass."""
        next_ms = last_revive_ms + self.config.revive_interval_ms
        for due_ms in (self.waiters.next_expiry_ms(), self.ctx.next_flush_ms()):
            if due_ms is not None:
                next_ms = min(next_ms, due_ms)
        return max(next_ms, now_ms + self.config.buffer_scan_interval_ms)

    def close(self) -> None:
        """Stop the thread and write every buffered checkpoint."""
        self._stop.set()
        self.schedule.request(0)
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._leading.is_set():
            try:
                self.ctx.flush_all()
            except NotLeading:  # replication stopped first: nothing here reaches the log now
                log.warning("pop: buffered checkpoints not written (this member does not lead)")
        self.ctx.ck_floors.detach()
        self.orders.persist()
