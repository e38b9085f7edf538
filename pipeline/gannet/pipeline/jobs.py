"""Bulk Spark jobs over commit-log segments: export, rebuild, verify.

Every job parallelises one Spark task per segment (``sparkContext.parallelize(segments,
len(segments))`` then ``mapPartitions``; export cuts large segments into byte ranges):
executors map their segment file read-only; export and rebuild parse it in bulk into columns
(:mod:`gannet.pipeline.columns`), verify record by record with the store's own check
(:mod:`gannet.node.store.log.records` through :mod:`gannet.pipeline.segments`). Records never
straddle files, so no task needs another's bytes.

* :func:`export` writes messages of chosen topics and store-time range to Parquet, partitioned
  by ``topic`` and ``date`` (UTC date of the store time) in the layout of Spark's
  ``partitionBy``; a segment larger than the job's bytes ÷ task slots (and than
  :data:`SPLIT_BYTES_MIN`) is cut into byte ranges, one task each (:func:`task_ranges`), so
  one large segment keeps every slot busy; each task writes its files with pyarrow
  (:mod:`exporting`), so
  OUTPUT is a path every executor can write (shared storage) or a URI pyarrow knows
  (``hdfs://``, ``s3://``). Prepared and rolled-back transactional records are left out. A
  damaged record fails the job with the segment, byte range and reason
  (:class:`gannet.pipeline.exporting.SegmentDamagedError`) instead of leaving messages out.
* :func:`rebuild` collects the dispatch columns of every segment and writes, on the driver and
  in commit-log order, the consume queues and index files in bulk with the store's own
  ``ConsumeQueueStore``/``IndexService`` (:meth:`rebuilding.Dispatcher.dispatch_columns`) —
  the same dispatch rules, so the same bytes as the broker's dispatch. It stops at the first
  damaged range or missing segment, as dispatch does. Index files are named from the store
  time of the message that opened them (the broker uses its wall clock), so a rebuild is
  reproducible; compare index files by order.
* :func:`verify` checks every record's structure, body CRC, whole-record CRC and
  PHYSICALOFFSET and reports damaged ranges (segment, from, to, reason) plus missing segments.
  Files are only read; on a store a broker is writing, the report is a snapshot (a record
  being appended at that moment may show as a torn tail).

Export and verify also take a broker group's tier (:class:`gannet.pipeline.sources.
TieredSource`: its bucket and manifest, with or without its store directory): each tier object
is one task that reads it straight from the bucket by ranged GETs (:mod:`gannet.pipeline.
objects`), followed by the local files after the tier's end.

Usage on one machine (``--master`` defaults to ``local[*]``), through the ``gannet`` command
(:mod:`gannet.node.cli.pipeline`)::

    gannet pipeline verify ~/.gannet/store
    gannet pipeline export ~/.gannet/store /data/out --topic orders \\
        --since 2026-11-01T00:00:00Z --until 2026-11-02T00:00:00Z
    gannet pipeline rebuild ~/.gannet/store /data/rebuilt   # broker sizes:
        # --cq-units-per-file, --index-hash-slots, --index-items-max (RocketMQ defaults)
    gannet pipeline rebuild ~/.gannet/store --in-place     # broker stopped

On a cluster, ``spark-submit`` runs a Python *file* (it has no ``-m``), so pass the path of
the CLI's pipeline module, :mod:`gannet.node.cli.pipeline`. Segment folders must be readable
at the same path on every executor (shared or copied storage; export OUTPUT likewise, or an
``hdfs://``/``s3://`` URI). Executors need pyarrow and the gannet code: install the
``gannet[pipeline]`` distribution on the workers, or ship the two source roots as one zip
(``gannet`` is a namespace package; zipimport handles that)::

    (cd node && zip -qr /tmp/gannet.zip gannet) && (cd pipeline && zip -qr /tmp/gannet.zip gannet)
    spark-submit --master spark://host:7077 --py-files /tmp/gannet.zip \\
        node/gannet/node/cli/pipeline.py export /shared/store /shared/export --topic orders
    spark-submit --master spark://host:7077 --py-files /tmp/gannet.zip \\
        "$(python -c 'import gannet.node.cli.pipeline as p; print(p.__file__)')" \\
        verify /shared/store

Under ``spark-submit`` the ``--master`` of ``spark-submit`` wins unless the job's own
``--master`` is given. Functions here take a ``SparkSession`` so tests share one session.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
from pyspark.sql import SparkSession

from gannet.node.store.config import StoreConfig
from gannet.pipeline import exporting, objects, rebuilding, segments
from gannet.pipeline.reports import ExportReport, RebuildReport, SegmentReport, VerifyReport
from gannet.pipeline.segments import Damage, Segment
from gannet.pipeline.sources import Part, TieredSource, TierSegment

DEFAULT_MASTER = "local[*]"
APP_NAME = "gannet-pipeline"
SEGMENTS_PER_TASK_SLOT_IN_WAVE = 4  # rebuild: segments per Spark job = this × parallelism

# --------------------------------------------------------------------------- session


def session(master: str | None = None, app_name: str = APP_NAME) -> SparkSession:
    """A Spark session; ``master=None`` keeps spark-submit's master, else ``local[*]``.

    Local masters bind to the loopback interface only. Spark logs errors only.
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
    # The CLI draws its own progress bar; Spark's would interleave with it.
    spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _segment_rdd(spark: SparkSession, found: Sequence[Part]) -> Any:
    """One partition per segment (the Spark boundary: RDDs are untyped)."""
    return spark.sparkContext.parallelize(found, max(1, len(found)))


