"""Authentication and authorization over the wire, with the official Python client.

The broker of this module (``conftest.secured``) requires signatures; refusals must be v2
``UNAUTHORIZED`` / ``FORBIDDEN`` (admin API: gRPC ``UNAUTHENTICATED`` / ``PERMISSION_DENIED``)
with a message naming the problem, and counted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import grpc
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
from rocketmq.v5.exception import ForbiddenException

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol import auth
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import StoreConfig

from .conftest import (
    ADMIN,
    GROUP_A,
    PUB_A,
    QUICK,
    SUB_A,
    TOPIC_A,
    TOPIC_B,
    Signed,
    denials,
    write_accounts,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def started() -> Iterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    for client in clients:
        client.shutdown()


def _config(secured, key: tuple[str, str]) -> ClientConfiguration:
    return ClientConfiguration(secured.endpoint, Credentials(*key), request_timeout=5)


def _message(topic: str, body: bytes) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    return msg


def test_signed_producer_and_consumer_round_trip(secured, started):
    producer = Producer(_config(secured, ADMIN), (TOPIC_A,))
    producer.startup()
    started.append(producer)
    sent = producer.send(_message(TOPIC_A, b"hello")).message_id
    consumer = SimpleConsumer(
        _config(secured, SUB_A), GROUP_A, {TOPIC_A: FilterExpression("*")}, await_duration=0
    )
    consumer.startup()
    started.append(consumer)
    got: list[Any] = []
    for _ in range(20):
        got += consumer.receive(16, 15)
        if any(m.message_id == sent for m in got):
            break
    assert sent in {m.message_id for m in got}
    for m in got:
        consumer.ack(m)


def test_pub_key_sends_to_its_topic_only(secured, started):
    producer = Producer(_config(secured, PUB_A), (TOPIC_A,))
    producer.startup()
    started.append(producer)
    assert producer.send(_message(TOPIC_A, b"ok")).message_id
    before = denials(secured).get("forbidden", 0)
    with pytest.raises(Exception, match="TopicB"):  # the route query was FORBIDDEN
        producer.send(_message(TOPIC_B, b"no"))
    assert denials(secured)["forbidden"] > before


def _refused_producer(secured, started, key: tuple[str, str]) -> None:
    """Startup logs the refused route query; the send then fails for want of a route."""
    producer = Producer(_config(secured, key), (TOPIC_A,))
    started.append(producer)

    def start_and_send() -> None:
        producer.startup()
        producer.send(_message(TOPIC_A, b"no"))

    with pytest.raises(Exception, match="TopicA"):
        start_and_send()


def test_unsigned_client_is_refused(secured, started, caplog):
    before = denials(secured).get("unsigned", 0)
    _refused_producer(secured, started, ("", ""))
    assert denials(secured)["unsigned"] > before
    assert "40100, the request is not signed" in caplog.text


def test_badly_signed_client_is_refused(secured, started, caplog):
    before = denials(secured).get("bad_signature", 0)
    _refused_producer(secured, started, (ADMIN[0], "not-the-secret"))
    assert denials(secured)["bad_signature"] > before
    assert "does not match its secret" in caplog.text


def test_sub_only_key_cannot_send_to_a_nor_read_b(secured, started):
    producer = Producer(_config(secured, SUB_A), (TOPIC_A,))
    producer.startup()  # route and settings need any right on TopicA: sub is one
    started.append(producer)
    before = denials(secured).get("forbidden", 0)
    with pytest.raises(ForbiddenException, match="'sub-a' may not pub topic 'TopicA'"):
        producer.send(_message(TOPIC_A, b"no"))
    consumer = SimpleConsumer(
        _config(secured, SUB_A), GROUP_A, {TOPIC_B: FilterExpression("*")}, await_duration=0
    )
    started.append(consumer)

    def start_and_receive() -> None:  # startup only logs the refused route query
        consumer.startup()
        consumer.receive(16, 15)

    with pytest.raises(Exception, match="TopicB"):
        start_and_receive()
    assert denials(secured)["forbidden"] >= before + 2


def _raw_call(endpoint: str, headers: list[tuple[str, str]]) -> Any:
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=TOPIC_A))
        return stub.QueryRoute(request, metadata=headers, timeout=5)


def _headers(key: tuple[str, str], now_s: float, request_id: str) -> list[tuple[str, str]]:
    return [
        *auth.signed_metadata(*key, now_s),
        ("x-mq-client-id", "raw@1@0@x"),
        ("x-mq-request-id", request_id),
    ]


def test_expired_request_is_refused(secured):
    stale = _headers(ADMIN, time.time() - 3600, "expired-1")
    reply = _raw_call(secured.endpoint, stale)
    assert reply.status.code == Code.UNAUTHORIZED
    assert "off the broker clock" in reply.status.message
    assert "at most 900 s" in reply.status.message


def test_replayed_request_is_refused(secured):
    headers = _headers(ADMIN, time.time(), "replay-1")
    assert _raw_call(secured.endpoint, headers).status.code == Code.OK
    before = denials(secured).get("replayed", 0)
    replayed = _raw_call(secured.endpoint, headers)  # a new connection, the same bytes
    assert replayed.status.code == Code.UNAUTHORIZED
    assert "replayed" in replayed.status.message
    assert denials(secured)["replayed"] == before + 1


def test_hosts_sharing_a_key_are_served_and_a_verbatim_replay_from_elsewhere_is_not(tmp_path):
    """Two source addresses (IPv4 and IPv6 loopback) signing the same second with one key:
    both served; the first call's exact headers sent again from the other address: refused."""
    config = BrokerConfig(
        store=StoreConfig.for_tests(tmp_path / "store"),
        listen_host="::",
        listen_port=0,
        auth_file=write_accounts(tmp_path / "accounts.json"),
    )
    try:
        running = threads.start(config, pop=receiving.factory(QUICK))
    except OSError as exc:
        pytest.skip(f"no dual-stack loopback: {exc}")
    try:
        now_s = time.time()
        v4, v6 = f"127.0.0.1:{running.broker.port}", f"[::1]:{running.broker.port}"
        first = _raw_call(v4, _headers(ADMIN, now_s, "x-1"))
        assert first.status.code == Code.TOPIC_NOT_FOUND  # authenticated; no topics here
        second = _raw_call(v6, _headers(ADMIN, now_s, "x-2"))
        assert second.status.code == Code.TOPIC_NOT_FOUND
        replayed = _raw_call(v6, _headers(ADMIN, now_s, "x-1"))
        assert replayed.status.code == Code.UNAUTHORIZED
        assert "request replayed" in replayed.status.message
    finally:
        running.stop()


