"""Export of one segment's messages to Parquet, run on a Spark executor.

Each task writes its own files with pyarrow, straight from the mapped segment: no row crosses
into the JVM, which is what makes the export run at parsing speed rather than at the speed of
Spark's Python-to-Java row conversion. The segment is parsed in bulk into columns
(:mod:`gannet.pipeline.columns`: record boundaries in one pass, fixed fields gathered
column-wise, bodies cut into one Arrow buffer, properties parsed column-wise); each chunk's
kept records become one Arrow table, gathered per (topic, date) file. The layout is the Hive
layout Spark's own ``partitionBy("topic", "date")`` writes, so ``spark.read.parquet``, pyarrow
and other engines read it back with ``topic`` and ``date`` columns::

    <output>/topic=<topic, %-escaped>/date=<YYYY-MM-DD, UTC store date>/part-<segment>-<id>.parquet

Exported from several broker groups' stores at once (:func:`gannet.pipeline.jobs.export` given
(group, data dir) pairs), each file sits one level deeper, ``…/date=<date>/broker=<group>/``,
and its name starts ``part-<group>-``: Spark and pyarrow read ``broker`` as a column, so
``(broker, queue_id, queue_offset)`` names a message (queue ids and offsets are per group).

Columns in each file are :data:`ARROW_SCHEMA` (``message_id`` is the UNIQ_KEY, else the offset
message id; ``properties`` is the full map, ``keys`` the split KEYS). Prepared and rolled-back
transactional records are not messages and are skipped. A task holds at most one chunk of
the segment (:data:`gannet.pipeline.columns.CHUNK_BYTES`) in memory; each chunk's rows of one
(topic, date) go to that file's writer as one row group.

A damaged record fails the task with :class:`SegmentDamagedError`, which names the segment,
the byte range and the reason: an export never leaves messages out silently. ``gannet pipeline
verify`` lists every damaged range.

A task may export a byte range of a segment instead of all of it (``byte_range``: the records
starting in it), so that one large segment is several tasks; the files of a range are named
like a segment's (their random suffixes differ). A damaged record fails its range's task;
other ranges of the job may have written their files (the job has failed: no ``_SUCCESS``).

Called by :func:`gannet.pipeline.jobs.export` (driver: mode handling, ``_SUCCESS``).
"""

from __future__ import annotations

import datetime as dt
import posixpath
import urllib.parse
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gannet.node.store import properties as props
from gannet.node.store.log import layout, records
from gannet.pipeline import columns, propcolumns, segments
from gannet.pipeline.columns import Chunk
from gannet.pipeline.segments import Damage, Segment

MS_PER_DAY = 86_400_000
PARTITION_COLUMNS = ("topic", "date")

ARROW_SCHEMA = pa.schema(
    [
        pa.field("queue_id", pa.int32(), False),
        pa.field("queue_offset", pa.int64(), False),
        pa.field("commit_offset", pa.int64(), False),
        pa.field("size_bytes", pa.int32(), False),
        pa.field("message_id", pa.string(), False),
        pa.field("keys", pa.list_(pa.string()), False),
        pa.field("tag", pa.string(), True),
        pa.field("properties", pa.map_(pa.string(), pa.string()), False),
        pa.field("body", pa.binary(), False),
        pa.field("born_timestamp_ms", pa.int64(), False),
        pa.field("store_timestamp_ms", pa.int64(), False),
        pa.field("sys_flag", pa.int32(), False),
    ]
)
"""Columns stored in the files; ``topic`` and ``date`` are the directory names."""


@dataclass(frozen=True, slots=True)
class ExportFilter:
    """Which records an export keeps: topics (None = all) and store time in [since, until)."""

    topics: frozenset[str] | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def mask(self, chunk: Chunk) -> npt.NDArray[np.bool_]:
        """Which records of ``chunk`` are kept."""
        kind = chunk.sys_flags & 0xC  # records.transaction_type, column-wise
        keep: npt.NDArray[np.bool_] = (kind == records.SYSFLAG_TRANSACTION_NOT_TYPE) | (
            kind == records.SYSFLAG_TRANSACTION_COMMIT_TYPE
        )
        if self.topics is not None:
            wanted = pa.array(sorted(self.topics), pa.string())
            keep &= pc.is_in(chunk.topic_column, value_set=wanted).to_numpy(zero_copy_only=False)
        if self.since_ms is not None:
            keep &= chunk.store_timestamps_ms >= self.since_ms
        if self.until_ms is not None:
            keep &= chunk.store_timestamps_ms < self.until_ms
        return keep


