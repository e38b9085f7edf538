"""Many consumers of one group share every queue: no message is delivered twice inside its
invisible window, none is lost, unacked ones come back exactly once per window."""

from __future__ import annotations

import random
import threading
from collections import Counter

from gannet.node.pop.popping import PoppedMessage
from tests.pop.pop_harness import GROUP, INVISIBLE_MS, TOPIC, Harness


def _drain(h: Harness, rng: random.Random, consumers: int) -> list[PoppedMessage]:
    got: list[PoppedMessage] = []
    idle_rounds = 0
    while idle_rounds < 3:
        round_got = []
        for _ in range(consumers):
            round_got += h.pop(rng.randint(1, 32)).messages
        got += round_got
        idle_rounds = idle_rounds + 1 if not round_got else 0
    return got


def test_consumers_share_without_double_delivery(harness: Harness) -> None:
    rng = random.Random(11)
    sent = harness.produce(200)
    first = _drain(harness, rng, consumers=5)
    bodies = Counter(m.message.body.decode() for m in first)
    assert sorted(bodies) == sorted(sent)
    assert max(bodies.values()) == 1
    acked = {m.message.body.decode() for m in first if rng.random() < 0.5}
    for m in first:
        if m.message.body.decode() in acked:
            harness.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=harness.now)
    harness.advance(INVISIBLE_MS + 3_000)
    second = _drain(harness, rng, consumers=5)
    again = Counter(m.message.body.decode() for m in second)
    assert set(again) == set(sent) - acked
    assert max(again.values()) == 1
    assert all(m.delivery_attempt == 2 for m in second)
    for m in second:
        harness.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=harness.now)
    harness.advance(INVISIBLE_MS + 3_000)
    assert _drain(harness, rng, consumers=2) == []


def test_concurrent_threads_never_get_the_same_message(harness: Harness) -> None:
    sent = harness.produce(400)
    results: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def consume(slot: int) -> None:
        start.wait()
        for _ in range(40):
            got = harness.broker.pop(
                GROUP, TOPIC, max_msgs=7, invisible_time_ms=INVISIBLE_MS, now_ms=harness.now
            )
            results[slot] += [m.message.body.decode() for m in got.messages]

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [b for r in results for b in r]
    assert len(everything) == len(set(everything))
    leftover = _drain(harness, random.Random(1), consumers=1)
    assert sorted(everything + [m.message.body.decode() for m in leftover]) == sorted(sent)
