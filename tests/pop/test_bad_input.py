"""Bad requests are refused with a clear error and change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gannet.node.pop.config import PopConfig
from gannet.node.pop.errors import (
    AlreadyAcked,
    BatchSizeIllegal,
    InvisibleTimeIllegal,
    ReceiptHandleExpired,
    ReceiptHandleForeign,
    ReceiptHandleIllegal,
    ReceiptHandleUnknown,
    UnknownTopicOrGroup,
)
from gannet.node.pop.receipts import ReceiptHandle
from gannet.node.store.errors import GroupNameIllegal, StoreError
from tests.pop.pop_harness import GROUP, INVISIBLE_MS, TOPIC, Harness

TIMER_TOPIC = "rmq_sys_wheel_timer"


def _written(h: Harness) -> int:
    h.settle()
    return h.store.commitlog.max_offset()


def _one(h: Harness) -> ReceiptHandle:
    h.produce(1, queue_id=0)
    (m,) = h.pop(queue_id=0).messages
    return m.handle


def _still_redelivered_once_acked(h: Harness, handle: ReceiptHandle) -> None:
    """The good handle still works after the bad request, and the message is not lost."""
    h.broker.ack(GROUP, TOPIC, handle, now_ms=h.now)
    h.advance(INVISIBLE_MS + 3_000)
    assert h.pop().messages == []


@pytest.mark.parametrize(
    "text",
    ["", "garbage", "1 2 3 4 5 6 7 8", "0 1 2 3 0 broker-a 0 x", "0 1 2 3 9 broker-a 0 0"],
)
def test_malformed_handles(harness: Harness, text: str) -> None:
    good = _one(harness)
    before = _written(harness)
    with pytest.raises(ReceiptHandleIllegal):
        harness.broker.ack(GROUP, TOPIC, text, now_ms=harness.now)
    assert _written(harness) == before
    _still_redelivered_once_acked(harness, good)


def test_unknown_handles(harness: Harness) -> None:
    good = _one(harness)
    before = _written(harness)
    beyond = ReceiptHandle(0, good.pop_time_ms, INVISIBLE_MS, 0, good.flag, "broker-a", 0, 99, 0)
    other_broker = ReceiptHandle(0, good.pop_time_ms, INVISIBLE_MS, 0, good.flag, "broker-b", 0, 0)
    for bad in (beyond, other_broker):
        with pytest.raises(ReceiptHandleUnknown):
            harness.broker.ack(GROUP, TOPIC, bad.encode(), now_ms=harness.now)
    with pytest.raises(UnknownTopicOrGroup):
        harness.pop(topic="NoSuchTopic")
    with pytest.raises(UnknownTopicOrGroup):
        harness.pop(queue_id=4)
    assert _written(harness) == before
    _still_redelivered_once_acked(harness, good)


def test_offset_outside_the_checkpoint_is_unknown(harness: Harness) -> None:
    harness.produce(3, queue_id=0)
    got = harness.pop(2, queue_id=0)
    h0 = got.messages[0].handle
    # commit offset -1 (unknown), so the checkpoint check is what refuses it
    outside = ReceiptHandle(
        h0.ck_queue_offset, h0.pop_time_ms, h0.invisible_time_ms, h0.revive_qid, h0.flag,
        h0.broker_name, 0, 2, -1,
    )  # fmt: skip
    with pytest.raises(ReceiptHandleUnknown, match="not part of the checkpoint"):
        harness.broker.ack(GROUP, TOPIC, outside, now_ms=harness.now)


def test_expired_handle(harness: Harness) -> None:
    good = _one(harness)
    before = _written(harness)
    with pytest.raises(ReceiptHandleExpired):
        harness.broker.ack(GROUP, TOPIC, good, now_ms=good.next_visible_time_ms)
    with pytest.raises(ReceiptHandleExpired):
        harness.broker.change_invisible_time(
            GROUP, TOPIC, good, invisible_time_ms=1_000, now_ms=good.next_visible_time_ms + 5
        )
    assert _written(harness) == before
    _still_redelivered_once_acked(harness, good)


@pytest.mark.parametrize("merge", [True, False])
def test_ack_twice(tmp_path: Path, merge: bool) -> None:
    h = Harness(tmp_path, PopConfig(buffer_merge_enabled=merge))
    h.setup()
    try:
        good = _one(h)
        h.broker.ack(GROUP, TOPIC, good, now_ms=h.now)
        before = _written(h)
        with pytest.raises(AlreadyAcked):
            h.broker.ack(GROUP, TOPIC, good, now_ms=h.now)
        with pytest.raises(AlreadyAcked):
            h.broker.change_invisible_time(
                GROUP, TOPIC, good, invisible_time_ms=5_000, now_ms=h.now
            )
        assert _written(h) == before
    finally:
        h.close()


def test_same_handle_twice_in_one_batch(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig(buffer_merge_enabled=False))
    h.setup()
    try:
        good = _one(h)
        results = h.broker.ack_many(GROUP, TOPIC, [good, good], now_ms=h.now)
        assert results[0] is None
        assert isinstance(results[1], AlreadyAcked)
    finally:
        h.close()


def test_handle_of_another_group(harness: Harness) -> None:
    harness.setup(group="GID_other")
    good = _one(harness)
    before = _written(harness)
    with pytest.raises(ReceiptHandleForeign, match="GID_pop"):
        harness.broker.ack("GID_other", TOPIC, good, now_ms=harness.now)
    assert _written(harness) == before
    _still_redelivered_once_acked(harness, good)


@pytest.mark.parametrize("invisible_ms", [-1, 12 * 3_600_000 + 1])
def test_bad_invisible_time(harness: Harness, invisible_ms: int) -> None:
    good = _one(harness)
    before = _written(harness)
    with pytest.raises(InvisibleTimeIllegal):
        harness.pop(invisible_ms=invisible_ms)
    with pytest.raises(InvisibleTimeIllegal):
        harness.broker.change_invisible_time(
            GROUP, TOPIC, good, invisible_time_ms=invisible_ms, now_ms=harness.now
        )
    assert _written(harness) == before
    _still_redelivered_once_acked(harness, good)


@pytest.mark.parametrize("count", [0, 33])
def test_bad_batch_size(harness: Harness, count: int) -> None:
    harness.produce(1)
    with pytest.raises(BatchSizeIllegal):
        harness.pop(count)


def test_bad_group_name(harness: Harness) -> None:
    with pytest.raises(GroupNameIllegal):
        harness.pop(group="bad group")


def test_errors_are_store_errors() -> None:
    assert issubclass(ReceiptHandleIllegal, StoreError)
