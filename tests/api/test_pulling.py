"""PullMessage over the wire: messages sent by the official Producer pulled back by queue
offset with every field, batches, tag filters, long polling, and bad requests' codes."""

from __future__ import annotations

import concurrent.futures
import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import pulling
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

from .conftest import _WithClientId, settle, unique

PULL_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def producer(broker: threads.BrokerThread) -> Iterator[Producer]:
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    started = Producer(config)
    started.startup()
    yield started
    started.shutdown()


def _queue(topic: str, queue_id: int) -> definition_pb2.MessageQueue:
    return definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic), id=queue_id)


def _pull(
    messaging: service_pb2_grpc.MessagingServiceStub,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    batch_size: int = 32,
    expression: str = "*",
    group: str = "",
    polling_ms: int = 0,
) -> list[service_pb2.PullMessageResponse]:
    request = service_pb2.PullMessageRequest(
        group=definition_pb2.Resource(name=group),
        message_queue=_queue(topic, queue_id),
        offset=offset,
        batch_size=batch_size,
        filter_expression=definition_pb2.FilterExpression(
            type=definition_pb2.TAG, expression=expression
        ),
        long_polling_timeout=Duration(seconds=polling_ms // 1000, nanos=polling_ms % 1000 * 10**6),
    )
    return list(messaging.PullMessage(request, timeout=PULL_TIMEOUT_S))


def _parts(
    frames: list[service_pb2.PullMessageResponse],
) -> tuple[definition_pb2.Status, list[definition_pb2.Message], int]:
    """(status, messages, next_offset), checking the frame order status, messages*, offset."""
    kinds = [f.WhichOneof("content") for f in frames]
    assert kinds[0] == "status"
    assert kinds[-1] == "next_offset"
    assert set(kinds[1:-1]) <= {"message"}
    return frames[0].status, [f.message for f in frames[1:-1]], frames[-1].next_offset


def _send_raw(
    messaging: service_pb2_grpc.MessagingServiceStub, topic: str, bodies: list[bytes], tag: str
) -> list[service_pb2.SendResultEntry]:
    messages = [
        definition_pb2.Message(
            topic=definition_pb2.Resource(name=topic),
            body=body,
            system_properties=definition_pb2.SystemProperties(
                message_id=uuid.uuid4().hex.upper(), tag=tag
            ),
        )
        for body in bodies
    ]
    reply = messaging.SendMessage(service_pb2.SendMessageRequest(messages=messages), timeout=10)
    assert reply.status.code == Code.OK, reply.status.message
    return list(reply.entries)


def test_pulls_back_what_the_official_producer_sent_with_all_fields(
    broker, messaging, make_topic, producer
) -> None:
    topic = make_topic(queues=1)
    born_ms = time.time_ns() // 1_000_000
    receipts = []
    for i in range(3):
        msg = Message()
        msg.topic = topic
        msg.body = f"body {i}".encode()
        msg.tag = "TagA"
        msg.keys = f"k{i}"
        msg.keys = "common"
        msg.add_property("color", "blue")
        receipts.append(producer.send(msg))
    settle(broker)
    status, messages, next_offset = _parts(_pull(messaging, topic, 0, 0))
    assert status.code == Code.OK
    assert next_offset == 3
    assert [m.body for m in messages] == [b"body 0", b"body 1", b"body 2"]
    for i, (message, receipt) in enumerate(zip(messages, receipts, strict=True)):
        sp = message.system_properties
        assert message.topic.name == topic
        assert sp.message_id == receipt.message_id
        assert sp.queue_id == 0
        assert sp.queue_offset == receipt.offset == i
        assert sp.tag == "TagA"
        assert sorted(sp.keys) == sorted([f"k{i}", "common"])
        assert dict(message.user_properties) == {"color": "blue"}
        assert sp.body_encoding == definition_pb2.IDENTITY
        assert sp.body_digest.checksum == hashlib.md5(message.body).hexdigest().upper()
        assert sp.message_type == definition_pb2.NORMAL
        assert born_ms // 1000 - 1 <= sp.born_timestamp.seconds <= time.time() + 1
        assert sp.store_timestamp.seconds >= sp.born_timestamp.seconds - 1
        assert not sp.HasField("receipt_handle")
    # At the end: nothing, and next_offset stays.
    status, messages, next_offset = _parts(_pull(messaging, topic, 0, 3))
    assert status.code == Code.MESSAGE_NOT_FOUND
    assert (messages, next_offset) == ([], 3)


def test_batches_follow_next_offset_without_gaps(broker, messaging, make_topic) -> None:
    topic = make_topic(queues=1)
    bodies = [f"m{i}".encode() for i in range(25)]
    _send_raw(messaging, topic, bodies, "T")
    settle(broker)
    seen: list[bytes] = []
    offset = 0
    while True:
        status, messages, offset = _parts(_pull(messaging, topic, 0, offset, batch_size=7))
        if status.code == Code.MESSAGE_NOT_FOUND:
            break
        assert len(messages) <= 7
        seen.extend(m.body for m in messages)
    assert seen == bodies
    assert offset == 25


def test_tag_filter_skips_other_tags_and_advances(broker, messaging, make_topic) -> None:
    topic = make_topic(queues=1)
    _send_raw(messaging, topic, [b"a1", b"a2"], "A")
    _send_raw(messaging, topic, [b"b1"], "B")
    _send_raw(messaging, topic, [b"a3"], "A")
    settle(broker)
    status, messages, next_offset = _parts(_pull(messaging, topic, 0, 0, expression="B"))
    assert status.code == Code.OK
    assert [m.body for m in messages] == [b"b1"]
    assert messages[0].system_properties.queue_offset == 2
    assert next_offset == 4
    status, messages, next_offset = _parts(_pull(messaging, topic, 0, 3, expression="B"))
    assert status.code == Code.MESSAGE_NOT_FOUND
    assert next_offset == 4  # the filtered-out unit is not scanned again


def test_long_poll_wakes_when_a_message_arrives(broker, messaging, make_topic) -> None:
    topic = make_topic(queues=1)
    pulled: list[list[service_pb2.PullMessageResponse]] = []
    puller = threading.Thread(
        target=lambda: pulled.append(_pull(messaging, topic, 0, 0, polling_ms=15_000))
    )
    started = time.monotonic()
    puller.start()
    _send_raw(messaging, topic, [b"late"], "T")
    puller.join(PULL_TIMEOUT_S)
    assert not puller.is_alive()
    status, messages, next_offset = _parts(pulled[0])
    assert status.code == Code.OK
    assert [m.body for m in messages] == [b"late"]
    assert next_offset == 1
    assert time.monotonic() - started < 10  # woken by the arrival, not by the 15 s timeout


def test_long_poll_ends_empty_after_its_timeout(messaging, make_topic) -> None:
    topic = make_topic(queues=1)
    started = time.monotonic()
    status, messages, next_offset = _parts(_pull(messaging, topic, 0, 0, polling_ms=300))
    assert time.monotonic() - started >= 0.3
    assert status.code == Code.MESSAGE_NOT_FOUND
    assert (messages, next_offset) == ([], 0)


def test_query_offset_policies_give_the_pull_range(broker, messaging, make_topic) -> None:
    topic = make_topic(queues=1)
    before = Timestamp()
    before.GetCurrentTime()
    _send_raw(messaging, topic, [b"x", b"y"], "T")
    settle(broker)

    def query(policy: int, timestamp: Timestamp | None = None) -> int:
        reply = messaging.QueryOffset(
            service_pb2.QueryOffsetRequest(
                message_queue=_queue(topic, 0), query_offset_policy=policy, timestamp=timestamp
            ),
            timeout=10,
        )
        assert reply.status.code == Code.OK, reply.status.message
        return int(reply.offset)

    assert query(definition_pb2.BEGINNING) == 0
    assert query(definition_pb2.END) == 2
    assert query(definition_pb2.TIMESTAMP, before) == 0


@pytest.mark.parametrize(
    ("offset", "queue_id", "batch_size", "code"),
    [
        (-1, 0, 8, Code.ILLEGAL_OFFSET),
        (3, 0, 8, Code.ILLEGAL_OFFSET),  # past the end (max is 2)
        (0, 9, 8, Code.BAD_REQUEST),  # no such queue
        (0, 0, 0, Code.BAD_REQUEST),  # batch_size 0
    ],
)
def test_bad_requests_get_one_status_frame(
    broker, messaging, make_topic, offset, queue_id, batch_size, code
) -> None:
    topic = make_topic(queues=1)
    _send_raw(messaging, topic, [b"x", b"y"], "T")
    settle(broker)
    frames = _pull(messaging, topic, queue_id, offset, batch_size=batch_size)
    assert len(frames) == 1
    assert frames[0].status.code == code
    if code == Code.ILLEGAL_OFFSET:
        assert "0..2" in frames[0].status.message


def test_unknown_topic_group_and_bad_filter_are_named(
    messaging, admin: admin_pb2_grpc.AdminStub, make_topic
) -> None:
    topic = make_topic(queues=1)
    frames = _pull(messaging, unique("Nope"), 0, 0)
    assert [f.status.code for f in frames] == [Code.TOPIC_NOT_FOUND]
    frames = _pull(messaging, topic, 0, 0, group=unique("G"))
    assert [f.status.code for f in frames] == [Code.CONSUMER_GROUP_NOT_FOUND]
    group = unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    frames = _pull(messaging, topic, 0, 0, group=group)
    assert frames[0].status.code == Code.MESSAGE_NOT_FOUND
    frames = _pull(messaging, topic, 0, 0, expression="||")
    assert [f.status.code for f in frames] == [Code.ILLEGAL_FILTER_EXPRESSION]


def _wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_broker_shutdown_ends_a_waiting_pull_at_once(tmp_path: Path) -> None:
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    running = threads.start(BrokerConfig(store=store, listen_port=0))
    try:
        messaging_servicer = running.broker.messaging
        assert messaging_servicer is not None
        with grpc.insecure_channel(running.endpoint) as plain:
            admin = admin_pb2_grpc.AdminStub(plain)  # type: ignore[no-untyped-call]
            admin.CreateTopic(admin_pb2.CreateTopicRequest(name="T", queue_nums=1))
            with_id = grpc.intercept_channel(plain, _WithClientId())
            stub = service_pb2_grpc.MessagingServiceStub(with_id)
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                parked = pool.submit(_pull, stub, "T", 0, 0, polling_ms=15_000)
                _wait_until(lambda: pulling.waiting_pulls(messaging_servicer) == 1)
                started = time.monotonic()
                stopping = pool.submit(running.stop)
                status, messages, next_offset = _parts(parked.result(timeout=10))
                assert time.monotonic() - started < 5  # not the 15 s poll
                assert status.code == Code.MESSAGE_NOT_FOUND
                assert (messages, next_offset) == ([], 0)
                stopping.result(timeout=15)
    finally:
        running.stop()
