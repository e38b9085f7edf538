"""Delivery semantics seen through the official ``rocketmq-python-client``: PushConsumer,
redelivery after the invisible time, ChangeInvisibleDuration, FIFO message groups across
consumers, delayed delivery and the dead-letter queue after the group's max attempts.

The broker of this module caps long polls at 200 ms and accepts invisible times from 1 s (the
proxy's floor is 10 s), so redeliveries come within a few seconds. Waits poll a condition with a
deadline (the client delivers on its own threads); nothing sleeps a fixed time.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.pop.config import PopConfig
from gannet.node.protocol.gen import admin_pb2
from gannet.node.store.configs.groups import CustomizedRetryPolicy, GroupRetryPolicy

from .conftest import pop_broker, settle, unique

pytestmark = pytest.mark.timeout(60)

FAST = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200, receive_invisible_ms_min=1_000)
REVIVE_OFTEN = PopConfig(revive_interval_ms=100)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    with pop_broker(tmp_path_factory.mktemp("delivery-broker"), FAST, REVIVE_OFTEN) as running:
        yield running


@pytest.fixture
def config(broker: threads.BrokerThread) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)


@pytest.fixture
def started() -> Iterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    for client in reversed(clients):
        client.shutdown()


def _producer(config: ClientConfiguration, started: list[Any], topic: str) -> Producer:
    producer = Producer(config, (topic,))
    producer.startup()
    started.append(producer)
    return producer


def _group(admin: Any, *, fifo: bool = False, retry_max_times: int | None = None) -> str:
    name = unique("G")
    request = admin_pb2.CreateGroupRequest(name=name, fifo=fifo)
    if retry_max_times is not None:
        request.retry_max_times = retry_max_times
    admin.CreateGroup(request)
    return name


def _retry_every_second(broker: threads.BrokerThread, group: str) -> None:
    """Give ``group`` a customized backoff of 1 s per attempt (the default starts at 1 s, 5 s,
    10 s); push consumers nack with it."""
    configs = broker.broker.store.group_configs
    current = configs.get(group)
    assert current is not None
    policy = GroupRetryPolicy(customized=CustomizedRetryPolicy(next_ms=(1_000,) * 18))
    configs.put(dataclasses.replace(current, group_retry_policy=policy))


def _simple(config: ClientConfiguration, started: list[Any], group: str, topic: str) -> Any:
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=0)
    consumer.startup()
    started.append(consumer)
    return consumer


def _message(topic: str, body: bytes, **fields: Any) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


def _wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.02)


def _receive_until(
    consumer: Any, wanted: int, timeout_s: float, invisible_s: int = 15
) -> list[Any]:
    """Receive (200 ms long polls) until ``wanted`` messages came or the time is up."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < wanted and time.monotonic() < deadline:
        got.extend(consumer.receive(32, invisible_s))
    return got


