"""Forged receipt handles (issue 21 item 2): every field must parse within its range and match
the checkpoint it names, for Ack, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue;
the genuine handle still acks afterwards."""

from __future__ import annotations

import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import Code, service_pb2

from gannet.node.protocol.gen import admin_pb2

from .conftest import settle, unique


def _received_handle(broker, admin, messaging) -> tuple[str, str, str]:
    topic, group = unique("RcT"), unique("RcG")
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=1), timeout=5)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=5)
    send = service_pb2.SendMessageRequest()
    for i in range(3):
        msg = send.messages.add(body=f"r{i}".encode())
        msg.topic.name = topic
        msg.system_properties.message_id = f"01RC{i}"
    assert messaging.SendMessage(send, timeout=5).status.code == Code.OK
    settle(broker)
    request = service_pb2.ReceiveMessageRequest(batch_size=3)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.message_queue.id = -1
    request.filter_expression.expression = "*"
    request.invisible_duration.FromSeconds(60)
    request.long_polling_timeout.FromSeconds(1)
    frames = list(messaging.ReceiveMessage(request, timeout=10))
    handles = [f.message.system_properties.receipt_handle for f in frames if f.HasField("message")]
    assert len(handles) == 3
    return topic, group, handles[1]


def _forgeries(genuine: str) -> list[str]:
    fields = genuine.split(" ")
    out = []
    for first in ("9223372036854775808", "1" * 40, "+" + fields[0], "0x1", "٣"):
        out.append(" ".join([first, *fields[1:]]))
    ck = int(fields[0])
    out.append(" ".join([str(ck + 1), *fields[1:]]))  # names a checkpoint never made
    out.append(" ".join([*fields[:8], str(int(fields[8]) + 1)]))  # another commit offset
    out.append(" ".join([*fields[:3], "2147483648", *fields[4:]]))  # revive queue overflow
    out.append(" ".join([*fields[:3], "63", *fields[4:]]))  # a revive queue that is not there
    out.append(" ".join([*fields[:6], "-1", *fields[7:]]))  # negative queue id
    out.append(" ".join([fields[0], str(int(fields[1]) + 3_600_000), *fields[2:]]))  # future
    return out


def _ack(messaging, topic, group, handle) -> service_pb2.AckMessageResponse:
    request = service_pb2.AckMessageRequest()
    request.group.name = group
    request.topic.name = topic
    request.entries.add(message_id="01RC1", receipt_handle=handle)
    return messaging.AckMessage(request, timeout=5)


def test_forged_handles_are_refused_and_the_genuine_one_still_acks(
    broker, admin, messaging
) -> None:
    topic, group, genuine = _received_handle(broker, admin, messaging)
    for forged in _forgeries(genuine):
        reply = _ack(messaging, topic, group, forged)
        assert reply.status.code == Code.INVALID_RECEIPT_HANDLE, (forged, reply.status)
        assert reply.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
        assert len(reply.status.message) < 400

        change = service_pb2.ChangeInvisibleDurationRequest(
            receipt_handle=forged, invisible_duration=Duration(seconds=30), message_id="01RC1"
        )
        change.group.name, change.topic.name = group, topic
        answer = messaging.ChangeInvisibleDuration(change, timeout=5)
        assert answer.status.code == Code.INVALID_RECEIPT_HANDLE, (forged, answer.status)

        dlq = service_pb2.ForwardMessageToDeadLetterQueueRequest(
            receipt_handle=forged, message_id="01RC1", delivery_attempt=1, max_delivery_attempts=3
        )
        dlq.group.name, dlq.topic.name = group, topic
        forwarded = messaging.ForwardMessageToDeadLetterQueue(dlq, timeout=5)
        assert forwarded.status.code == Code.INVALID_RECEIPT_HANDLE, (forged, forwarded.status)
    assert _ack(messaging, topic, group, genuine).status.code == Code.OK
    again = _ack(messaging, topic, group, genuine)
    assert again.status.code == Code.INVALID_RECEIPT_HANDLE  # acked once, not by a forgery
    dlq_topic = f"%DLQ%{group}"
    store = broker.broker.store
    assert store.max_offset_in_queue(dlq_topic, 0) == 0  # no forgery reached the DLQ


@pytest.mark.parametrize("length", [1025, 20_000])
def test_oversized_handle_is_refused_with_a_short_message(broker, admin, messaging, length) -> None:
    topic, group, _ = _received_handle(broker, admin, messaging)
    reply = _ack(messaging, topic, group, "1" * length)
    assert reply.status.code == Code.INVALID_RECEIPT_HANDLE
    assert len(reply.status.message) < 400
