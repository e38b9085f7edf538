"""The bulk segment parser (:mod:`gannet.pipeline.columns`) and the export's Arrow tables, without
Spark, against the store's record-by-record path they replace: the same records, fields and
types for random segments (IPv6 hosts, V2 topics, whole-record CRCs, transactional flags,
empty and odd properties, large bodies), the same first damage as ``segments.scan`` for a
corrupted byte anywhere, and a corrupt segment refused by the export with its name."""

from __future__ import annotations

import tempfile
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gannet.node.store.log import native, records
from gannet.node.store.log.records import Message
from gannet.node.store.msgids import create_offset_msg_id
from gannet.node.store.properties import split_keys
from gannet.pipeline import columns, exporting, jobs, rebuilding, segments
from gannet.pipeline.columns import Chunk
from gannet.pipeline.exporting import ExportFilter, SegmentDamagedError
from gannet.pipeline.segments import Damage, Segment

START_OFFSET = 3 * 2**20
BODY_BYTES_MAX = 4 * 2**20

texts = st.text(max_size=12)
property_maps = st.dictionaries(
    st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "a", "b b", "é"]) | texts, texts, max_size=5
)
hosts = st.sampled_from([("127.0.0.1", 10911), ("10.1.2.3", 1), ("::1", 8081), ("fe80::7", 9)])
bodies = st.binary(max_size=2000) | st.sampled_from([b"", b"L" * 70_000])


@st.composite
def stored_messages(draw: st.DrawFn) -> list[tuple[Message, bool, bool]]:
    """Messages as the store would hold them, with (append CRC, force V2) per record."""
    made = []
    for i in range(draw(st.integers(1, 12))):
        msg = Message(
            topic=draw(st.sampled_from(["Orders", "Zahlungen-ü", "t" * 130])),
            body=draw(bodies),
            queue_id=draw(st.integers(0, 7)),
            properties=draw(property_maps),
            sys_flag=draw(st.sampled_from([0, 0, 0x4, 0x8, 0xC])),
            born_timestamp_ms=draw(st.integers(0, 2**42)),
            born_host=draw(hosts),
            store_host=draw(hosts),
            store_timestamp_ms=draw(st.integers(-(2**40), 2**42)),
            queue_offset=i,
            reconsume_times=draw(st.integers(0, 3)),
            prepared_transaction_offset=draw(st.integers(0, 2**40)),
        )
        made.append((msg, draw(st.booleans()), draw(st.booleans())))
    return made


def segment_bytes(messages: list[tuple[Message, bool, bool]], tail: str) -> bytearray:
    """The records of ``messages`` as one segment from START_OFFSET, ending with ``tail``:
    ``blank`` (an older file), ``zeros`` (the newest) or ``none``."""
    buf = bytearray()
    for msg, crc, v2 in messages:
        msg.physical_offset = START_OFFSET + len(buf)
        record = records.encode(
            msg, body_size_max_bytes=BODY_BYTES_MAX, append_crc=crc, force_v2=v2
        )
        if crc:
            records.seal_crc(record)
        buf += record
    if tail == "blank":
        buf += records.blank_record(64) + bytes(56)
    elif tail == "zeros":
        buf += bytes(200)
    return buf


def _segment(buf: bytes | bytearray, *, is_last: bool) -> Segment:
    return Segment(f"/nowhere/{START_OFFSET:020d}", START_OFFSET, len(buf), is_last)


def _parsed(buf: bytes | bytearray, segment: Segment, chunk_bytes: int) -> list[Chunk | Damage]:
    return list(columns.chunks(bytes(buf), segment, chunk_bytes=chunk_bytes))


def old_export_row(buf: bytes, position: int, info: records.DispatchInfo) -> dict[str, object]:
    """The export row of one record as the record-by-record export built it (the oracle)."""
    msg = records.decode(buf, position)
    message_id = msg.uniq_key or create_offset_msg_id(*msg.store_host, info.commit_offset)
    return {
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "commit_offset": info.commit_offset,
        "size_bytes": info.size,
        "message_id": message_id,
        "keys": split_keys(info.keys),
        "tag": msg.tags,
        "properties": list(msg.properties.items()),
        "body": msg.body,
        "born_timestamp_ms": msg.born_timestamp_ms,
        "store_timestamp_ms": msg.store_timestamp_ms,
        "sys_flag": msg.sys_flag,
    }


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=stored_messages(),
    tail=st.sampled_from(["blank", "zeros", "none"]),
    chunk_bytes=st.sampled_from([1, 500, 10_000, columns.CHUNK_BYTES]),
)
def test_chunks_hold_exactly_the_records_the_store_scan_finds(
    messages: list[tuple[Message, bool, bool]], tail: str, chunk_bytes: int
) -> None:
    buf = bytes(segment_bytes(messages, tail))
    segment = _segment(buf, is_last=tail != "blank")
    scanned = [e for e in segments.scan(buf, segment) if isinstance(e, segments.Record)]
    parsed = _parsed(buf, segment, chunk_bytes)
    assert all(isinstance(p, Chunk) for p in parsed)
    chunks = [p for p in parsed if isinstance(p, Chunk)]
    assert [int(p) for c in chunks for p in c.positions] == [r.position for r in scanned]
    infos = [i for c in chunks for i in rebuilding.DispatchColumns.of(c).infos()]
    assert infos == [r.info._replace(properties={}) for r in scanned]
    rows = [row for c in chunks for row in exporting.chunk_table(buf, c, _all(c)).to_pylist()]
    assert rows == [old_export_row(buf, r.position, r.info) for r in scanned]
    for c in chunks:
        assert exporting.chunk_table(buf, c, _all(c)).schema == exporting.ARROW_SCHEMA