# ------------------------------------------------------------------------ push consumer
class _Recorder(MessageListener):  # type: ignore[misc]
    """Records every delivery; fails the first ``failures`` deliveries of each message."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.lock = threading.Lock()
        self.deliveries: list[tuple[str, bytes, int]] = []

    def consume(self, message: Any) -> Any:
        with self.lock:
            self.deliveries.append((message.message_id, message.body, message.delivery_attempt))
        if message.delivery_attempt <= self.failures:
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

    def seen(self) -> list[tuple[str, bytes, int]]:
        with self.lock:
            return list(self.deliveries)


def _push(
    config: ClientConfiguration, started: list[Any], group: str, topic: str, listener: _Recorder
) -> Any:
    consumer = PushConsumer(
        config, group, listener, {topic: FilterExpression("*")}, consumption_thread_count=4
    )
    consumer.startup()
    started.append(consumer)
    return consumer


def test_push_consumer_gets_every_message_once(broker, admin, make_topic, config, started):
    topic = make_topic()
    group = _group(admin)
    listener = _Recorder()
    _push(config, started, group, topic, listener)
    producer = _producer(config, started, topic)
    sent = {producer.send(_message(topic, f"p{i}".encode())).message_id for i in range(40)}
    _wait_until(lambda: len(listener.seen()) >= 40, 20, "40 push deliveries")
    seen = listener.seen()
    assert sorted(m for m, _, _ in seen) == sorted(sent)
    assert {attempt for _, _, attempt in seen} == {1}
    # Acked: another group member started now gets nothing of them back.
    settle(broker)
    late = _simple(config, started, group, topic)
    assert _receive_until(late, 1, 1.0) == []


def test_push_consumer_failure_is_redelivered_with_next_attempt(
    broker, admin, make_topic, config, started
):
    topic = make_topic()
    group = _group(admin)
    _retry_every_second(broker, group)
    listener = _Recorder(failures=1)
    _push(config, started, group, topic, listener)
    producer = _producer(config, started, topic)
    message_id = producer.send(_message(topic, b"flaky")).message_id
    # FAILURE -> ChangeInvisibleDuration(the group's 1 s backoff) -> redelivered as attempt 2.
    _wait_until(lambda: len(listener.seen()) >= 2, 20, "the redelivery")
    seen = listener.seen()
    assert [(m, a) for m, _, a in seen[:2]] == [(message_id, 1), (message_id, 2)]


def test_push_consumer_is_told_the_server_owns_the_invisible_time(
    broker, admin, make_topic, config, started
):
    """The Python push consumer never renews by itself: it asks ``auto_renew`` and the server
    picks 60 s, so a slow listener is not redelivered within its first minute."""
    topic = make_topic()
    group = _group(admin)
    gate = threading.Event()

    class Slow(_Recorder):
        def consume(self, message: Any) -> Any:
            super().consume(message)
            gate.wait(10)
            return ConsumeResult.SUCCESS

    listener = Slow()
    _push(config, started, group, topic, listener)
    _producer(config, started, topic).send(_message(topic, b"slow"))
    _wait_until(lambda: len(listener.seen()) == 1, 20, "the first delivery")
    try:
        other = _simple(config, started, group, topic)
        assert _receive_until(other, 1, 3.0) == []  # still invisible after > 1 revive pass
    finally:
        gate.set()


# ------------------------------------------------------------------------ invisible time
def test_unacked_message_is_redelivered_after_the_invisible_time(
    broker, admin, make_topic, config, started
):
    topic = make_topic()
    producer = _producer(config, started, topic)
    message_id = producer.send(_message(topic, b"forgotten", tag="TagA", keys="k1")).message_id
    settle(broker)
    consumer = _simple(config, started, _group(admin), topic)
    [first] = _receive_until(consumer, 1, 5, invisible_s=1)
    assert (first.message_id, first.delivery_attempt) == (message_id, 1)
    began = time.monotonic()
    [again] = _receive_until(consumer, 1, 15, invisible_s=30)
    assert time.monotonic() - began >= 0.5  # not before the invisible time ran out
    assert (again.message_id, again.body, again.delivery_attempt) == (message_id, b"forgotten", 2)
    assert (again.tag, list(again.keys)) == ("TagA", ["k1"])
    assert again.receipt_handle != first.receipt_handle
    with pytest.raises(Exception, match=r"INVALID_RECEIPT_HANDLE|receipt"):
        consumer.ack(first)  # the expired handle is refused
    consumer.ack(again)
    assert _receive_until(consumer, 1, 1.0) == []


def test_change_invisible_duration_shortens_and_extends(broker, admin, make_topic, config, started):
    topic = make_topic()
    producer = _producer(config, started, topic)
    ids = [producer.send(_message(topic, body)).message_id for body in (b"soon", b"later")]
    settle(broker)
    consumer = _simple(config, started, _group(admin), topic)
    got = {m.body: m for m in _receive_until(consumer, 2, 5, invisible_s=20)}
    assert set(got) == {b"soon", b"later"}
    consumer.change_invisible_duration(got[b"soon"], 1)  # visible again in 1 s
    consumer.change_invisible_duration(got[b"later"], 60)  # not within this test
    [back] = _receive_until(consumer, 1, 15, invisible_s=30)
    assert (back.message_id, back.delivery_attempt) == (ids[0], 2)
    consumer.ack(back)
    consumer.ack(got[b"later"])  # the handle from change_invisible_duration acks it
    assert _receive_until(consumer, 1, 1.0) == []


# ------------------------------------------------------------------------ FIFO
def test_fifo_message_groups_are_ordered_across_consumers(
    broker, admin, make_topic, config, started
):
    topic = make_topic(admin_pb2.FIFO, queues=4)
    producer = _producer(config, started, topic)
    groups = [f"order-{g}" for g in range(3)]
    for i in range(5):
        for g in groups:
            producer.send(_message(topic, f"{g}:{i}".encode(), message_group=g))
    settle(broker)
    group = _group(admin, fifo=True)
    consumers = [_simple(config, started, group, topic) for _ in range(2)]
    consumed: dict[str, list[int]] = {g: [] for g in groups}
    held: dict[str, Any] = {}  # message group -> message received but not yet acked
    rounds = 0
    while sum(map(len, consumed.values())) < 15:
        rounds += 1
        assert rounds < 200, f"FIFO consumption stalled at {consumed}"
        for consumer in consumers:
            for m in consumer.receive(1, 20):
                g, i = m.body.decode().split(":")
                assert m.message_group == g
                assert g not in held, f"{g}:{i} delivered while an earlier one is unacked"
                held[g] = (consumer, m, int(i))
        # Ack one held message per round, so that others stay held while both consumers poll.
        if held:
            g = sorted(held)[rounds % len(held)]
            consumer, m, i = held.pop(g)
            consumer.ack(m)
            consumed[g].append(i)
    assert consumed == {g: list(range(5)) for g in groups}


# ------------------------------------------------------------------------ delay
def test_delayed_message_arrives_at_its_delivery_timestamp(
    broker, admin, make_topic, config, started
):
    topic = make_topic(admin_pb2.DELAY)
    consumer = _simple(config, started, _group(admin), topic)
    producer = _producer(config, started, topic)
    deliver_at_ms = time.time_ns() // 1_000_000 + 2_000
    message_id = producer.send(
        _message(topic, b"later", delivery_timestamp=deliver_at_ms)
    ).message_id
    assert _receive_until(consumer, 1, 1.0) == []  # not yet
    [got] = _receive_until(consumer, 1, 10)
    arrived_ms = time.time_ns() // 1_000_000
    assert got.message_id == message_id
    assert arrived_ms >= deliver_at_ms - 1_000  # the timer has 1 s precision
    assert got.delivery_timestamp is not None
    assert abs(got.delivery_timestamp - deliver_at_ms) < 1_000
    consumer.ack(got)


# ------------------------------------------------------------------------ DLQ
def test_message_goes_to_the_dead_letter_queue_after_max_attempts(
    broker, admin, make_topic, config, started
):
    topic = make_topic()
    group = _group(admin, retry_max_times=1)  # 2 deliveries, then %DLQ%<group>
    producer = _producer(config, started, topic)
    message_id = producer.send(_message(topic, b"poison")).message_id
    settle(broker)
    consumer = _simple(config, started, group, topic)
    attempts = []
    for _ in range(2):
        [m] = _receive_until(consumer, 1, 15, invisible_s=1)
        attempts.append((m.message_id, m.delivery_attempt))
    assert attempts == [(message_id, 1), (message_id, 2)]
    dlq = f"%DLQ%{group}"
    store = broker.broker.store
    _wait_until(lambda: store.max_offset_in_queue(dlq, 0) == 1, 15, "the DLQ copy")
    assert _receive_until(consumer, 1, 1.0) == []
    stored = admin.QueryMessage(
        admin_pb2.QueryMessageRequest(topic=dlq, message_id=message_id, max_count=4)
    ).messages
    assert [m.body for m in stored] == [b"poison"]


def test_customized_retry_policy_is_sent_to_push_consumers(
    broker, admin, make_topic, config, started
):
    """A group's own backoff reaches the push consumer, which nacks with it."""
    topic = make_topic()
    group = _group(admin, retry_max_times=0)  # one delivery only
    _retry_every_second(broker, group)
    listener = _Recorder(failures=5)
    _push(config, started, group, topic, listener)
    message_id = _producer(config, started, topic).send(_message(topic, b"bad")).message_id
    dlq = f"%DLQ%{group}"
    store = broker.broker.store
    _wait_until(lambda: store.max_offset_in_queue(dlq, 0) == 1, 20, "the DLQ copy")
    assert [(m, a) for m, _, a in listener.seen()] == [(message_id, 1)]


