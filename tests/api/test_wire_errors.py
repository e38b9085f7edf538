"""Bad input over the wire gets the right v2 Code in the response status, never a server error."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.protocol.gen import admin_pb2

from .conftest import settle


def _send_request(topic: str, body: bytes = b"x", **system) -> service_pb2.SendMessageRequest:
    msg = definition_pb2.Message(body=body)
    msg.topic.name = topic
    msg.system_properties.message_id = system.pop(
        "message_id", "0102FC000000013E000B13F97D00000001"
    )
    msg.system_properties.body_encoding = definition_pb2.IDENTITY
    user = system.pop("user_properties", {})
    msg.user_properties.update(user)
    for name, value in system.items():
        field = getattr(msg.system_properties, name)
        if hasattr(field, "extend"):
            field.extend(value)
        else:
            setattr(msg.system_properties, name, value)
    return service_pb2.SendMessageRequest(messages=[msg])


def _code(messaging, request) -> tuple[int, str]:
    reply = messaging.SendMessage(request, timeout=5)
    return reply.status.code, reply.status.message


@pytest.mark.parametrize(
    ("fields", "code", "mentions"),
    [
        ({}, Code.OK, "OK"),
        ({"body": b""}, Code.MESSAGE_BODY_EMPTY, "body"),
        ({"body": b"x" * (4 * 1024 * 1024 + 1)}, Code.MESSAGE_BODY_TOO_LARGE, "body"),
        ({"message_id": " "}, Code.ILLEGAL_MESSAGE_ID, "message_id"),
        ({"tag": "a|b"}, Code.ILLEGAL_MESSAGE_TAG, "tag"),
        ({"tag": "  "}, Code.ILLEGAL_MESSAGE_TAG, "tag"),
        ({"keys": ["ok", "bad\x01"]}, Code.ILLEGAL_MESSAGE_KEY, "key"),
        ({"user_properties": {"UNIQ_KEY": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "UNIQ_KEY"),
        (
            {"user_properties": {f"k{i}": "v" for i in range(129)}},
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            "128",
        ),
        ({"user_properties": {"big": "v" * 17_000}}, Code.MESSAGE_PROPERTIES_TOO_LARGE, "bytes"),
        ({"message_group": "g"}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "FIFO"),
    ],
)
def test_send_validation(messaging, make_topic, fields, code, mentions) -> None:
    topic = make_topic()
    body = fields.pop("body", b"x")
    status_code, message = _code(messaging, _send_request(topic, body, **fields))
    assert (Code.Name(status_code), message) == (Code.Name(code), message)
    assert mentions in message


def test_fifo_topic_checks_message_group(messaging, make_topic) -> None:
    topic = make_topic(admin_pb2.FIFO)
    code, message = _code(messaging, _send_request(topic, message_group="g" * 64))
    assert code == Code.ILLEGAL_MESSAGE_GROUP
    assert "message_group" in message
    assert _code(messaging, _send_request(topic, message_group="g" * 63))[0] == Code.OK


def test_delay_beyond_one_day_is_refused(messaging, make_topic) -> None:
    topic = make_topic(admin_pb2.DELAY)
    request = _send_request(topic)
    request.messages[0].system_properties.delivery_timestamp.seconds = 4_000_000_000
    code, message = _code(messaging, request)
    assert code == Code.ILLEGAL_DELIVERY_TIME
    assert "delivery_timestamp" in message


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        ("bad topic!", Code.ILLEGAL_TOPIC),
        ("", Code.ILLEGAL_TOPIC),
        ("rmq_sys_internal", Code.ILLEGAL_TOPIC),
        ("t" * 128, Code.ILLEGAL_TOPIC),
        ("NoSuchTopic", Code.TOPIC_NOT_FOUND),
    ],
)
def test_bad_topics(messaging, topic, code) -> None:
    status_code, message = _code(messaging, _send_request(topic))
    assert status_code == code
    if code == Code.TOPIC_NOT_FOUND:
        assert "gannet topic create NoSuchTopic" in message
    route = messaging.QueryRoute(
        service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic)), timeout=5
    )
    assert route.status.code == code


def test_empty_and_mixed_batches_are_corrupted(messaging, make_topic) -> None:
    assert _code(messaging, service_pb2.SendMessageRequest())[0] == Code.MESSAGE_CORRUPTED
    first, second = make_topic(), make_topic()
    request = _send_request(first)
    request.messages.extend(_send_request(second).messages)
    assert _code(messaging, request)[0] == Code.MESSAGE_CORRUPTED


def test_batch_is_stored_in_one_queue(broker, messaging, admin, make_topic) -> None:
    topic = make_topic()
    request = _send_request(topic)
    for i in range(2, 6):
        request.messages.extend(
            _send_request(topic, message_id=f"0102FC000000013E000B13F97D0000000{i}").messages
        )
    reply = messaging.SendMessage(request, timeout=5)
    assert reply.status.code == Code.OK
    assert [e.offset for e in reply.entries] == [0, 1, 2, 3, 4]
    settle(broker)
    described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic))
    assert sorted(q.max_offset for q in described.queues) == [0, 0, 0, 5]


def test_malformed_protobuf_gets_bad_request(channel) -> None:
    call = channel.unary_unary(
        "/apache.rocketmq.v2.MessagingService/SendMessage",
        response_deserializer=service_pb2.SendMessageResponse.FromString,
    )
    reply = call(b"\xff\xff\xff\xff", timeout=5)
    assert reply.status.code == Code.BAD_REQUEST
    assert "SendMessageRequest" in reply.status.message
    stream = channel.unary_stream(
        "/apache.rocketmq.v2.MessagingService/ReceiveMessage",
        response_deserializer=service_pb2.ReceiveMessageResponse.FromString,
    )
    assert [f.status.code for f in stream(b"\x0a\xff", timeout=5)] == [Code.BAD_REQUEST]
    admin_call = channel.unary_unary("/gannet.admin.v1.Admin/CreateTopic")
    with pytest.raises(grpc.RpcError) as caught:
        admin_call(b"\xff\xff", timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_pop_rpcs_check_the_group_and_end_transaction_checks_the_topic(
    messaging, make_topic
) -> None:
    topic = definition_pb2.Resource(name=make_topic())
    group = definition_pb2.Resource(name="g")
    ack = messaging.AckMessage(service_pb2.AckMessageRequest(group=group, topic=topic), timeout=5)
    assert ack.status.code == Code.CONSUMER_GROUP_NOT_FOUND
    frames = list(
        messaging.ReceiveMessage(service_pb2.ReceiveMessageRequest(group=group), timeout=5)
    )
    assert [f.status.code for f in frames] == [Code.CONSUMER_GROUP_NOT_FOUND]
    end = messaging.EndTransaction(service_pb2.EndTransactionRequest(), timeout=5)
    assert end.status.code == Code.ILLEGAL_TOPIC


def test_query_assignment_needs_an_existing_group(messaging, admin, make_topic) -> None:
    topic = definition_pb2.Resource(name=make_topic(queues=3))
    request = service_pb2.QueryAssignmentRequest(
        topic=topic, group=definition_pb2.Resource(name="nobody")
    )
    reply = messaging.QueryAssignment(request, timeout=5)
    assert reply.status.code == Code.CONSUMER_GROUP_NOT_FOUND
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name="somebody"))
    request.group.name = "somebody"
    reply = messaging.QueryAssignment(request, timeout=5)
    assert reply.status.code == Code.OK
    # RocketMQ's answer to Pop consumers: one assignment per broker group, queue id -1
    assert [a.message_queue.id for a in reply.assignments] == [-1]
    assert all(a.message_queue.broker.endpoints.addresses for a in reply.assignments)


def test_telemetry_answers_producer_settings(messaging, make_topic) -> None:
    settings = definition_pb2.Settings(client_type=definition_pb2.PRODUCER)
    settings.publishing.topics.add(name=make_topic())
    command = service_pb2.TelemetryCommand(settings=settings)
    replies = messaging.Telemetry(iter([command]), timeout=5)
    reply = next(replies)
    replies.cancel()
    assert reply.status.code == Code.OK
    assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert reply.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    assert reply.settings.metric.on is False


def test_telemetry_answers_consumer_settings(messaging, admin) -> None:
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name="fifo-group", fifo=True))
    settings = definition_pb2.Settings(client_type=definition_pb2.PUSH_CONSUMER)
    settings.subscription.group.name = "fifo-group"
    command = service_pb2.TelemetryCommand(settings=settings)
    replies = messaging.Telemetry(iter([command]), timeout=5)
    reply = next(replies)
    replies.cancel()
    sub = reply.settings.subscription
    assert (sub.fifo, sub.receive_batch_size, sub.long_polling_timeout.seconds) == (True, 32, 20)
    assert reply.settings.backoff_policy.max_attempts == 17
    assert len(reply.settings.backoff_policy.customized_backoff.next) == 18


def test_telemetry_without_pub_sub_is_invalid_argument(messaging) -> None:
    settings = definition_pb2.Settings(client_type=definition_pb2.PRODUCER)
    replies = messaging.Telemetry(iter([service_pb2.TelemetryCommand(settings=settings)]))
    with pytest.raises(grpc.RpcError) as caught:
        next(replies)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_heartbeat_and_termination_answer_ok(messaging) -> None:
    beat = messaging.Heartbeat(
        service_pb2.HeartbeatRequest(client_type=definition_pb2.PRODUCER), timeout=5
    )
    assert beat.status.code == Code.OK
    bye = messaging.NotifyClientTermination(service_pb2.NotifyClientTerminationRequest(), timeout=5)
    assert bye.status.code == Code.OK


def test_heartbeat_with_a_bad_group_name_is_illegal_consumer_group(messaging) -> None:
    beat = messaging.Heartbeat(
        service_pb2.HeartbeatRequest(
            client_type=definition_pb2.PUSH_CONSUMER,
            group=definition_pb2.Resource(name="bad group!"),
        ),
        timeout=5,
    )
    assert beat.status.code == Code.ILLEGAL_CONSUMER_GROUP
    assert "bad group!" in beat.status.message


def test_missing_client_id_is_client_id_required(raw_channel) -> None:
    stub = service_pb2_grpc.MessagingServiceStub(raw_channel)
    reply = stub.Heartbeat(service_pb2.HeartbeatRequest(), timeout=5)
    assert reply.status.code == Code.CLIENT_ID_REQUIRED
    assert "x-mq-client-id" in reply.status.message
    settings = definition_pb2.Settings(client_type=definition_pb2.PRODUCER)
    settings.publishing.SetInParent()
    replies = stub.Telemetry(iter([service_pb2.TelemetryCommand(settings=settings)]), timeout=5)
    with pytest.raises(grpc.RpcError) as caught:
        next(replies)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# ------------------------------------------------------------------ every RPC, malformed bytes
_UNARY_RPCS = [
    ("QueryRoute", service_pb2.QueryRouteResponse),
    ("Heartbeat", service_pb2.HeartbeatResponse),
    ("QueryAssignment", service_pb2.QueryAssignmentResponse),
    ("AckMessage", service_pb2.AckMessageResponse),
    ("ChangeInvisibleDuration", service_pb2.ChangeInvisibleDurationResponse),
    ("ForwardMessageToDeadLetterQueue", service_pb2.ForwardMessageToDeadLetterQueueResponse),
    ("EndTransaction", service_pb2.EndTransactionResponse),
    ("NotifyClientTermination", service_pb2.NotifyClientTerminationResponse),
]


@pytest.mark.parametrize(("method", "response"), _UNARY_RPCS)
def test_malformed_protobuf_on_every_unary_rpc(channel, method, response) -> None:
    call = channel.unary_unary(
        f"/apache.rocketmq.v2.MessagingService/{method}",
        response_deserializer=response.FromString,
    )
    reply = call(b"\x0a\x05ab", timeout=5)  # field 1 claims 5 bytes, 2 follow
    assert reply.status.code == Code.BAD_REQUEST
    assert f"{method}Request" in reply.status.message


# ------------------------------------------------------------------ missing fields
def test_send_missing_fields_are_named(messaging, make_topic) -> None:
    topic = make_topic()
    no_id = _send_request(topic)
    no_id.messages[0].system_properties.ClearField("message_id")
    assert _code(messaging, no_id) == (
        Code.ILLEGAL_MESSAGE_ID,
        "system_properties.message_id is blank",
    )
    no_topic = _send_request(topic)
    no_topic.messages[0].ClearField("topic")
    code, message = _code(messaging, no_topic)
    assert code == Code.ILLEGAL_TOPIC
    assert "topic" in message
    no_body = _send_request(topic)
    no_body.messages[0].ClearField("body")
    assert _code(messaging, no_body)[0] == Code.MESSAGE_BODY_EMPTY


def _receive(messaging, timeout_s: float = 5, **fields) -> list[service_pb2.ReceiveMessageResponse]:
    request = service_pb2.ReceiveMessageRequest(**fields)
    return list(messaging.ReceiveMessage(request, timeout=timeout_s))


def _only_status(frames) -> tuple[int, str]:
    assert [f.WhichOneof("content") for f in frames] == ["status"]
    return frames[0].status.code, frames[0].status.message


def test_receive_missing_or_bad_fields(messaging, admin, make_topic) -> None:
    topic = make_topic()
    group = "wire-receiver"
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    queue = definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic))
    group_pb = definition_pb2.Resource(name=group)
    invisible = Duration(seconds=30)
    code, message = _only_status(_receive(messaging, message_queue=queue, batch_size=1))
    assert code == Code.ILLEGAL_CONSUMER_GROUP
    assert "group" in message
    code, message = _only_status(
        _receive(messaging, group=group_pb, batch_size=1, invisible_duration=invisible)
    )
    assert code == Code.ILLEGAL_TOPIC
    assert "topic" in message
    # No invisible_duration (and no auto_renew): 0 ms is below the 10 s floor.
    code, message = _only_status(
        _receive(messaging, group=group_pb, message_queue=queue, batch_size=1)
    )
    assert code == Code.ILLEGAL_INVISIBLE_TIME
    assert "invisible_duration" in message
    code, message = _only_status(
        _receive(
            messaging,
            group=group_pb,
            message_queue=queue,
            batch_size=1,
            invisible_duration=Duration(seconds=13 * 3600),
        )
    )
    assert code == Code.ILLEGAL_INVISIBLE_TIME
    code, message = _only_status(
        _receive(messaging, group=group_pb, message_queue=queue, invisible_duration=invisible)
    )
    assert code == Code.BAD_REQUEST
    assert "batch_size" in message
    code, message = _only_status(
        _receive(
            messaging,
            group=group_pb,
            message_queue=queue,
            batch_size=1,
            invisible_duration=invisible,
            filter_expression=definition_pb2.FilterExpression(
                type=definition_pb2.TAG, expression="||"
            ),
        )
    )
    assert code == Code.ILLEGAL_FILTER_EXPRESSION
    bad_group = definition_pb2.Resource(name="bad group!")
    code, message = _only_status(
        _receive(
            messaging,
            group=bad_group,
            message_queue=queue,
            batch_size=1,
            invisible_duration=invisible,
        )
    )
    assert code == Code.ILLEGAL_CONSUMER_GROUP
    missing = definition_pb2.MessageQueue(topic=definition_pb2.Resource(name="NoSuchTopic"))
    code, message = _only_status(
        _receive(
            messaging,
            group=group_pb,
            message_queue=missing,
            batch_size=1,
            invisible_duration=invisible,
        )
    )
    assert code == Code.TOPIC_NOT_FOUND
    assert "NoSuchTopic" in message


def test_receive_batch_size_is_capped_at_32(broker, messaging, admin, make_topic) -> None:
    topic = make_topic(queues=1)
    request = _send_request(topic)
    for i in range(40):
        request.messages.extend(
            _send_request(topic, message_id=f"0102FC000000013E000B13F97D0001{i:04d}").messages
        )
    assert messaging.SendMessage(request, timeout=5).status.code == Code.OK
    settle(broker)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name="wire-batch"))
    frames = _receive(
        messaging,
        timeout_s=10,
        group=definition_pb2.Resource(name="wire-batch"),
        message_queue=definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic)),
        batch_size=1000,
        invisible_duration=Duration(seconds=30),
    )
    assert frames[0].status.code == Code.OK
    assert sum(f.WhichOneof("content") == "message" for f in frames) == 32


def test_send_batch_above_the_limit_is_payload_too_large(messaging, make_topic) -> None:
    topic = make_topic()
    request = _send_request(topic)
    one = request.messages[0]
    request.messages.extend([one] * 1024)
    code, message = _code(messaging, request)
    assert code == Code.PAYLOAD_TOO_LARGE
    assert "1025 messages" in message


def test_pop_rpcs_missing_fields_and_garbage_handles(messaging, admin, make_topic) -> None:
    topic_pb = definition_pb2.Resource(name=make_topic())
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name="wire-acker"))
    group_pb = definition_pb2.Resource(name="wire-acker")
    ack = messaging.AckMessage(
        service_pb2.AckMessageRequest(group=group_pb, topic=topic_pb), timeout=5
    )
    assert ack.status.code == Code.BAD_REQUEST
    assert "entries" in ack.status.message
    no_topic = messaging.AckMessage(
        service_pb2.AckMessageRequest(
            group=group_pb, entries=[service_pb2.AckMessageEntry(receipt_handle="x")]
        ),
        timeout=5,
    )
    assert no_topic.status.code == Code.ILLEGAL_TOPIC
    garbage = [
        "",
        "x",
        "1 2 3",
        "a b c d e f g h i",
        "0 1700000000000 30000 1 0 broker-a 0 0 zz",
        "\x00\xff" * 20,
        "9" * 400,
    ]
    for handle in garbage:
        change = service_pb2.ChangeInvisibleDurationRequest(
            group=group_pb, topic=topic_pb, receipt_handle=handle
        )
        change.invisible_duration.FromSeconds(10)
        reply = messaging.ChangeInvisibleDuration(change, timeout=5)
        assert reply.status.code == Code.INVALID_RECEIPT_HANDLE, handle
        assert "receipt" in reply.status.message.lower() or "handle" in reply.status.message
        forward = service_pb2.ForwardMessageToDeadLetterQueueRequest(
            group=group_pb, topic=topic_pb, receipt_handle=handle
        )
        reply = messaging.ForwardMessageToDeadLetterQueue(forward, timeout=5)
        assert reply.status.code == Code.INVALID_RECEIPT_HANDLE, handle
        acked = messaging.AckMessage(
            service_pb2.AckMessageRequest(
                group=group_pb,
                topic=topic_pb,
                entries=[service_pb2.AckMessageEntry(receipt_handle=handle)],
            ),
            timeout=5,
        )
        assert acked.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE, handle
    negative = service_pb2.ChangeInvisibleDurationRequest(
        group=group_pb, topic=topic_pb, receipt_handle="x"
    )
    negative.invisible_duration.seconds = -1
    reply = messaging.ChangeInvisibleDuration(negative, timeout=5)
    assert reply.status.code == Code.ILLEGAL_INVISIBLE_TIME
    assert "invisible_duration" in reply.status.message
    unknown = service_pb2.ChangeInvisibleDurationRequest(
        group=definition_pb2.Resource(name="nobody-here"), topic=topic_pb, receipt_handle="x"
    )
    assert messaging.ChangeInvisibleDuration(unknown, timeout=5).status.code == (
        Code.CONSUMER_GROUP_NOT_FOUND
    )
    forward_unknown = service_pb2.ForwardMessageToDeadLetterQueueRequest(
        group=definition_pb2.Resource(name="nobody-here"), topic=topic_pb, receipt_handle="x"
    )
    assert messaging.ForwardMessageToDeadLetterQueue(forward_unknown, timeout=5).status.code == (
        Code.CONSUMER_GROUP_NOT_FOUND
    )


def test_query_route_and_assignment_missing_fields(messaging, make_topic) -> None:
    route = messaging.QueryRoute(service_pb2.QueryRouteRequest(), timeout=5)
    assert route.status.code == Code.ILLEGAL_TOPIC
    assert "topic" in route.status.message
    assignment = messaging.QueryAssignment(
        service_pb2.QueryAssignmentRequest(topic=definition_pb2.Resource(name=make_topic())),
        timeout=5,
    )
    assert assignment.status.code == Code.ILLEGAL_CONSUMER_GROUP
    assert "group" in assignment.status.message
