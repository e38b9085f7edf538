"""Tier objects read on a Spark executor: ranged GETs in windows, parsed as local segments are.

An executor reads an offloaded commit-log file (:class:`gannet.pipeline.sources.TierSegment`)
straight from the bucket with the tier's own S3 client (:class:`gannet.node.store.tier.buckets.
S3Bucket`, boto3, in the Python worker; why not Hadoop S3A is in ``docs/pipeline.md``), never
through a broker. One task reads one object, **streamed in windows** of ``window_bytes``
(default :data:`WINDOW_BYTES`, 32 MiB): each window is one ranged GET starting at a record
boundary, and holds the records that end inside it; the next window starts where the last
complete record ended, so the bytes of a record cut by the window's end are fetched again
(at most one record per window). A record larger than the window is fetched whole in a window
of its own size, up to :data:`RECORD_BYTES_MAX`: a TOTALSIZE above that is damage, so a flipped
bit never makes a task fetch a gigabyte. A task therefore holds one window (plus at most one
record) of its object in memory, whatever the object's size.

Each window is parsed by :func:`gannet.pipeline.columns.chunks` as a segment whose start offset
is the window's commit-log offset, so every check of a local segment applies (magic, TOTALSIZE,
PHYSICALOFFSET equal to the position, field lengths, body and whole-record CRCs), and damage is
reported as for a local segment — a :class:`~gannet.pipeline.segments.Damage` whose
``segment`` is the **object key** and whose range is in commit-log offsets. A window whose walk
stops at a BLANK ends the object. Export stops at the first damage
(:class:`gannet.pipeline.exporting.SegmentDamagedError`); verify records it and continues at
the next valid record the parser found (or the window's end).

The S3 client is made once per Python worker process and bucket configuration
(:func:`open_bucket`; Spark reuses its Python workers), not once per task.
"""

from __future__ import annotations

import dataclasses
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from gannet.node.store.log import layout
from gannet.node.store.tier import buckets, errors
from gannet.pipeline import columns, exporting
from gannet.pipeline.columns import Chunk
from gannet.pipeline.reports import SegmentReport
from gannet.pipeline.segments import Damage, Segment
from gannet.pipeline.sources import TierBucket, TierSegment

WINDOW_BYTES = 32 * 2**20
"""Bytes of a tier object one ranged GET fetches (one window in a task's memory)."""
WINDOW_BYTES_MIN = 1024
RECORD_BYTES_MAX = 64 * 2**20
"""The largest TOTALSIZE a window grows for (a 4 MiB body, RocketMQ's maxMessageSize, plus
properties and topic is far below); a larger one is damage."""
_RECORD_BYTES_MIN = 91
_HEAD = struct.Struct(">ii")
_MAGICS = (layout.MAGIC_V1, layout.MAGIC_V2)

_buckets: dict[buckets.BucketConfig, buckets.S3Bucket] = {}
_buckets_lock = threading.Lock()


def open_bucket(tier: TierBucket) -> buckets.S3Bucket:
    """This worker process's S3 client for ``tier``'s bucket (made on first use)."""
    with _buckets_lock:
        bucket = _buckets.get(tier.config)
        if bucket is None:
            bucket = _buckets[tier.config] = buckets.S3Bucket(tier.config)
        return bucket


class RangeReads(Protocol):
    """What reading a tier object needs of the bucket (:class:`buckets.S3Bucket` has it)."""

    def get_range(self, key: str, start: int, size_bytes: int) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Window:
    """Bytes ``[position, position + len(data))`` of a tier object.

    ``end``: the records starting before it end inside ``data`` and the next window starts
    there; ``None``: the walk of the window stopped at a BLANK, at damage or at the object's end,
    and the window is parsed to there. ``segment`` is the window as a segment (start offset: the
    window's commit-log offset; path: the object key) for the parser.
    """

    position: int
    data: bytes
    end: int | None
    segment: Segment


def _fetch(bucket: RangeReads, part: TierSegment, position: int, size: int) -> bytes:
    data = bucket.get_range(part.key, position, size)
    if len(data) != size:
        raise errors.TierUnavailable(
            f"GET {part.key} bytes {position}..{position + size}: {len(data)} bytes answered, "
            f"{size} asked (is the object shorter than the manifest's {part.size_bytes}?)"
        )
    return data


def complete_end(data: bytes, *, final: bool) -> tuple[int | None, int]:
    """Where the complete records of a window end, and the size of the record cut by that
    place (0 when none is): ``(None, 0)`` when the walk stopped at a BLANK, at damage, or
    ``final`` (the window reaches the object's end) — the window is then parsed to its end."""
    stop = columns.walk_end(data)
    rest = len(data) - stop
    if final:
        return None, 0
    if rest < _HEAD.size:
        return stop, _HEAD.size
    total, magic = _HEAD.unpack_from(data, stop)
    if magic in _MAGICS and _RECORD_BYTES_MIN <= total <= RECORD_BYTES_MAX and total > rest:
        return stop, total
    return None, 0


