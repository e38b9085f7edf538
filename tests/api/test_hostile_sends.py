"""Hostile SendMessage fields over the wire: refused before any queue offset is reserved, and
the doubtful inputs of issue 21 answered with the v2 code that names the field."""

from __future__ import annotations

import gzip
import hashlib
import zlib

import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.store.log import records
from gannet.node.store.upkeep import verifying

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
    from gannet.node.protocol.gen import admin_pb2

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


def _gzip_body(raw: bytes) -> bytes:
    return gzip.compress(raw)


@pytest.mark.parametrize(
    ("change", "code", "mentions"),
    [
        ({"message_type": 99}, Code.BAD_REQUEST, "message_type 99"),
        ({"message_type": definition_pb2.FIFO}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "FIFO"),
        ({"message_type": definition_pb2.LITE}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "LITE"),
        ({"body_encoding": definition_pb2.GZIP}, Code.MESSAGE_CORRUPTED, "GZIP"),
        ({"body_encoding": 7}, Code.BAD_REQUEST, "body_encoding 7"),
        ({"digest": (definition_pb2.MD5, "00" * 16)}, Code.MESSAGE_CORRUPTED, "body_digest"),
        ({"digest": (definition_pb2.CRC32, "DEADBEEF")}, Code.MESSAGE_CORRUPTED, "body_digest"),
        ({"digest": (9, "x")}, Code.BAD_REQUEST, "body_digest.type 9"),
        ({"message_id": "A" * 10_240}, Code.ILLEGAL_MESSAGE_ID, "10240 characters"),
        ({"message_id": "01AA\x00BB"}, Code.ILLEGAL_MESSAGE_ID, "U+0000"),
        ({"message_id": "01AA\x01BB"}, Code.ILLEGAL_MESSAGE_ID, "U+0001"),
        ({"message_id": "01 AA"}, Code.ILLEGAL_MESSAGE_ID, "U+0020"),
        ({"tag": "t" * 10_240}, Code.ILLEGAL_MESSAGE_TAG, "tag"),
        (
            {"user": {"__STARTDELIVERTIME": "1"}},
            Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
            "__STARTDELIVERTIME",
        ),
        ({"user": {"__SHARDINGKEY": "g"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "__SHARDINGKEY"),
        ({"user": {"TRACE_CONTEXT": "t"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "TRACE_CONTEXT"),
    ],
)
def test_doubtful_fields_are_refused(broker, messaging, make_topic, change, code, mentions):
    """Issue 21 item 4: each was stored with OK before; now refused, naming the field, and the
    queue's next offset does not move."""
    topic = make_topic(queues=1)
    request = _request(topic, body=b"plain, not gzip")
    msg = request.messages[0]
    sp = msg.system_properties
    for name, value in change.items():
        if name == "digest":
            sp.body_digest.type, sp.body_digest.checksum = value
        elif name == "user":
            msg.user_properties.update(value)
        else:
            setattr(sp, name, value)
    reply = _send(messaging, request)
    assert reply.status.code == code, reply.status
    assert mentions in reply.status.message
    assert len(reply.status.message) < 600
    assert broker.broker.store.max_offset_in_queue(topic, 0) == 0


@pytest.mark.parametrize(
    "change",
    [
        {"message_type": definition_pb2.NORMAL},
        {"message_type": definition_pb2.MESSAGE_TYPE_UNSPECIFIED},
        {"body_encoding": definition_pb2.ENCODING_UNSPECIFIED},
        {"gzip": True},
        {"zlib": True},
        {"digest": (definition_pb2.MD5, hashlib.md5(b"payload").hexdigest().upper())},
        {"digest": (definition_pb2.MD5, hashlib.md5(b"payload").hexdigest())},
        {"digest": (definition_pb2.SHA1, hashlib.sha1(b"payload").hexdigest().upper())},
        {"digest": (definition_pb2.CRC32, f"{zlib.crc32(b'payload'):08X}")},
        {"message_id": "0102FC000000013E000B13F97D00000000"},
        {"message_id": "M" * 128},
        {"tag": "t" * 256},
    ],
)
def test_sound_fields_are_stored(broker, messaging, make_topic, change):
    topic = make_topic(queues=1)
    body = b"payload"
    if change.pop("gzip", False):
        body = _gzip_body(body)
        change["body_encoding"] = definition_pb2.GZIP
    if change.pop("zlib", False):
        body = zlib.compress(body)
        change["body_encoding"] = definition_pb2.GZIP
    request = _request(topic, body=body)
    sp = request.messages[0].system_properties
    for name, value in change.items():
        if name == "digest":
            sp.body_digest.type, sp.body_digest.checksum = value
        else:
            setattr(sp, name, value)
    reply = _send(messaging, request)
    assert reply.status.code == Code.OK, reply.status


def test_gzip_bomb_is_refused_without_inflating_it_whole(messaging, make_topic) -> None:
    topic = make_topic(queues=1)
    bomb = zlib.compress(bytes(80 * 1024 * 1024), 9)  # 80 MiB of zeros in ~80 KB
    request = _request(topic, body=bomb)
    request.messages[0].system_properties.body_encoding = definition_pb2.GZIP
    reply = _send(messaging, request)
    assert reply.status.code == Code.MESSAGE_BODY_TOO_LARGE, reply.status
    assert "inflates" in reply.status.message