def _all(chunk: Chunk) -> npt.NDArray[np.int64]:
    return np.arange(len(chunk), dtype=np.int64)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=stored_messages(), data=st.data())
def test_a_damaged_byte_ends_the_chunks_with_the_damage_the_scan_reports(
    messages: list[tuple[Message, bool, bool]], data: st.DataObject
) -> None:
    buf = segment_bytes(messages, "blank")
    at = data.draw(st.integers(0, len(buf) - 1), label="position")
    buf[at] ^= data.draw(st.integers(1, 255), label="xor")
    segment = _segment(buf, is_last=False)
    events = [e for e in segments.scan(bytes(buf), segment) if not isinstance(e, segments.End)]
    first_damage = next((i for i, e in enumerate(events) if isinstance(e, Damage)), len(events))
    expected = events[: first_damage + 1]
    parsed = _parsed(buf, segment, data.draw(st.sampled_from([1, 700, columns.CHUNK_BYTES])))
    got: list[object] = []
    for part in parsed:
        if isinstance(part, Chunk):
            got += [int(p) for p in part.positions]
        else:
            got.append(part)
    assert got == [e.position if isinstance(e, segments.Record) else e for e in expected]


def test_export_refuses_a_corrupt_segment_naming_it(tmp_path: Path) -> None:
    messages = [
        (Message(topic="Orders", body=b"b" * 100, properties={"TAGS": "t"}), False, False)
        for _ in range(5)
    ]
    buf = segment_bytes(messages, "blank")
    third = records.encode(messages[0][0], body_size_max_bytes=BODY_BYTES_MAX)
    third_at = 2 * len(third)
    buf[third_at + len(third) - 40] ^= 0x10  # a bit of the third record's body
    path = tmp_path / f"{START_OFFSET:020d}"
    path.write_bytes(buf)
    (segment,) = segments.find_segments(tmp_path)
    with pytest.raises(SegmentDamagedError) as raised:
        exporting.export_segment(segment, ExportFilter(), str(tmp_path / "out"))
    message = str(raised.value)
    assert segment.name in message
    assert f"bytes {START_OFFSET + third_at}..{START_OFFSET + third_at + len(third)}" in message
    assert "body CRC mismatch" in message
    assert "gannet pipeline verify" in message
    # What came before the damage was written (and closed: the file reads back).
    (written,) = (tmp_path / "out").rglob("*.parquet")
    assert pq.read_table(written).num_rows == 2


def test_export_filter_masks_transactions_topics_and_times() -> None:
    messages = [
        (Message(topic=t, body=b"x", sys_flag=f, store_timestamp_ms=ts), False, False)
        for t, f, ts in [("A", 0, 5), ("A", 0x4, 5), ("B", 0x8, 6), ("A", 0xC, 7), ("A", 0, 9)]
    ]
    buf = bytes(segment_bytes(messages, "zeros"))
    (chunk,) = _parsed(buf, _segment(buf, is_last=True), columns.CHUNK_BYTES)
    assert isinstance(chunk, Chunk)
    assert ExportFilter().mask(chunk).tolist() == [True, False, True, False, True]
    keep = ExportFilter(topics=frozenset({"A"}), since_ms=5, until_ms=9)
    assert keep.mask(chunk).tolist() == [True, False, False, False, False]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=stored_messages(), data=st.data())
