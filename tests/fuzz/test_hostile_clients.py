"""A hostile client against one live broker, with raw v2 and admin stubs on 127.0.0.1.

Each attack is bounded in count and time (the module takes a few seconds). After every attack
the suite checks the broker's health, not just its answers:

* it is serving, and a normal send → receive → ack round trip takes under a second;
* no answer was INTERNAL_ERROR / INTERNAL_SERVER_ERROR / gRPC UNKNOWN / INTERNAL;
* nothing was logged at ERROR and no traceback was logged at any level;
* resident memory grew by at most :data:`RSS_GROWTH_MAX_BYTES` over the whole run;
* ``store verify`` finds the store clean, and every message a producer was answered OK for is
  at the queue offset it was told, with its body.

Attacks: garbage bytes and garbage protobuf on every v2 method, born timestamps of int64
min/max between good sends on a one-queue topic, forged receipt handles (ack, change invisible
time, dead-letter), 19,760-character names on every admin and v2 method, the doubtful fields of
issue 21 (message type 99, GZIP with a plain body, a wrong digest, 10 KB id and tag, NUL in an
id, ``__STARTDELIVERTIME``), a burst of concurrent long polls and of idle connections.
"""

from __future__ import annotations

import concurrent.futures
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log import records
from gannet.node.store.upkeep import verifying

from .conftest import FUZZ_SEED

pytestmark = pytest.mark.timeout(120)
V2 = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
ADMIN = admin_pb2.DESCRIPTOR.services_by_name["Admin"]
QUICK = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=300)
BAD_V2 = {Code.INTERNAL_ERROR, Code.INTERNAL_SERVER_ERROR}
BAD_GRPC = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.RESOURCE_EXHAUSTED}
ROUND_TRIP_S_MAX = 1.0
RSS_GROWTH_MAX_BYTES = 96 * 1024 * 1024
LONG = "N" * 19_760
TOPIC, HOLE_TOPIC, GROUP = "HcT", "HcHole", "HcG"


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _metadata() -> list[tuple[str, str]]:
    return [("x-mq-client-id", "hostile@1@0@x"), ("x-mq-request-id", str(uuid.uuid4()))]


