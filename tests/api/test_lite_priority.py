"""Lite topics and priority messages with the official Python clients against a broker:
a LiteSimpleConsumer gets exactly the lite topics it subscribed (in send order per lite topic),
unsubscribing stops them, bad lite-topic names and wrong topics are refused; priority messages
are received most urgent first."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    LiteSimpleConsumer,
    Message,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2
from rocketmq.v5.exception import LiteSubscriptionQuotaExceededException

from gannet.node.api import lite_topics
from gannet.node.protocol.gen import admin_pb2

from .conftest import settle, unique

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def clients() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for client in reversed(started):
        client.shutdown()


def _topic(admin: Any, kind: admin_pb2.MessageType, queues: int = 4) -> str:
    topic = unique("LP")
    admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=queues, message_type=kind)
    )
    return topic


def _group(admin: Any) -> str:
    group = unique("LPG")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    return group


def subscribe(consumer: Any, lite_topic: str, timeout_s: float = 10) -> None:
    """``subscribe_lite`` once the client has its Settings: it checks their quota, and its
    ``startup`` does not wait for them (a LiteSubscriptionQuotaExceededException of quota 0)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            consumer.subscribe_lite(lite_topic)
            return
        except LiteSubscriptionQuotaExceededException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _receive_all(consumer: Any, want: int, timeout_s: float = 15) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for message in consumer.receive(32, 30):
            got.append(message)
            consumer.ack(message)
    return got


def test_a_lite_consumer_gets_the_lite_topics_it_subscribed(broker, admin, clients) -> None:
    topic, group = _topic(admin, admin_pb2.LITE), _group(admin)
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    consumer = LiteSimpleConsumer(topic, config, group, await_duration=1)
    consumer.startup()
    clients.append(consumer)
    subscribe(consumer, "session-a")
    subscribe(consumer, "session-b")
    producer = Producer(config, (topic,))
    producer.startup()
    clients.append(producer)
    for i in range(4):
        for session in ("session-a", "session-b", "session-c"):
            msg = Message()
            msg.topic, msg.body, msg.lite_topic = topic, f"{session}/{i}".encode(), session
            producer.send(msg)
    settle(broker)
    got = _receive_all(consumer, 8)
    assert sorted(m.lite_topic for m in got) == ["session-a"] * 4 + ["session-b"] * 4
    for session in ("session-a", "session-b"):  # one queue per lite topic: send order kept
        bodies = [m.body for m in got if m.lite_topic == session]
        assert bodies == [f"{session}/{i}".encode() for i in range(4)]
    assert all(m.message_type == definition_pb2.LITE for m in got)
    consumer.unsubscribe_lite("session-a")
    msg = Message()
    msg.topic, msg.body, msg.lite_topic = topic, b"late", "session-a"
    producer.send(msg)
    msg = Message()
    msg.topic, msg.body, msg.lite_topic = topic, b"still", "session-b"
    producer.send(msg)
    settle(broker)
    assert [m.body for m in _receive_all(consumer, 1, 5)] == [b"still"]


def test_lite_subscriptions_are_checked(broker, admin, messaging) -> None:
    lite, normal, group = (
        _topic(admin, admin_pb2.LITE),
        _topic(admin, admin_pb2.NORMAL),
        _group(admin),
    )

    def sync(topic: str, names: list[str], action: int = definition_pb2.PARTIAL_ADD) -> Any:
        request = service_pb2.SyncLiteSubscriptionRequest(action=action, lite_topic_set=names)
        request.topic.name, request.group.name = topic, group
        return messaging.SyncLiteSubscription(request, timeout=5).status

    assert sync(lite, ["ok-1"]).code == Code.OK
    assert sync(lite, ["bad name!"]).code == Code.ILLEGAL_LITE_TOPIC
    assert (
        sync(lite, ["x" * (lite_topics.LITE_TOPIC_CHARS_MAX + 1)]).code == Code.ILLEGAL_LITE_TOPIC
    )
    too_many = [f"t{i}" for i in range(lite_topics.SUBSCRIPTIONS_PER_CLIENT_MAX + 1)]
    quota = sync(lite, too_many, definition_pb2.COMPLETE_ADD)
    assert quota.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    wrong = sync(normal, ["ok-1"])
    assert (wrong.code, "not a LITE topic" in wrong.message) == (Code.BAD_REQUEST, True)
    assert sync("NoSuchTopic", ["ok-1"]).code == Code.TOPIC_NOT_FOUND


def test_priority_messages_are_received_most_urgent_first(broker, admin, clients) -> None:
    topic, group = _topic(admin, admin_pb2.PRIORITY, queues=4), _group(admin)
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    clients.append(consumer)
    producer = Producer(config, (topic,))
    producer.startup()
    clients.append(producer)
    for priority in (0, 2, 9, 1, 3, 0):  # 9 counts as the top level, 3, of 4 queues
        msg = Message()
        msg.topic, msg.body, msg.priority = topic, f"p{priority}".encode(), priority
        producer.send(msg)
    settle(broker)
    got: list[Any] = []
    deadline = time.monotonic() + 15
    while len(got) < 6 and time.monotonic() < deadline:
        for message in consumer.receive(1, 30):  # one at a time: each the most urgent left
            got.append(message)
            consumer.ack(message)
    assert [m.body for m in got] == [b"p9", b"p3", b"p2", b"p1", b"p0", b"p0"]
    assert [m.priority for m in got] == [9, 3, 2, 1, 0, 0]


def test_lite_and_priority_messages_need_their_topic_type(broker, admin, messaging) -> None:
    normal = _topic(admin, admin_pb2.NORMAL)
    for field, value in (("lite_topic", "s1"), ("priority", 1)):
        msg = definition_pb2.Message(body=b"x")
        msg.topic.name = normal
        msg.system_properties.message_id = "0102FC000000013E000B13F97D000000F1"
        setattr(msg.system_properties, field, value)
        reply = messaging.SendMessage(service_pb2.SendMessageRequest(messages=[msg]), timeout=5)
        assert reply.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, field
    priority = _topic(admin, admin_pb2.PRIORITY)
    msg = definition_pb2.Message(body=b"x")
    msg.topic.name = priority
    msg.system_properties.message_id = "0102FC000000013E000B13F97D000000F2"
    msg.system_properties.priority = -1
    reply = messaging.SendMessage(service_pb2.SendMessageRequest(messages=[msg]), timeout=5)
    assert (reply.status.code, "negative" in reply.status.message) == (Code.BAD_REQUEST, True)
