"""The broker's offload loop: sealed commit-log files to the bucket, then local deletes.

Started by the broker (:mod:`gannet.node.broker.tiering`) when a tier is configured; runs on
its own thread, never on the append path or the event loop. Each pass:

1. On the **leader** only (a group of one always leads): the sealed files, the commit offset
   and the disk use go to :func:`planning.plan_offload`; each chosen file goes through
   :func:`uploading.offload` (hash, upload unless held, verify, record through the manifest
   log) without deleting it.
   Then remote retention (:mod:`.retention`): the manifest's bucket copy, remote expiry
   (an ``expire`` change through the manifest log, then the objects' deletes) and the orphan
   sweep.
2. On **every member**: :func:`planning.plan_local_deletes` over the applied manifest; each
   file to delete has its MD5 checked against the manifest here (a file the manifest records
   with other bytes is kept, a ``conflict`` failure), then the store deletes the leading run
   of them (:meth:`OffloadedStore.delete_offloaded`: the cleaner, under the append lock, which
   is held only for the unlink, never for the read); when the tier's start moved up, the
   queues' minimums follow it (:meth:`.retention.RemoteRetention.member_pass`).

Failures never reach writers: a pass that fails counts one failure by reason
(``unavailable``, ``credentials``, ``rejected``, ``not-verified``, ``conflict``, ``corrupt``,
``local-io``, ``manifest-log``), logs once per change of reason, and the next pass
waits twice as long as the last (from ``pass_interval_s`` up to ``retry_backoff_s_max``); a
successful pass resets the wait and logs that offload resumed.

A gap (the oldest local file starts after the tier's end: disk pressure deleted files before
they were offloaded) is recovered before planning by :func:`gaps.recover`: the missing range is
recorded in the manifest once no copy is left, with one warning per gap, and offload continues
after it (``docs/tiered-storage.md`` §7).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gannet.node.store.tier import (
    buckets,
    errors,
    gaps,
    manifest_copy,
    manifests,
    planning,
    reading,
    retention,
    uploading,
)

log = logging.getLogger(__name__)

REASONS = (
    "unavailable",
    "credentials",
    "rejected",
    "not-verified",
    "conflict",
    "corrupt",
    "local-io",
    "manifest-log",
)


@dataclass(frozen=True, slots=True)
class TierConfig:
    """A broker's tier: where, under which prefix, when to offload, how often to look."""

    bucket: buckets.BucketConfig
    prefix: str
    policy: planning.TierPolicy
    pass_interval_s: float = 10.0
    retry_backoff_s_max: float = 300.0
    sweep_interval_s: float = 600.0
    """How often the leader lists the bucket for orphans (:mod:`.retention`)."""
    orphan_grace_s: float = 3600.0
    """An unrecorded object at or past the tier's end is swept only when older (sweeping)."""
    reads: reading.ReadOptions = field(default_factory=reading.ReadOptions)
    """How the broker's store reads offloaded files (caches, read-ahead)."""

    def __post_init__(self) -> None:
        if self.sweep_interval_s <= 0 or self.orphan_grace_s <= 0:
            raise ValueError(
                f"tier sweep interval {self.sweep_interval_s} s and orphan grace period"
                f" {self.orphan_grace_s} s must be positive"
            )
        if self.pass_interval_s <= 0:
            raise ValueError(f"tier pass interval {self.pass_interval_s} s is not positive")
        if self.retry_backoff_s_max < self.pass_interval_s:
            raise ValueError(
                f"tier retry backoff {self.retry_backoff_s_max} s is below the pass interval"
                f" {self.pass_interval_s} s"
            )


class OffloadedStore(Protocol):
    """What the loop needs of the store (implemented by the broker over its MessageStore)."""

    def sealed_files(self) -> list[planning.SealedFile]: ...

    def file_path(self, base_offset: int) -> Path: ...

    def committed_offset(self) -> int: ...

    def disk_use(self) -> planning.DiskUse: ...

    def is_leader(self) -> bool: ...

    def delete_offloaded(self, base_offsets: Sequence[int]) -> int:
        """Delete the leading local files whose base offset is in ``base_offsets`` (never
        the active one); returns how many were deleted."""
        ...

    def local_start_offset(self) -> int | None: ...

    def tier_moved(self) -> None: ...


