"""Bulk Spark jobs over commit-log segments: export, rebuild, verify.

Every job parallelises one Spark task per segment (``sparkContext.parallelize(segments,
len(segments))`` then ``mapPartitions``): executors map their segment file read-only and parse
it with the store's own codecs (:mod:`gannet.node.store.records` through
:mod:`gannet.pipeline.segments`). Records never straddle files, so no task needs another's
bytes.

* :func:`export` writes messages of chosen topics and store-time range to Parquet, partitioned
  by ``topic`` and ``date`` (UTC date of the store time). Prepared and rolled-back
  transactional records are not messages and are left out.
* :func:`rebuild` collects the dispatch infos of every segment and writes, on the driver and in
  commit-log order, the consume queues and index files with the store's own
  ``ConsumeQueueStore``/``IndexService`` — the same dispatch rules, so the same bytes as the
  broker's dispatch. It stops at the first damaged range or missing segment, as dispatch
  does. Index files are named from the store time of the message that opened them (the broker
  uses its wall clock), so a rebuild is reproducible; compare index files by order.
* :func:`verify` checks every record's structure, body CRC, whole-record CRC and
  PHYSICALOFFSET and reports damaged ranges (segment, from, to, reason) plus missing segments.

Usage on one machine (``--master`` defaults to ``local[*]``)::

    python -m gannet.pipeline.jobs verify ~/.gannet/store
    python -m gannet.pipeline.jobs export ~/.gannet/store /data/out --topic orders \\
        --since 2026-11-01T00:00:00Z --until 2026-11-02T00:00:00Z
    python -m gannet.pipeline.jobs rebuild ~/.gannet/store /data/rebuilt
    gannet pipeline verify ~/.gannet/store          # the same commands in the gannet CLI

On a cluster, ``spark-submit`` runs a Python *file* (it has no ``-m``), so pass this module's
path; segment folders must be readable at the same path on every executor (shared or copied
storage), and the gannet code must be importable there (install the ``gannet[pipeline]``
distribution on the workers, or ship it with ``--py-files``)::

    spark-submit --master spark://host:7077 \\
        "$(python -c 'import gannet.pipeline.jobs as j; print(j.__file__)')" \\
        export /shared/store /shared/export --topic orders

Under ``spark-submit`` the ``--master`` of ``spark-submit`` wins unless the job's own
``--master`` is given. Functions here take a ``SparkSession`` so tests share one session.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as st

from gannet.node.store import records
from gannet.node.store.config import StoreConfig
from gannet.node.store.consume_queues import ConsumeQueueStore
from gannet.node.store.index_files import IndexService
from gannet.node.store.msgids import create_offset_msg_id
from gannet.node.store.properties import split_keys
from gannet.node.store.records import DispatchInfo
from gannet.pipeline import segments
from gannet.pipeline.segments import Damage, Segment

DEFAULT_MASTER = "local[*]"
APP_NAME = "gannet-pipeline"
_CONSUMABLE_TRANSACTION_TYPES = (
    records.SYSFLAG_TRANSACTION_NOT_TYPE,
    records.SYSFLAG_TRANSACTION_COMMIT_TYPE,
)

EXPORT_SCHEMA = st.StructType(
    [
        st.StructField("topic", st.StringType(), False),
        st.StructField("queue_id", st.IntegerType(), False),
        st.StructField("queue_offset", st.LongType(), False),
        st.StructField("commit_offset", st.LongType(), False),
        st.StructField("size_bytes", st.IntegerType(), False),
        st.StructField("message_id", st.StringType(), False),
        st.StructField("keys", st.ArrayType(st.StringType(), False), False),
        st.StructField("tag", st.StringType(), True),
        st.StructField("properties", st.MapType(st.StringType(), st.StringType(), False), False),
        st.StructField("body", st.BinaryType(), False),
        st.StructField("born_timestamp_ms", st.LongType(), False),
        st.StructField("store_timestamp_ms", st.LongType(), False),
        st.StructField("sys_flag", st.IntegerType(), False),
        st.StructField("date", st.StringType(), False),
    ]
)
"""Columns of an export; ``message_id`` is the UNIQ_KEY, else the offset message id."""


# --------------------------------------------------------------------------- session


def session(master: str | None = None, app_name: str = APP_NAME) -> SparkSession:
    """A Spark session; ``master=None`` keeps spark-submit's master, else ``local[*]``.

    Local masters bind to the loopback interface only.
    """
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    chosen = master if master is not None else (None if under_submit else DEFAULT_MASTER)
    builder = SparkSession.builder.appName(app_name)
    if chosen is not None:
        builder = builder.master(chosen)
    if chosen is not None and chosen.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
        )
    return builder.getOrCreate()


def _segment_rdd(spark: SparkSession, found: list[Segment]) -> Any:
    """One partition per segment (the Spark boundary: RDDs are untyped)."""
    return spark.sparkContext.parallelize(found, max(1, len(found)))


def _require_segments(source: Path) -> list[Segment]:
    found = segments.find_segments(source)
    if not found:
        raise FileNotFoundError(f"{source}: no commit-log segments (20-digit file names)")
    return found


# --------------------------------------------------------------------------- export


@dataclass(frozen=True, slots=True)
class ExportFilter:
    """Which records an export keeps: topics (None = all) and store time in [since, until)."""

    topics: frozenset[str] | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def keeps(self, info: DispatchInfo) -> bool:
        if records.transaction_type(info.sys_flag) not in _CONSUMABLE_TRANSACTION_TYPES:
            return False
        if self.topics is not None and info.topic not in self.topics:
            return False
        if self.since_ms is not None and info.store_timestamp_ms < self.since_ms:
            return False
        return self.until_ms is None or info.store_timestamp_ms < self.until_ms


@dataclass(frozen=True, slots=True)
class ExportReport:
    segments: int
    commitlog_bytes: int
    messages: int
    elapsed_s: float


def utc_date(epoch_ms: int) -> str:
    """``YYYY-MM-DD`` of a store time in UTC: the ``date`` partition value."""
    return dt.datetime.fromtimestamp(epoch_ms / 1000, dt.UTC).date().isoformat()


def export_row(buf: records.Buffer, position: int, info: DispatchInfo) -> tuple[object, ...]:
    """One Parquet row (in :data:`EXPORT_SCHEMA` order) of the record at ``position``."""
    msg = records.decode(buf, position)
    message_id = msg.uniq_key or create_offset_msg_id(*msg.store_host, info.commit_offset)
    return (
        msg.topic,
        msg.queue_id,
        msg.queue_offset,
        info.commit_offset,
        info.size,
        message_id,
        split_keys(info.keys),
        msg.tags,
        msg.properties,
        msg.body,
        msg.born_timestamp_ms,
        msg.store_timestamp_ms,
        msg.sys_flag,
        utc_date(msg.store_timestamp_ms),
    )


def _export_partition(
    keep: ExportFilter, counter: Any, parts: Iterable[Segment]
) -> Iterator[tuple[object, ...]]:
    """Executor side: rows of the kept records of each segment of this partition."""
    for segment in parts:
        kept = 0
        with segments.mapped(segment) as buf:
            for event in segments.scan(buf, segment):
                if isinstance(event, segments.Record) and keep.keeps(event.info):
                    kept += 1
                    yield export_row(buf, event.position, event.info)
        counter.add(kept)


def export(
    spark: SparkSession,
    source: Path,
    output: str,
    keep: ExportFilter = ExportFilter(),
    *,
    mode: str = "errorifexists",
) -> ExportReport:
    """Write the kept messages of ``source`` to Parquet at ``output`` (``topic=…/date=…``)."""
    started = time.monotonic()
    found = _require_segments(source)
    counter = spark.sparkContext.accumulator(0)
    rows = _segment_rdd(spark, found).mapPartitions(partial(_export_partition, keep, counter))
    frame = spark.createDataFrame(rows, EXPORT_SCHEMA)
    frame.write.mode(mode).partitionBy("topic", "date").parquet(output)
    return ExportReport(
        segments=len(found),
        commitlog_bytes=sum(s.size_bytes for s in found),
        messages=int(counter.value),
        elapsed_s=time.monotonic() - started,
    )


# --------------------------------------------------------------------------- verify


@dataclass(frozen=True, slots=True)
class SegmentReport:
    """What :func:`verify` found in one segment."""

    segment: str
    start_offset: int
    size_bytes: int
    records_ok: int
    data_end_offset: int
    damage: tuple[Damage, ...]


@dataclass(frozen=True, slots=True)
class VerifyReport:
    segments: tuple[SegmentReport, ...]
    damage: tuple[Damage, ...]
    elapsed_s: float

    @property
    def clean(self) -> bool:
        return not self.damage

    @property
    def records_ok(self) -> int:
        return sum(s.records_ok for s in self.segments)

    @property
    def commitlog_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)


def verify_segment(segment: Segment) -> SegmentReport:
    """Scan one segment with CRC checks (runs on an executor)."""
    ok = 0
    damage: list[Damage] = []
    data_end = segment.start_offset
    with segments.mapped(segment) as buf:
        for event in segments.scan(buf, segment, check_crc=True):
            if isinstance(event, segments.Record):
                ok += 1
            elif isinstance(event, Damage):
                damage.append(event)
            else:
                data_end = event.data_end_offset
    return SegmentReport(
        segment.name, segment.start_offset, segment.size_bytes, ok, data_end, tuple(damage)
    )


def _verify_partition(parts: Iterable[Segment]) -> Iterator[SegmentReport]:
    for segment in parts:
        yield verify_segment(segment)


def verify(spark: SparkSession, source: Path) -> VerifyReport:
    """Check every record of every segment of ``source``; damaged ranges in offset order."""
    started = time.monotonic()
    found = _require_segments(source)
    reports: list[SegmentReport] = (
        _segment_rdd(spark, found).mapPartitions(_verify_partition).collect()
    )
    damage = [d for r in reports for d in r.damage] + segments.gaps(found)
    damage.sort(key=lambda d: d.start_offset)
    return VerifyReport(tuple(reports), tuple(damage), time.monotonic() - started)


# --------------------------------------------------------------------------- rebuild


@dataclass(frozen=True, slots=True)
class RebuildReport:
    segments: int
    commitlog_bytes: int
    records: int
    consume_queues: int
    index_files: int
    dispatched_end_offset: int
    stopped_at: Damage | None
    elapsed_s: float


def _dispatch_partition(parts: Iterable[Segment]) -> Iterator[DispatchInfo | Damage]:
    """Executor side: dispatch infos (without the property map) until a segment's damage."""
    for segment in parts:
        with segments.mapped(segment) as buf:
            for event in segments.scan(buf, segment, check_crc=True):
                if isinstance(event, segments.Record):
                    yield event.info._replace(properties={})
                elif isinstance(event, Damage):
                    yield event
                    break


