"""Hostile SendMessage fields over the wire: refused before any queue offset is reserved, and
the doubtful inputs of issue 21 answered with the v2 code that names the field."""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.store import records, verifying

from .conftest import settle

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _request(
    topic: str, body: bytes = b"x", message_id: str = "01AA"
) -> service_pb2.SendMessageRequest:
    msg = definition_pb2.Message(body=body)
    msg.topic.name = topic
    msg.system_properties.message_id = message_id
    msg.system_properties.message_type = definition_pb2.NORMAL
    msg.system_properties.body_encoding = definition_pb2.IDENTITY
    return service_pb2.SendMessageRequest(messages=[msg])


def _send(messaging, request) -> service_pb2.SendMessageResponse:
    return messaging.SendMessage(request, timeout=5)


@pytest.mark.parametrize("seconds", [INT64_MIN, INT64_MAX])
def test_failed_send_never_shifts_a_queue(broker, messaging, make_topic, seconds) -> None:
    """Issue 21 item 1: born timestamps of int64 min/max between good sends on a one-queue
    topic. Before the fix the bad send answered INTERNAL_SERVER_ERROR after reserving an
    offset: answered offsets 0, 1, 3, 4 sat at positions 0, 1, 2, 3."""
    topic = make_topic(queues=1)
    told: dict[int, bytes] = {}
    for i in range(6):
        request = _request(topic, body=f"m{i}".encode(), message_id=f"01AA{i:04d}")
        if i in (2, 4):
            request.messages[0].system_properties.born_timestamp.seconds = seconds
            reply = _send(messaging, request)
            assert reply.status.code == Code.BAD_REQUEST, reply.status
            assert "born_timestamp" in reply.status.message
            continue
        reply = _send(messaging, request)
        assert reply.status.code == Code.OK, reply.status
        told[reply.entries[0].offset] = f"m{i}".encode()
    assert sorted(told) == [0, 1, 2, 3]
    settle(broker)
    store = broker.broker.store
    got = store.get_messages(topic, 0, 0, 10)
    for m in got.messages:
        msg = records.decode(m.data)
        assert msg.queue_offset == m.queue_offset
        assert told[m.queue_offset] == msg.body
    assert len(got.messages) == 4
    report = verifying.verify(store.config.root_dir)
    assert [d for d in report.damage if topic in d.where or topic in d.reason] == []


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(INT64_MIN, 0), (INT64_MAX, 0), (-1, 0), (1_700_000_000, -1), (1_700_000_000, 10**9)],
)
def test_delivery_timestamp_out_of_range(messaging, make_topic, seconds, nanos) -> None:
    from gannet.node.api.gen import admin_pb2

    topic = make_topic(admin_pb2.DELAY)
    request = _request(topic)
    sp = request.messages[0].system_properties
    sp.message_type = definition_pb2.DELAY
    sp.delivery_timestamp.seconds = seconds
    sp.delivery_timestamp.nanos = nanos
    reply = _send(messaging, request)
    assert reply.status.code == Code.ILLEGAL_DELIVERY_TIME, reply.status
    assert "delivery_timestamp" in reply.status.message


def test_born_timestamp_nanos_out_of_range(messaging, make_topic) -> None:
    request = _request(make_topic(queues=1))
    request.messages[0].system_properties.born_timestamp.nanos = -5
    reply = _send(messaging, request)
    assert reply.status.code == Code.BAD_REQUEST
    assert "born_timestamp" in reply.status.message
