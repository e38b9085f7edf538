"""Commit-log segments parsed in bulk into columns: the parser of the export and rebuild jobs.

One pass over a mapped segment finds the record boundaries (TOTALSIZE and MAGICCODE of each
record: one C call, ``record_starts`` of the store's native module
:mod:`gannet.node.store.log.native`, or one struct unpack per record in Python when it is not
built). The fixed-position fields of all the records found are
then read column-wise with numpy — big-endian gathers at record start + field position
(``docs/formats/commitlog.md`` §3; the positions are those of
:mod:`gannet.node.store.log.records`) —
bodies and PROPERTIES strings are cut into Arrow binary columns by Arrow (``take`` over one
array spanning the records: one copy, no Python object per record), and the properties are
parsed column-wise as the store's decoder (:func:`gannet.node.store.properties.decode`) does
(:mod:`gannet.pipeline.propcolumns`), so keys, tags and unique keys mean what they mean
to the broker. Body CRCs are checked in one C call (``bodies_crc_bad``), else one
``zlib.crc32`` per body.

Every record is checked as the store's
:func:`~gannet.node.store.log.record_checks.check_record` does:
magic code, TOTALSIZE inside the file, PHYSICALOFFSET equal to the record's position, field
lengths adding up to TOTALSIZE, body CRC, and the whole-record CRC where the properties end with
one. Parsing works in :class:`Chunk` s of at most ``chunk_bytes`` of the file (bounded memory
for 1 GiB segments). At the first record that does not check, :func:`chunks` yields what was
valid before it and then the :class:`~gannet.pipeline.segments.Damage` that
:func:`gannet.pipeline.segments.scan` reports for that place (same range, same reason), and
stops: the jobs never skip damage silently.

Pure apart from reading the mapped bytes; runs on Spark executors. Called by
:mod:`gannet.pipeline.exporting` and :mod:`gannet.pipeline.rebuilding`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from gannet.node.store import properties as props
from gannet.node.store.log import layout, native, record_checks, records
from gannet.node.store.log.layout import Buffer
from gannet.node.store.msgids import create_offset_msg_id
from gannet.pipeline import propcolumns, segments
from gannet.pipeline.propcolumns import PropertyColumns
from gannet.pipeline.segments import Damage, Segment

CHUNK_BYTES = 32 * 1024 * 1024
_HEAD = struct.Struct(">ii")
_MAGICS = (layout.MAGIC_V1, layout.MAGIC_V2)
_RECORD_BYTES_MIN = 91
_CRC_TAIL_MARK = b"__CRC32#\x01"
_ARROW_OFFSET_MAX = 2**31 - 1  # int32 offsets of an Arrow binary array

Int64s = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive valid records of one segment, one entry per record in every column.

    ``positions`` are bytes from the segment start; ``properties`` are the decoded maps (the
    store's decoder); ``bodies`` is an Arrow binary column.
    """

    positions: Int64s
    sizes: Int64s
    queue_ids: Int64s
    queue_offsets: Int64s
    commit_offsets: Int64s
    sys_flags: Int64s
    born_timestamps_ms: Int64s
    store_timestamps_ms: Int64s
    prepared_offsets: Int64s
    store_host_positions: Int64s
    store_host_lengths: Int64s
    topic_column: pa.StringArray
    property_columns: PropertyColumns
    bodies: pa.BinaryArray

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def topics(self) -> list[str]:
        return self.topic_column.to_pylist()  # type: ignore[no-any-return]

    @property
    def properties(self) -> list[dict[str, str]]:
        """Each record's properties as the store's decoder gives them (one dict per record:
        for row-by-row consumers; the bulk ones use :attr:`property_columns`)."""
        return [dict(pairs) for pairs in self.property_columns.maps().to_pylist()]

    def message_ids(self, buf: Buffer) -> pa.StringArray:
        """Each record's ``UNIQ_KEY``, or for one without, its offset message id (store host,
        commit offset), as PullMessage answers; ``buf`` is what the chunk was parsed from."""
        found = self.property_columns.value(props.UNIQ_KEY)
        if not found.null_count:  # (the decoder drops empty values: none is ever empty)
            return found
        ids: list[str] = []
        for i, uniq in enumerate(found.to_pylist()):
            if uniq:
                ids.append(uniq)
                continue
            host, port = self.store_host(buf, i)
            ids.append(create_offset_msg_id(host, port, int(self.commit_offsets[i])))
        return pa.array(ids, pa.string())

    def store_host(self, buf: Buffer, index: int) -> tuple[str, int]:
        """STOREHOST of record ``index`` (address, port), read from the segment ``buf``."""
        at = int(self.store_host_positions[index])
        return records.decode_host(bytes(buf[at : at + int(self.store_host_lengths[index])]))


