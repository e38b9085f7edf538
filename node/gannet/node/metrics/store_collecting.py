"""Store figures for Prometheus, read at scrape time, and running totals of cleanup runs.

:class:`StoreCollector` is a custom collector: each scrape calls ``MessageStore.statistics()``
(a handful of attribute reads) and one ``statvfs`` for the disk ratio, so nothing is paid
between scrapes. Offsets are byte positions in the commit log, hence the ``_bytes`` suffix.
While the store is not open (recovery, shutdown) only ``gannet_store_open 0`` is exported; a
store that closes under a scrape exports what it read before the failure.

:class:`StoreCollector` also exports the store's truncation tally
(:class:`~gannet.node.store.upkeep.recovering.TruncationTally`) as counters,
``gannet_store_truncations_total`` and ``gannet_store_truncated_bytes_total`` by ``cause``, at
every scrape, open or not: a cut made by recovery is counted before the store opens.

:class:`CleanupTally` counts what every cleanup run removed. The clean service keeps only its
latest result and runs every ``clean_resource_interval_ms`` (10 s by default), faster than a
typical scrape interval, so the tally taps :meth:`CleanService.run` itself rather than polling
``last_result`` (which would miss runs).

Both are created by :class:`~gannet.node.metrics.broker_metrics.BrokerMetrics`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gannet.node.store.message_store import MessageStore
from gannet.node.store.upkeep import cleaning, disk_space
from gannet.node.store.upkeep.recovering import TRUNCATION_CAUSES

log = logging.getLogger(__name__)

# The clamps CleanService applies to the configured ratios (see cleaning.py's docstring).
WARNING_RATIO_RANGE = cleaning.WARNING_RATIO_RANGE
CLEAN_FORCIBLY_RATIO_RANGE = cleaning.CLEAN_FORCIBLY_RATIO_RANGE
CLEAN_REASONS = ("idle", "manual", "time", "space")
REMOVED_FILE_KINDS = ("commitlog", "consume_queue", "index")


@dataclass(frozen=True, slots=True)
class StoreFigures:
    """Everything one scrape exports about the store; computed by :func:`figures_of`."""

    min_offset_bytes: int
    max_offset_bytes: int
    flushed_offset_bytes: int
    commit_offset_bytes: int
    dispatched_offset_bytes: int
    commitlog_files: int
    commitlog_size_bytes: int
    consume_queues: int
    index_files: int
    timer_backlog_messages: int
    disk_used_ratio: float
    disk_warning_ratio: float
    disk_clean_forcibly_ratio: float
    disk_hysteresis_ratio: float
    disk_full: bool
    fsync_failed: bool

    @property
    def dispatch_lag_bytes(self) -> int:
        return max(0, self.commit_offset_bytes - self.dispatched_offset_bytes)

    @property
    def flush_lag_bytes(self) -> int:
        return max(0, self.max_offset_bytes - self.flushed_offset_bytes)

    @property
    def writable(self) -> bool:
        return not (self.disk_full or self.fsync_failed)


def _clamp(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])


def figures_of(store: MessageStore) -> StoreFigures:
    """Read the store's figures now (any thread; the store must be open)."""
    s = store.statistics()
    policy = store.cleaner.policy
    flush = store.flush
    return StoreFigures(
        min_offset_bytes=s.min_offset,
        max_offset_bytes=s.max_offset,
        flushed_offset_bytes=s.flushed_offset,
        commit_offset_bytes=s.commit_offset,
        dispatched_offset_bytes=s.dispatched_offset,
        commitlog_files=s.commitlog_files,
        commitlog_size_bytes=s.commitlog_files * store.config.commitlog_file_size_bytes,
        consume_queues=s.consume_queues,
        index_files=s.index_files,
        timer_backlog_messages=s.timer_backlog,
        disk_used_ratio=disk_space.disk_used_ratio(str(store.config.root_dir)),
        disk_warning_ratio=_clamp(policy.disk_warning_ratio, WARNING_RATIO_RANGE),
        disk_clean_forcibly_ratio=_clamp(
            policy.disk_clean_forcibly_ratio, CLEAN_FORCIBLY_RATIO_RANGE
        ),
        disk_hysteresis_ratio=cleaning.hysteresis_margin(policy),
        disk_full=s.disk_full,
        fsync_failed=flush is not None and flush.fatal_error is not None,
    )