def read_window(
    bucket: RangeReads, part: TierSegment, position: int, window_bytes: int = WINDOW_BYTES
) -> Window:
    """The window of ``part`` starting at ``position`` (a record boundary): one ranged GET of
    ``window_bytes``, or of the record there when it is larger (module docstring)."""
    if window_bytes < WINDOW_BYTES_MIN:
        raise ValueError(f"window_bytes {window_bytes} < {WINDOW_BYTES_MIN}")
    if not 0 <= position < part.size_bytes:
        raise ValueError(f"position {position} outside object {part.key} of {part.size_bytes}")
    size = min(window_bytes, part.size_bytes - position)
    data = _fetch(bucket, part, position, size)
    end, need = complete_end(data, final=position + size == part.size_bytes)
    if end == 0:  # one record larger than the window: fetch it whole
        size = min(need, part.size_bytes - position)
        data = _fetch(bucket, part, position, size)
        end, _ = complete_end(data, final=position + size == part.size_bytes)
    segment = Segment(part.key, part.start_offset + position, len(data), False, part.group)
    return Window(position, data, end, segment)


def _in_object(damage: Damage, part: TierSegment) -> Damage:
    return dataclasses.replace(damage, segment=part.key)


def _whole_damage(bucket: RangeReads, part: TierSegment, window: Window, damage: Damage) -> Damage:
    """``damage`` (found in ``window``) with the range the parser gives it in the whole object:
    when the next valid record was not found inside the window, the search runs again from the
    damage in windows twice as large, up to :data:`RECORD_BYTES_MAX` bytes past it (beyond, the
    range ends there)."""
    size = len(window.data)
    while True:
        end = damage.end_offset - part.start_offset
        if end < window.position + len(window.data) or end >= part.size_bytes:
            return _in_object(damage, part)
        size *= 2
        start = damage.start_offset - part.start_offset
        if size > 2 * RECORD_BYTES_MAX:
            return _in_object(damage, part)
        window = read_window(bucket, part, start, size)
        found = next(columns.chunks(window.data, window.segment, end=window.end), None)
        if not isinstance(found, Damage) or found.start_offset != damage.start_offset:
            raise AssertionError(
                f"{part.key}: damage at {damage.start_offset} not found again; please report this"
            )
        damage = found


def chunks(
    bucket: RangeReads, part: TierSegment, window_bytes: int = WINDOW_BYTES
) -> Iterator[tuple[bytes, Chunk | Damage]]:
    """The records of ``part`` in order as (window bytes, chunk) — a chunk's positions are in
    its window's bytes — then its first damage, if any (as ``(window bytes, Damage)``)."""
    position = 0
    while position < part.size_bytes:
        window = read_window(bucket, part, position, window_bytes)
        for found in columns.chunks(window.data, window.segment, end=window.end):
            if isinstance(found, Damage):
                yield window.data, _whole_damage(bucket, part, window, found)
                return
            yield window.data, found
        if window.end is None:
            return
        position += window.end


def export_object(
    part: TierSegment,
    keep: exporting.ExportFilter,
    output: str,
    window_bytes: int = WINDOW_BYTES,
    bucket: RangeReads | None = None,
) -> exporting.SegmentExport:
    """:func:`gannet.pipeline.exporting.export_segment` of a tier object: its kept messages
    under ``output`` (file names and ``broker=`` directories as for the local file it was);
    :class:`~gannet.pipeline.exporting.SegmentDamagedError` naming the object key at the first
    damage. ``bucket``: this worker's S3 client (:func:`open_bucket`) unless given."""
    bucket = bucket if bucket is not None else open_bucket(part.tier)
    writers = exporting.PartitionWriters(output, _as_segment(part))
    kept = 0
    try:
        for data, found in chunks(bucket, part, window_bytes):
            done, damage = exporting.write_chunks(data, [found], keep, writers)
            kept += done
            if damage is not None:
                raise exporting.SegmentDamagedError(damage)
    finally:
        files = writers.close()
    return exporting.SegmentExport(part.key, kept, files)


def verify_object(
    part: TierSegment, window_bytes: int = WINDOW_BYTES, bucket: RangeReads | None = None
) -> SegmentReport:
    """Every record of a tier object checked as a local segment's (:func:`gannet.pipeline.
    jobs.verify_segment`); damaged ranges named by the object key, the walk continuing after
    each. ``bucket``: this worker's S3 client (:func:`open_bucket`) unless given."""
    bucket = bucket if bucket is not None else open_bucket(part.tier)
    ok = 0
    damage: list[Damage] = []
    position = 0
    data_end = part.start_offset
    while position < part.size_bytes:
        window = read_window(bucket, part, position, window_bytes)
        resume: int | None = None
        for found in columns.chunks(window.data, window.segment, end=window.end):
            if isinstance(found, Damage):
                whole = _whole_damage(bucket, part, window, found)
                _add_damage(damage, whole)
                resume = whole.end_offset - part.start_offset
                break
            ok += len(found)
            data_end = window.segment.start_offset + int(found.positions[-1] + found.sizes[-1])
        if resume is not None:
            data_end = part.start_offset + resume
            position = resume
        elif window.end is None:
            break
        else:
            position += window.end
    return SegmentReport(part.key, part.start_offset, part.size_bytes, ok, data_end, tuple(damage))


def _add_damage(found: list[Damage], damage: Damage) -> None:
    """Append ``damage``, joined to the previous range when it continues it: a window that
    ends before the parser found the next valid record cuts one damaged range in two."""
    if found and found[-1].end_offset == damage.start_offset:
        found[-1] = dataclasses.replace(found[-1], end_offset=damage.end_offset)
    else:
        found.append(damage)


def _as_segment(part: TierSegment) -> Segment:
    """The local segment the object was (names of export files)."""
    return Segment(part.key, part.start_offset, part.size_bytes, False, part.group)