@dataclass
class Run:
    """The live broker, its stubs and what producers were told."""

    broker: threads.BrokerThread
    channel: grpc.Channel
    v2: service_pb2_grpc.MessagingServiceStub
    admin: admin_pb2_grpc.AdminStub
    told: list[tuple[str, int, int, bytes]] = field(default_factory=list)
    bad_answers: list[str] = field(default_factory=list)
    sequence: int = 0

    def note_v2(self, what: str, code: int) -> None:
        if code in BAD_V2 or code == 0:
            self.bad_answers.append(f"{what}: v2 {code}")

    def note_grpc(self, what: str, error: grpc.RpcError) -> None:
        if error.code() in BAD_GRPC:
            self.bad_answers.append(f"{what}: grpc {error.code()} {(error.details() or '')[:120]}")

    def send(self, topic: str, body: bytes, **system: Any) -> service_pb2.SendMessageResponse:
        self.sequence += 1
        msg = definition_pb2.Message(body=body)
        msg.topic.name = topic
        sp = msg.system_properties
        sp.message_id = f"01HC{self.sequence:08d}"
        sp.message_type = definition_pb2.NORMAL
        sp.body_encoding = definition_pb2.IDENTITY
        for name, value in system.items():
            if name == "born_seconds":
                sp.born_timestamp.seconds = value
            elif name == "user":
                msg.user_properties.update(value)
            elif name == "digest":
                sp.body_digest.type, sp.body_digest.checksum = value
            else:
                setattr(sp, name, value)
        reply = self.v2.SendMessage(
            service_pb2.SendMessageRequest(messages=[msg]), timeout=5, metadata=_metadata()
        )
        self.note_v2("SendMessage", reply.status.code)
        if reply.status.code == Code.OK:
            entry = reply.entries[0]
            queue_id = self._queue_of(topic, sp.message_id)
            self.told.append((topic, queue_id, entry.offset, body))
        return reply

    def _queue_of(self, topic: str, message_id: str) -> int:
        """The queue the broker chose (the answer carries only the offset)."""
        store = self.broker.broker.store
        assert store.wait_dispatched(store.commitlog.max_offset(), timeout_s=5)
        for queue_id in range(8):
            hi = store.max_offset_in_queue(topic, queue_id)
            got = store.get_messages(topic, queue_id, max(0, hi - 1), 1)
            for m in got.messages:
                if records.decode(m.data).uniq_key == message_id:
                    return queue_id
        raise AssertionError(f"{message_id} answered OK but not found in {topic}")

    def receive(self, topic: str, batch: int = 1, timeout_s: float = 5.0) -> list[Any]:
        request = service_pb2.ReceiveMessageRequest(batch_size=batch)
        request.group.name = GROUP
        request.message_queue.topic.name = topic
        request.message_queue.id = -1
        request.filter_expression.expression = "*"
        request.invisible_duration.FromSeconds(30)
        request.long_polling_timeout.FromMilliseconds(300)
        frames = list(self.v2.ReceiveMessage(request, timeout=timeout_s, metadata=_metadata()))
        for f in frames:
            if f.HasField("status"):
                self.note_v2("ReceiveMessage", f.status.code)
        return [f.message for f in frames if f.HasField("message")]

    def ack(self, topic: str, message: Any) -> int:
        request = service_pb2.AckMessageRequest()
        request.group.name = GROUP
        request.topic.name = topic
        request.entries.add(
            message_id=message.system_properties.message_id,
            receipt_handle=message.system_properties.receipt_handle,
        )
        reply = self.v2.AckMessage(request, timeout=5, metadata=_metadata())
        self.note_v2("AckMessage", reply.status.code)
        return int(reply.status.code)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("hostile")
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    broker = threads.start(BrokerConfig(store=store, listen_port=0), pop=receiving.factory(QUICK))
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    channel = grpc.insecure_channel(broker.endpoint, options=options)
    admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
    for name in (TOPIC, HOLE_TOPIC):
        queues = 1 if name == HOLE_TOPIC else 2
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=name, queue_nums=queues), timeout=5)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=GROUP), timeout=5)
    try:
        yield Run(broker, channel, service_pb2_grpc.MessagingServiceStub(channel), admin)
    finally:
        channel.close()
        broker.stop()


def _round_trip(run: Run) -> None:
    """Send, receive and ack one message: under a second, everything OK."""
    drained = run.receive(TOPIC, batch=32)  # leftovers of attacks, acked out of the way
    for m in drained:
        run.ack(TOPIC, m)
    body = f"round-trip {run.sequence}".encode()
    started = time.monotonic()
    sent = run.send(TOPIC, body)
    assert sent.status.code == Code.OK, sent.status
    got: list[Any] = []
    while not got and time.monotonic() - started < ROUND_TRIP_S_MAX:
        got = [m for m in run.receive(TOPIC, batch=32) if m.body == body]
    assert got, "the round-trip message was not received"
    assert run.ack(TOPIC, got[0]) == Code.OK
    elapsed = time.monotonic() - started
    assert elapsed < ROUND_TRIP_S_MAX, f"round trip took {elapsed:.2f} s"


def _check_health(run: Run, caplog: pytest.LogCaptureFixture, rss_start: int) -> None:
    assert run.broker.broker.phase == "serving"
    _round_trip(run)
    assert run.bad_answers == []
    noisy = [
        f"{r.name}: {r.getMessage()[:200]}"
        for r in caplog.records
        if r.name.startswith(("gannet", "grpc"))
        and (r.levelno >= logging.ERROR or r.exc_info is not None or "Traceback" in r.getMessage())
    ]
    assert noisy == []
    store = run.broker.broker.store
    assert store.wait_dispatched(store.commitlog.max_offset(), timeout_s=5)
    report = verifying.verify(store.config.root_dir)
    assert report.damage == []
    for topic, queue_id, offset, body in run.told:
        got = store.get_messages(topic, queue_id, offset, 1)
        assert got.messages, f"{topic}/{queue_id} offset {offset}: told OK, not there"
        stored = records.decode(got.messages[0].data)
        assert (got.messages[0].queue_offset, stored.queue_offset, stored.body) == (
            offset,
            offset,
            body,
        )
    growth = _rss_bytes() - rss_start
    assert growth < RSS_GROWTH_MAX_BYTES, f"RSS grew by {growth >> 20} MiB"


