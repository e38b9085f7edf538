"""The admin ``GetTierStatus`` answer: a member's tier, manifest and offload loop, as a message.

:class:`TierSide` is what the broker (:mod:`gannet.node.broker.serving`) hands the admin
servicer when it runs with ``--tier-*``: the tier's settings, the manifest source the store's
reader follows (the applied manifest before replication starts, the manifest log after), and a
callable returning the running offload loop (None while it is not running, e.g. before the
broker serves). :func:`status_pb` is pure: it turns those into ``admin_pb2.TierStatus``. The
operator polls it to post Events when offload fails (docs/tiered-storage.md §10), and
``gannet tier status`` prints it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gannet.node.protocol.gen import admin_pb2
from gannet.node.store.tier import manifests, offloading, reading

CREDENTIALS_REASON = "credentials"
GAP_REASON = "gap"


@dataclass(frozen=True, slots=True)
class TierSide:
    config: offloading.TierConfig
    manifest: reading.ManifestSource
    offloader: Callable[[], offloading.Offloader | None]


def status_pb(
    config: offloading.TierConfig | None,
    manifest: manifests.Manifest | None,
    figures: offloading.OffloadFigures | None,
    *,
    local_start_offset: int,
    leader: bool,
) -> admin_pb2.TierStatus:
    """The message of a member with ``config`` (None: no tier: only ``enabled=False``)."""
    if config is None:
        return admin_pb2.TierStatus(enabled=False)
    answer = admin_pb2.TierStatus(
        enabled=True,
        endpoint=config.bucket.endpoint_url,
        bucket=config.bucket.bucket,
        prefix=config.prefix,
        local_start_offset=local_start_offset,
        leader=leader,
    )
    if manifest is not None and manifest.objects:
        answer.objects = len(manifest.objects)
        answer.bytes = sum(o.size_bytes for o in manifest.objects)
        answer.has_objects = True
        answer.start_offset = manifest.start_offset or 0
        answer.end_offset = manifest.end_offset or 0
    if figures is not None:
        reason = figures.failing_reason
        answer.passes_total = figures.passes_total
        answer.last_success_ms = figures.last_success_ms
        answer.failing_reason = reason
        answer.last_error = figures.last_failure
        answer.failures_total.update(figures.failures_total)
        answer.gap = reason == GAP_REASON
        answer.credentials_rejected = reason == CREDENTIALS_REASON
        answer.offloaded_files_total = figures.offloaded_files_total
        answer.offloaded_bytes_total = figures.offloaded_bytes_total
        answer.local_deleted_files_total = figures.local_deleted_files_total
    return answer