def test_admin_api_needs_admin(secured):
    with grpc.insecure_channel(secured.endpoint) as raw:
        unsigned = admin_pb2_grpc.AdminStub(raw)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as error:
            unsigned.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5)
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "not signed" in (error.value.details() or "")
        as_sub = admin_pb2_grpc.AdminStub(grpc.intercept_channel(raw, Signed(*SUB_A)))  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as error:
            as_sub.CreateTopic(admin_pb2.CreateTopicRequest(name="Nope", queue_nums=1), timeout=5)
        assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "'sub-a' may not admin topic 'Nope'" in (error.value.details() or "")
        as_root = admin_pb2_grpc.AdminStub(grpc.intercept_channel(raw, Signed(*ADMIN)))  # type: ignore[no-untyped-call]
        listed = as_root.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5)
        assert {TOPIC_A, TOPIC_B} <= {t.name for t in listed.topics}


def test_telemetry_settings_for_a_foreign_topic_end_the_stream(secured):
    with grpc.insecure_channel(secured.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        command = service_pb2.TelemetryCommand(
            settings=definition_pb2.Settings(
                publishing=definition_pb2.Publishing(topics=[definition_pb2.Resource(name=TOPIC_B)])
            )
        )
        headers = _headers(SUB_A, time.time(), "tele-1")
        with pytest.raises(grpc.RpcError) as error:
            list(stub.Telemetry(iter([command]), metadata=headers, timeout=5))
        assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "may not use topic 'TopicB'" in (error.value.details() or "")


def test_local_time_stamps_are_accepted(secured):
    """The Python client stamps local time with a literal Z; the broker's own zone is UTC here."""
    stamp = datetime.now().strftime(auth.DATE_TIME_FORMAT)
    value = (
        f"MQv2-HMAC-SHA1 Credential={ADMIN[0]}, SignedHeaders=x-mq-date-time, "
        f"Signature={auth.sign(ADMIN[1], stamp)}"
    )
    headers = [
        ("x-mq-date-time", stamp),
        ("authorization", value),
        ("x-mq-client-id", "raw@1@0@x"),
        ("x-mq-request-id", "local-1"),
    ]
    assert _raw_call(secured.endpoint, headers).status.code == Code.OK
    _ = UTC
