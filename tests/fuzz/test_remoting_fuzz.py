"""Fuzz the remoting protocol: its frame decoder, the batch and property decoders, and a LIVE
broker's remoting port.

Contract of the decoders: any input decodes or raises their own error (``FrameError``,
``BadMessage``), never anything else; encode then decode gives the command back, in both header
serializations. Contract of the port: every frame is answered or closes its connection, nothing
is logged at ERROR (the dispatcher's answer to an uncaught exception), and the port serves a
plain request afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.remoting import codec, codes, messages
from gannet.node.remoting.codec import Command
from gannet.node.store.config import FlushMode, StoreConfig
from tests.remoting.client import RawClient

from .conftest import SEEDED, fuzz_settings

pytestmark = pytest.mark.timeout(120)
SMALL = codec.Limits(frame_bytes_max=4096, header_bytes_max=1024)
TEXT = st.text(max_size=30)
CODES = st.one_of(st.sampled_from(sorted(codes.NAMES)), st.integers(-(2**15), 2**15 - 1))


@st.composite
def commands(draw: st.DrawFn) -> Command:
    return Command(
        code=draw(st.integers(0, 2**16 - 1)),
        opaque=draw(st.integers(-(2**31), 2**31 - 1)),
        flag=draw(st.integers(0, 3)),
        remark=draw(st.one_of(st.none(), st.text(min_size=1, max_size=40))),
        ext=draw(st.dictionaries(st.text(max_size=20), TEXT, max_size=8)),
        body=draw(st.binary(max_size=200)),
        language=draw(st.sampled_from(codec.LANGUAGES)),
        version=draw(st.integers(0, 2**16 - 1)),
        serialize_type=draw(st.sampled_from([codec.SERIALIZE_JSON, codec.SERIALIZE_ROCKETMQ])),
    )


@SEEDED
@fuzz_settings(300)
@given(commands())
def test_encode_then_decode_gives_the_command_back(command: Command) -> None:
    frame = codec.encode(command)
    length = codec.frame_length(frame[:4])
    assert length == len(frame) - 4
    assert codec.decode_frame(frame[4:]) == command


def _mutated(frame: bytes, position: int, value: int) -> bytes:
    if not frame:
        return frame
    i = position % len(frame)
    return frame[:i] + bytes([value]) + frame[i + 1 :]


@SEEDED
@fuzz_settings(400)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.builds(
            _mutated,
            commands().map(lambda c: codec.encode(c)[4:]),
            st.integers(0, 10_000),
            st.integers(0, 255),
        ),
        st.builds(
            lambda m, rest: struct.pack(">I", m) + rest,
            st.integers(0, 2**32 - 1),
            st.binary(max_size=64),
        ),
    )
)
def test_the_decoder_decodes_or_refuses_by_name(frame: bytes) -> None:
    try:
        command = codec.decode_frame(frame, SMALL)
    except codec.FrameError as exc:
        message = str(exc)
        assert message  # every refusal names what is wrong
        return
    assert isinstance(command.ext, dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in command.ext.items())


@SEEDED
@fuzz_settings(200)
@given(st.binary(min_size=4, max_size=4))
def test_frame_lengths_are_checked_against_the_limit(prefix: bytes) -> None:
    (raw,) = struct.unpack(">i", prefix)
    try:
        length = codec.frame_length(prefix, SMALL)
    except codec.FrameError:
        assert raw < 4 or raw > SMALL.frame_bytes_max
        return
    assert 4 <= length == raw <= SMALL.frame_bytes_max


@SEEDED
@fuzz_settings(300)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.lists(
            st.tuples(
                st.integers(0, 1),
                st.binary(max_size=40),
                st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
            ),
            min_size=1,
            max_size=4,
        ).map(lambda entries: b"".join(_batch_entry(*e) for e in entries)),
    ),
    st.integers(0, 400),
)
def test_batch_bodies_decode_or_refuse(body: bytes, cut: int) -> None:
    for candidate in (body, body[:cut]):
        try:
            entries = messages.decode_batch(candidate)
        except messages.BadMessage:
            continue
        assert entries


def _batch_entry(flag: int, body: bytes, properties: dict[str, str]) -> bytes:
    props = messages.format_properties(properties).encode()
    size = 20 + len(body) + 2 + len(props)
    return (
        struct.pack(">iiiii", size, 0, 0, flag, len(body))
        + body
        + struct.pack(">h", len(props))
        + props
    )


@SEEDED
@fuzz_settings(300)
@given(st.text(max_size=80))
def test_property_strings_always_parse(text: str) -> None:
    parsed = messages.parse_properties(text)
    assert all(k for k in parsed)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    root = tmp_path_factory.mktemp("remoting-fuzz")
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    config = BrokerConfig(
        store=store, listen_port=0, remoting_port=0, auto_create_topics=True,
        auto_create_groups=True,
    )  # fmt: skip
    running = threads.start(config)
    yield running
    running.stop()


def _request(code: int, ext: dict[str, str], body: bytes, serialize_type: int) -> bytes:
    command = Command(code, opaque=7, ext=ext, body=body, serialize_type=serialize_type)
    return codec.encode(command)


HOSTILE_VALUES = st.one_of(
    st.sampled_from(
        [
            "",
            "-1",
            "0",
            "1",
            "2147483648",
            "9" * 30,
            "x",
            "FuzzT",
            "*",
            "true",
            "TagA || ",
            "a > ",
            "%RETRY%G",
            "1e3",
            "\x00",
        ]
    ),
    TEXT,
)
FIELDS = [
    "topic", "queueId", "consumerGroup", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
    "suspendTimeoutMillis", "subscription", "expressionType", "a", "b", "e", "f", "g", "i", "m",
    "readQueueNums", "writeQueueNums", "perm", "clientID", "bornTimestamp", "properties",
    "timestamp", "key", "offset", "group", "delayLevel", "maxReconsumeTimes",
    "groupName", "cleanOffset", "producerGroup", "topicList", "isForce", "namespace",
]  # fmt: skip


@SEEDED
@fuzz_settings(150)
@given(
    code=CODES,
    ext=st.dictionaries(st.sampled_from(FIELDS), HOSTILE_VALUES, max_size=10),
    body=st.one_of(st.binary(max_size=100), st.sampled_from([b"{}", b"[]", b'{"clientID":1}',
                   b'{"consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{}]}]}',
                   b'{"groupName":"G","retryMaxTimes":1099511627776}'])),
    serialize_type=st.sampled_from([codec.SERIALIZE_JSON, codec.SERIALIZE_ROCKETMQ]),
)  # fmt: skip
def test_hostile_requests_are_answered_without_internal_errors(
    broker: threads.BrokerThread, caplog: pytest.LogCaptureFixture, code: int,
    ext: dict[str, str], body: bytes, serialize_type: int,
) -> None:  # fmt: skip
    if code == codes.PULL_MESSAGE:
        ext["sysFlag"] = "0"  # no long poll: each example answers at once
    endpoint = f"127.0.0.1:{broker.broker.remoting_port}"
    caplog.set_level(logging.ERROR)
    caplog.clear()
    with RawClient(endpoint, timeout_s=20) as rc:
        rc.write(_request(code & 0xFFFF if code < 0 else code, ext, body, serialize_type))
        answer = rc.response(7)
        assert answer.code != codes.SYSTEM_ERROR or "Error:" not in (answer.remark or "")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@SEEDED
@fuzz_settings(100)
@given(st.binary(min_size=1, max_size=200))
def test_random_bytes_on_the_port_are_answered_or_close_it(
    broker: threads.BrokerThread, data: bytes
) -> None:
    endpoint = f"127.0.0.1:{broker.broker.remoting_port}"
    with RawClient(endpoint, timeout_s=20) as rc:
        rc.write(data)
        # the broker sees the end: it answers or closes (a close is a reset, which may have
        # ended the connection already: SO_LINGER 0, remoting.server)
        with contextlib.suppress(OSError):
            rc.sock.shutdown(socket.SHUT_WR)
        assert rc.closed_by_peer()
    with RawClient(endpoint) as rc:
        assert rc.call(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).code == codes.SUCCESS
