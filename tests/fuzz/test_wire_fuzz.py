"""Fuzz a LIVE in-process broker with malformed and hostile requests on every RPC.

Each v2 (``apache.rocketmq.v2.MessagingService``) and admin (``gannet.admin.v1.Admin``) method
gets random bytes and well-formed requests with hostile field values (``protos.py``), over a
real gRPC channel on 127.0.0.1. Contract: every call is answered — a v2 reply carries a
non-zero status that is not INTERNAL_ERROR / INTERNAL_SERVER_ERROR (the servicers' answer to
an uncaught exception), a gRPC error is never UNKNOWN or INTERNAL — nothing is logged at
ERROR, and the broker serves a plain request afterwards. A second broker requiring signatures
gets hostile ``authorization`` / ``x-mq-date-time`` headers.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.duration_pb2 import Duration
from hypothesis import given
from hypothesis import strategies as st
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

from . import protos
from .conftest import SEEDED, fuzz_settings

pytestmark = pytest.mark.timeout(120)
V2 = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
ADMIN = admin_pb2.DESCRIPTOR.services_by_name["Admin"]
QUICK = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=100)
CALL_TIMEOUT_S = 10.0
BAD_V2_CODES = {Code.INTERNAL_ERROR, Code.INTERNAL_SERVER_ERROR, 0}
BAD_GRPC_CODES = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
# Admin calls that legitimately take long or change broker-wide state the rest relies on.
ADMIN_SKIPPED = {"TransferLeadership"}
SEED_REFUSED = (grpc.StatusCode.UNAUTHENTICATED,)


def _start(root: Path, **extra: Any) -> threads.BrokerThread:
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    running = threads.start(
        BrokerConfig(store=store, listen_port=0, **extra), pop=receiving.factory(QUICK)
    )
    _seed(running, [])
    return running


def _seed(running: threads.BrokerThread, metadata: list[tuple[str, str]]) -> None:
    with grpc.insecure_channel(running.endpoint) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        for method, request in (
            (admin.CreateTopic, admin_pb2.CreateTopicRequest(name="FuzzT", queue_nums=2)),
            (admin.CreateGroup, admin_pb2.CreateGroupRequest(name="FuzzG")),
        ):
            code = grpc.StatusCode.OK
            try:
                method(request, metadata=metadata)
            except grpc.RpcError as exc:
                code = exc.code()
            assert code in (grpc.StatusCode.OK, grpc.StatusCode.ALREADY_EXISTS, *SEED_REFUSED)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    running = _start(tmp_path_factory.mktemp("fuzz-broker"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def channel(live: threads.BrokerThread) -> Iterator[grpc.Channel]:
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    with grpc.insecure_channel(live.endpoint, options=options) as ch:
        yield ch


def _metadata() -> list[tuple[str, str]]:
    return [("x-mq-client-id", "fuzz@1@0@x"), ("x-mq-request-id", str(uuid.uuid4()))]


def _identity(data: bytes) -> bytes:
    return data


def _call(
    channel: grpc.Channel, service: Any, method: Any, data: bytes, metadata: list[tuple[str, str]]
) -> list[bytes]:
    """Raw bytes in, raw replies out; raises grpc.RpcError."""
    path = f"/{service.full_name}/{method.name}"
    if method.client_streaming:
        call = channel.stream_stream(path, _identity, _identity)
        return list(call(iter([data]), metadata=metadata, timeout=CALL_TIMEOUT_S))
    if method.server_streaming:
        call = channel.unary_stream(path, _identity, _identity)
        return list(call(data, metadata=metadata, timeout=CALL_TIMEOUT_S))
    call = channel.unary_unary(path, _identity, _identity)
    return [call(data, metadata=metadata, timeout=CALL_TIMEOUT_S)]


def _judge(service: Any, method: Any, channel: grpc.Channel, data: bytes, metadata) -> str:
    """Send one request; fail on a crash-like answer; return the outcome for the tally."""
    try:
        replies = _call(channel, service, method, data, metadata)
    except grpc.RpcError as error:
        failure: grpc.RpcError | None = error
    else:
        failure = None
    if failure is not None:
        code = failure.code()
        assert code not in BAD_GRPC_CODES, (method.name, code, failure.details())
        assert code != grpc.StatusCode.DEADLINE_EXCEEDED, f"{method.name} did not answer"
        return f"grpc {code.name}"
    if service is V2 and not method.client_streaming:
        reply_cls = message_factory.GetMessageClass(method.output_type)
        codes = []
        for raw in replies:
            reply = reply_cls.FromString(raw)
            if reply.HasField("status"):
                codes.append(reply.status.code)
        assert codes, f"{method.name}: no status in {len(replies)} replies"
        for code in codes:
            assert code not in BAD_V2_CODES, (method.name, code, data[:80])
        return f"v2 {Code.Name(codes[0]) if codes[0] in Code.values() else codes[0]}"
    return "ok"


def _methods() -> list[tuple[Any, Any]]:
    found = [(V2, m) for m in V2.methods]
    found += [(ADMIN, m) for m in ADMIN.methods if m.name not in ADMIN_SKIPPED]
    return found


def _still_serving(live: threads.BrokerThread) -> None:
    with grpc.insecure_channel(live.endpoint) as ch:
        status = admin_pb2_grpc.AdminStub(ch).GetStatus(  # type: ignore[no-untyped-call]
            admin_pb2.GetStatusRequest(), timeout=10
        )
    assert status.broker_name
    assert live.broker.phase == "serving"


@pytest.fixture
def quiet_server(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Hostile input must never surface as a logged server error."""
    caplog.set_level(logging.WARNING)
    yield
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith(("gannet", "grpc"))
    ]
    assert errors == []