@dataclass(slots=True)
class OffloadFigures:
    """Counters of the loop (exported as ``gannet_tier_*`` metrics)."""

    passes_total: int = 0
    offloaded_files_total: int = 0
    offloaded_bytes_total: int = 0
    local_deleted_files_total: int = 0
    gaps_recorded_total: int = 0
    """Gaps this member (as leader) recorded in the manifest."""
    gap_bytes_total: int = 0
    """Commit-log bytes lost to the tier in those gaps."""
    failures_total: dict[str, int] = field(default_factory=dict)
    last_failure: str = ""
    """The message of the failure of the latest pass; empty after a successful one."""
    failing_reason: str = ""
    """The reason (one of :data:`REASONS`) of the latest pass's failure; empty after a
    successful one (the admin ``GetTierStatus``, the operator's Events)."""
    last_success_ms: int = 0
    """Wall-clock end of the latest successful pass; 0: none since the broker started."""
    remote: retention.RetentionFigures = field(default_factory=retention.RetentionFigures)
    """Remote expiry, orphan sweep and manifest copies (:mod:`.retention`)."""


def reason_of(exc: BaseException) -> str:
    """The failure reason label of ``exc`` (one of :data:`REASONS`)."""
    bucket = errors.bucket_reason(exc)
    if bucket is not None:
        return bucket
    if isinstance(exc, errors.UploadNotVerified):
        return "not-verified"
    if isinstance(exc, errors.ManifestConflict):
        return "conflict"
    if isinstance(exc, errors.ManifestCorrupt):
        return "corrupt"
    if isinstance(exc, OSError):
        return "local-io"
    return "manifest-log"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Offloader:
    """The offload loop of one broker (module docstring). :meth:`run_pass` is one pass."""

    def __init__(
        self,
        config: TierConfig,
        store: OffloadedStore,
        manifest_log: uploading.ManifestLog,
        bucket: buckets.Bucket,
        *,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.config = config
        self.store = store
        self.figures = OffloadFigures()
        self.copy = manifest_copy.ManifestCopy(bucket, config.prefix, on_write=self._copied)
        self.manifest_log = manifest_copy.CopiedManifestLog(manifest_log, self.copy)
        self.bucket = bucket
        self.remote = retention.RemoteRetention(
            store,
            self.manifest_log,
            bucket,
            self.copy,
            config.policy,
            sweep_interval_s=config.sweep_interval_s,
            orphan_grace_s=config.orphan_grace_s,
            clock_ms=clock_ms,
        )
        self.remote.figures = self.figures.remote
        self._clock_ms = clock_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reason = ""

    def _copied(self) -> None:
        self.figures.remote.manifest_copies_total += 1

    # ------------------------------------------------------------------ thread
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tier-offload", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the step in progress (an upload is not interrupted mid-call)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                log.warning("tier offload did not stop within %.1f s", timeout_s)

    def _run(self) -> None:
        delay_s = self.config.pass_interval_s
        while not self._stop.wait(delay_s):
            ok = self.run_pass()
            delay_s = (
                self.config.pass_interval_s
                if ok
                else min(delay_s * 2, self.config.retry_backoff_s_max)
            )

    # ------------------------------------------------------------------ one pass
    def run_pass(self) -> bool:
        """Offload (leader) and delete locally (every member); returns False on a failure
        (counted, logged once per reason change)."""
        self.figures.passes_total += 1
        try:
            if self.store.is_leader():
                self._offload()
                self.remote.leader_pass()
            else:
                self.remote.follower_pass()
            self._delete_local()
            self.remote.member_pass()
        except Exception as exc:  # every failure waits for the next pass; writes go on
            self._failed(exc)
            return False
        if self._reason:
            log.warning("tier offload resumed after %s failures", self._reason)
            self._reason = ""
        self.figures.last_failure = ""
        self.figures.failing_reason = ""
        self.figures.last_success_ms = self._clock_ms()
        return True

    def _offload(self) -> None:
        files = self.store.sealed_files()
        committed_offset = self.store.committed_offset()
        self._recover_gap(files, committed_offset)
        chosen = planning.plan_offload(
            files,
            self.manifest_log.current(),
            self.config.policy,
            committed_offset=committed_offset,
            disk=self.store.disk_use(),
            now_ms=self._clock_ms(),
        )
        for base_offset in chosen:
            if self._stop.is_set():
                return
            done = uploading.offload(
                self.store.file_path(base_offset),
                bucket=self.bucket,
                log=self.manifest_log,
                now_ms=self._clock_ms(),
                delete=False,
            )
            self.figures.offloaded_files_total += 1
            self.figures.offloaded_bytes_total += done.obj.size_bytes
            log.info(
                "tier: offloaded commit-log file %020d (%d bytes, md5 %s%s)",
                base_offset,
                done.obj.size_bytes,
                done.obj.md5_hex,
                "" if done.uploaded else ", already in the bucket",
            )

    def _recover_gap(self, files: list[planning.SealedFile], committed_offset: int) -> None:
        recovery = gaps.recover(
            files,
            log=self.manifest_log,
            bucket=self.bucket,
            committed_offset=committed_offset,
            now_ms=self._clock_ms(),
        )
        for obj in recovery.adopted:
            self.figures.offloaded_files_total += 1
            self.figures.offloaded_bytes_total += obj.size_bytes
            log.warning(
                "tier: recorded commit-log file %020d (%d bytes) that the bucket held without a"
                " record, before recording a gap after it",
                obj.base_offset,
                obj.size_bytes,
            )
        gap = recovery.gap
        if gap is not None:
            size_bytes = gap.to_offset - gap.from_offset
            self.figures.gaps_recorded_total += 1
            self.figures.gap_bytes_total += size_bytes
            log.warning(
                "tier: recorded a gap [%d, %d) (%d bytes): those commit-log files were deleted"
                " locally (disk pressure) before they were offloaded and no copy is left; their"
                " messages read as removed, offload continues at %d (docs/tiered-storage.md §7)",
                gap.from_offset,
                gap.to_offset,
                size_bytes,
                gap.to_offset,
            )

    def _delete_local(self) -> None:
        files = self.store.sealed_files()
        manifest = self.manifest_log.current()
        doomed = planning.plan_local_deletes(files, manifest, self.config.policy)
        verified: list[int] = []
        for base_offset in doomed:
            if self._stop.is_set():
                break
            path = self.store.file_path(base_offset)
            if not path.exists():
                break
            _check_recorded(path, manifest)
            verified.append(base_offset)
        if verified:
            deleted = self.store.delete_offloaded(verified)
            self.figures.local_deleted_files_total += deleted

    def _failed(self, exc: Exception) -> None:
        reason = reason_of(exc)
        counts = self.figures.failures_total
        counts[reason] = counts.get(reason, 0) + 1
        self.figures.last_failure = f"{reason}: {exc}"
        self.figures.failing_reason = reason
        if reason != self._reason:
            log.error(
                "tier offload failed (%s): %s; writes go on, offload retries with backoff up to"
                " %.0f s",
                reason,
                exc,
                self.config.retry_backoff_s_max,
                exc_info=reason == "manifest-log",
            )
            self._reason = reason


def _check_recorded(path: Path, manifest: manifests.Manifest) -> None:
    """Raise :class:`errors.ManifestConflict` unless the manifest records ``path``'s bytes."""
    base_offset = int(path.name)
    recorded = manifest.find(base_offset)
    size_bytes = path.stat().st_size
    md5_hex = uploading.file_md5(path).hex()
    if recorded is None or (recorded.size_bytes, recorded.md5_hex) != (size_bytes, md5_hex):
        raise errors.ManifestConflict(
            f"{path}: the manifest records {recorded}, the local file has {size_bytes} bytes"
            f" md5 {md5_hex}; keeping it"
        )
