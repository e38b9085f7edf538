"""The broker's side of tiered storage: the offload loop over its store and manifest log.

Created by :class:`gannet.node.broker.serving.Broker` when its config has a ``tier``
(``gannet broker run --tier-endpoint ...``). The manifest log is the Raft log in a replicated
group (:class:`~gannet.node.replication.tier_log.RaftManifestLog`: only the leader offloads;
every member deletes locally what the applied manifest records) and a durable local file for a
group of one (:class:`~gannet.node.store.tier.uploading.FileManifestLog` on
``<store>/tier/manifest.json``). The store's cleanup is told the tier's range, so its
store-full and expiry rules count only files not yet offloaded
(:mod:`gannet.node.store.upkeep.cleaning`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from gannet.node.replication.driver import ReplicationNode
from gannet.node.replication.tier_log import RaftManifestLog
from gannet.node.store.message_store import MessageStore
from gannet.node.store.tier import (
    applied,
    buckets,
    disk_caching,
    manifests,
    naming,
    offloading,
    planning,
    reading,
    uploading,
)
from gannet.node.store.upkeep import disk_space

log = logging.getLogger(__name__)


class ManifestSource:
    """The manifest the store's tier reader follows (:class:`reading.ManifestSource`): the
    broker's manifest log once :func:`start` set it, the applied manifest file before that (the
    store's recovery runs before replication starts)."""

    def __init__(self, store_root: Path, prefix: str) -> None:
        self._before = applied.AppliedManifest(applied.manifest_path(store_root))
        self._prefix = prefix
        self.log: uploading.ManifestLog | None = None

    def current(self) -> manifests.Manifest:
        log = self.log
        return log.current() if log is not None else self._before.for_prefix(self._prefix)


def reader(
    config: offloading.TierConfig, source: ManifestSource, store_root: Path
) -> reading.TierReader:
    """The reader the broker's store reads offloaded files with: memory cache in front of the
    disk cache under ``<store>/tiercache/`` (none when its size is 0)."""
    reads = config.reads
    disk = (
        disk_caching.DiskBlockCache(store_root / disk_caching.DIR_NAME, reads.disk_cache_bytes_max)
        if reads.disk_cache_bytes_max > 0
        else None
    )
    return reading.reader_of(
        config.bucket,
        source,
        block_bytes=reads.block_bytes,
        cache_bytes_max=reads.memory_cache_bytes_max,
        readahead_blocks=reads.readahead_blocks,
        fetches_max=reads.fetches_max,
        disk_cache=disk,
    )


class StoreSide:
    """:class:`offloading.OffloadedStore` over a broker's message store."""

    def __init__(self, store: MessageStore, replication: ReplicationNode | None) -> None:
        self.store = store
        self.replication = replication

    def sealed_files(self) -> list[planning.SealedFile]:
        files = list(self.store.commitlog.files.files)[:-1]
        return [
            planning.SealedFile(f.file_from_offset, f.file_size, f.last_modified_ms())
            for f in files
        ]

    def file_path(self, base_offset: int) -> Path:
        return self.store.config.commitlog_dir / naming.commitlog_file_name(base_offset)

    def committed_offset(self) -> int:
        return self.store.dispatch.commit_offset

    def disk_use(self) -> planning.DiskUse:
        space = disk_space.measure(str(self.store.config.root_dir))
        return planning.DiskUse(space.used_bytes, space.used_bytes + space.available_bytes)

    def is_leader(self) -> bool:
        return self.replication is None or self.replication.is_serving_leader()

    def delete_offloaded(self, base_offsets: Sequence[int]) -> int:
        return self.store.cleaner.delete_offloaded(base_offsets)

    def local_start_offset(self) -> int | None:
        first = self.store.commitlog.files.first_file()
        return first.file_from_offset if first is not None else None

    def tier_moved(self) -> None:
        self.store.cleaner.tier_moved()


def manifest_log(
    store: MessageStore, replication: ReplicationNode | None, config: offloading.TierConfig
) -> uploading.ManifestLog:
    """The Raft log of a replicated group, a durable local file for a group of one."""
    if replication is not None:
        return RaftManifestLog(
            replication, config.prefix, commit_timeout_s=replication.config.commit_timeout_s
        )
    return uploading.FileManifestLog(applied.manifest_path(store.config.root_dir), config.prefix)


def start(
    store: MessageStore,
    replication: ReplicationNode | None,
    config: offloading.TierConfig,
    source: ManifestSource | None = None,
) -> offloading.Offloader:
    """Tell cleanup the tier's range, point the store's reader (``source``) at the manifest
    log, and start the offload loop's thread."""
    manifests_log = manifest_log(store, replication, config)
    manifests_log.current()  # a manifest of another prefix fails the start, named
    if source is not None:
        source.log = manifests_log

    def tier_range() -> tuple[int, int] | None:
        manifest = manifests_log.current()
        if manifest.start_offset is None or manifest.end_offset is None:
            return None
        return manifest.start_offset, manifest.end_offset

    store.cleaner.tier_range = tier_range
    offloader = offloading.Offloader(
        config, StoreSide(store, replication), manifests_log, buckets.S3Bucket(config.bucket)
    )
    offloader.start()
    log.info(
        "tier: offloading sealed commit-log files to %s bucket %s prefix %s (after %s s or above"
        " %s of the disk)",
        config.bucket.endpoint_url,
        config.bucket.bucket,
        config.prefix,
        config.policy.offload_age_s_min,
        config.policy.local_use_ratio_max,
    )
    return offloader