@dataclass(slots=True)
class _Dispatcher:
    """Driver side: the broker's dispatch chain (consume queue, then index) for one target.

    Invariant: infos arrive in commit-log order; ``last_store_timestamp_ms`` is the store time
    of the record being dispatched, which names index files created for it.
    """

    config: StoreConfig
    queues: ConsumeQueueStore = field(init=False)
    index: IndexService | None = field(init=False)
    records: int = 0
    end_offset: int = 0
    last_store_timestamp_ms: int = 0

    def __post_init__(self) -> None:
        self.queues = ConsumeQueueStore(self.config)
        self.index = None
        if self.config.index_enabled:
            self.index = IndexService(self.config, clock_ms=self._clock_ms)

    def _clock_ms(self) -> int:
        return self.last_store_timestamp_ms or time.time_ns() // 1_000_000

    def dispatch(self, info: DispatchInfo) -> None:
        self.last_store_timestamp_ms = info.store_timestamp_ms
        if records.transaction_type(info.sys_flag) in _CONSUMABLE_TRANSACTION_TYPES:
            cq = self.queues.find_or_create(info.topic, info.queue_id)
            cq.put(info.commit_offset, info.size, info.tags_code, info.queue_offset)
        if self.index is not None:
            self.index.build_index(info)
        self.records += 1
        self.end_offset = info.commit_offset + info.size

    def close(self) -> tuple[int, int]:
        """Flush and close everything; (consume queues, index files) written."""
        queues = len(self.queues.queues())
        index_files = len(self.index.files) if self.index is not None else 0
        self.queues.flush_all(0)
        self.queues.close()
        if self.index is not None:
            self.index.close()
        return queues, index_files


