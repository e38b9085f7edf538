"""The Pop broker thread sleeps until its next known deadline instead of polling
(:mod:`gannet.node.pop.waking`), driven here by a virtual clock whose waits end only when the
schedule wakes them."""

from __future__ import annotations

import threading
from pathlib import Path

from gannet.node.domain.committing import pop_flush_wait
from gannet.node.pop.config import PopConfig
from gannet.node.pop.receipts import ReceiptHandle
from gannet.node.pop.service import PopBroker
from gannet.node.pop.waking import WakeSchedule
from tests.pop.pop_harness import GROUP, TOPIC, Harness

REVIVE_MS = PopConfig().revive_interval_ms


class VirtualTimer:
    """The thread's clock and wait: a wait records its timeout (ms) and ends only when the
    schedule sets the event (a request, or a poke after the test moved ``now_ms``)."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self.waits_ms: list[int] = []
        self._cond = threading.Condition()

    def clock(self) -> int:
        return self.now_ms

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        with self._cond:
            self.waits_ms.append(round(timeout_s * 1000))
            self._cond.notify_all()
        return event.wait(60)

    def await_waits(self, count: int) -> list[int]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.waits_ms) >= count, 30), self.waits_ms
            return list(self.waits_ms)


def _threaded(tmp_path: Path) -> tuple[Harness, VirtualTimer, PopBroker]:
    h = Harness(tmp_path, PopConfig())
    h.setup()
    h.broker.close()
    timer = VirtualTimer(h.now)
    h.broker = PopBroker(
        h.store,
        h.config,
        wait_durable=pop_flush_wait(h.store),
        clock_ms=timer.clock,
        wait=timer.wait,
    )
    h.broker.start()
    return h, timer, h.broker


def test_idle_thread_sleeps_until_the_next_revive_pass(tmp_path: Path) -> None:
    h, timer, broker = _threaded(tmp_path)
    t0 = timer.now_ms
    try:
        assert timer.await_waits(1) == [REVIVE_MS]  # not the 5 ms scan interval
        assert broker.passes_total == 1
        timer.now_ms = t0 + REVIVE_MS - 1
        broker.schedule.poke()
        assert timer.await_waits(2)[-1] == 1  # woken early: waits out the rest, no pass
        assert broker.passes_total == 1
        timer.now_ms = t0 + REVIVE_MS
        broker.schedule.poke()
        assert timer.await_waits(3)[-1] == REVIVE_MS
        assert broker.passes_total == 2
    finally:
        h.close()


def test_waiter_registered_while_asleep_expires_at_its_millisecond(tmp_path: Path) -> None:
    h, timer, broker = _threaded(tmp_path)
    t0 = timer.now_ms
    try:
        timer.await_waits(1)
        waiter = broker.waiters.register(TOPIC, GROUP, -1, t0 + 37, t0)
        assert waiter is not None
        assert timer.await_waits(2)[-1] == 37  # the registration cut the sleep short
        timer.now_ms = t0 + 36
        broker.schedule.poke()
        timer.await_waits(3)
        assert not waiter.woken
        timer.now_ms = t0 + 37
        broker.schedule.poke()
        assert waiter.wait(30)
        assert waiter.expired
        assert timer.await_waits(4)[-1] == REVIVE_MS - 37
        assert broker.passes_total == 2
    finally:
        h.close()


def test_passes_stay_one_scan_interval_apart(tmp_path: Path) -> None:
    h, timer, broker = _threaded(tmp_path)
    t0 = timer.now_ms
    scan_ms = h.config.buffer_scan_interval_ms
    try:
        timer.await_waits(1)
        waiter = broker.waiters.register(TOPIC, GROUP, -1, t0 + 2, t0)
        assert waiter is not None
        assert timer.await_waits(2)[-1] == scan_ms  # as late as the 5 ms scan, not later
        timer.now_ms = t0 + scan_ms
        broker.schedule.poke()
        assert waiter.wait(30)
        assert waiter.expired
    finally:
        h.close()


def test_acks_wake_the_thread_within_the_scan_interval(tmp_path: Path) -> None:
    h, timer, broker = _threaded(tmp_path)
    t0 = timer.now_ms
    scan_ms = h.config.buffer_scan_interval_ms
    try:
        timer.await_waits(1)
        h.produce(3, queue_id=0)
        got = h.pop(queue_id=0)  # buffered: due in pop_ck_stay_buffer_time_ms, no wake
        assert broker.ctx.buffer.statistics().buffered == 1
        handles: list[str | ReceiptHandle] = [m.receipt_handle for m in got.messages]
        assert broker.ack_many(GROUP, TOPIC, handles, now_ms=t0) == [None, None, None]
        # Offsets over finished pops may need committing: a pass one scan interval after the
        # last (the ack itself committed these; the pass catches any it could not).
        assert timer.await_waits(2)[-1] == scan_ms
        assert broker.passes_total == 1
        timer.now_ms = t0 + scan_ms
        broker.schedule.poke()
        assert timer.await_waits(3)[-1] == REVIVE_MS - scan_ms
        assert broker.passes_total == 2
        assert h.store.consumer_offsets.query(GROUP, TOPIC, 0) == 3
        assert broker.ctx.buffer.statistics().buffered == 0  # all acked: never written
    finally:
        h.close()


def test_a_request_made_during_a_pass_shortens_the_next_sleep() -> None:
    now_ms = 100
    timeouts: list[float] = []

    def wait(event: threading.Event, timeout_s: float) -> bool:
        timeouts.append(timeout_s)
        return False

    schedule = WakeSchedule(lambda: now_ms, 1_000, wait)
    schedule.begin_pass()
    schedule.request(120)  # e.g. a waiter registered while the pass ran
    schedule.request(500)  # later than the first: ignored
    schedule.sleep(900, threading.Event())
    assert timeouts == [0.02]
    assert schedule.wake_at_ms == 120
