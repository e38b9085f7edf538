"""Error texts stay bounded (issue 21 item 3): a 19,760-character name in any admin or v2
request is answered with its code (NOT_FOUND, INVALID_ARGUMENT, ILLEGAL_*…) and a short text
quoting a prefix and the length — never a gRPC metadata-size failure."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor
from rocketmq.grpc_protocol import Code, service_pb2

from gannet.node.protocol import statuses
from gannet.node.protocol.gen import admin_pb2

LONG = "N" * 19_760
TEXT_MAX = statuses.MESSAGE_CHARS_MAX + 64


def _fill(message, depth: int = 0) -> None:
    """Every string field (nested ones too) set to the long name."""
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value[LONG] = LONG if field.message_type.fields[1].type == field.TYPE_STRING else 0
        elif field.type == descriptor.FieldDescriptor.TYPE_STRING:
            if field.is_repeated:
                value.append(LONG)
            else:
                setattr(message, field.name, LONG)
        elif field.type == descriptor.FieldDescriptor.TYPE_MESSAGE and depth < 2:
            if field.is_repeated:
                _fill(value.add(), depth + 1)
            elif not field.message_type.full_name.startswith("google.protobuf"):
                _fill(getattr(message, field.name), depth + 1)


def _methods(service: descriptor.ServiceDescriptor, skip: set[str]) -> list[str]:
    return [m.name for m in service.methods if m.name not in skip]


ADMIN = admin_pb2.DESCRIPTOR.services_by_name["Admin"]


@pytest.mark.parametrize("method", _methods(ADMIN, {"TransferLeadership"}))
def test_admin_long_names(channel, method) -> None:
    spec = ADMIN.methods_by_name[method]
    request = admin_pb2.__dict__[spec.input_type.name]()
    _fill(request)
    call = channel.unary_unary(
        f"/{ADMIN.full_name}/{method}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=lambda b: b,
    )
    code, details = _outcome(call, request)
    assert code not in (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    ), (method, code, details[:200])
    assert len(details) <= TEXT_MAX, method
    assert LONG not in details


def _outcome(call, request) -> tuple[grpc.StatusCode, str]:
    try:
        call(request, timeout=10)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


V2 = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
_STREAMING = {"Telemetry", "ReceiveMessage"}


@pytest.mark.parametrize("method", _methods(V2, _STREAMING))
def test_v2_long_names(channel, method) -> None:
    spec = V2.methods_by_name[method]
    request = service_pb2.__dict__[spec.input_type.name]()
    _fill(request)
    call = channel.unary_unary(
        f"/{V2.full_name}/{method}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=service_pb2.__dict__[spec.output_type.name].FromString,
    )
    try:
        reply = call(request, timeout=10)
    except grpc.RpcError as exc:
        failed = exc
    else:
        failed = None
    if failed is not None:
        assert failed.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INVALID_ARGUMENT)
        assert len(failed.details() or "") <= TEXT_MAX
        return
    status = reply.status
    assert status.code not in (Code.INTERNAL_ERROR, Code.INTERNAL_SERVER_ERROR), (method, status)
    assert len(status.message) <= TEXT_MAX, method
    assert LONG not in status.message


def test_receive_long_names(channel) -> None:
    request = service_pb2.ReceiveMessageRequest()
    _fill(request)
    stub = channel.unary_stream(
        f"/{V2.full_name}/ReceiveMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=service_pb2.ReceiveMessageResponse.FromString,
    )
    frames = list(stub(request, timeout=10))
    codes = [f.status for f in frames if f.HasField("status")]
    assert codes
    assert codes[0].code != Code.OK
    assert all(len(s.message) <= TEXT_MAX for s in codes)


def test_bounded_keeps_short_texts_and_cuts_long_values() -> None:
    short = "topic 'a' accepts NORMAL messages; 'b' is FIFO"
    assert statuses.bounded(short) == short
    cut = statuses.bounded(f"topic {LONG!r} does not exist")
    assert cut == f"topic {'N' * 64!r}… (19760 characters) does not exist"
    assert len(statuses.bounded("x " * 5000)) <= statuses.MESSAGE_CHARS_MAX
