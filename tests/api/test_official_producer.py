"""The official ``rocketmq-python-client`` Producer against an in-process broker."""

from __future__ import annotations

import threading
import time

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from gannet.node.protocol.gen import admin_pb2

from .conftest import settle, unique


@pytest.fixture
def producer_for(broker):
    started = []

    def make(topic: str) -> Producer:
        config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
        producer = Producer(config, (topic,))
        producer.startup()
        started.append(producer)
        return producer

    yield make
    for producer in started:
        producer.shutdown()


def _message(topic: str, body: bytes, **fields) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    for name, value in fields.items():
        if name == "properties":
            for key, val in value.items():
                msg.add_property(key, val)
        elif name == "keys":  # the client's setter adds one key per assignment
            for key in value:
                msg.keys = key
        else:
            setattr(msg, name, value)
    return msg


def _query_id(admin, topic: str, message_id: str):
    reply = admin.QueryMessage(admin_pb2.QueryMessageRequest(topic=topic, message_id=message_id))
    assert len(reply.messages) == 1
    return reply.messages[0]


def test_send_normal_messages_with_keys_and_tags(broker, admin, make_topic, producer_for):
    topic = make_topic()
    producer = producer_for(topic)
    receipts = []
    for i in range(6):
        msg = _message(
            topic,
            f"hello {i}".encode(),
            tag="TagA",
            keys=[f"k{i}", "common"],
            properties={"color": "blue"},
        )
        receipts.append(producer.send(msg))
    settle(broker)
    for i, receipt in enumerate(receipts):
        stored = _query_id(admin, topic, receipt.message_id)
        assert stored.body == f"hello {i}".encode()
        assert stored.tag == "TagA"
        assert set(stored.keys) == {f"k{i}", "common"}
        assert stored.properties["color"] == "blue"
        assert stored.queue_offset == receipt.offset
    by_key = admin.QueryMessage(admin_pb2.QueryMessageRequest(topic=topic, key="common"))
    assert len(by_key.messages) == 6
    described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic))
    assert sum(q.max_offset for q in described.queues) == 6
    assert sum(1 for q in described.queues if q.max_offset > 0) > 1  # round-robin


def test_send_fifo_messages_keeps_a_group_on_one_queue(broker, admin, make_topic, producer_for):
    topic = make_topic(admin_pb2.FIFO)
    producer = producer_for(topic)
    receipts = [
        producer.send(_message(topic, f"order-{i}".encode(), message_group="order-42"))
        for i in range(5)
    ]
    settle(broker)
    stored = [_query_id(admin, topic, r.message_id) for r in receipts]
    assert len({m.queue_id for m in stored}) == 1
    assert [m.queue_offset for m in stored] == sorted(m.queue_offset for m in stored)
    assert all(m.properties["__SHARDINGKEY"] == "order-42" for m in stored)


def test_send_delayed_message_is_parked_then_delivered(broker, admin, make_topic, producer_for):
    topic = make_topic(admin_pb2.DELAY)
    arrived = threading.Event()
    broker.broker.store.add_arrival_listener(
        lambda infos: arrived.set() if any(i.topic == topic for i in infos) else None
    )
    producer = producer_for(topic)
    deliver_at_ms = int(time.time() * 1000) + 1_000
    receipt = producer.send(_message(topic, b"later", delivery_timestamp=deliver_at_ms))
    assert not arrived.is_set()  # parked in the timer topic
    assert arrived.wait(10)  # the store's timer has 1 s precision
    found = admin.QueryMessage(
        admin_pb2.QueryMessageRequest(topic=topic, message_id=receipt.message_id)
    ).messages
    assert len(found) == 1
    assert found[0].body == b"later"
    assert int(found[0].properties["TIMER_DELIVER_MS"]) >= deliver_at_ms - 1000
    assert found[0].store_timestamp_ms >= deliver_at_ms - 1000


def test_normal_message_to_fifo_topic_is_refused(broker, make_topic, producer_for):
    topic = make_topic(admin_pb2.FIFO)
    producer = producer_for(topic)
    with pytest.raises(Exception, match="message type"):
        producer.send(_message(topic, b"x"))


def test_simple_consumer_receives_from_the_default_broker(
    broker, admin, make_topic, producer_for
) -> None:
    from rocketmq import FilterExpression, SimpleConsumer

    topic = make_topic()
    sent = producer_for(topic).send(_message(topic, b"popped"))
    settle(broker)
    group = unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    try:
        [received] = consumer.receive(16, 15)  # already there: no long-poll wait
        assert received.message_id == sent.message_id
        assert received.body == b"popped"
        consumer.ack(received)
    finally:
        consumer.shutdown()


def test_push_consumer_starts_with_the_broker_settings(broker, admin, make_topic) -> None:
    from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, message):
            return ConsumeResult.SUCCESS

    topic = make_topic()
    group = unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    consumer = PushConsumer(config, group, Listener(), {topic: FilterExpression("*")})
    consumer.startup()  # blocks until the Telemetry settings reply arrives (10 s limit)
    consumer.shutdown()
