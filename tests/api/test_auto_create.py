"""With auto-creation on, a producer's first use creates the topic (MIXED: every type) and a
consumer's first use creates its group; with it off, an unknown group is refused by name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.topics import MessageType


@pytest.fixture
def auto_broker(tmp_path: Path) -> Iterator[threads.BrokerThread]:
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    quick = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200)
    running = threads.start(
        BrokerConfig(store=store, listen_port=0, auto_create_topics=True, auto_create_groups=True),
        pop=receiving.factory(quick),
    )
    yield running
    running.stop()


def test_unknown_topic_is_created_on_first_use(auto_broker: threads.BrokerThread) -> None:
    config = ClientConfiguration(auto_broker.endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, ("Fresh",))
    producer.startup()
    try:
        normal, fifo = Message(), Message()
        for msg in (normal, fifo):
            msg.topic = "Fresh"
            msg.body = b"x"
        fifo.message_group = "g"
        assert producer.send(normal).message_id
        assert producer.send(fifo).message_id
    finally:
        producer.shutdown()
    created = auto_broker.broker.store.topic_configs.get("Fresh")
    assert created is not None
    assert created.message_type is MessageType.MIXED
    assert created.write_queue_nums == 8


def test_unknown_group_is_created_on_first_use(auto_broker: threads.BrokerThread) -> None:
    config = ClientConfiguration(auto_broker.endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, ("Jobs",))
    producer.startup()
    consumer = SimpleConsumer(config, "JobWorkers", {"Jobs": FilterExpression("*")}, 0)
    try:
        msg = Message()
        msg.topic = "Jobs"
        msg.body = b"job 1"
        producer.send(msg)
        consumer.startup()
        got = []
        for _ in range(20):
            got += consumer.receive(16, 15)
            if got:
                break
        assert [m.body for m in got] == [b"job 1"]
        consumer.ack(got[0])
    finally:
        consumer.shutdown()
        producer.shutdown()
    group = auto_broker.broker.store.group_configs.get("JobWorkers")
    assert group is not None
    assert not group.consume_message_orderly
    assert group.retry_max_times == 16


def test_unknown_group_is_refused_when_auto_creation_is_off(
    broker: threads.BrokerThread, messaging: service_pb2_grpc.MessagingServiceStub
) -> None:
    entry = service_pb2.AckMessageEntry(message_id="m", receipt_handle="h")
    reply = messaging.AckMessage(
        service_pb2.AckMessageRequest(
            group=definition_pb2.Resource(name="NoSuchWorkers"),
            topic=definition_pb2.Resource(name="Jobs"),
            entries=[entry],
        ),
        timeout=5,
    )
    assert reply.status.code == Code.CONSUMER_GROUP_NOT_FOUND
    assert "gannet group create NoSuchWorkers" in reply.status.message
    assert "--auto-create-groups" in reply.status.message
    assert broker.broker.store.group_configs.get("NoSuchWorkers") is None