def _gather(data: npt.NDArray[np.uint8], at: Int64s, width: int, kind: str) -> Int64s:
    """The big-endian integers of ``width`` bytes at each of ``at`` (signed, as Java's)."""
    index = np.minimum(at[:, None] + np.arange(width, dtype=np.int64), len(data) - 1)
    raw = np.ascontiguousarray(data[index])
    return raw.view(f">{kind}{width}").reshape(-1).astype(np.int64)


def _boundaries(buf: Buffer, start: int, size: int, chunk_bytes: int) -> tuple[Int64s, int, bool]:
    """Positions of the records from ``start`` on whose magic and TOTALSIZE look right, up to
    ``chunk_bytes`` of them (at least one); where the walk stopped; and whether it stopped only
    because the chunk was full (else: a BLANK, the file end, or a record that does not look
    right). The store's native module walks them when it is built (one C call), else
    :func:`_boundaries_python`."""
    codec = native.codec
    if codec is None:
        found, stop, full = _boundaries_python(buf, start, size, chunk_bytes)
        return np.array(found, dtype=np.int64), stop, full
    raw, stop, full = codec.record_starts(buf, start, size, chunk_bytes, _RECORD_BYTES_MIN)
    return np.frombuffer(raw, dtype=np.int64), stop, full


def _boundaries_python(
    buf: Buffer, start: int, size: int, chunk_bytes: int
) -> tuple[list[int], int, bool]:
    """:func:`_boundaries` one record at a time (the reference of the native walk)."""
    found: list[int] = []
    pos = start
    stop = min(size, start + chunk_bytes)
    unpack = _HEAD.unpack_from
    while pos < size and (pos < stop or not found):
        if size - pos < 8:
            break
        total, magic = unpack(buf, pos)
        if magic not in _MAGICS or not _RECORD_BYTES_MIN <= total <= size - pos:
            break
        found.append(pos)
        pos += total
    else:
        return found, pos, pos < size
    return found, pos, False


def _first_bad_body(
    view: memoryview, body_at: Int64s, body_len: Int64s, crc: Int64s, limit: int
) -> int:
    """The first of the first ``limit`` records whose body CRC differs, else ``limit`` (one C
    call with the store's native module, else one ``zlib.crc32`` per body)."""
    codec = native.codec
    if codec is not None:
        starts, lengths, expected = (
            np.ascontiguousarray(a[:limit], dtype=np.int64).data for a in (body_at, body_len, crc)
        )
        return codec.bodies_crc_bad(view, starts, lengths, expected, limit)
    body_list = body_at.tolist()
    body_len_list = body_len.tolist()
    crc_list = crc.tolist()
    for i in range(limit):
        b = body_list[i]
        if zlib.crc32(view[b : b + body_len_list[i]]) & 0x7FFFFFFF != crc_list[i]:
            return i
    return limit


