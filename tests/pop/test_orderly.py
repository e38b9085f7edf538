"""Orderly (FIFO) pop: one in-flight batch per queue, next messages only after ack or expiry."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gannet.node.pop.errors import AlreadyAcked, ReceiptHandleExpired
from gannet.node.pop.receipts import ORDER_REVIVE_QUEUE
from gannet.node.store import validation
from gannet.node.store.log import records
from tests.pop.pop_harness import INVISIBLE_MS, TOPIC, Harness, bodies_of

FIFO = "GID_fifo"


def _setup(h: Harness, retry_max_times: int = 16) -> None:
    h.setup(group=FIFO, consume_message_orderly=True, retry_max_times=retry_max_times)


def test_fifo_blocks_until_acked_and_keeps_order(harness: Harness) -> None:
    _setup(harness)
    harness.produce(6, queue_id=0)
    first = harness.pop(3, group=FIFO, queue_id=0)
    assert bodies_of(first) == ["m0", "m1", "m2"]
    assert first.revive_qid == ORDER_REVIVE_QUEUE
    assert all(m.handle.is_order for m in first.messages)
    assert harness.pop(3, group=FIFO, queue_id=0).messages == []
    for m in first.messages[:2]:
        harness.broker.ack(FIFO, TOPIC, m.receipt_handle, now_ms=harness.now)
    with pytest.raises(AlreadyAcked):
        harness.broker.ack(FIFO, TOPIC, first.messages[0].receipt_handle, now_ms=harness.now)
    assert harness.pop(3, group=FIFO, queue_id=0).messages == []  # m2 still in flight
    harness.broker.ack(FIFO, TOPIC, first.messages[2].receipt_handle, now_ms=harness.now)
    second = harness.pop(3, group=FIFO, queue_id=0)
    assert bodies_of(second) == ["m3", "m4", "m5"]
    harness.advance(INVISIBLE_MS + 1)
    third = harness.pop(3, group=FIFO, queue_id=0)
    assert bodies_of(third) == ["m3", "m4", "m5"]
    assert [m.delivery_attempt for m in third.messages] == [2, 2, 2]
    with pytest.raises(ReceiptHandleExpired):
        harness.broker.ack(FIFO, TOPIC, second.messages[0].receipt_handle, now_ms=harness.now)
    for m in third.messages:
        harness.broker.ack(FIFO, TOPIC, m.receipt_handle, now_ms=harness.now)
    assert harness.pop(3, group=FIFO, queue_id=0).messages == []
    assert harness.store.consumer_offsets.query(FIFO, TOPIC, 0) == 6


def test_fifo_partial_ack_then_expiry_redelivers_from_first_unacked(harness: Harness) -> None:
    _setup(harness)
    harness.produce(4, queue_id=1)
    first = harness.pop(4, group=FIFO, queue_id=1)
    harness.broker.ack(FIFO, TOPIC, first.messages[0].receipt_handle, now_ms=harness.now)
    assert harness.store.consumer_offsets.query(FIFO, TOPIC, 1) == 1
    harness.advance(INVISIBLE_MS + 1)
    again = harness.pop(4, group=FIFO, queue_id=1)
    assert bodies_of(again) == ["m1", "m2", "m3"]


def test_fifo_popped_again_skips_the_messages_acked_in_the_batch(harness: Harness) -> None:
    """Fault seeds 601 and 606: the ack of one message of a batch was lost; when the batch came
    back after its invisible time, the messages acked behind it came back too."""
    _setup(harness)
    harness.produce(4, queue_id=1)
    first = harness.pop(4, group=FIFO, queue_id=1)
    for message in (first.messages[1], first.messages[3]):
        harness.broker.ack(FIFO, TOPIC, message.receipt_handle, now_ms=harness.now)
    assert harness.store.consumer_offsets.query(FIFO, TOPIC, 1) == 0
    harness.advance(INVISIBLE_MS + 1)
    again = harness.pop(4, group=FIFO, queue_id=1)
    assert bodies_of(again) == ["m0", "m2"]
    for message in again.messages:
        harness.broker.ack(FIFO, TOPIC, message.receipt_handle, now_ms=harness.now)
    assert harness.store.consumer_offsets.query(FIFO, TOPIC, 1) == 4


def test_fifo_queues_are_independent(harness: Harness) -> None:
    _setup(harness)
    harness.produce(2, queue_id=0)
    harness.produce(2, queue_id=1)
    a = harness.pop(1, group=FIFO, queue_id=0)
    b = harness.pop(1, group=FIFO, queue_id=1)
    assert bodies_of(a) == ["m0"]
    assert bodies_of(b) == ["m2"]
    everything = harness.pop(32, group=FIFO)
    assert everything.messages == []  # both queues blocked


def test_fifo_change_invisible_time(harness: Harness) -> None:
    _setup(harness)
    harness.produce(1, queue_id=0)
    (m,) = harness.pop(group=FIFO, queue_id=0).messages
    new = harness.broker.change_invisible_time(
        FIFO, TOPIC, m.receipt_handle, invisible_time_ms=90_000, now_ms=harness.now + 1_000
    )
    assert new.pop_time_ms == m.handle.pop_time_ms
    assert new.next_visible_time_ms == harness.now + 91_000
    harness.advance(INVISIBLE_MS + 1)
    assert harness.pop(group=FIFO, queue_id=0).messages == []
    harness.broker.ack(FIFO, TOPIC, new, now_ms=harness.now)
    assert harness.store.consumer_offsets.query(FIFO, TOPIC, 0) == 1


def test_fifo_poison_message_goes_to_dlq(harness: Harness) -> None:
    _setup(harness, retry_max_times=1)
    harness.produce(2, queue_id=0)
    assert bodies_of(harness.pop(1, group=FIFO, queue_id=0)) == ["m0"]
    harness.advance(INVISIBLE_MS + 1)
    assert bodies_of(harness.pop(1, group=FIFO, queue_id=0)) == ["m0"]
    harness.advance(INVISIBLE_MS + 1)
    assert bodies_of(harness.pop(1, group=FIFO, queue_id=0)) == []  # m0 dead-lettered
    assert bodies_of(harness.pop(1, group=FIFO, queue_id=0)) == ["m1"]
    dead = harness.store.get_messages(validation.dlq_topic(FIFO), 0, 0, 5).messages
    assert [records.decode(d.data).body for d in dead] == [b"m0"]


def test_fifo_state_survives_restart(harness: Harness) -> None:
    _setup(harness)
    harness.produce(3, queue_id=0)
    first = harness.pop(2, group=FIFO, queue_id=0)
    harness.restart()
    path = harness.store.config.config_dir / "consumerOrderInfo.json"
    doc = json.loads(path.read_text())
    info = doc["table"][f"{TOPIC}@{FIFO}"]["0"]
    assert (info["o"], info["cm"], info["i"]) == ([0, 1], 0, INVISIBLE_MS)
    assert harness.pop(2, group=FIFO, queue_id=0).messages == []
    for m in first.messages:
        harness.broker.ack(FIFO, TOPIC, m.receipt_handle, now_ms=harness.now)
    assert bodies_of(harness.pop(2, group=FIFO, queue_id=0)) == ["m2"]


def test_fifo_forward_to_dlq_unblocks_the_queue(harness: Harness) -> None:
    _setup(harness)
    harness.produce(2, queue_id=0)
    (m,) = harness.pop(1, group=FIFO, queue_id=0).messages
    harness.broker.forward_to_dlq(FIFO, TOPIC, m.receipt_handle, now_ms=harness.now)
    harness.settle()
    assert bodies_of(harness.pop(1, group=FIFO, queue_id=0)) == ["m1"]
    dead = harness.store.get_messages(validation.dlq_topic(FIFO), 0, 0, 5).messages
    assert [records.decode(d.data).body for d in dead] == [b"m0"]


class _RecordingLock:
    """An RLock that notes, in ``order``, the first time each thread takes it."""

    def __init__(self, name: str, inner: Any, order: list[str]) -> None:
        self.name, self.inner, self.order = name, inner, order

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = bool(self.inner.acquire(blocking, timeout))
        if got and self.name not in self.order:
            self.order.append(self.name)
        return got

    def release(self) -> None:
        self.inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_fifo_forward_to_dlq_takes_the_locks_in_the_pops_order(harness: Harness) -> None:
    """A FIFO pop takes the order infos' lock, then the buffer's. A forward of an orderly
    handle used to take the buffer's and then, in its ack, the order infos': a forward and a
    pop of the same group deadlocked (the official PushConsumer hung on shutdown)."""
    _setup(harness)
    harness.produce(2, queue_id=0)
    broker = harness.broker
    pop_order: list[str] = []
    broker.orders.infos.lock = _RecordingLock("infos", broker.orders.infos.lock, pop_order)  # type: ignore[assignment]
    broker.ctx.buffer.lock = _RecordingLock("buffer", broker.ctx.buffer.lock, pop_order)  # type: ignore[assignment]
    (m,) = harness.pop(1, group=FIFO, queue_id=0).messages
    assert pop_order[:2] == ["infos", "buffer"]
    forward_order: list[str] = []
    broker.orders.infos.lock.order = forward_order  # type: ignore[attr-defined]
    broker.ctx.buffer.lock.order = forward_order  # type: ignore[attr-defined]
    broker.forward_to_dlq(FIFO, TOPIC, m.receipt_handle, now_ms=harness.now)
    assert forward_order[:2] == ["infos", "buffer"]