def test_the_native_walk_and_body_crcs_equal_the_python_path(
    messages: list[tuple[Message, bool, bool]], data: st.DataObject
) -> None:
    """``_native.record_starts`` and ``bodies_crc_bad`` against the Python loops they replace,
    on clean and damaged segments from any start and with any chunk size."""
    if native.codec is None:
        pytest.skip("the native module is not built")
    buf = segment_bytes(messages, data.draw(st.sampled_from(["blank", "zeros", "none"])))
    if data.draw(st.booleans(), label="damaged"):
        flipped = data.draw(st.integers(0, len(buf) - 1), label="position")
        buf[flipped] ^= data.draw(st.integers(1, 255), label="xor")
    raw = bytes(buf)
    start = data.draw(st.integers(0, len(raw)), label="start")
    size = data.draw(st.integers(start, len(raw)), label="size")
    chunk_bytes = data.draw(st.sampled_from([0, 1, 300, 5000, len(raw) + 1]), label="chunk")
    positions, stop, full = columns._boundaries(raw, start, size, chunk_bytes)
    expected = columns._boundaries_python(raw, start, size, chunk_bytes)
    assert (positions.tolist(), stop, full) == expected
    # Body CRCs of ranges inside the records the whole walk finds, some of them wrong.
    at, _, _ = columns._boundaries(raw, 0, len(raw), len(raw) + 1)
    if not len(at):
        return
    data_array = np.frombuffer(raw, dtype=np.uint8)
    total = columns._gather(data_array, at, 4, "i")
    body_at = np.minimum(at + 8, len(raw) - 1)  # any ranges inside the buffer will do
    body_len = np.minimum(total - 8, len(raw) - body_at)
    crc = np.array(  # the right CRC of each range, but for the ones drawn to be wrong
        [
            zlib.crc32(raw[a : a + n]) & 0x7FFFFFFF
            for a, n in zip(body_at.tolist(), body_len.tolist(), strict=True)
        ],
        dtype=np.int64,
    )
    for wrong in data.draw(st.sets(st.integers(0, len(at) - 1), max_size=3), label="wrong"):
        crc[wrong] ^= 1
    limit = data.draw(st.integers(0, len(at)), label="limit")
    view = memoryview(raw)
    got = columns._first_bad_body(view, body_at, body_len, crc, limit)
    codec, native.codec = native.codec, None
    try:
        assert got == columns._first_bad_body(view, body_at, body_len, crc, limit)
    finally:
        native.codec = codec


def test_the_native_walk_refuses_a_size_beyond_the_buffer() -> None:
    if native.codec is None:
        pytest.skip("the native module is not built")
    with pytest.raises(ValueError, match="outside the buffer"):
        native.codec.record_starts(b"12345678", 0, 9, 100, 91)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=stored_messages(), data=st.data())
def test_byte_ranges_split_the_records_of_a_segment_without_overlap(
    messages: list[tuple[Message, bool, bool]], data: st.DataObject
) -> None:
    """Any cuts: the ranges' records, exported one range at a time as the tasks of a split
    segment do, are exactly the whole segment's, once each, with the same rows."""
    tail = data.draw(st.sampled_from(["blank", "zeros", "none"]))
    buf = bytes(segment_bytes(messages, tail))
    with tempfile.TemporaryDirectory(prefix="gannet-ranges-") as tmp:
        path = Path(tmp) / f"{START_OFFSET:020d}"
        path.write_bytes(buf)
        (segment,) = segments.find_segments(Path(tmp))
        cuts = sorted(data.draw(st.lists(st.integers(1, len(buf) - 1), max_size=4), label="cuts"))
        bounds: list[tuple[int, int | None]] = [
            (a, b) for a, b in zip([0, *cuts], [*cuts, None], strict=True)
        ]
        whole = exporting.export_segment(segment, ExportFilter(), f"{tmp}/whole")
        parts = [
            exporting.export_segment(segment, ExportFilter(), f"{tmp}/ranges", r) for r in bounds
        ]
        assert sum(p.messages for p in parts) == whole.messages
        if not whole.messages:
            return
        rows = [
            pq.read_table(f"{tmp}/{name}").sort_by("commit_offset") for name in ("whole", "ranges")
        ]
        assert rows[0].to_pylist() == rows[1].to_pylist()


def test_task_ranges_cut_large_segments_and_keep_small_ones_whole() -> None:
    big = Segment("/x/00000000000000000000", 0, 100 * 2**20, is_last=False)
    small = [Segment(f"/x/{i:020d}", i, 2**20, is_last=False) for i in range(1, 3)]
    ranges = jobs.task_ranges([big, *small], parallelism=4)
    step = 25 * 2**20
    assert [(a, b) for s, a, b in ranges if s is big] == [
        (0, step), (step, 2 * step), (2 * step, 3 * step), (3 * step, None)
    ]  # fmt: skip
    assert [(a, b) for s, a, b in ranges if s is not big] == [(0, None), (0, None)]
    only = jobs.task_ranges(small, parallelism=2)  # below SPLIT_BYTES_MIN: one task each
    assert [(a, b) for _, a, b in only] == [(0, None), (0, None)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["A", "B", "Ü"]), st.integers(-(2**40), 2**42), st.booleans()),
        min_size=1,
        max_size=30,
    )
)
def test_partition_rows_group_by_topic_and_date_in_record_order(
    rows: list[tuple[str, int, bool]],
) -> None:
    messages = [
        (Message(topic=t, body=b"x", store_timestamp_ms=ts), False, False) for t, ts, _ in rows
    ]
    buf = bytes(segment_bytes(messages, "zeros"))
    (chunk,) = _parsed(buf, _segment(buf, is_last=True), columns.CHUNK_BYTES)
    assert isinstance(chunk, Chunk)
    picked = np.array([i for i, (_, _, kept) in enumerate(rows) if kept], dtype=np.int64)
    expected: dict[tuple[str, str], list[int]] = {}
    for j, i in enumerate(picked.tolist()):
        topic, ts, _ = rows[i]
        expected.setdefault((topic, exporting.utc_date(ts)), []).append(j)
    got = exporting.partition_rows(chunk, picked)
    assert [(key, rel.tolist()) for key, rel in got] == list(expected.items())