# ------------------------------------------------------------------------------- attacks


def _raw(run: Run, method: Any, data: bytes) -> None:
    path = f"/{V2.full_name}/{method.name}"
    try:
        if method.client_streaming:
            call = run.channel.stream_stream(path, lambda b: b, lambda b: b)
            list(call(iter([data]), timeout=5, metadata=_metadata()))
        elif method.server_streaming:
            stream = run.channel.unary_stream(path, lambda b: b, lambda b: b)
            list(stream(data, timeout=5, metadata=_metadata()))
        else:
            unary = run.channel.unary_unary(path, lambda b: b, lambda b: b)
            raw = unary(data, timeout=5, metadata=_metadata())
            reply_cls = service_pb2.__dict__[method.output_type.name]
            run.note_v2(method.name, reply_cls.FromString(raw).status.code)
    except grpc.RpcError as error:
        run.note_grpc(method.name, error)


def attack_garbage_bytes(run: Run) -> None:
    rng = random.Random(FUZZ_SEED)
    for method in V2.methods:
        for size in (1, 7, 300):
            _raw(run, method, rng.randbytes(size))


def attack_garbage_protobuf(run: Run) -> None:
    """Well-formed wire bytes of random fields (varints, lengths, nested garbage)."""
    rng = random.Random(FUZZ_SEED + 1)
    for method in V2.methods:
        for _ in range(3):
            parts = []
            for _ in range(rng.randint(1, 6)):
                number = rng.randint(1, 20)
                if rng.random() < 0.5:
                    parts.append(bytes([number << 3 | 0]) + bytes([0xFF] * 9 + [0x01]))
                else:
                    payload = rng.randbytes(rng.randint(0, 40))
                    parts.append(bytes([number << 3 | 2, len(payload)]) + payload)
            _raw(run, method, b"".join(parts))


def attack_born_timestamps(run: Run) -> None:
    """Issue 21.1: int64 min/max born times between good sends on a one-queue topic."""
    offsets = []
    for i in range(6):
        if i in (2, 4):
            seconds = -(2**63) if i == 2 else 2**63 - 1
            reply = run.send(HOLE_TOPIC, b"bad", born_seconds=seconds)
            assert reply.status.code == Code.BAD_REQUEST
        else:
            reply = run.send(HOLE_TOPIC, f"good {i}".encode())
            offsets.append(reply.entries[0].offset)
    assert offsets == sorted(offsets)
    assert offsets[1:] == [o + 1 for o in offsets[:-1]]  # no hole


def attack_forged_receipts(run: Run) -> None:
    """Issue 21.2: forged first fields for ack, change invisible time and DLQ; the genuine
    handle acks afterwards."""
    run.send(TOPIC, b"to forge")
    got = run.receive(TOPIC, batch=32)
    assert got
    for message in got:
        genuine = message.system_properties.receipt_handle
        rest = genuine.split(" ")[1:]
        for first in ("9223372036854775808", "1" * 40):
            forged = " ".join([first, *rest])
            ack = service_pb2.AckMessageRequest()
            ack.group.name, ack.topic.name = GROUP, TOPIC
            ack.entries.add(message_id="x", receipt_handle=forged)
            code = run.v2.AckMessage(ack, timeout=5, metadata=_metadata()).status.code
            assert code == Code.INVALID_RECEIPT_HANDLE
            change = service_pb2.ChangeInvisibleDurationRequest(
                receipt_handle=forged, invisible_duration=Duration(seconds=10), message_id="x"
            )
            change.group.name, change.topic.name = GROUP, TOPIC
            reply = run.v2.ChangeInvisibleDuration(change, timeout=5, metadata=_metadata())
            assert reply.status.code == Code.INVALID_RECEIPT_HANDLE
            dlq = service_pb2.ForwardMessageToDeadLetterQueueRequest(
                receipt_handle=forged, message_id="x", delivery_attempt=1, max_delivery_attempts=2
            )
            dlq.group.name, dlq.topic.name = GROUP, TOPIC
            answer = run.v2.ForwardMessageToDeadLetterQueue(dlq, timeout=5, metadata=_metadata())
            assert answer.status.code == Code.INVALID_RECEIPT_HANDLE
        assert run.ack(TOPIC, message) == Code.OK


