"""Resource limits over the wire: per-client in-flight calls, long-polling waiters, message,
batch and request sizes — each refusal a clear error, the broker serving on."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import limits, receiving, sending
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.pop.config import PopConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import StoreConfig

pytestmark = pytest.mark.timeout(60)
TOPIC = "LimitTopic"
EMPTY_TOPIC = "LimitEmptyTopic"  # never written: every poll on it waits
GROUP = "LimitGroup"
POLL_MS = 1_000
REQUEST_BYTES_MAX = 8 * 1024 * 1024


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    config = BrokerConfig(
        store=StoreConfig.for_tests(tmp_path_factory.mktemp("limited")),
        listen_port=0,
        inflight_per_client_max=1,
        receive_message_bytes_max=REQUEST_BYTES_MAX,
    )
    pop = receiving.factory(
        receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=POLL_MS),
        PopConfig(poll_waiters_max=2),
    )
    running = threads.start(config, pop=pop)
    with grpc.insecure_channel(running.endpoint) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        for topic in (TOPIC, EMPTY_TOPIC):
            admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=1))
        admin.CreateGroup(admin_pb2.CreateGroupRequest(name=GROUP))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def stub(limited) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    with grpc.insecure_channel(limited.endpoint, options=options) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def _client(client_id: str) -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id)]


def _resource(name: str) -> definition_pb2.Resource:
    return definition_pb2.Resource(name=name)


def _receive(stub, client_id: str) -> list[service_pb2.ReceiveMessageResponse]:
    request = service_pb2.ReceiveMessageRequest(
        group=_resource(GROUP),
        message_queue=definition_pb2.MessageQueue(topic=_resource(EMPTY_TOPIC), id=-1),
        filter_expression=definition_pb2.FilterExpression(expression="*"),
        batch_size=1,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=POLL_MS // 1000),
    )
    return list(stub.ReceiveMessage(request, metadata=_client(client_id), timeout=20))


def _send_request(body: bytes, count: int = 1) -> service_pb2.SendMessageRequest:
    messages = [
        definition_pb2.Message(
            topic=_resource(TOPIC),
            body=body,
            system_properties=definition_pb2.SystemProperties(message_id=f"ID{i}"),
        )
        for i in range(count)
    ]
    return service_pb2.SendMessageRequest(messages=messages)


def _wait_until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    """The broker exposes no event for "a call is in flight" or "a poll waits"; wait for the
    counter."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_per_client_inflight_cap(limited, stub):
    limiter: limits.InflightPerClient = limited.broker.inflight
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        polling = pool.submit(_receive, stub, "busy-client")
        _wait_until(lambda: limiter.inflight("busy-client") == 1)
        refused = stub.SendMessage(_send_request(b"x"), metadata=_client("busy-client"))
        assert refused.status.code == Code.TOO_MANY_REQUESTS
        assert "'busy-client' has 1 requests in flight; at most 1" in refused.status.message
        other = stub.SendMessage(_send_request(b"x"), metadata=_client("other-client"))
        assert other.status.code == Code.OK
        polling.result(timeout=20)
    assert limiter.inflight("busy-client") == 0
    assert stub.SendMessage(_send_request(b"x"), metadata=_client("busy-client")).status.code == (
        Code.OK
    )


def test_long_polling_waiters_are_bounded(limited, stub):
    """Two waiters at most (PopConfig.poll_waiters_max=2): the third poll is refused."""
    waiters = limited.broker.messaging.pop.pop.waiters
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        waiting = [pool.submit(_receive, stub, f"poller-{i}") for i in range(2)]
        _wait_until(lambda: waiters.waiting() == 2)
        third = _receive(stub, "poller-2")
        statuses = [r.status.code for r in third if r.HasField("status")]
        assert Code.TOO_MANY_REQUESTS in statuses
        for future in waiting:
            future.result(timeout=20)


def test_body_and_batch_limits(stub):
    big = stub.SendMessage(
        _send_request(b"x" * (sending.BODY_SIZE_MAX_BYTES + 1)), metadata=_client("c")
    )
    assert big.status.code == Code.MESSAGE_BODY_TOO_LARGE
    assert str(sending.BODY_SIZE_MAX_BYTES) in big.status.message
    many = stub.SendMessage(
        _send_request(b"x", sending.BATCH_MESSAGES_MAX + 1), metadata=_client("c")
    )
    assert many.status.code == Code.PAYLOAD_TOO_LARGE
    assert str(sending.BATCH_MESSAGES_MAX) in many.status.message


def test_request_size_cap_is_a_grpc_refusal_and_the_broker_serves_on(stub):
    with pytest.raises(grpc.RpcError) as error:
        stub.SendMessage(_send_request(b"x" * (REQUEST_BYTES_MAX + 1)), metadata=_client("c"))
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stub.SendMessage(_send_request(b"ok"), metadata=_client("c")).status.code == Code.OK


def test_limiter_refuses_bad_configuration_and_counts():
    with pytest.raises(ValueError, match="use 1 or more"):
        limits.InflightPerClient(0)
    limiter = limits.InflightPerClient(2)
    limiter.acquire("a")
    limiter.acquire("a")
    with pytest.raises(Exception, match="at most 2 per client"):
        limiter.acquire("a")
    assert limiter.refused_total == 1
    limiter.release("a")
    limiter.release("a")
    assert len(limiter) == 0
    with pytest.raises(RuntimeError, match="release without acquire"):
        limiter.release("a")
