"""Pop, ack, change invisible time, redelivery through revive, DLQ — with virtual time."""

from __future__ import annotations

from pathlib import Path

from gannet.node.pop import checkpoints
from gannet.node.pop.config import PopConfig
from gannet.node.pop.popping import InitMode
from gannet.node.store import properties as props
from gannet.node.store import validation
from gannet.node.store.log import records
from tests.pop.pop_harness import GROUP, INVISIBLE_MS, TOPIC, Harness, bodies_of

RETRY = validation.retry_topic_v1(GROUP, TOPIC)


def test_pop_returns_every_message_once_and_ack_stops_redelivery(harness: Harness) -> None:
    sent = harness.produce(10)
    got = harness.pop(32)
    assert sorted(bodies_of(got)) == sorted(sent)
    assert harness.pop(32).messages == []  # invisible now
    for m in got.messages:
        harness.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=harness.now)
    for _ in range(5):
        harness.advance(INVISIBLE_MS)
        assert harness.pop(32).messages == []


def test_popped_message_carries_pop_ck_and_handle(harness: Harness) -> None:
    harness.produce(1, queue_id=1)
    got = harness.pop(1)
    (m,) = got.messages
    assert m.message.topic == TOPIC
    assert m.message.properties[props.POP_CK] == m.handle.extra_info()
    assert m.handle.queue_id == 1
    assert m.handle.queue_offset == 0
    assert m.handle.pop_time_ms == harness.now
    assert m.handle.invisible_time_ms == INVISIBLE_MS
    assert m.delivery_attempt == 1
    stored = harness.store.read_message(m.handle.commit_offset)
    assert stored is not None
    assert stored.body == m.message.body
    assert got.start_offset_info == ["0 1 0"]
    assert got.msg_offset_info == ["0 1 0"]


def test_unacked_messages_come_back_with_increasing_attempts(harness: Harness) -> None:
    harness.produce(3, queue_id=0)
    first = harness.pop(32)
    assert len(first.messages) == 3
    harness.broker.ack(GROUP, TOPIC, first.messages[0].receipt_handle, now_ms=harness.now)
    seen: list[tuple[str, int]] = []
    for attempt in (2, 3, 4):
        harness.advance(INVISIBLE_MS + 3_000)
        again = harness.pop(32)
        assert sorted(bodies_of(again)) == ["m1", "m2"]
        assert all(m.delivery_attempt == attempt for m in again.messages)
        assert all(m.message.topic == TOPIC for m in again.messages)
        assert all(m.handle.flag == 1 for m in again.messages)
        seen += [(m.message.body.decode(), m.delivery_attempt) for m in again.messages]
        first_pop = again.messages[0].message.properties[props.FIRST_POP_TIME]
        assert int(first_pop) == first.pop_time_ms
    assert len(seen) == 6
    m = again.messages[0]
    harness.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=harness.now)
    harness.advance(INVISIBLE_MS + 3_000)
    assert bodies_of(harness.pop(32)) == [again.messages[1].message.body.decode()]


def test_not_revived_before_invisible_time(harness: Harness) -> None:
    harness.produce(1)
    harness.pop()
    harness.advance(INVISIBLE_MS - 1_000)
    assert harness.pop().messages == []
    harness.advance(4_000)
    assert len(harness.pop().messages) == 1


def test_change_invisible_time_postpones_and_returns_a_new_handle(harness: Harness) -> None:
    harness.produce(1)
    (m,) = harness.pop().messages
    harness.advance(10_000)
    new = harness.broker.change_invisible_time(
        GROUP, TOPIC, m.receipt_handle, invisible_time_ms=60_000, now_ms=harness.now
    )
    assert new.pop_time_ms == m.handle.pop_time_ms + 1  # the same for a second run
    assert new.next_visible_time_ms == harness.now + 60_000
    assert new.ck_queue_offset == m.handle.queue_offset
    harness.advance(INVISIBLE_MS + 3_000)  # the old invisible time is over
    assert harness.pop().messages == []
    harness.advance(30_000)  # the new one too
    again = harness.pop().messages
    assert len(again) == 1
    assert again[0].delivery_attempt == 2


def test_change_then_ack_with_the_new_handle(harness: Harness) -> None:
    harness.produce(1)
    (m,) = harness.pop().messages
    new = harness.broker.change_invisible_time(
        GROUP, TOPIC, m.receipt_handle, invisible_time_ms=60_000, now_ms=harness.now
    )
    harness.broker.ack(GROUP, TOPIC, new.encode(), now_ms=harness.now + 1)
    for _ in range(4):
        harness.advance(40_000)
        assert harness.pop().messages == []


def test_dead_letter_after_the_group_limit(harness: Harness) -> None:
    harness.setup(group="GID_dlq", retry_max_times=2)
    harness.produce(1, queue_id=0)
    attempts = []
    for _ in range(3):
        got = harness.pop(group="GID_dlq")
        attempts += [m.delivery_attempt for m in got.messages]
        harness.advance(INVISIBLE_MS + 3_000)
    assert attempts == [1, 2, 3]
    stats = harness.broker.statistics()
    assert (stats.revived_total, stats.revive_write_queues) == (2, 8)
    for _ in range(3):
        assert harness.pop(group="GID_dlq").messages == []
        harness.advance(INVISIBLE_MS + 3_000)
    dlq = validation.dlq_topic("GID_dlq")
    dead = harness.store.get_messages(dlq, 0, 0, 10)
    assert len(dead.messages) == 1
    assert harness.broker.statistics().dead_lettered_total == 1
    msg = records.decode(dead.messages[0].data)
    assert msg.body == b"m0"
    assert msg.properties[props.DLQ_ORIGIN_TOPIC] == TOPIC
    assert harness.store.topic_configs.get(dlq) is not None