class SegmentDamagedError(RuntimeError):
    """A segment holds a damaged range; the export of that segment stopped there."""

    def __init__(self, damage: Damage) -> None:
        self.damage = damage
        super().__init__(
            f"commit-log segment {damage.segment}: bytes {damage.start_offset}.."
            f"{damage.end_offset} hold no valid record ({damage.reason}); nothing of this "
            "segment from there on was exported. Run `gannet pipeline verify` on the store to "
            "list every damaged range, then restore the segment from a replica or backup"
        )


@dataclass(frozen=True, slots=True)
class SegmentExport:
    """What one task wrote for one segment."""

    segment: str
    messages: int
    files: int


def utc_date(epoch_ms: int) -> str:
    """``YYYY-MM-DD`` of a store time in UTC: the ``date`` partition value."""
    return dt.datetime.fromtimestamp(epoch_ms / 1000, dt.UTC).date().isoformat()


def partition_dir(topic: str, date: str) -> str:
    """``topic=<escaped>/date=<date>``; escaping as Spark's (any ``%XX`` is decoded back)."""
    return f"topic={urllib.parse.quote(topic, safe='-_.')}/date={date}"


def open_output(output: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and base path of ``output`` (a local path or a URI pyarrow knows)."""
    if "://" in output:
        filesystem, path = pafs.FileSystem.from_uri(output)
        return filesystem, path
    return pafs.LocalFileSystem(), posixpath.abspath(output)


def chunk_table(buf: layout.Buffer, chunk: Chunk, rows: npt.NDArray[np.int64]) -> pa.Table:
    """The :data:`ARROW_SCHEMA` columns of records ``rows`` (ascending indices) of ``chunk``,
    built column-wise (:mod:`gannet.pipeline.propcolumns`); all of them without a gather."""
    found = chunk.property_columns
    columns_made = [
        chunk.message_ids(buf),
        propcolumns.keys_lists(found.value(props.KEYS)),
        found.value(props.TAGS),
        found.maps(),
        chunk.bodies,
    ]
    numbers = [
        chunk.queue_ids,
        chunk.queue_offsets,
        chunk.commit_offsets,
        chunk.sizes,
        chunk.born_timestamps_ms,
        chunk.store_timestamps_ms,
        chunk.sys_flags,
    ]
    if len(rows) != len(chunk):
        index = pa.array(rows)
        columns_made = [c.take(index) for c in columns_made]
        numbers = [n[rows] for n in numbers]
    queue_ids, queue_offsets, commit_offsets, sizes, born, stored, sys_flags = numbers
    message_ids, keys, tags, maps, bodies = columns_made
    arrays = [
        pa.array(queue_ids, pa.int32()),
        pa.array(queue_offsets, pa.int64()),
        pa.array(commit_offsets, pa.int64()),
        pa.array(sizes, pa.int32()),
        message_ids,
        keys,
        tags,
        maps,
        bodies,
        pa.array(born, pa.int64()),
        pa.array(stored, pa.int64()),
        pa.array(sys_flags, pa.int32()),
    ]
    return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)


def partition_rows(
    chunk: Chunk, picked: npt.NDArray[np.int64]
) -> list[tuple[tuple[str, str], npt.NDArray[np.int64]]]:
    """The records ``picked`` (ascending indices) of ``chunk`` grouped by (topic, UTC store
    date), groups in the order of their first record; each group as indices into
    ``picked``, in record order."""
    if not len(picked):
        return []
    encoded = pc.dictionary_encode(chunk.topic_column.take(pa.array(picked)))
    names = encoded.dictionary.to_pylist()
    codes = encoded.indices.to_numpy().astype(np.int64)
    days = chunk.store_timestamps_ms[picked] // MS_PER_DAY
    first_day = int(days.min())
    keys = codes * (int(days.max()) - first_day + 1) + (days - first_day)
    if int(keys.min()) == int(keys.max()):  # one topic and one date: the common case
        return [((names[int(codes[0])], utc_date(int(days[0]) * MS_PER_DAY)), np.arange(len(keys)))]
    order = np.argsort(keys, kind="stable")  # record order kept within each group
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    bounds = [*starts.tolist(), len(order)]
    groups = [order[bounds[g] : bounds[g + 1]] for g in range(len(starts))]
    groups.sort(key=lambda rows: int(rows[0]))
    return [
        ((names[int(codes[rows[0]])], utc_date(int(days[rows[0]]) * MS_PER_DAY)), rows)
        for rows in groups
    ]


class PartitionWriters:
    """One open Parquet writer per (topic, date) met in a segment."""

    def __init__(self, output: str, segment: Segment) -> None:
        self.filesystem, self.base = open_output(output)
        group = f"{segment.group}-" if segment.group else ""
        self.file_stem = f"part-{group}{segment.name}-{uuid.uuid4().hex[:12]}"
        self.group_dir = (
            f"/broker={urllib.parse.quote(segment.group, safe='-_.')}" if segment.group else ""
        )
        self.writers: dict[tuple[str, str], pq.ParquetWriter] = {}

    def write(self, key: tuple[str, str], table: pa.Table) -> None:
        writer = self.writers.get(key)
        if writer is None:
            directory = posixpath.join(self.base, partition_dir(*key) + self.group_dir)
            self.filesystem.create_dir(directory, recursive=True)
            path = posixpath.join(directory, f"{self.file_stem}.parquet")
            writer = pq.ParquetWriter(path, ARROW_SCHEMA, filesystem=self.filesystem)
            self.writers[key] = writer
        writer.write_table(table)

    def close(self) -> int:
        """Close every file; the number of files."""
        for writer in self.writers.values():
            writer.close()
        return len(self.writers)


def export_segment(
    segment: Segment,
    keep: ExportFilter,
    output: str,
    byte_range: tuple[int, int | None] | None = None,
) -> SegmentExport:
    """Write the kept messages of one segment under ``output``; SegmentDamagedError at the
    first damaged record (what was before it is written).

    ``byte_range`` = (cut, next cut or None for the file's end) exports only the records
    starting in it (:func:`columns.range_chunks`: the ranges of consecutive cuts split a
    segment's records between them without overlap; what :func:`gannet.pipeline.jobs.export`
    gives each task).
    """
    writers = PartitionWriters(output, segment)
    try:
        with segments.mapped(segment) as buf:
            cut, next_cut = (0, None) if byte_range is None else byte_range
            parts = columns.range_chunks(buf, segment, cut, next_cut)
            kept, damage = write_chunks(buf, parts, keep, writers)
            del parts  # no view of the mapping may outlive it
    finally:
        files = writers.close()
    if damage is not None:  # raised once the mapping is closed
        raise SegmentDamagedError(damage)
    return SegmentExport(segment.name, kept, files)


def write_chunks(
    buf: layout.Buffer,
    parts: Iterable[Chunk | Damage],
    keep: ExportFilter,
    writers: PartitionWriters,
) -> tuple[int, Damage | None]:
    """Write the kept records of ``parts`` (chunks parsed from ``buf``) to ``writers`` up to the
    first damage; the number kept and that damage (the caller raises
    :class:`SegmentDamagedError` once the bytes are released). Also used for the windows of a
    tier object (:mod:`gannet.pipeline.objects`)."""
    kept = 0
    for part in parts:
        if isinstance(part, Damage):
            return kept, part
        picked = np.flatnonzero(keep.mask(part))
        groups = partition_rows(part, picked)
        table = chunk_table(buf, part, picked) if groups else None
        for key, rows in groups:
            assert table is not None
            writers.write(key, table if len(rows) == len(picked) else table.take(rows))
            kept += len(rows)
    return kept, None
