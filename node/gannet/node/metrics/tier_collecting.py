"""Tier read figures for Prometheus, read at scrape time from ``TierReader.statistics()``.

:class:`TierCollector` asks the store for its tier reader at each scrape (``None`` — no tier
configured — exports nothing) and turns one :class:`~gannet.node.store.tier.reading.ReadStatistics`
snapshot into families (:func:`families_of`, pure): cache hits and misses, ranged GETs and the
bytes they fetched, failed reads by ``reason`` (every reason exported, zeros included, so a rate
over it never starts from an absent series), the bytes the memory and disk block caches hold,
disk-cache hits, misses and discarded files, read-ahead GETs and dropped read-aheads, and the
``gannet_tier_fetch_seconds`` histogram. Counters are
the reader's own running totals since it was made (the broker's start).

Created by :class:`~gannet.node.metrics.broker_metrics.BrokerMetrics`; the families are listed in
``docs/metrics.md``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from gannet.node.store.tier.reading import ERROR_REASONS, FETCH_SECONDS_BOUNDS, ReadStatistics

log = logging.getLogger(__name__)


def families_of(statistics: ReadStatistics) -> list[Metric]:
    """The tier families of one statistics snapshot."""
    counters = (
        ("gannet_tier_cache_hits", "Tier blocks served from the block cache.", "cache_hits"),
        ("gannet_tier_cache_misses", "Tier blocks not in the cache (fetched).", "cache_misses"),
        ("gannet_tier_fetches", "Ranged GETs of offloaded commit-log files.", "fetches"),
        (
            "gannet_tier_fetched_bytes",
            "Bytes fetched from the bucket by ranged GETs.",
            "fetched_bytes",
        ),
        (
            "gannet_tier_disk_cache_hits",
            "Tier blocks served from the disk cache (<store>/tiercache/).",
            "disk_cache_hits",
        ),
        (
            "gannet_tier_disk_cache_misses",
            "Tier blocks in neither cache (fetched, or waited for in flight).",
            "disk_cache_misses",
        ),
        (
            "gannet_tier_disk_cache_discarded",
            "Disk-cache files found partial or damaged, deleted and fetched again.",
            "disk_cache_discarded",
        ),
        (
            "gannet_tier_readahead_fetches",
            "Ranged GETs made in the background for sequential readers (read-ahead).",
            "readahead_fetches",
        ),
        (
            "gannet_tier_readahead_dropped",
            "Read-ahead GETs not made because the read-ahead queue was full.",
            "readahead_dropped",
        ),
    )
    families: list[Metric] = [
        CounterMetricFamily(name, documentation, value=float(getattr(statistics, field)))
        for name, documentation, field in counters
    ]
    errors = CounterMetricFamily(
        "gannet_tier_read_errors",
        "Failed tier fetches by reason (unavailable: bucket down or timing out; busy: every "
        "fetch slot taken; credentials; rejected: other 4xx; short_read; other).",
        labels=["reason"],
    )
    for reason in ERROR_REASONS:
        errors.add_metric([reason], float(statistics.read_errors.get(reason, 0)))
    families.append(errors)
    families.append(
        GaugeMetricFamily(
            "gannet_tier_cache_bytes",
            "Bytes of offloaded files the tier block cache holds.",
            value=float(statistics.cached_bytes),
        )
    )
    families.append(
        GaugeMetricFamily(
            "gannet_tier_disk_cache_bytes",
            "Bytes of offloaded files the tier disk cache holds (<store>/tiercache/).",
            value=float(statistics.disk_cached_bytes),
        )
    )
    families.append(fetch_seconds(statistics))
    return families


def fetch_seconds(statistics: ReadStatistics) -> HistogramMetricFamily:
    """``gannet_tier_fetch_seconds``: the time of each ranged GET, failed ones included."""
    counts = statistics.fetch_seconds_counts or (0,) * (len(FETCH_SECONDS_BOUNDS) + 1)
    buckets: list[tuple[str, float]] = []
    total = 0
    for bound, count in zip((*FETCH_SECONDS_BOUNDS, math.inf), counts, strict=True):
        total += count
        buckets.append(("+Inf" if bound == math.inf else repr(bound), float(total)))
    return HistogramMetricFamily(
        "gannet_tier_fetch_seconds",
        "Time of the ranged GETs of offloaded commit-log files (read-ahead included).",
        buckets=buckets,
        sum_value=statistics.fetch_seconds_sum,
    )


class CountingReader(Protocol):
    """What the collector needs of a reader (``TierReader``)."""

    def statistics(self) -> ReadStatistics: ...


class TierCollector:
    """A prometheus_client collector over the store's tier reader, if it has one."""

    def __init__(self, reader: Callable[[], CountingReader | None]) -> None:
        self._reader = reader

    def collect(self) -> Iterator[Metric]:
        reader = self._reader()
        if reader is None:
            return
        yield from families_of(reader.statistics())