def test_forward_to_dlq_acks(harness: Harness) -> None:
    harness.produce(1)
    (m,) = harness.pop().messages
    harness.broker.forward_to_dlq(GROUP, TOPIC, m.receipt_handle, now_ms=harness.now)
    harness.settle()
    assert len(harness.store.get_messages(validation.dlq_topic(GROUP), 0, 0, 5).messages) == 1
    harness.advance(INVISIBLE_MS + 3_000)
    assert harness.pop().messages == []


def test_tag_filter_skips_other_tags_and_advances_the_offset(harness: Harness) -> None:
    from gannet.node.pop import filtering

    harness.produce(3, queue_id=0, tag="A")
    harness.produce(3, queue_id=0, tag="B")
    got = harness.pop(tag_filter=filtering.parse("B"))
    assert bodies_of(got) == ["m3", "m4", "m5"]
    assert [m.handle.queue_offset for m in got.messages] == [3, 4, 5]
    harness.advance(11_000)  # buffered CK stored, offset committed
    assert harness.store.consumer_offsets.query(GROUP, TOPIC, 0) == 6


def test_init_mode_max_starts_at_the_last_message(harness: Harness) -> None:
    harness.produce(5, queue_id=0)
    got = harness.pop(group="GID_new", queue_id=0, init_mode=InitMode.MAX)
    assert bodies_of(got) == ["m4"]


def test_consumer_offset_moves_once_the_checkpoint_is_stored(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig())
    h.setup()
    try:
        h.produce(4, queue_id=0)
        h.pop(2, queue_id=0)
        assert h.store.consumer_offsets.query(GROUP, TOPIC, 0) == 0  # CK only in memory
        h.advance(11_000)  # older than popCkStayBufferTime: CK written
        assert h.store.consumer_offsets.query(GROUP, TOPIC, 0) == 2
        revive = h.store.get_messages(
            validation.TIMER_TOPIC if False else "rmq_sys_wheel_timer", 0, 0, 10
        )
        cks = [records.decode(s.data) for s in revive.messages]
        assert [m.properties.get("REAL_TOPIC") for m in cks] == [
            "rmq_sys_REVIVE_LOG_DefaultCluster"
        ]
        ck = checkpoints.decode(cks[0].body)
        assert (ck.start_offset, ck.num, ck.cid, ck.topic) == (0, 2, GROUP, TOPIC)
    finally:
        h.close()


def test_acked_in_memory_checkpoint_is_never_written(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig())
    h.setup()
    try:
        h.produce(3, queue_id=0)
        got = h.pop(queue_id=0)
        errors = h.broker.ack_many(
            GROUP, TOPIC, [m.receipt_handle for m in got.messages], now_ms=h.now
        )
        assert errors == [None, None, None]
        h.advance(1)
        assert h.store.consumer_offsets.query(GROUP, TOPIC, 0) == 3
        assert h.store.max_offset_in_queue("rmq_sys_wheel_timer", 0) == 0
        h.advance(INVISIBLE_MS + 1)
        assert h.broker.ctx.buffer.statistics().dropped_without_write_total == 1
    finally:
        h.close()


def test_without_buffer_merge_cks_and_acks_are_written(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig(buffer_merge_enabled=False))
    h.setup()
    try:
        h.produce(3, queue_id=0)
        got = h.pop(queue_id=0)
        assert h.store.consumer_offsets.query(GROUP, TOPIC, 0) == 3
        h.broker.ack_many(GROUP, TOPIC, [m.receipt_handle for m in got.messages[:2]], now_ms=h.now)
        h.settle()
        # one CK and one batch ACK parked in the timer
        parked = h.store.get_messages("rmq_sys_wheel_timer", 0, 0, 10).messages
        assert [records.decode(p.data).tags for p in parked] == ["ck", "bAck"]
        h.advance(INVISIBLE_MS + 3_000)
        assert bodies_of(h.pop()) == ["m2"]
    finally:
        h.close()


def test_change_invisible_in_the_millisecond_of_the_pop(tmp_path: Path) -> None:
    """Regression (simulation seed 3): the new CK of the batch's first message had the old CK's
    revive key, so revive matched the old ack to it and lost the rest of the batch."""
    for merge in (True, False):
        h = Harness(tmp_path / str(merge), PopConfig(buffer_merge_enabled=merge))
        h.setup()
        try:
            h.produce(2, queue_id=3)
            first, second = h.pop(2, queue_id=3, invisible_ms=5_000).messages
            new = h.broker.change_invisible_time(
                GROUP, TOPIC, first.handle, invisible_time_ms=1_000, now_ms=h.now
            )
            assert new.pop_time_ms == first.handle.pop_time_ms + 1
            h.advance(8_000)
            assert sorted(bodies_of(h.pop())) == ["m0", "m1"]
            assert second.handle.queue_offset == 1
        finally:
            h.close()
