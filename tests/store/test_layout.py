"""The record layout has one owner, :mod:`gannet.node.store.log.layout`; ``_native.c`` mirrors
it. On generated records (V1/V2 topics, IPv4/IPv6 hosts, properties, whole-record CRC) the
native encoder's bytes walk under :func:`layout.walk` to the fields of the messages, and the
native record-boundary walk (``record_starts``) finds the starts :func:`layout.record_starts`
finds, on whole and on torn buffers. The paired checks on what crosses a boundary name what is
wrong.
"""

from __future__ import annotations

import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gannet.node.invariants import InvariantViolation
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import CorruptionError
from gannet.node.store.log import layout, native, records
from gannet.node.store.log.commitlog import AppendResult, CommitLog, _check_laid_out
from gannet.node.store.log.records import Message

CODEC, WHY = native.load()
FILE_SIZE = 1 << 20
BODY_MAX = 2048

_hosts = st.sampled_from([("127.0.0.1", 10911), ("10.1.2.3", 0), ("::1", 8081), ("fe80::1", 1)])
_text = st.text(st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=8)
_messages = st.builds(
    Message,
    topic=st.sampled_from(["T", "Ω-topic", "t" * 127, "u" * 128]),
    body=st.binary(max_size=300),
    queue_id=st.integers(0, 3),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=st.dictionaries(st.sampled_from(["KEYS", "TAGS", "a", "Ω"]), _text, max_size=3),
    sys_flag=st.sampled_from([0, 0x4, 0x8, 0xC]),
    born_timestamp_ms=st.integers(0, 2**42),
    born_host=_hosts,
    store_host=_hosts,
    reconsume_times=st.integers(0, 16),
    prepared_transaction_offset=st.integers(0, 2**40),
)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> CommitLog:
    config = StoreConfig.for_tests(
        tmp_path_factory.mktemp("layout"),
        commitlog_file_size_bytes=FILE_SIZE,
        message_body_size_max_bytes=BODY_MAX,
    )
    return CommitLog(config)


def _native_records(
    log: CommitLog, msgs: list[Message], crc: bool, start: int
) -> tuple[bytes, list[AppendResult]]:
    """The records the native put path lays out for ``msgs`` at ``start``, one file's worth."""
    assert CODEC is not None
    log.append_crc = crc
    batch = log.encode_all([m.copy() for m in msgs])
    plan, results, _ = CODEC.lay_out(
        batch, {}, start, FILE_SIZE, FILE_SIZE, 1_700_000_000_000, crc, "10.0.0.9", 10911,
        AppendResult,
    )  # fmt: skip
    assert len(plan) == 1
    return bytes(plan[0][1]), results


def _native_starts(buf: bytes, size: int) -> list[int]:
    assert CODEC is not None
    raw, _, _ = CODEC.record_starts(buf, 0, size, len(buf) + 1, layout.RECORD_LENGTH_MIN)
    return array.array("q", raw).tolist()


@pytest.mark.skipif(CODEC is None, reason=f"native module not in use: {WHY}")
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    msgs=st.lists(_messages, min_size=1, max_size=8),
    crc=st.booleans(),
    start=st.integers(0, 2**40),
    cut=st.integers(0, 2**16),
)
def test_native_records_walk_to_their_messages_and_the_walks_agree(
    log: CommitLog, msgs: list[Message], crc: bool, start: int, cut: int
) -> None:
    buf, results = _native_records(log, msgs, crc, start)
    starts = [r.wrote_offset - start for r in results]
    assert layout.record_starts(buf, 0, len(buf)) == starts
    assert _native_starts(buf, len(buf)) == starts
    for msg, result, at in zip(msgs, results, starts, strict=True):
        span, size, error = layout.walk(buf, at, len(buf), check_crc=True)
        assert span is not None, error
        assert (size, span.physical_offset, span.queue_offset) == (
            result.wrote_bytes,
            result.wrote_offset,
            result.queue_offset,
        )
        assert span.magic == (layout.MAGIC_V2 if len(msg.topic) > 127 else layout.MAGIC_V1)
        assert (span.queue_id, span.flag, span.born_timestamp_ms, span.reconsume_times) == (
            msg.queue_id,
            msg.flag,
            msg.born_timestamp_ms,
            msg.reconsume_times,
        )
        assert buf[span.body_at : span.body_at + span.body_length] == msg.body
        assert buf[span.topic_at : span.topic_at + span.topic_length] == msg.topic.encode()
        assert span.born_host_length == (20 if ":" in msg.born_host[0] else 8)
        back = records.decode(buf, at)
        assert (back.topic, back.body, back.born_host) == (msg.topic, msg.body, msg.born_host)
        assert {k: v for k, v in back.properties.items() if k != "__CRC32#"} == msg.properties
    # A torn buffer: both walks stop before the first record that does not fit.
    size = cut % (len(buf) + 1)
    assert _native_starts(buf, size) == layout.record_starts(buf, 0, size)
    assert layout.record_starts(buf, 0, size) == [at for at, r in zip(starts, results, strict=True)
                                                  if at + r.wrote_bytes <= size]  # fmt: skip


def test_the_walk_names_what_is_wrong() -> None:
    msg = Message(topic="T", body=b"body", properties={"a": "b"})
    record = records.encode(msg, body_size_max_bytes=BODY_MAX)
    span, _, _ = layout.walk(record, 0, len(record), check_crc=True)
    assert span is not None  # encode computed the body CRC
    wrong_crc = bytearray(record)
    layout.INT.pack_into(wrong_crc, layout.BODY_CRC_POSITION, span.body_crc ^ 1)
    assert layout.walk(wrong_crc, 0, len(record), check_crc=True)[2] == "body CRC mismatch"
    assert layout.walk(wrong_crc, 0, len(record), check_crc=False)[0] is not None
    torn = layout.walk(record, 0, len(record) - 1, check_crc=False)
    assert torn == (None, -1, f"total size {len(record)} outside the readable region")
    bad_body = bytearray(record)
    layout.INT.pack_into(bad_body, span.body_at - 4, 10_000)  # BODY length
    span, size, error = layout.walk(bad_body, 0, len(bad_body), check_crc=False)
    assert (span, size, error) == (None, len(record), "body length 10000 overruns the record")
    assert layout.walk(records.blank_record(64), 0, 64, check_crc=True) == (None, 0, "")


def test_a_laid_out_buffer_that_disagrees_with_its_results_is_never_written() -> None:
    msg = Message(topic="T", body=b"x", queue_offset=3, physical_offset=100)
    record = records.encode(msg, body_size_max_bytes=BODY_MAX)
    right = AppendResult(100, len(record), 3, 0, "h", 1)
    _check_laid_out([(False, record, 1)], [right])
    wrong = right._replace(queue_offset=4)
    with pytest.raises(InvariantViolation, match=r"QUEUEOFFSET 3; expected .* 4$"):
        _check_laid_out([(False, record, 1)], [wrong])
    with pytest.raises(InvariantViolation, match=f"buffer of {len(record)} bytes"):
        _check_laid_out([(False, record, 1)], [right._replace(wrote_bytes=len(record) + 1)])


def test_a_record_read_back_at_the_wrong_place_stops_the_read(log: CommitLog) -> None:
    assert log.max_offset() == 0
    msg = Message(topic="T", body=b"x", physical_offset=64)  # made for offset 64
    record = records.encode(msg, body_size_max_bytes=BODY_MAX)
    log.append_raw(log.max_offset(), bytes(record))
    with pytest.raises(CorruptionError, match=r"read back at 0 .* says PHYSICALOFFSET 64"):
        log.read_message(0)
    log.truncate(0)
