"""Tier read figures for Prometheus, read at scrape time from ``TierReader.statistics()``.

:class:`TierCollector` asks the store for its tier reader at each scrape (``None`` — no tier
configured — exports nothing) and turns one :class:`~gannet.node.store.tier.reading.ReadStatistics`
snapshot into families (:func:`families_of`, pure): cache hits and misses, ranged GETs and the
bytes they fetched, failed reads by ``reason`` (every reason exported, zeros included, so a rate
over it never starts from an absent series), and the bytes the block cache holds. Counters are
the reader's own running totals since it was made (the broker's start).

Created by :class:`~gannet.node.metrics.broker_metrics.BrokerMetrics`; the families are listed in
``docs/metrics.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gannet.node.store.tier.reading import ERROR_REASONS, ReadStatistics

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
    return families


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
