"""The delayed-message figures rebuilt when the store opens: from the timer-log units (topic
hash and slot time), reading a parked message only where a unit cannot tell (a ROLL unit's due
time, a unit whose hash a crash zeroed). Virtual clock, no sleeps."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

from gannet.node.store import properties as props
from gannet.node.store.config import StoreConfig
from gannet.node.store.log.commitlog import now_ms
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.timers import codecs
from gannet.node.store.timers.codecs import UNIT_SIZE_BYTES, topic_hash
from gannet.node.store.timers.pending import TopicTimers
from gannet.node.store.timers.wheel import read_checkpoint
from tests.store.test_delayed_delivery import open_store, settle

TOPIC_HASH_FIELD = slice(40, 44)  # the real-topic hash inside a 52-byte timer-log unit


def park(store: MessageStore, topic: str, deliver_ms: int, i: int = 0) -> None:
    store.put_message(
        Message(
            topic=topic,
            body=f"{topic}-{i}".encode(),
            queue_id=0,
            properties={props.TIMER_DELIVER_MS: str(deliver_ms)},
        )
    )


def figures(store: MessageStore, topics: list[str]) -> dict[str, TopicTimers]:
    return {topic: store.timers.pending_of(topic) for topic in topics}


def test_restart_with_many_topics_rebuilds_every_figure_from_the_units_alone(
    tmp_path: Path,
) -> None:
    """40 topics, topic i holding i + 1 delayed messages: after a restart every topic reads
    exactly what it read before, and no parked message was read to get there."""
    topics = [f"Topic{i}" for i in range(40)]
    assert len({topic_hash(t) for t in topics}) == len(topics)  # no collision in this test
    t0 = now_ms()
    store = open_store(tmp_path)
    for i, topic in enumerate(topics):
        for j in range(i + 1):
            park(store, topic, t0 + 10_000 + (i * 7 + j * 13) % 600 * 1_000, j)
    settle(store)
    store.timers.tick(t0)
    before = figures(store, topics)
    assert [before[t].messages for t in topics] == list(range(1, 41))
    store.close()
    store = open_store(tmp_path)
    try:
        assert figures(store, topics) == before
        assert store.timers.recount_reads == 0
        assert store.timers.tick(t0 + 700_000) == sum(range(1, 41))
        settle(store)
        assert all(f == TopicTimers(0, 0) for f in figures(store, topics).values())
    finally:
        store.close()


def test_topics_sharing_a_hash_each_report_both_never_zero_while_one_waits(
    tmp_path: Path,
) -> None:
    """``OrdersAa`` and ``OrdersBB`` have one Java hash: each reports the messages of both
    (too many, never too few), before and after a restart, until the last one is delivered."""
    aa, bb = "OrdersAa", "OrdersBB"
    assert topic_hash(aa) == topic_hash(bb)
    t0 = now_ms()
    store = open_store(tmp_path)
    park(store, aa, t0 + 20_000, 0)
    park(store, aa, t0 + 30_000, 1)
    park(store, bb, t0 + 10_000, 0)
    settle(store)
    store.timers.tick(t0)
    assert [f.messages for f in figures(store, [aa, bb, "Payments"]).values()] == [3, 3, 0]
    store.close()
    store = open_store(tmp_path)
    try:
        shared = figures(store, [aa, bb])
        assert [f.messages for f in shared.values()] == [3, 3]
        assert shared[aa].last_due_ms == shared[bb].last_due_ms >= t0 + 30_000
        assert store.timers.tick(t0 + 15_000) == 1  # OrdersBB's message
        settle(store)
        assert store.get_messages(bb, 0, 0, 4).status is GetStatus.FOUND
        assert [f.messages for f in figures(store, [aa, bb]).values()] == [2, 2]  # aa waits
        assert store.timers.tick(t0 + 40_000) == 2
        settle(store)
        assert figures(store, [aa, bb]) == {aa: TopicTimers(0, 0), bb: TopicTimers(0, 0)}
    finally:
        store.close()


def zero_topic_hashes(timer_log_dir: Path) -> int:
    """Zero the hash of every unit in the timer log, as a crash that tore each unit after its
    record size would; returns the units changed."""
    changed = 0
    for path in sorted(timer_log_dir.iterdir()):
        data = bytearray(path.read_bytes())
        for pos in range(0, len(data) - UNIT_SIZE_BYTES + 1, UNIT_SIZE_BYTES):
            if struct.unpack_from(">i", data, pos)[0] != UNIT_SIZE_BYTES:
                break
            start = pos + TOPIC_HASH_FIELD.start
            data[start : pos + TOPIC_HASH_FIELD.stop] = bytes(4)
            changed += 1
        path.write_bytes(bytes(data))
    return changed


def test_a_unit_whose_hash_was_zeroed_is_counted_from_its_message(tmp_path: Path) -> None:
    """A hash of 0 may be a torn unit: the rebuild reads the message's REAL_TOPIC, counts it
    under that topic, and the delivery takes it off again (not stuck above 0)."""
    t0 = now_ms()
    store = open_store(tmp_path)
    for i in range(3):
        park(store, "Orders", t0 + 10_000 + i * 1_000, i)
    settle(store)
    store.timers.tick(t0)
    store.close()
    config = StoreConfig.for_tests(tmp_path)
    assert zero_topic_hashes(config.timer_log_dir) == 3
    store = open_store(tmp_path)
    try:
        assert store.timers.pending_of("Orders").messages == 3
        assert store.timers.recount_reads == 3
        assert store.timers.tick(t0 + 20_000) == 3
        settle(store)
        assert store.timers.pending_of("Orders") == TopicTimers(0, 0)
    finally:
        store.close()


def test_a_rolled_entry_keeps_its_due_time_across_a_restart(tmp_path: Path) -> None:
    """A ROLL unit's slot is where it rolls, not when it is due: the unit records the
    message's TIMER_OUT_MS, so the rebuild reads nothing, and the entry stays counted once
    until it is delivered."""
    t0 = now_ms()
    store = open_store(tmp_path)
    window = store.timers.timer_store.roll_window_ms  # type: ignore[union-attr]
    park(store, "Orders", t0 + 3 * window)
    settle(store)
    store.timers.tick(t0)
    before = store.timers.pending_of("Orders")
    assert before.messages == 1
    assert before.last_due_ms >= t0 + 3 * window
    store.close()
    store = open_store(tmp_path)
    try:
        assert store.timers.pending_of("Orders") == before
        assert store.timers.recount_reads == 0
        clock = t0
        while store.timers.pending_of("Orders").messages and clock < t0 + 5 * window:
            clock += window // 4
            store.timers.tick(clock)
            assert store.timers.pending_of("Orders").messages in (0, 1)
            settle(store)
        assert store.get_messages("Orders", 0, 0, 4).status is GetStatus.FOUND
        assert store.timers.pending_of("Orders") == TopicTimers(0, 0)
    finally:
        store.close()


def test_a_rolled_unit_replayed_after_a_crash_is_read_from_its_message(tmp_path: Path) -> None:
    """A ROLL unit past the checkpoint's flush position may be torn (its recorded due time
    half zeroed): the rebuild takes the due time from the parked message instead."""
    t0 = now_ms()
    store = open_store(tmp_path)
    window = store.timers.timer_store.roll_window_ms  # type: ignore[union-attr]
    park(store, "Orders", t0 + 3 * window)
    settle(store)
    store.timers.tick(t0)
    before = store.timers.pending_of("Orders")
    store.close()
    config = StoreConfig.for_tests(tmp_path)
    assert tear_low_half_of_reserved(config.timer_log_dir) == 1
    checkpoint_path = config.config_dir / codecs.CHECKPOINT_FILE_NAME
    checkpoint = read_checkpoint(checkpoint_path)
    assert checkpoint is not None
    unflushed = dataclasses.replace(checkpoint, last_timer_log_flush_pos=0)  # crash before it
    checkpoint_path.write_bytes(codecs.encode_checkpoint(unflushed))
    store = open_store(tmp_path)
    try:
        assert store.timers.pending_of("Orders") == before
        assert store.timers.recount_reads == 1
    finally:
        store.close()


def tear_low_half_of_reserved(timer_log_dir: Path) -> int:
    """Zero bytes 48..52 of every ROLL unit (a tear at 48); returns the units changed."""
    changed = 0
    for path in sorted(timer_log_dir.iterdir()):
        data = bytearray(path.read_bytes())
        for pos in range(0, len(data) - UNIT_SIZE_BYTES + 1, UNIT_SIZE_BYTES):
            unit = codecs.decode_unit(data, pos)
            if unit is None:
                break
            if unit.magic & codecs.MAGIC_ROLL:
                assert codecs.roll_due_ms(unit) is not None  # recorded when it was written
                data[pos + 48 : pos + 52] = bytes(4)
                changed += 1
        path.write_bytes(bytes(data))
    return changed