def _check(
    data: npt.NDArray[np.uint8], buf: Buffer, segment: Segment | None, at: Int64s
) -> tuple[int, Chunk | None]:
    """How many records of ``at`` check before the first that does not, and the chunk of all
    of them when they all do. Without a ``segment`` (records copied out of the log, not in
    place) PHYSICALOFFSET is not compared with the position."""
    n = len(at)
    total = _gather(data, at, 4, "i")
    magic = _gather(data, at + 4, 4, "i")
    crc = _gather(data, at + 8, 4, "i")
    queue_id = _gather(data, at + 12, 4, "i")
    queue_offset = _gather(data, at + 20, 8, "i")
    physical = _gather(data, at + layout.PHYSICAL_OFFSET_POSITION, 8, "i")
    sys_flag = _gather(data, at + layout.SYSFLAG_POSITION, 4, "i")
    born_ts = _gather(data, at + 40, 8, "i")
    born_len = np.where(sys_flag & layout.SYSFLAG_BORNHOST_V6, 20, 8)
    store_len = np.where(sys_flag & layout.SYSFLAG_STOREHOST_V6, 20, 8)
    store_ts_at = at + layout.BORN_HOST_POSITION + born_len
    store_ts = _gather(data, store_ts_at, 8, "i")
    host_at = store_ts_at + 8
    prepared = _gather(data, host_at + store_len + 4, 8, "i")
    body_len_at = host_at + store_len + 12
    body_len = _gather(data, body_len_at, 4, "i")
    body_at = body_len_at + 4
    end = at + total
    ok = physical == segment.start_offset + at if segment is not None else physical >= 0
    ok &= (body_len >= 0) & (body_at + body_len <= end)
    v2 = magic == layout.MAGIC_V2
    topic_len_at = np.where(ok, body_at + body_len, at)
    topic_len = np.where(
        v2,
        _gather(data, topic_len_at, 2, "i"),
        data[np.minimum(topic_len_at, len(data) - 1)].astype(np.int64),
    )
    topic_at = topic_len_at + np.where(v2, 2, 1)
    props_len_at = topic_at + topic_len
    ok &= (topic_len >= 0) & (props_len_at + 2 <= end)
    props_len = _gather(data, np.where(ok, props_len_at, at), 2, "i")
    props_at = props_len_at + 2
    ok &= (props_len >= 0) & (props_at + props_len == end)
    bad = np.flatnonzero(~ok)
    limit = int(bad[0]) if len(bad) else n
    view = memoryview(buf) if not isinstance(buf, memoryview) else buf
    limit = _first_bad_body(view, body_at, body_len, crc, limit)
    tails = np.flatnonzero(_has_crc_tail(data, end, props_len)[:limit])
    for i in tails.tolist():  # records with a whole-record CRC (the broker's option)
        tail = bytes(view[int(end[i]) - layout.CRC32_RESERVED_LENGTH + 9 : int(end[i]) - 1])
        try:
            expected = int(tail.decode("ascii")[::-1])
        except ValueError:
            limit = i
            break
        covered = view[int(at[i]) : int(end[i]) - layout.CRC32_RESERVED_LENGTH]
        if zlib.crc32(covered) & 0x7FFFFFFF != expected:
            limit = i
            break
    topics = _topic_column(data, view, topic_at[:limit], topic_len[:limit])
    try:
        topic_column = topics.cast(pa.string())
    except pa.ArrowInvalid:  # the first topic that is not UTF-8 ends the valid records
        limit = _first_not_utf8(topics.to_pylist())
    if limit < n:
        return limit, None
    properties = propcolumns.parse(_binary_column(view, props_at, props_len))
    bodies = _binary_column(view, body_at, body_len)
    chunk = Chunk(
        positions=at,
        sizes=total,
        queue_ids=queue_id,
        queue_offsets=queue_offset,
        commit_offsets=physical,
        sys_flags=sys_flag,
        born_timestamps_ms=born_ts,
        store_timestamps_ms=store_ts,
        prepared_offsets=prepared,
        store_host_positions=host_at,
        store_host_lengths=store_len,
        topic_column=topic_column,
        property_columns=properties,
        bodies=bodies,
    )
    return n, chunk