def rebuild(spark: SparkSession, source: Path, target: StoreConfig) -> RebuildReport:
    """Write the consume queues and index files of ``source``'s commit log under
    ``target.root_dir`` (which must not hold any yet), with ``target``'s file sizes."""
    started = time.monotonic()
    found = _require_segments(source)
    _require_empty(target.consume_queue_dir)
    _require_empty(target.index_dir)
    missing = segments.gaps(found)
    stop_at = missing[0] if missing else None
    dispatcher = _Dispatcher(target)
    stopped: Damage | None = None
    try:
        events: Iterator[DispatchInfo | Damage] = (
            _segment_rdd(spark, found)
            .mapPartitions(_dispatch_partition)
            .toLocalIterator(prefetchPartitions=True)
        )
        for event in events:
            if isinstance(event, Damage):
                stopped = event
                break
            if stop_at is not None and event.commit_offset >= stop_at.start_offset:
                stopped = stop_at
                break
            dispatcher.dispatch(event)
    finally:
        queues, index_files = dispatcher.close()
    return RebuildReport(
        segments=len(found),
        commitlog_bytes=sum(s.size_bytes for s in found),
        records=dispatcher.records,
        consume_queues=queues,
        index_files=index_files,
        dispatched_end_offset=dispatcher.end_offset,
        stopped_at=stopped,
        elapsed_s=time.monotonic() - started,
    )