@pytest.mark.parametrize(("service", "method"), _methods(), ids=lambda x: getattr(x, "name", ""))
def test_random_bytes(live, channel, quiet_server, service, method):
    tally: dict[str, int] = {}

    @SEEDED
    @fuzz_settings(8)
    @given(protos.garbage())
    def check(data: bytes) -> None:
        outcome = _judge(service, method, channel, data, _metadata())
        tally[outcome] = tally.get(outcome, 0) + 1

    check()
    print(method.name, tally)
    _still_serving(live)


@pytest.mark.parametrize(("service", "method"), _methods(), ids=lambda x: getattr(x, "name", ""))
def test_hostile_values(live, channel, quiet_server, service, method):
    tally: dict[str, int] = {}

    @SEEDED
    @fuzz_settings(30)
    @given(st.one_of(protos.hostile(method.input_type), protos.anchored(method.input_type)))
    def check(data: bytes) -> None:
        outcome = _judge(service, method, channel, data, _metadata())
        tally[outcome] = tally.get(outcome, 0) + 1

    check()
    print(method.name, tally)
    _seed(live, [])  # a hostile DeleteTopic may have removed the fixtures' names
    _still_serving(live)


HEADER_VALUES = st.one_of(
    st.text(max_size=80),
    st.sampled_from(
        [
            "MQv2-HMAC-SHA1",
            "MQv2-HMAC-SHA1 ",
            "MQv2-HMAC-SHA1 Credential=root, SignedHeaders=x-mq-date-time, Signature=",
            "MQv2-HMAC-SHA1 Credential=root, SignedHeaders=x-mq-date-time, Signature=zz",
            "MQv2-HMAC-SHA1 Credential=/, SignedHeaders=, Signature=00",
            "MQv2-HMAC-SHA1 ,,,,=,=",
            "MQv2-HMAC-SHA1 Credential=" + "a" * 2000,
        ]
    ),
)
DATE_VALUES = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["20261122T063000Z", "99999999T999999Z", "00010101T000000Z", ""]),
)


def test_hostile_auth_headers(tmp_path: Path, quiet_server):
    accounts = tmp_path / "accounts.json"
    accounts.write_text(
        '{"accounts": [{"access_key": "root", "secret_key": "s", '
        '"allow": [{"actions": ["pub", "sub", "admin"], "topics": ["*"], "groups": ["*"]}]}]}'
    )
    running = _start(tmp_path / "store", auth_file=accounts)
    route = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="FuzzT"))
    try:
        with grpc.insecure_channel(running.endpoint) as ch:

            @SEEDED
            @fuzz_settings(150)
            @given(HEADER_VALUES, DATE_VALUES)
            def check(authorization: str, date_time: str) -> None:
                printable = [
                    ("authorization", "".join(c for c in authorization if " " <= c <= "~")),
                    ("x-mq-date-time", "".join(c for c in date_time if " " <= c <= "~")),
                    *_metadata(),
                ]
                replies = _call(
                    ch, V2, V2.methods_by_name["QueryRoute"], route.SerializeToString(), printable
                )
                reply = service_pb2.QueryRouteResponse.FromString(replies[0])
                assert reply.status.code == Code.UNAUTHORIZED
                assert reply.status.message

            check()
        authenticator = running.broker.authenticator
        assert authenticator is not None
        assert sum(authenticator.denials_total.values()) >= 150
        print(authenticator.denials_total)
    finally:
        running.stop()


def test_regression_telemetry_unknown_client_type(live, channel, quiet_server):
    """Found by test_hostile_values[Telemetry]: an undefined ClientType ended the stream with
    gRPC UNKNOWN (ValueError from ``ClientType.Name``) and a logged traceback."""
    command = service_pb2.TelemetryCommand(
        settings=definition_pb2.Settings(client_type=70, publishing=definition_pb2.Publishing())
    )
    telemetry = V2.methods_by_name["Telemetry"]
    with pytest.raises(grpc.RpcError) as error:
        _call(channel, V2, telemetry, command.SerializeToString(), _metadata())
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "client type 70 with publishing is not served" in (error.value.details() or "")