def _has_crc_tail(
    data: npt.NDArray[np.uint8], end: Int64s, props_len: Int64s
) -> npt.NDArray[np.bool_]:
    """Which records' properties end with the whole-record CRC property (``__CRC32#`` and ten
    reversed digits, then the pair separator), found column-wise."""
    long_enough = props_len >= layout.CRC32_RESERVED_LENGTH
    start = np.where(long_enough, end - layout.CRC32_RESERVED_LENGTH, 0)
    index = np.minimum(start[:, None] + np.arange(len(_CRC_TAIL_MARK)), len(data) - 1)
    marked = (data[index] == np.frombuffer(_CRC_TAIL_MARK, dtype=np.uint8)).all(axis=1)
    last = data[np.clip(end - 1, 0, len(data) - 1)] == 2
    return long_enough & marked & last  # type: ignore[no-any-return]


def _topic_column(
    data: npt.NDArray[np.uint8], view: memoryview, starts: Int64s, lengths: Int64s
) -> pa.BinaryArray:
    """The topics as one binary column; records of one topic (a queue's, a typical segment's
    run) are compared column-wise and the column made from the first."""
    n = len(starts)
    if n and int(lengths.min()) == int(lengths.max()) and n * int(lengths[0]) <= len(data):
        width = int(lengths[0])
        names = data[starts[:, None] + np.arange(width)]
        if (names == names[0]).all():
            offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)[: n + 1]
            repeated = bytes(names[0]) * n
            buffers = [None, pa.py_buffer(offsets), pa.py_buffer(repeated)]
            return pa.BinaryArray.from_buffers(pa.binary(), n, buffers)
    return _binary_column(view, starts, lengths)


def _first_not_utf8(raw: list[bytes]) -> int:
    for i, value in enumerate(raw):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return i
    return len(raw)


