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
  disk pressure deleted before they were offloaded);
* ``gannet_tier_expired_objects_total`` / ``gannet_tier_expired_bytes_total`` — objects remote
  retention expired and deleted (the leader), and their bytes;
* ``gannet_tier_swept_objects_total`` — orphan objects the leader's sweep deleted;
* ``gannet_tier_manifest_copies_total`` — writes of the manifest's bucket copy (the leader).

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
    remote = figures.remote
    counters = [
        ("gannet_tier_offloaded_files", "Commit-log files recorded in the tier by this member.",
         figures.offloaded_files_total),
        ("gannet_tier_offloaded_bytes", "Bytes of the commit-log files recorded in the tier.",
         figures.offloaded_bytes_total),
        ("gannet_tier_local_deleted_files", "Offloaded commit-log files deleted locally.",
         figures.local_deleted_files_total),
        ("gannet_tier_gaps_recorded",
         "Gaps recorded in the tier manifest by this member: files deleted before offload.",
         figures.gaps_recorded_total),
        ("gannet_tier_gap_bytes", "Commit-log bytes lost to the tier in the gaps recorded.",
         figures.gap_bytes_total),
        ("gannet_tier_expired_objects",
         "Objects remote retention expired from the manifest and deleted from the bucket.",
         remote.expired_objects_total),
        ("gannet_tier_expired_bytes", "Bytes of the objects remote retention deleted.",
         remote.expired_bytes_total),
        ("gannet_tier_swept_objects",
         "Orphan objects (not in the manifest, never recordable) the sweep deleted.",
         remote.swept_objects_total),
        ("gannet_tier_manifest_copies",
         "Writes of the manifest's copy to <prefix>/manifest.json in the bucket.",
         remote.manifest_copies_total),
    ]  # fmt: skip
    return [failures, *(_counter(name, text, value) for name, text, value in counters)]


def _counter(name: str, documentation: str, value: int) -> Metric:
    family = CounterMetricFamily(name, documentation)
    family.add_metric([], value)
    return family


class OffloadCollector(FiguresCollector[OffloadFigures]):
    """Exports :func:`families` of ``source()`` per scrape; nothing when it is None."""

    def __init__(self, source: OffloadSource) -> None:
        super().__init__(source, families, what="tier offload figures", log=log)