def test_fifo_push_consumer_orders_groups_and_forwards_poison_to_the_dlq(
    broker, admin, make_topic, config, started
):
    """A FIFO push consumer consumes each message group in order; a message its listener keeps
    failing is retried locally ``max_attempts`` times, then ForwardMessageToDeadLetterQueue
    moves it to ``%DLQ%<group>`` and the group goes on."""
    topic = make_topic(admin_pb2.FIFO, queues=2)
    group = _group(admin, fifo=True, retry_max_times=1)  # 2 attempts
    _retry_every_second(broker, group)
    lock = threading.Lock()
    seen: list[str] = []

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            body = message.body.decode()
            with lock:
                seen.append(body)
            return ConsumeResult.FAILURE if body == "a:poison" else ConsumeResult.SUCCESS

    consumer = PushConsumer(config, group, Listener(), {topic: FilterExpression("*")})
    consumer.startup()
    started.append(consumer)
    producer = _producer(config, started, topic)
    bodies = {"a": ["a:0", "a:poison", "a:1"], "b": [f"b:{i}" for i in range(4)]}
    for i in range(4):
        for g, items in bodies.items():
            if i < len(items):
                producer.send(_message(topic, items[i].encode(), message_group=g))
    dlq = f"%DLQ%{group}"
    store = broker.broker.store
    _wait_until(
        lambda: store.max_offset_in_queue(dlq, 0) == 1 and len(seen) >= 8, 20, "all deliveries"
    )
    with lock:
        order = list(seen)
    for g, items in bodies.items():
        mine = [b for b in order if b.startswith(g + ":")]
        expected = [x for item in items for x in ([item] * 2 if item == "a:poison" else [item])]
        assert mine == expected, (g, order)
    request = admin_pb2.QueryMessageRequest(topic=dlq, max_count=4)
    request.queue_offset.queue_id, request.queue_offset.offset = 0, 0
    assert [m.body for m in admin.QueryMessage(request).messages] == [b"a:poison"]