def _binary_column(view: memoryview, starts: Int64s, lengths: Int64s) -> pa.BinaryArray:
    """One Arrow binary column of the byte ranges (a single copy into one buffer).

    Ranges in ascending order that do not overlap (a segment's bodies, properties, topics) are
    cut by Arrow: an array over the spanned bytes whose elements alternate between a range and
    the gap to the next, of which ``take`` keeps every other element (one copy in C, no Python
    object per range). Any other ranges are joined one slice at a time.
    """
    n = len(starts)
    ends = starts + lengths
    if (
        n
        and int(ends[-1]) - int(starts[0]) < _ARROW_OFFSET_MAX
        and (n == 1 or bool((starts[1:] >= ends[:-1]).all()))
    ):
        first = int(starts[0])
        cuts = np.empty(2 * n, dtype=np.int32)
        cuts[0::2] = starts - first
        cuts[1::2] = ends - first
        spanned = pa.py_buffer(view[first : int(ends[-1])])
        pieces = pa.BinaryArray.from_buffers(
            pa.binary(), 2 * n - 1, [None, pa.py_buffer(cuts), spanned]
        )
        column: pa.BinaryArray = pieces.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
        return column
    data = b"".join(
        [view[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
    )
    offsets = np.zeros(len(starts) + 1, dtype=np.int32)  # a chunk stays far below 2 GiB
    np.cumsum(lengths, out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.BinaryArray.from_buffers(pa.binary(), len(starts), buffers)


def walk_end(buf: Buffer) -> int:
    """Where a walk of TOTALSIZE from the start of ``buf`` stops: the end of the last record
    whose magic code and TOTALSIZE look right and fit in ``buf`` (one C call with the native
    module). A window of a tier object ends its complete records there
    (:mod:`gannet.pipeline.objects`)."""
    _, stop, _ = _boundaries(buf, 0, len(buf), len(buf) + 1)
    return stop


def first_record_from(buf: Buffer, at: int) -> int | None:
    """Where the first record of segment ``buf`` starting at or after byte ``at`` lies, found
    by walking TOTALSIZE from the segment's start (one C call with the native module); None
    when the walk ends before ``at`` (a BLANK, the end of the data, or a record that does not
    look right: :func:`chunks` of the range holding that place reports it)."""
    if at <= 0:
        return 0
    _, stop, full = _boundaries(buf, 0, len(buf), at)
    return stop if full else None


def chunks(
    buf: Buffer,
    segment: Segment,
    *,
    chunk_bytes: int = CHUNK_BYTES,
    start: int = 0,
    end: int | None = None,
) -> Iterator[Chunk | Damage]:
    """The valid records of one segment in file order, as chunks, then its first damage if any
    (see the module docstring). ``start`` (a record's position) and ``end`` limit them to the
    records starting in ``[start, end)``."""
    size = len(buf)
    if size == 0:
        return
    end = size if end is None else min(end, size)
    data = np.frombuffer(buf, dtype=np.uint8)
    pos = start
    while pos < end:
        at, stop, more = _boundaries(buf, pos, size, min(chunk_bytes, end - pos))
        good, chunk = _check(data, buf, segment, at)
        if chunk is None and good:
            chunk = _check(data, buf, segment, at[:good])[1]
        if chunk is not None and len(chunk):
            yield chunk
        if good < len(at) or not more:
            at_pos = int(at[good]) if good < len(at) else stop
            damage = None if at_pos >= size else _damage_at(buf, segment, at_pos)
            if damage is not None:
                yield damage
            return
        pos = stop


def range_chunks(
    buf: Buffer, segment: Segment, cut: int, next_cut: int | None
) -> Iterator[Chunk | Damage]:
    """:func:`chunks` of the records starting in ``[cut, next_cut)`` (None: the file's end),
    from the first record at or after ``cut`` (:func:`first_record_from`): the ranges of
    consecutive cuts split a segment's records between them without overlap. Nothing when no
    record starts in the range."""
    start = first_record_from(buf, cut)
    if start is not None:
        yield from chunks(buf, segment, start=start, end=next_cut)


def records_chunk(buf: bytes, count: int) -> Chunk:
    """The ``count`` records ``buf`` holds back to back (an Admin ``PullRecords`` reply: records
    copied from a commit log, so positions are within ``buf``), parsed and checked as a
    segment's are; ValueError naming the first record that does not check."""
    at, stop, _ = _boundaries(buf, 0, len(buf), len(buf) + 1)
    if len(at) != count or stop != len(buf):
        raise ValueError(
            f"the reply holds {count} records in {len(buf)} bytes, but only {len(at)} "
            f"records ({stop} bytes) are well-formed"
        )
    good, chunk = _check(np.frombuffer(buf, dtype=np.uint8), buf, None, at)
    if chunk is None:
        raise ValueError(f"record {good} of the reply (at byte {int(at[good])}) does not check")
    return chunk


def _damage_at(buf: Buffer, segment: Segment, pos: int) -> Damage | None:
    """What :func:`segments.scan` reports at ``pos`` where a record does not check: a damaged
    range, or ``None`` for the normal end of the data (a BLANK, the newest file's zero tail)."""
    size = len(buf)
    result = record_checks.check_record(buf, pos, size, check_crc=True)
    if result.ok and result.size == 0:
        return None
    info = result.info
    if result.ok and info is not None and info.commit_offset == segment.start_offset + pos:
        raise AssertionError(
            f"{segment.name}: the bulk parser refused the record at {pos}, which the store "
            "accepts; please report this"
        )
    resume = segments.next_record_position(buf, segment, pos + 1, check_crc=True)
    if resume is None and segment.is_last and segments.is_zero_at(buf, pos):
        return None
    reason = result.error or "PHYSICALOFFSET differs from the record's position"
    end = size if resume is None else resume
    return Damage(segment.name, segment.start_offset + pos, segment.start_offset + end, reason)