@st.composite
def _sends(draw: st.DrawFn) -> bytes:
    """SendMessage requests that pass the name checks: hostile system and user properties."""
    properties = protos.hostile(definition_pb2.SystemProperties.DESCRIPTOR, depth=2)
    messages = []
    for i in range(draw(st.integers(1, 3))):
        system = definition_pb2.SystemProperties.FromString(draw(properties))
        if not system.message_id or draw(st.booleans()):
            system.message_id = f"FUZZ{i:04d}"
        messages.append(
            definition_pb2.Message(
                topic=definition_pb2.Resource(name="FuzzT"),
                body=draw(st.binary(min_size=1, max_size=64)),
                system_properties=system,
                user_properties=draw(
                    st.dictionaries(protos.HOSTILE_TEXT, protos.HOSTILE_TEXT, max_size=3)
                ),
            )
        )
    return bytes(service_pb2.SendMessageRequest(messages=messages).SerializeToString())


def test_hostile_sends(live, channel, quiet_server):
    tally: dict[str, int] = {}
    method = V2.methods_by_name["SendMessage"]

    @SEEDED
    @fuzz_settings(60)
    @given(_sends())
    def check(data: bytes) -> None:
        outcome = _judge(V2, method, channel, data, _metadata())
        tally[outcome] = tally.get(outcome, 0) + 1

    check()
    print(tally)
    assert tally.get("v2 OK", 0) > 0  # some reached the store
    _still_serving(live)


def _receipt_handles(channel: grpc.Channel) -> list[str]:
    """Real receipt handles of messages popped from FuzzT by FuzzG."""
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    for i in range(4):
        message = definition_pb2.Message(
            topic=definition_pb2.Resource(name="FuzzT"),
            body=b"r",
            system_properties=definition_pb2.SystemProperties(message_id=f"RH{i}"),
        )
        sent = stub.SendMessage(
            service_pb2.SendMessageRequest(messages=[message]), timeout=10, metadata=_metadata()
        )
        assert sent.status.code == Code.OK
    request = service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name="FuzzG"),
        message_queue=definition_pb2.MessageQueue(
            topic=definition_pb2.Resource(name="FuzzT"), id=-1
        ),
        filter_expression=definition_pb2.FilterExpression(expression="*"),
        batch_size=32,
        invisible_duration=Duration(seconds=60),
        long_polling_timeout=Duration(seconds=1),
    )
    handles: list[str] = []
    for _ in range(5):
        replies = stub.ReceiveMessage(request, metadata=_metadata(), timeout=15)
        handles += [
            r.message.system_properties.receipt_handle for r in replies if r.HasField("message")
        ]
        if handles:
            break
    assert handles, "nothing to receive"
    return handles


@st.composite
def _mutated_handle(draw: st.DrawFn, handles: list[str]) -> str:
    handle = list(draw(st.sampled_from(handles)))
    for _ in range(draw(st.integers(0, 4))):
        pos = draw(st.integers(0, max(0, len(handle) - 1)))
        how = draw(st.sampled_from(["replace", "insert", "delete", "cut"]))
        char = draw(st.sampled_from(list(" 0123456789-_abcfZ\x00é")))
        if how == "replace" and handle:
            handle[pos] = char
        elif how == "insert":
            handle.insert(pos, char)
        elif how == "delete" and handle:
            del handle[pos]
        else:
            del handle[pos:]
    return "".join(handle)


def test_hostile_receipt_handles(live, channel, quiet_server):
    handles = _receipt_handles(channel)
    tally: dict[str, int] = {}
    durations = st.builds(
        Duration,
        seconds=st.sampled_from([-1, 0, 1, 30, 10**9, 2**40]),
        nanos=st.sampled_from([0, 1, 999_999_999]),
    )

    @SEEDED
    @fuzz_settings(60)
    @given(_mutated_handle(handles), st.sampled_from(["ack", "change", "dlq"]), durations)
    def check(handle: str, kind: str, duration: Duration) -> None:
        group = definition_pb2.Resource(name="FuzzG")
        topic = definition_pb2.Resource(name="FuzzT")
        if kind == "ack":
            name = "AckMessage"
            entry = service_pb2.AckMessageEntry(message_id="RH0", receipt_handle=handle)
            request: Any = service_pb2.AckMessageRequest(group=group, topic=topic, entries=[entry])
        elif kind == "change":
            name = "ChangeInvisibleDuration"
            request = service_pb2.ChangeInvisibleDurationRequest(
                group=group,
                topic=topic,
                receipt_handle=handle,
                invisible_duration=duration,
                message_id="RH0",
            )
        else:
            name = "ForwardMessageToDeadLetterQueue"
            request = service_pb2.ForwardMessageToDeadLetterQueueRequest(
                group=group,
                topic=topic,
                receipt_handle=handle,
                message_id="RH0",
                delivery_attempt=duration.seconds % 100,
                max_delivery_attempts=16,
            )
        data = request.SerializeToString()
        outcome = _judge(V2, V2.methods_by_name[name], channel, data, _metadata())
        tally[f"{name} {outcome}"] = tally.get(f"{name} {outcome}", 0) + 1

    check()
    print(tally)
    _still_serving(live)
