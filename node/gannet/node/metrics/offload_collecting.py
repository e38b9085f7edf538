"""The tier's offload loop, at scrape time (:mod:`gannet.node.store.tier.offloading`).

Families (a broker without a tier exports none):

* ``gannet_tier_offload_failures_total{reason}`` — offload passes that failed, by reason
  (``unavailable``, ``credentials``, ``rejected``, ``not-verified``, ``conflict``, ``corrupt``,
  ``local-io``, ``manifest-log``; every reason from 0 on, so a rate is defined);
* ``gannet_tier_offloaded_files_total`` / ``gannet_tier_offloaded_bytes_total`` — commit-log
  files recorded in the tier by this member (the leader) and their bytes;
* ``gannet_tier_local_deleted_files_total`` — offloaded files this member deleted locally;
* ``gannet_tier_gaps_recorded_total`` / ``gannet_tier_gap_bytes_total`` — gaps this member (the
  leader) recorded in the manifest and the commit-log bytes lost to the tier in them (files
  disk pressure deleted before they were offloaded).

Registered by the broker (:mod:`gannet.node.broker.serving`) with a callable returning the
loop's :class:`~gannet.node.store.tier.offloading.OffloadFigures`, or None without a tier.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client.core import CounterMetricFamily, Metric

from gannet.node.metrics.figures_collecting import FiguresCollector, counter_by
from gannet.node.store.tier.offloading import REASONS, OffloadFigures

log = logging.getLogger(__name__)

OffloadSource = Callable[[], OffloadFigures | None]


def families(figures: OffloadFigures) -> list[Metric]:
    counts = {reason: figures.failures_total.get(reason, 0) for reason in REASONS}
    failures = counter_by(
        "gannet_tier_offload_failures",
        "Tier offload passes that failed, by reason (writes are never held by them).",
        "reason",
        counts,
    )
    files = CounterMetricFamily(
        "gannet_tier_offloaded_files", "Commit-log files recorded in the tier by this member."
    )
    files.add_metric([], figures.offloaded_files_total)
    size = CounterMetricFamily(
        "gannet_tier_offloaded_bytes", "Bytes of the commit-log files recorded in the tier."
    )
    size.add_metric([], figures.offloaded_bytes_total)
    deleted = CounterMetricFamily(
        "gannet_tier_local_deleted_files", "Offloaded commit-log files deleted locally."
    )
    deleted.add_metric([], figures.local_deleted_files_total)
    gaps = CounterMetricFamily(
        "gannet_tier_gaps_recorded",
        "Gaps recorded in the tier manifest by this member: files deleted before offload.",
    )
    gaps.add_metric([], figures.gaps_recorded_total)
    gap_bytes = CounterMetricFamily(
        "gannet_tier_gap_bytes", "Commit-log bytes lost to the tier in the gaps recorded."
    )
    gap_bytes.add_metric([], figures.gap_bytes_total)
    return [failures, files, size, deleted, gaps, gap_bytes]


class OffloadCollector(FiguresCollector[OffloadFigures]):
    """Exports :func:`families` of ``source()`` per scrape; nothing when it is None."""

    def __init__(self, source: OffloadSource) -> None:
        super().__init__(source, families, what="tier offload figures", log=log)
