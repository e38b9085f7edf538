"""The official ``rocketmq-python-client`` SimpleConsumer against an in-process broker serving
Pop (:mod:`gannet.node.api.receiving`).

The broker of this module caps long polls at 200 ms (the default range is 5 s – 20 s; the client
leaves ``long_polling_timeout`` unset for ``await_duration=0``, so half the deadline would be
used), so an empty receive answers within 0.2 s: no test sleeps.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import Code, FilterType, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.cli import calls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

from .conftest import CLIENT_ID, pop_broker, settle, unique

QUICK = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    with pop_broker(tmp_path_factory.mktemp("consumer-broker"), QUICK) as running:
        yield running


@pytest.fixture
def config(broker: threads.BrokerThread) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)


@pytest.fixture
def started() -> Iterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    for client in clients:
        client.shutdown()


def _producer(config, started, topic: str) -> Producer:
    producer = Producer(config, (topic,))
    producer.startup()
    started.append(producer)
    return producer


def _consumer(config, started, admin, topic: str, expression: FilterExpression) -> SimpleConsumer:
    group = unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    consumer = SimpleConsumer(config, group, {topic: expression}, await_duration=0)
    consumer.startup()
    started.append(consumer)
    return consumer


def _message(topic: str, body: bytes, tag: str | None = None) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    if tag is not None:
        msg.tag = tag
    msg.keys = "k-" + body.decode()
    msg.add_property("color", "blue")
    return msg


def _receive_all(consumer: SimpleConsumer, wanted: int) -> list[Any]:
    got: list[Any] = []
    for _ in range(20):
        if len(got) >= wanted:
            break
        got.extend(consumer.receive(32, 15))
    return got


def test_send_receive_ack_then_nothing_comes_back(broker, admin, make_topic, config, started):
    topic = make_topic()
    producer = _producer(config, started, topic)
    sent = {producer.send(_message(topic, f"m{i}".encode(), "TagA")).message_id for i in range(10)}
    settle(broker)
    consumer = _consumer(config, started, admin, topic, FilterExpression("*"))
    got = _receive_all(consumer, 10)
    assert {m.message_id for m in got} == sent
    for m in got:
        assert m.topic == topic
        assert m.tag == "TagA"
        assert set(m.keys) == {"k-" + m.body.decode()}
        assert m.properties["color"] == "blue"
        assert m.delivery_attempt == 1
        assert m.receipt_handle
        assert not m.corrupted
        consumer.ack(m)
    assert consumer.receive(32, 15) == []
    assert consumer.receive(32, 15) == []


def test_tag_filter_delivers_only_matching_messages(broker, admin, make_topic, config, started):
    topic = make_topic()
    producer = _producer(config, started, topic)
    for i in range(8):
        producer.send(_message(topic, f"t{i}".encode(), "TagA" if i % 2 == 0 else "TagB"))
    producer.send(_message(topic, b"untagged"))
    settle(broker)
    consumer = _consumer(config, started, admin, topic, FilterExpression("TagA || TagC"))
    got = _receive_all(consumer, 4)
    assert sorted(m.body for m in got) == [b"t0", b"t2", b"t4", b"t6"]
    for m in got:
        consumer.ack(m)
    assert consumer.receive(32, 15) == []


def test_change_invisible_duration_gives_a_new_handle(broker, admin, make_topic, config, started):
    topic = make_topic()
    producer = _producer(config, started, topic)
    producer.send(_message(topic, b"slow", "TagA"))
    settle(broker)
    consumer = _consumer(config, started, admin, topic, FilterExpression("*"))
    [message] = _receive_all(consumer, 1)
    old = message.receipt_handle
    consumer.change_invisible_duration(message, 30)
    assert message.receipt_handle
    assert message.receipt_handle != old
    consumer.ack(message)  # with the new handle
    assert consumer.receive(32, 15) == []


def test_bad_sql_filter_and_short_invisible_time_are_refused(admin, make_topic, config, started):
    topic = make_topic()
    sql = FilterExpression("a > 'x'", FilterType.SQL)
    with pytest.raises(Exception, match=r"SQL92.*column 5"):
        _consumer(config, started, admin, topic, sql).receive(1, 15)
    consumer = _consumer(config, started, admin, topic, FilterExpression("*"))
    with pytest.raises(Exception, match="invisible_duration"):
        consumer.receive(1, 5)


def test_ack_entries_answer_each_handle(messaging, admin, make_topic) -> None:
    topic = definition_pb2.Resource(name=make_topic())
    group = unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    entries = [
        service_pb2.AckMessageEntry(message_id="a", receipt_handle="not a handle"),
        service_pb2.AckMessageEntry(message_id="b", receipt_handle=""),
    ]
    reply = messaging.AckMessage(
        service_pb2.AckMessageRequest(
            group=definition_pb2.Resource(name=group), topic=topic, entries=entries
        ),
        timeout=5,
    )
    assert [e.status.code for e in reply.entries] == [Code.INVALID_RECEIPT_HANDLE] * 2
    assert reply.status.code == Code.INVALID_RECEIPT_HANDLE
    unknown_group = messaging.AckMessage(
        service_pb2.AckMessageRequest(
            group=definition_pb2.Resource(name="nobody"), topic=topic, entries=entries
        ),
        timeout=5,
    )
    assert unknown_group.status.code == Code.CONSUMER_GROUP_NOT_FOUND


def test_receive_stream_is_status_messages_then_delivery_timestamp(
    broker, messaging, admin, make_topic, config, started
) -> None:
    name = make_topic()
    _producer(config, started, name).send(_message(name, b"one", "TagA"))
    settle(broker)
    group = unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    request = service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name=group),
        message_queue=definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=name)),
        filter_expression=definition_pb2.FilterExpression(type=definition_pb2.TAG, expression="*"),
        batch_size=4,
    )
    request.invisible_duration.FromSeconds(20)
    request.long_polling_timeout.FromSeconds(0)
    frames = list(messaging.ReceiveMessage(request, timeout=5))
    assert [f.WhichOneof("content") for f in frames] == [
        "status",
        "message",
        "delivery_timestamp",
    ]
    assert frames[0].status.code == Code.OK
    sp = frames[1].message.system_properties
    assert sp.body_encoding == definition_pb2.IDENTITY
    assert sp.delivery_attempt == 1
    assert sp.HasField("store_timestamp")
    assert sp.store_host
    again = list(messaging.ReceiveMessage(request, timeout=5))
    assert again[0].status.code == Code.MESSAGE_NOT_FOUND


def _wait_until(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_long_poll_wakes_on_arrival_and_ends_at_shutdown(tmp_path) -> None:
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    limits = receiving.ReceiveLimits(polling_ms_min=0)
    running = threads.start(BrokerConfig(store=store, listen_port=0), pop=receiving.factory(limits))
    assert running.broker.messaging is not None
    pop = running.broker.messaging.pop
    assert isinstance(pop, receiving.PopHandler)
    try:
        with calls.channel(running.endpoint) as plain:
            stub = service_pb2_grpc.MessagingServiceStub(plain)
            stub_admin = admin_pb2_grpc.AdminStub(plain)  # type: ignore[no-untyped-call]
            stub_admin.CreateTopic(admin_pb2.CreateTopicRequest(name="T", queue_nums=2))
            stub_admin.CreateGroup(admin_pb2.CreateGroupRequest(name="G"))
            request = service_pb2.ReceiveMessageRequest(
                group=definition_pb2.Resource(name="G"),
                message_queue=definition_pb2.MessageQueue(topic=definition_pb2.Resource(name="T")),
                batch_size=8,
            )
            request.invisible_duration.FromSeconds(20)
            request.long_polling_timeout.FromSeconds(15)
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                started_at = time.monotonic()
                waiting = pool.submit(
                    lambda: list(stub.ReceiveMessage(request, timeout=20, metadata=CLIENT_ID))
                )
                _wait_until(lambda: pop.pop.waiters.waiting() == 1)
                config = ClientConfiguration(running.endpoint, Credentials(), request_timeout=5)
                producer = Producer(config, ("T",))
                producer.startup()
                try:
                    producer.send(_message("T", b"late", "TagA"))
                finally:
                    producer.shutdown()
                frames = waiting.result(timeout=10)
                assert frames[0].status.code == Code.OK
                assert frames[1].message.body == b"late"
                assert time.monotonic() - started_at < 10
                parked = pool.submit(
                    lambda: list(stub.ReceiveMessage(request, timeout=20, metadata=CLIENT_ID))
                )
                _wait_until(lambda: pop.pop.waiters.waiting() == 1)
                stopping = pool.submit(running.stop)  # ends long polls first, then drains
                ended = parked.result(timeout=5)
                assert ended[0].status.code == Code.MESSAGE_NOT_FOUND
                assert "shutting down" in ended[0].status.message
                stopping.result(timeout=10)
    finally:
        running.stop()


def test_forward_to_dead_letter_queue_and_change_checks(
    broker, messaging, admin, make_topic, config, started
) -> None:
    name = make_topic()
    _producer(config, started, name).send(_message(name, b"poison", "TagA"))
    settle(broker)
    group = unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    group_pb = definition_pb2.Resource(name=group)
    topic_pb = definition_pb2.Resource(name=name)
    request = service_pb2.ReceiveMessageRequest(
        group=group_pb,
        message_queue=definition_pb2.MessageQueue(topic=topic_pb),
        batch_size=1,
    )
    request.invisible_duration.FromSeconds(20)
    frames = list(messaging.ReceiveMessage(request, timeout=5))
    handle = frames[1].message.system_properties.receipt_handle
    too_long = service_pb2.ChangeInvisibleDurationRequest(
        group=group_pb, topic=topic_pb, receipt_handle=handle
    )
    too_long.invisible_duration.FromSeconds(13 * 3600)
    reply = messaging.ChangeInvisibleDuration(too_long, timeout=5)
    assert reply.status.code == Code.ILLEGAL_INVISIBLE_TIME
    bad = service_pb2.ChangeInvisibleDurationRequest(
        group=group_pb, topic=topic_pb, receipt_handle="1 2 3"
    )
    bad.invisible_duration.FromSeconds(30)
    reply = messaging.ChangeInvisibleDuration(bad, timeout=5)
    assert reply.status.code == Code.INVALID_RECEIPT_HANDLE
    assert not reply.receipt_handle
    forward = service_pb2.ForwardMessageToDeadLetterQueueRequest(
        group=group_pb,
        topic=topic_pb,
        receipt_handle=handle,
        message_id=frames[1].message.system_properties.message_id,
    )
    assert messaging.ForwardMessageToDeadLetterQueue(forward, timeout=5).status.code == Code.OK
    settle(broker)
    store = broker.broker.store
    dlq = f"%DLQ%{group}"
    assert store.topic_configs.get(dlq) is not None
    assert store.max_offset_in_queue(dlq, 0) == 1
    request.long_polling_timeout.FromSeconds(0)
    again = list(messaging.ReceiveMessage(request, timeout=5))
    assert again[0].status.code == Code.MESSAGE_NOT_FOUND