def rebuild_in_place(spark: SparkSession, config: StoreConfig) -> RebuildReport:
    """Replace the consume queues and index files of a store that no broker has open.

    The store's lock file is held meanwhile; the new files are built beside the store and
    swapped in only after the rebuild finished.
    """
    root = config.root_dir
    staging = root / ".rebuild"
    shutil.rmtree(staging, ignore_errors=True)
    with _store_lock(config):
        report = rebuild(spark, root, dataclasses.replace(config, root_dir=staging))
        for name in ("consumequeue", "index"):
            shutil.rmtree(root / name, ignore_errors=True)
            if (staging / name).exists():
                (staging / name).rename(root / name)
        shutil.rmtree(staging, ignore_errors=True)
    return report


class StoreLockedError(RuntimeError):
    """The store directory is open in a broker (its lock file is held)."""


@contextmanager
def _store_lock(config: StoreConfig) -> Iterator[None]:
    """Hold the store's lock file, as a broker does, for the duration of the block."""
    fd = os.open(config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raise StoreLockedError(
                f"{config.root_dir} is open in a running broker; stop it first"
            ) from exc
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _require_empty(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} is not empty; rebuild into a fresh directory")


def store_config_for(
    root: Path,
    *,
    commitlog_file_size_bytes: int,
    consume_queue_units_per_file: int,
    index_hash_slots: int,
    index_items_max: int,
    index_enabled: bool = True,
) -> StoreConfig:
    """The target of a rebuild: a store config with the sizes the broker used."""
    return StoreConfig(
        root_dir=root,
        commitlog_file_size_bytes=commitlog_file_size_bytes,
        consume_queue_units_per_file=consume_queue_units_per_file,
        index_hash_slots=index_hash_slots,
        index_items_max=index_items_max,
        index_enabled=index_enabled,
    )


def main() -> None:
    """``python -m gannet.pipeline.jobs`` / ``spark-submit jobs.py``: the pipeline CLI."""
    from gannet.pipeline import cli  # noqa: PLC0415 - cli imports this module lazily too

    cli.pipeline(prog_name="gannet.pipeline.jobs")


if __name__ == "__main__":
    main()