def _require_segments(source: Path) -> list[Segment]:
    found = segments.find_segments(source)
    if not found:
        raise FileNotFoundError(f"{source}: no commit-log segments (20-digit file names)")
    return found


# --------------------------------------------------------------------------- export


ExportFilter = exporting.ExportFilter
KEEP_ALL = ExportFilter()
EXPORT_MODES = ("errorifexists", "overwrite", "append", "ignore")


SPLIT_BYTES_MIN = 8 * 2**20
"""Export and rebuild: a segment is cut into byte ranges of at least this many bytes (see
:func:`task_ranges`)."""

TaskRange = tuple[Part, int, int | None]


def task_ranges(found: Sequence[Part], parallelism: int) -> list[TaskRange]:
    """The tasks of an export or rebuild: each segment cut into byte ranges of about the job's
    bytes ÷ ``parallelism`` (at least :data:`SPLIT_BYTES_MIN`), so that few or large segments
    still keep every task slot busy; many small segments stay one task each. A range holds the
    records that start in it (:func:`gannet.pipeline.columns.range_chunks`); the last range of
    a segment runs to the file's end as it is when the task runs (None). A tier object is one
    task, read in windows (:mod:`gannet.pipeline.objects`): finding the first record after a
    cut needs a walk from the object's start, which is a GET per record over S3."""
    total = sum(s.size_bytes for s in found)
    target = max(SPLIT_BYTES_MIN, -(-total // max(1, parallelism)))
    ranges: list[TaskRange] = []
    for segment in found:
        if isinstance(segment, TierSegment):
            ranges.append((segment, 0, None))
            continue
        parts = max(1, -(-segment.size_bytes // target))
        step = -(-segment.size_bytes // parts)
        cuts: list[int | None] = [i * step for i in range(1, parts)]
        ranges += [(segment, i * step, cut) for i, cut in enumerate([*cuts, None])]
    return ranges


def _export_partition(
    keep: ExportFilter, output: str, parts: Iterable[TaskRange]
) -> Iterator[exporting.SegmentExport]:
    for segment, cut, next_cut in parts:
        if isinstance(segment, TierSegment):
            yield objects.export_object(segment, keep, output)
            continue
        whole = cut == 0 and next_cut is None
        yield exporting.export_segment(segment, keep, output, None if whole else (cut, next_cut))


def export(
    spark: SparkSession,
    source: Path | Sequence[tuple[str, Path]] | TieredSource,
    output: str,
    keep: ExportFilter = KEEP_ALL,
    *,
    mode: str = "errorifexists",
) -> ExportReport:
    """Write the kept messages of ``source`` to Parquet at ``output`` (``topic=…/date=…``).

    ``source`` is one store, or several broker groups' stores as (group name, data dir) pairs:
    one job over all their segments, each group's files under ``…/broker=<group>/``
    (:mod:`exporting`). ``mode`` is Spark's save mode: ``errorifexists`` refuses an existing
    output, ``overwrite`` deletes it first, ``append`` adds files, ``ignore`` does nothing when
    it exists. A :class:`~gannet.pipeline.sources.TieredSource` is a broker group's tier, with
    or without its local store: its objects are read from the bucket by the executors
    (:mod:`gannet.pipeline.objects`), then the local files after the tier's end.
    """
    started = time.monotonic()
    found: list[Part]
    if isinstance(source, TieredSource):
        found = source.parts()
    elif isinstance(source, Path):
        found = list(_require_segments(source))
    else:
        names = [name for name, _ in source]
        if not names or len(set(names)) != len(names) or not all(names):
            raise ValueError(f"broker groups must be distinct non-empty names, not {names}")
        found = [
            dataclasses.replace(segment, group=name)
            for name, path in source
            for segment in _require_segments(path)
        ]
    if mode not in EXPORT_MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(EXPORT_MODES)}")
    filesystem, base = exporting.open_output(output)
    exists = filesystem.get_file_info(base).type != pafs.FileType.NotFound
    if exists and mode == "errorifexists":
        raise FileExistsError(f"{output} exists; choose --mode overwrite or append")
    done: list[exporting.SegmentExport] = []
    if not (exists and mode == "ignore"):
        if exists and mode == "overwrite":
            filesystem.delete_dir(base)
        ranges = task_ranges(found, int(spark.sparkContext.defaultParallelism))
        tasks = spark.sparkContext.parallelize(ranges, len(ranges))
        work = tasks.mapPartitions(partial(_export_partition, keep, output))
        done = work.collect()
        filesystem.create_dir(base, recursive=True)
        with filesystem.open_output_stream(posixpath.join(base, "_SUCCESS")):
            pass
    return ExportReport(
        segments=len(found),
        commitlog_bytes=sum(s.size_bytes for s in found),
        messages=sum(d.messages for d in done),
        files=sum(d.files for d in done),
        elapsed_s=time.monotonic() - started,
    )


# --------------------------------------------------------------------------- verify


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


def _verify_partition(parts: Iterable[Part]) -> Iterator[SegmentReport]:
    for segment in parts:
        if isinstance(segment, TierSegment):
            yield objects.verify_object(segment)
        else:
            yield verify_segment(segment)


def verify(spark: SparkSession, source: Path | TieredSource) -> VerifyReport:
    """Check every record of every segment of ``source``; damaged ranges in offset order. A
    tiered source's objects are checked from the bucket by the executors (damage named by the
    object key); its series is contiguous by construction (:func:`sources.series`)."""
    started = time.monotonic()
    found: list[Part] = (
        source.parts() if isinstance(source, TieredSource) else list(_require_segments(source))
    )
    reports: list[SegmentReport] = (
        _segment_rdd(spark, found).mapPartitions(_verify_partition).collect()
    )
    local = [s for s in found if isinstance(s, Segment)]
    damage = [d for r in reports for d in r.damage] + segments.gaps(local)
    damage.sort(key=lambda d: d.start_offset)
    return VerifyReport(tuple(reports), tuple(damage), time.monotonic() - started)


# --------------------------------------------------------------------------- rebuild


def _in_segment_order(
    spark: SparkSession, found: list[Part]
) -> Iterator[rebuilding.DispatchColumns | Damage]:
    """Dispatch events of all segments in commit-log order, one wave of Spark tasks at a time.

    Each job (a *wave*) parses ``SEGMENTS_PER_TASK_SLOT_IN_WAVE × defaultParallelism``
    segments or byte ranges of large ones (:func:`task_ranges`): fewer jobs than one per
    segment, bounded driver memory. The next wave is parsed on the executors while the driver
    dispatches the current one, so the driver holds at most two waves of dispatch columns
    (about 100 bytes per record).
    """
    context = spark.sparkContext
    ranges = task_ranges(found, int(context.defaultParallelism))
    rdd: Any = context.parallelize(ranges, len(ranges))  # local segments only: rebuild
    wave = max(1, int(context.defaultParallelism) * SEGMENTS_PER_TASK_SLOT_IN_WAVE)
    waves = [range(i, min(len(ranges), i + wave)) for i in range(0, len(ranges), wave)]

    def run(partitions: range) -> list[rebuilding.DispatchColumns | Damage]:
        result: list[rebuilding.DispatchColumns | Damage] = context.runJob(
            rdd, rebuilding.dispatch_events, partitions
        )
        return result

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gannet-rebuild") as pool:
        pending = [pool.submit(run, waves[0])] if waves else []
        for index in range(len(waves)):
            events = pending.pop().result()
            if index + 1 < len(waves):
                pending.append(pool.submit(run, waves[index + 1]))
            yield from events


StoreLockedError = rebuilding.StoreLockedError
store_config_for = rebuilding.store_config_for


def rebuild(spark: SparkSession, source: Path | TieredSource, target: StoreConfig) -> RebuildReport:
    """Write the consume queues and index files of ``source``'s commit log under
    ``target.root_dir`` (which must not hold any yet), with ``target``'s file sizes. A tiered
    source's objects are read from the bucket by the executors, in commit-log order with the
    local files after them (its series is contiguous by construction)."""
    started = time.monotonic()
    found: list[Part] = (
        source.parts() if isinstance(source, TieredSource) else list(_require_segments(source))
    )
    rebuilding.require_empty(target.consume_queue_dir)
    rebuilding.require_empty(target.index_dir)
    missing = segments.gaps([s for s in found if isinstance(s, Segment)])
    stop_at = missing[0] if missing else None
    dispatcher = rebuilding.Dispatcher(target)
    stopped: Damage | None = None
    try:
        for event in _in_segment_order(spark, found):
            if isinstance(event, Damage):
                stopped = event
                break
            stopped = dispatcher.dispatch_columns(event, stop_at)
            if stopped is not None:
                break
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


def rebuild_in_place(
    spark: SparkSession, config: StoreConfig, tier: TieredSource | None = None
) -> RebuildReport:
    """Replace the consume queues and index files of a store that no broker has open.

    The store's lock file is held meanwhile; the new files are built beside the store and
    swapped in only when the whole commit log was dispatched — after damage or a missing
    segment the store is left as it was (the report says where the rebuild stopped). With
    ``tier``, the commit log is the tier's objects (read from the bucket) and the store's files
    after the tier's end.
    """
    root = config.root_dir
    staging = root / ".rebuild"
    with rebuilding.store_lock(config):
        shutil.rmtree(staging, ignore_errors=True)
        try:
            source: Path | TieredSource = root if tier is None else tier
            report = rebuild(spark, source, dataclasses.replace(config, root_dir=staging))
            if report.stopped_at is None:
                _swap_in(staging, root)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return report


def _swap_in(staging: Path, root: Path) -> None:
    for name in ("consumequeue", "index"):
        shutil.rmtree(root / name, ignore_errors=True)
        if (staging / name).exists():
            (staging / name).rename(root / name)
