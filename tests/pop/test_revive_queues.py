"""Revive-queue count changes while messages are in flight: new checkpoints go to the new set,
old queues are revived until drained, nothing is lost or revived twice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gannet.node.pop.config import PopConfig
from gannet.node.store import validation
from tests.pop.pop_harness import GROUP, INVISIBLE_MS, TOPIC, Harness

REVIVE_TOPIC = validation.revive_topic("DefaultCluster")


def _revive_queue_counts(h: Harness) -> tuple[int, int]:
    config = h.store.topic_configs.get(REVIVE_TOPIC)
    assert config is not None
    return config.read_queue_nums, config.write_queue_nums


def test_shrink_and_grow_under_load(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig(buffer_merge_enabled=False))
    h.setup()
    try:
        sent = h.produce(120)
        used: set[int] = set()
        first: Counter[str] = Counter()
        for count in (8, 2, 12, 3):
            h.broker.set_revive_queue_count(count)
            for _ in range(4):
                got = h.pop(8)
                used.add(got.revive_qid)
                assert got.revive_qid < count
                first.update(m.message.body.decode() for m in got.messages)
        assert max(first.values()) == 1
        assert _revive_queue_counts(h) == (12, 3)
        assert h.broker.revive_queue_ids() == list(range(12))
        assert {0, 1, 8, 11} <= used
        assert not h.broker.retired_queues_drained(h.now)
        assert not h.broker.shrink_drained_revive_queues(h.now)
        h.advance(INVISIBLE_MS + 3_000)
        redelivered: Counter[str] = Counter()
        while True:
            got = h.pop(32)
            if not got.messages:
                break
            redelivered.update(m.message.body.decode() for m in got.messages)
            for m in got.messages:
                h.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=h.now)
        assert redelivered == first  # every popped message came back exactly once
        h.advance(INVISIBLE_MS + 3_000)
        assert h.broker.retired_queues_drained(h.now)
        assert h.broker.shrink_drained_revive_queues(h.now)
        assert _revive_queue_counts(h) == (3, 3)
        assert h.broker.revive_queue_ids() == [0, 1, 2]
        assert set(first) <= set(sent)
    finally:
        h.close()


def test_count_change_survives_restart(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig(revive_queue_count=8, buffer_merge_enabled=False))
    h.setup()
    try:
        h.produce(16)
        h.pop(4)
        h.broker.set_revive_queue_count(2)
        h.restart()
        assert _revive_queue_counts(h) == (8, 8)  # config says 8 again; old set kept readable
        h.broker.set_revive_queue_count(2)
        assert h.broker.revive_queue_ids() == list(range(8))
    finally:
        h.close()


def test_restart_after_shrinking_still_revives_the_retired_queues(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig(revive_queue_count=8, buffer_merge_enabled=False))
    h.setup()
    try:
        h.produce(64)
        popped: Counter[str] = Counter()
        for _ in range(4):
            popped.update(m.message.body.decode() for m in h.pop(8).messages)
        h.broker.set_revive_queue_count(2)
        for _ in range(4):
            got = h.pop(8)
            assert got.revive_qid < 2
            popped.update(m.message.body.decode() for m in got.messages)
        h.config = PopConfig(revive_queue_count=2, buffer_merge_enabled=False)
        h.restart()
        assert _revive_queue_counts(h) == (8, 2)
        h.advance(INVISIBLE_MS + 3_000)
        back: Counter[str] = Counter()
        while True:
            got = h.pop(32)
            if not got.messages:
                break
            back.update(m.message.body.decode() for m in got.messages)
            for m in got.messages:
                h.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=h.now)
        assert back == popped
        assert not h.broker.retired_queues_drained(h.now)  # an earlier process may have parked more
    finally:
        h.close()