def _fill(message: Any, depth: int = 0) -> None:
    for f in message.DESCRIPTOR.fields:
        value = getattr(message, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            continue
        if f.type == descriptor.FieldDescriptor.TYPE_STRING:
            if f.is_repeated:
                value.append(LONG)
            else:
                setattr(message, f.name, LONG)
        elif f.type == descriptor.FieldDescriptor.TYPE_MESSAGE and depth < 2:
            if f.is_repeated:
                _fill(value.add(), depth + 1)
            elif not f.message_type.full_name.startswith("google.protobuf"):
                _fill(value, depth + 1)


def attack_long_names(run: Run) -> None:
    """Issue 21.3: 19,760-character strings everywhere; answers stay short."""
    for service, module in ((ADMIN, admin_pb2), (V2, service_pb2)):
        for method in service.methods:
            if method.name in ("TransferLeadership", "Telemetry") or method.server_streaming:
                continue
            request = module.__dict__[method.input_type.name]()
            _fill(request)
            call = run.channel.unary_unary(
                f"/{service.full_name}/{method.name}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=lambda b: b,
            )
            try:
                raw = call(request, timeout=10, metadata=_metadata())
            except grpc.RpcError as error:
                run.note_grpc(method.name, error)
                if len(error.details() or "") >= 1200:
                    run.bad_answers.append(f"{method.name}: {len(error.details())}-char details")
                continue
            if service is V2:
                reply = module.__dict__[method.output_type.name].FromString(raw)
                run.note_v2(method.name, reply.status.code)
                assert len(reply.status.message) < 1200, method.name


def attack_doubtful_fields(run: Run) -> None:
    """Issue 21.4: each refused with its code; nothing stored."""
    cases: list[tuple[dict[str, Any], int]] = [
        ({"message_type": 99}, Code.BAD_REQUEST),
        ({"body_encoding": definition_pb2.GZIP}, Code.MESSAGE_CORRUPTED),
        ({"digest": (definition_pb2.MD5, "0" * 32)}, Code.MESSAGE_CORRUPTED),
        ({"message_id": "I" * 10_240}, Code.ILLEGAL_MESSAGE_ID),
        ({"tag": "t" * 10_240}, Code.ILLEGAL_MESSAGE_TAG),
        ({"message_id": "01\x0002"}, Code.ILLEGAL_MESSAGE_ID),
        ({"user": {"__STARTDELIVERTIME": "0"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ]
    store = run.broker.broker.store
    before = store.max_offset_in_queue(HOLE_TOPIC, 0)
    for fields, code in cases:
        assert run.send(HOLE_TOPIC, b"doubtful", **fields).status.code == code, fields
    assert store.max_offset_in_queue(HOLE_TOPIC, 0) == before


def attack_concurrent_polls(run: Run) -> None:
    """32 long polls at once on a topic with nothing to receive."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda _: run.receive(HOLE_TOPIC, timeout_s=10), range(32)))
    assert all(isinstance(r, list) for r in results)
    for messages in results:  # whatever was there (doubtful sends stored nothing)
        for m in messages:
            run.ack(HOLE_TOPIC, m)


def attack_idle_connections(run: Run) -> None:
    """100 connections opened, made ready and left idle, then dropped."""
    channels = [grpc.insecure_channel(run.broker.endpoint) for _ in range(100)]
    try:
        for ch in channels:
            grpc.channel_ready_future(ch).result(timeout=5)
    finally:
        for ch in channels:
            ch.close()


ATTACKS: list[Callable[[Run], None]] = [
    attack_garbage_bytes,
    attack_garbage_protobuf,
    attack_born_timestamps,
    attack_forged_receipts,
    attack_long_names,
    attack_doubtful_fields,
    attack_concurrent_polls,
    attack_idle_connections,
]


@pytest.fixture(scope="module")
def rss_start(run: Run) -> int:
    _round_trip(run)  # warm up before measuring
    return _rss_bytes()


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.__name__.removeprefix("attack_"))
def test_attack_leaves_the_broker_healthy(
    run: Run, rss_start: int, caplog: pytest.LogCaptureFixture, attack: Callable[[Run], None]
) -> None:
    caplog.set_level(logging.DEBUG, logger="gannet")
    print(f"fuzz seed {FUZZ_SEED}")
    attack(run)
    _check_health(run, caplog, rss_start)
