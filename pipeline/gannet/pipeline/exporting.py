"""Export of one segment's messages to Parquet, run on a Spark executor.

Each task writes its own files with pyarrow, straight from the mapped segment: no row crosses
into the JVM, which is what makes the export run at parsing speed rather than at the speed of
Spark's Python-to-Java row conversion. The layout is the Hive layout Spark's own
``partitionBy("topic", "date")`` writes, so ``spark.read.parquet``, pyarrow and other engines
read it back with ``topic`` and ``date`` columns::

    <output>/topic=<topic, %-escaped>/date=<YYYY-MM-DD, UTC store date>/part-<segment>-<id>.parquet

Columns in each file are :data:`ARROW_SCHEMA` (``message_id`` is the UNIQ_KEY, else the offset
message id; ``properties`` is the full map, ``keys`` the split KEYS). Prepared and rolled-back
transactional records are not messages and are skipped. A task buffers at most
``BATCH_ROWS_MAX`` rows per (topic, date) before handing them to that file's writer.

Called by :func:`gannet.pipeline.jobs.export` (driver: mode handling, ``_SUCCESS``).
"""

from __future__ import annotations

import datetime as dt
import posixpath
import urllib.parse
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gannet.node.store import records
from gannet.node.store.msgids import create_offset_msg_id
from gannet.node.store.properties import split_keys
from gannet.node.store.records import DispatchInfo
from gannet.pipeline import segments
from gannet.pipeline.segments import Segment

BATCH_ROWS_MAX = 2048
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

    def keeps(self, info: DispatchInfo) -> bool:
        if not segments.is_consumable(info.sys_flag):
            return False
        if self.topics is not None and info.topic not in self.topics:
            return False
        if self.since_ms is not None and info.store_timestamp_ms < self.since_ms:
            return False
        return self.until_ms is None or info.store_timestamp_ms < self.until_ms


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


def message_row(buf: records.Buffer, position: int, info: DispatchInfo) -> dict[str, object]:
    """The :data:`ARROW_SCHEMA` columns of the record at ``position``."""
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


class _PartitionWriters:
    """One open Parquet writer per (topic, date) met in a segment, each with a row buffer."""

    def __init__(self, output: str, segment: Segment) -> None:
        self.filesystem, self.base = open_output(output)
        self.file_stem = f"part-{segment.name}-{uuid.uuid4().hex[:12]}"
        self.writers: dict[tuple[str, str], pq.ParquetWriter] = {}
        self.buffers: dict[tuple[str, str], list[dict[str, object]]] = {}

    def add(self, key: tuple[str, str], row: dict[str, object]) -> None:
        rows = self.buffers.setdefault(key, [])
        rows.append(row)
        if len(rows) >= BATCH_ROWS_MAX:
            self._flush(key)

    def _flush(self, key: tuple[str, str]) -> None:
        rows = self.buffers.pop(key, [])
        if not rows:
            return
        writer = self.writers.get(key)
        if writer is None:
            directory = posixpath.join(self.base, partition_dir(*key))
            self.filesystem.create_dir(directory, recursive=True)
            path = posixpath.join(directory, f"{self.file_stem}.parquet")
            writer = pq.ParquetWriter(path, ARROW_SCHEMA, filesystem=self.filesystem)
            self.writers[key] = writer
        writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA))

    def close(self) -> int:
        """Write what is buffered and close every file; the number of files."""
        for key in list(self.buffers):
            self._flush(key)
        for writer in self.writers.values():
            writer.close()
        return len(self.writers)


def export_segment(segment: Segment, keep: ExportFilter, output: str) -> SegmentExport:
    """Write the kept messages of one segment under ``output``."""
    writers = _PartitionWriters(output, segment)
    kept = 0
    try:
        with segments.mapped(segment) as buf:
            for event in segments.scan(buf, segment):
                if isinstance(event, segments.Record) and keep.keeps(event.info):
                    key = (event.info.topic, utc_date(event.info.store_timestamp_ms))
                    writers.add(key, message_row(buf, event.position, event.info))
                    kept += 1
    finally:
        files = writers.close()
    return SegmentExport(segment.name, kept, files)