# (name, help, how to read it from StoreFigures)
_GAUGES: tuple[tuple[str, str, Callable[[StoreFigures], float]], ...] = (
    ("gannet_store_min_offset_bytes", "Commit-log minimum offset.", lambda f: f.min_offset_bytes),
    ("gannet_store_max_offset_bytes", "Commit-log end offset.", lambda f: f.max_offset_bytes),
    (
        "gannet_store_flushed_offset_bytes",
        "Offset synced to disk.",
        lambda f: f.flushed_offset_bytes,
    ),
    (
        "gannet_store_commit_offset_bytes",
        "Offset consumers may see (flushed offset on one node, Raft commit later).",
        lambda f: f.commit_offset_bytes,
    ),
    (
        "gannet_store_dispatched_offset_bytes",
        "Offset up to which consume queues and the index are built.",
        lambda f: f.dispatched_offset_bytes,
    ),
    (
        "gannet_store_dispatch_lag_bytes",
        "Committed bytes not yet dispatched to consume queues (commit - dispatched).",
        lambda f: f.dispatch_lag_bytes,
    ),
    (
        "gannet_store_flush_lag_bytes",
        "Written bytes not yet synced to disk (end - flushed).",
        lambda f: f.flush_lag_bytes,
    ),
    ("gannet_store_commitlog_files", "Commit-log files on disk.", lambda f: f.commitlog_files),
    (
        "gannet_store_commitlog_size_bytes",
        "Disk space taken by the (preallocated) commit-log files.",
        lambda f: f.commitlog_size_bytes,
    ),
    (
        "gannet_store_consume_queues",
        "Consume queues (topic, queue id).",
        lambda f: f.consume_queues,
    ),
    ("gannet_store_index_files", "Hash index files.", lambda f: f.index_files),
    (
        "gannet_store_timer_backlog_messages",
        "Delayed messages parked in the timer store, not yet due.",
        lambda f: f.timer_backlog_messages,
    ),
    (
        "gannet_store_disk_used_ratio",
        "Used fraction of the store's partition as df's Use% counts it, used / (used + "
        "available to the broker), root-reserved blocks excluded; exact, not rounded (0-1).",
        lambda f: f.disk_used_ratio,
    ),
    (
        "gannet_store_disk_warning_ratio",
        "Disk ratio above which the store refuses writes (effective, clamped).",
        lambda f: f.disk_warning_ratio,
    ),
    (
        "gannet_store_disk_clean_forcibly_ratio",
        "Disk ratio above which cleanup deletes unexpired files (effective, clamped).",
        lambda f: f.disk_clean_forcibly_ratio,
    ),
    (
        "gannet_store_disk_hysteresis_ratio",
        "Once the disk ratio rose above the warning or clean-forcibly ratio, writes stay refused "
        "(cleanup forced) until it falls this much below that ratio (0-1; 0.02 = 2 points).",
        lambda f: f.disk_hysteresis_ratio,
    ),
    ("gannet_store_disk_full", "1 while writes are refused for disk space.", lambda f: f.disk_full),
    (
        "gannet_store_fsync_failed",
        "1 after a failed fsync: the store refuses writes and the node must be restarted.",
        lambda f: f.fsync_failed,
    ),
    ("gannet_store_writable", "1 while the store accepts writes.", lambda f: f.writable),
)


class StoreCollector:
    """A prometheus_client collector over one store; ``is_open`` says when it may be read."""

    def __init__(self, store: MessageStore, is_open: Callable[[], bool]) -> None:
        self._store = store
        self._is_open = is_open

    def collect(self) -> Iterator[Metric]:
        is_open = self._is_open()
        yield GaugeMetricFamily(
            "gannet_store_open", "1 while the store is open (recovered).", value=int(is_open)
        )
        yield from self._truncations()
        if not is_open:
            return
        try:
            figures = figures_of(self._store)
        except Exception:  # the store closed under the scrape
            log.debug("store figures unavailable", exc_info=True)
            return
        for name, documentation, read in _GAUGES:
            yield GaugeMetricFamily(name, documentation, value=float(read(figures)))

    def _truncations(self) -> Iterator[Metric]:
        tally = self._store.truncations
        events = CounterMetricFamily(
            "gannet_store_truncations",
            "Commit-log cuts that removed data, by cause (recovery: torn tail or forced cut at "
            "start; divergence: Raft divergent suffix; catch_up: log discarded to follow the "
            "leader).",
            labels=["cause"],
        )
        removed = CounterMetricFamily(
            "gannet_store_truncated_bytes",
            "Commit-log bytes those cuts removed, by cause.",
            labels=["cause"],
        )
        for cause in TRUNCATION_CAUSES:
            events.add_metric([cause], tally.events[cause])
            removed.add_metric([cause], tally.bytes[cause])
        yield events
        yield removed


class CleanupTally:
    """Counters of cleanup runs and of what they removed."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter(
            "gannet_cleanup_runs_total",
            "Cleanup passes, by trigger (idle: nothing was due).",
            ["reason"],
            registry=registry,
        )
        self.files_removed = Counter(
            "gannet_cleanup_files_removed_total",
            "Files deleted by cleanup, by kind.",
            ["kind"],
            registry=registry,
        )
        self.bytes_removed = Counter(
            "gannet_cleanup_bytes_removed_total",
            "Bytes of commit-log files deleted by cleanup.",
            registry=registry,
        )
        self.unconsumed_removed = Counter(
            "gannet_cleanup_unconsumed_messages_removed_total",
            "Messages a consumer group had not consumed, in commit-log files cleanup deleted "
            "(expired by fileReservedTime, or forced with --delete-unconsumed); per group in the "
            "broker log.",
            registry=registry,
        )
        for reason in CLEAN_REASONS:
            self.runs.labels(reason)
        for kind in REMOVED_FILE_KINDS:
            self.files_removed.labels(kind)

    def record(self, result: cleaning.CleanResult) -> None:
        reason = result.reason if result.reason in CLEAN_REASONS else "idle"
        self.runs.labels(reason).inc()
        self.files_removed.labels("commitlog").inc(result.commitlog_files_deleted)
        self.files_removed.labels("consume_queue").inc(result.consume_queue_files_deleted)
        self.files_removed.labels("index").inc(result.index_files_deleted)
        self.bytes_removed.inc(result.bytes_freed)
        self.unconsumed_removed.inc(sum(result.unconsumed_deleted.values()))

    def attach(self, cleaner: cleaning.CleanService) -> None:
        """Record every later :meth:`CleanService.run` of ``cleaner`` (one call per run)."""
        cleaner.listeners.append(self.record)
