"""Long-polling waiters: woken by new messages (topic or retry topic), bounded, expiring."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gannet.node.pop.config import PopConfig
from gannet.node.pop.errors import PopBusy
from gannet.node.pop.polling import ANY_QUEUE, PollWaiters
from gannet.node.store import validation
from tests.pop.pop_harness import GROUP, INVISIBLE_MS, TOPIC, Harness


def test_new_message_wakes_one_any_queue_and_one_queue_waiter(harness: Harness) -> None:
    waiters = harness.broker.waiters
    any1 = waiters.register(TOPIC, GROUP, ANY_QUEUE, harness.now + 10_000, harness.now)
    any2 = waiters.register(TOPIC, GROUP, ANY_QUEUE, harness.now + 10_000, harness.now)
    q2 = waiters.register(TOPIC, GROUP, 2, harness.now + 10_000, harness.now)
    q3 = waiters.register(TOPIC, GROUP, 3, harness.now + 10_000, harness.now)
    assert any1
    assert any2
    assert q2
    assert q3
    harness.produce(1, queue_id=2)  # dispatch calls the arrival listener
    assert any1.woken
    assert not any1.expired
    assert q2.woken
    assert not any2.woken
    assert not q3.woken
    assert waiters.waiting() == 2
    assert len(harness.pop().messages) == 1


def test_retry_topic_message_wakes_the_original_topic_waiters(harness: Harness) -> None:
    harness.produce(1)
    (m,) = harness.pop().messages
    waiter = harness.broker.waiters.register(
        TOPIC, GROUP, ANY_QUEUE, harness.now + 60_000, harness.now
    )
    assert waiter is not None
    harness.advance(INVISIBLE_MS + 3_000)  # revive writes to %RETRY%GID_pop_Orders
    assert waiter.woken
    assert not waiter.expired
    assert validation.retry_topic_v1(GROUP, TOPIC) in harness.store.topic_configs
    assert harness.pop().messages[0].message.body == m.message.body


def test_expiry_and_bounds() -> None:
    waiters = PollWaiters(PopConfig(poll_waiters_per_key_max=2, poll_waiters_max=3))
    assert waiters.register("T", "G", 0, 100, 100) is None  # already expired
    a = waiters.register("T", "G", 0, 200, 100)
    b = waiters.register("T", "G", 0, 300, 100)
    with pytest.raises(PopBusy):
        waiters.register("T", "G", 0, 300, 100)
    c = waiters.register("T", "G", 1, 300, 100)
    with pytest.raises(PopBusy):
        waiters.register("T", "G", 2, 300, 100)
    assert a
    assert b
    assert c
    assert waiters.expire(250) == 1
    assert a.woken
    assert a.expired
    waiters.cancel(b)
    assert waiters.waiting() == 1
    assert waiters.notify("Other", 0) == 0
    assert waiters.notify("T", 1) == 1
    assert waiters.waiting() == 0
    assert waiters.notify("T", 1) == 0  # nobody waits: returns before the lock
    d = waiters.register("T", "G", 1, 400, 100)
    assert d is not None
    assert waiters.notify("T", 1) == 1  # the next waiter is found again
    assert d.woken


def test_thread_and_asyncio_waits() -> None:
    waiters = PollWaiters(PopConfig())
    w = waiters.register("T", "G", ANY_QUEUE, 10_000, 0)
    assert w is not None
    woke = threading.Event()

    def wait() -> None:
        if w.wait(30):
            woke.set()

    t = threading.Thread(target=wait)
    t.start()
    waiters.notify("T", 5)
    t.join()
    assert woke.is_set()

    async def main() -> bool:
        aw = waiters.register("T", "G", 1, 10_000, 0)
        assert aw is not None
        task = asyncio.create_task(aw.wait_async())
        await asyncio.sleep(0)  # let the task start waiting (no wall-clock wait)
        threading.Thread(target=waiters.notify, args=("T", 1)).start()
        await asyncio.wait_for(task, 30)
        return aw.woken

    assert asyncio.run(main())


def test_pop_long_polling_waits_for_a_message(harness: Harness) -> None:
    async def main() -> list[str]:
        task = asyncio.create_task(
            harness.broker.pop_long_polling(
                GROUP,
                TOPIC,
                poll_time_ms=20_000,
                invisible_time_ms=INVISIBLE_MS,
                clock_ms=lambda: harness.now,
            )
        )
        for _ in range(3):
            await asyncio.sleep(0)  # the task pops (nothing) and waits
        assert not task.done()
        assert harness.broker.waiters.waiting() == 1
        harness.produce(2, queue_id=1)  # dispatch wakes the waiter
        result = await asyncio.wait_for(task, 30)
        return [m.message.body.decode() for m in result.messages]

    assert asyncio.run(main()) == ["m0", "m1"]
    assert harness.broker.waiters.waiting() == 0


def test_pop_long_polling_gives_up_at_its_deadline(harness: Harness) -> None:
    async def main() -> int:
        task = asyncio.create_task(
            harness.broker.pop_long_polling(
                GROUP,
                TOPIC,
                poll_time_ms=20_000,
                invisible_time_ms=INVISIBLE_MS,
                clock_ms=lambda: harness.now,
            )
        )
        for _ in range(3):
            await asyncio.sleep(0)
        harness.advance(20_000)  # tick() expires the waiter
        result = await asyncio.wait_for(task, 30)
        return len(result.messages)

    assert asyncio.run(main()) == 0
    assert harness.broker.waiters.waiting() == 0


def test_pop_long_polling_with_a_found_message_does_not_wait(harness: Harness) -> None:
    harness.produce(1)
    result = asyncio.run(
        harness.broker.pop_long_polling(
            GROUP,
            TOPIC,
            poll_time_ms=0,
            invisible_time_ms=INVISIBLE_MS,
            clock_ms=lambda: harness.now,
        )
    )
    assert len(result.messages) == 1
    assert harness.broker.waiters.waiting() == 0
