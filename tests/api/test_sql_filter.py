"""SQL92 filters end to end: the official Python client's ``FilterExpression(..., SQL)`` against
an in-process broker (ReceiveMessage), PullMessage with an SQL92 expression, and the refusal
of a bad expression in ReceiveMessage and in Telemetry settings (``ILLEGAL_FILTER_EXPRESSION``
with the error's column). The official client's own view of a refusal is in
``test_official_consumer.py``."""

from __future__ import annotations

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
from rocketmq.grpc_protocol import Code, FilterType, definition_pb2, service_pb2

from gannet.node.api import client_settings, receiving
from gannet.node.broker import threads
from gannet.node.protocol.gen import admin_pb2
from gannet.node.protocol.statuses import ApiError

from .conftest import pop_broker, settle, unique

QUICK = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    with pop_broker(tmp_path_factory.mktemp("sql"), QUICK) as running:
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


ORDERS = [  # (body, tag, properties)
    (b"o1", "created", {"region": "eu", "amount": "250"}),
    (b"o2", "created", {"region": "us", "amount": "300"}),
    (b"o3", "paid", {"region": "eu", "amount": "40"}),
    (b"o4", "paid", {"region": "eu", "amount": "120.5"}),
    (b"o5", "shipped", {"region": "eu", "amount": "999"}),
    (b"o6", "created", {"amount": "500"}),  # no region
    (b"o7", "created", {"region": "eu", "amount": "lots"}),  # amount is not a number
    (b"o8", "", {"region": "eu", "amount": "700"}),  # no tag
]


def _send_orders(config: ClientConfiguration, started: list[Any], topic: str) -> None:
    producer = Producer(config, (topic,))
    producer.startup()
    started.append(producer)
    for body, tag, properties in ORDERS:
        msg = Message()
        msg.topic = topic
        msg.body = body
        if tag:
            msg.tag = tag
        for name, value in properties.items():
            msg.add_property(name, value)
        producer.send(msg)


def _consumer(config, started, admin, topic: str, expression: FilterExpression) -> SimpleConsumer:
    group = unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    consumer = SimpleConsumer(config, group, {topic: expression}, await_duration=0)
    consumer.startup()
    started.append(consumer)
    return consumer


def _drain(consumer: SimpleConsumer) -> list[bytes]:
    """Everything the group gets, acked; ends after two empty receives in a row."""
    got: list[bytes] = []
    empty = 0
    while empty < 2:
        batch = consumer.receive(32, 15)
        empty = 0 if batch else empty + 1
        for m in batch:
            got.append(m.body)
            consumer.ack(m)
    return sorted(got)


@pytest.mark.parametrize(
    ("expression", "bodies"),
    [
        ("region = 'eu' AND amount > 100", [b"o1", b"o5", b"o8"]),  # '120.5': Integer.valueOf
        ("region = 'eu' AND amount > 100.0", [b"o1", b"o4", b"o5", b"o8"]),
        ("TAGS IN ('paid', 'shipped')", [b"o3", b"o4", b"o5"]),
        ("TAGS = 'created' AND region IS NULL", [b"o6"]),
        ("amount BETWEEN 200 AND 500", [b"o1", b"o2", b"o6"]),
        ("region <> 'eu'", [b"o2"]),  # o6 has no region: unknown, not delivered
        ("TAGS IS NULL OR amount < 50", [b"o3", b"o8"]),
    ],
)
def test_official_consumer_gets_exactly_the_matching_messages(
    broker, admin, make_topic, config, started, expression: str, bodies: list[bytes]
) -> None:
    topic = make_topic(queues=2)
    _send_orders(config, started, topic)
    settle(broker)
    consumer = _consumer(
        config, started, admin, topic, FilterExpression(expression, FilterType.SQL)
    )
    assert _drain(consumer) == bodies


def test_receive_message_answers_illegal_filter_expression(messaging, admin, make_topic) -> None:
    topic = make_topic()
    group = unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    request = service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name=group),
        message_queue=definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic), id=-1),
        filter_expression=definition_pb2.FilterExpression(
            type=definition_pb2.SQL, expression="amount > 'x'"
        ),
        batch_size=1,
        auto_renew=True,
    )
    [frame] = list(messaging.ReceiveMessage(request, timeout=5))
    assert frame.status.code == Code.ILLEGAL_FILTER_EXPRESSION
    assert "line 1, column 10" in frame.status.message


def test_pull_with_sql_skips_and_advances(broker, messaging, make_topic, config, started) -> None:
    topic = make_topic(queues=1)
    _send_orders(config, started, topic)
    settle(broker)
    request = service_pb2.PullMessageRequest(
        group=definition_pb2.Resource(name=""),
        message_queue=definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic), id=0),
        offset=0,
        batch_size=32,
        filter_expression=definition_pb2.FilterExpression(
            type=definition_pb2.SQL, expression="amount >= 500"
        ),
    )
    frames = list(messaging.PullMessage(request, timeout=10))
    assert frames[0].status.code == Code.OK
    assert [f.message.body for f in frames[1:-1]] == [b"o5", b"o6", b"o8"]
    assert frames[-1].next_offset == len(ORDERS)


def test_telemetry_settings_refuse_a_bad_subscription_expression(broker) -> None:
    settings = definition_pb2.Settings(
        client_type=definition_pb2.SIMPLE_CONSUMER,
        subscription=definition_pb2.Subscription(
            group=definition_pb2.Resource(name="Workers"),
            subscriptions=[
                definition_pb2.SubscriptionEntry(
                    topic=definition_pb2.Resource(name="Orders"),
                    expression=definition_pb2.FilterExpression(
                        type=definition_pb2.SQL, expression="a BETWEEN 5 AND 1"
                    ),
                )
            ],
        ),
    )
    groups = broker.broker.store.group_configs
    with pytest.raises(ApiError) as caught:
        client_settings.reply_settings(settings, groups)
    assert caught.value.code == Code.ILLEGAL_FILTER_EXPRESSION
    assert "low <= high" in caught.value.message
    good = settings.subscription.subscriptions[0].expression
    good.expression = "a BETWEEN 1 AND 5"
    assert client_settings.reply_settings(settings, groups).subscription.subscriptions
