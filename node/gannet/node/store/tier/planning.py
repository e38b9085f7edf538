"""Offload, local-delete and remote-expiry plans: pure functions of files, manifest and policy.

Called by the offload loop (the next slice wires it into the broker's upkeep); here they are
pure so that every rule is a unit test. Inputs are plain values: the sealed local commit-log
files (every file but the one being written), the replicated manifest, the Raft commit offset
and the policy. Outputs are base offsets, oldest first.

Rules:

- **Offload** only files that are sealed *and* wholly below the commit offset (a file a failover
  could still truncate is never offloaded), that the manifest does not hold yet, oldest first and
  without gaps: the candidate list stops at the first file that is not eligible, since the tier
  must stay contiguous (:mod:`.manifests`). A file is due when it is older than
  ``offload_age_s_min`` or while the local disk use is above ``local_use_ratio_max`` (counting the
  files already chosen as gone). At most ``uploads_max`` per plan. A file wholly inside a recorded
  gap (a member that kept a copy the leader lost) is skipped: the group agreed it is not tiered.
- **Gap**: when the oldest sealed file starts after the tier's end and is below the commit
  offset, the range between is gone from the leader's disk; :func:`plan_gap` names it, and the
  offload loop records it once the bucket does not hold it either.
- **Local delete** only files the manifest records with the same size, keeping the newest
  ``local_keep_bytes`` of them on disk as a hot cache for consumers near the head.
- **Remote expiry** drops the oldest objects while the tier holds more than
  ``remote_bytes_max`` or while the oldest was uploaded more than ``remote_retention_s`` ago,
  but never an object whose file is still on local disk (local retention is the local tier's).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from gannet.node.store.tier import manifests


@dataclass(frozen=True, slots=True)
class SealedFile:
    """A sealed local commit-log file: no more appends will reach it."""

    base_offset: int
    size_bytes: int
    sealed_at_ms: int

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size_bytes


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """When to offload, which local copies to keep, when the tier forgets. ``None`` = rule off."""

    offload_age_s_min: float | None = 3600.0
    local_use_ratio_max: float | None = 0.7
    uploads_max: int = 4
    local_keep_bytes: int = 0
    remote_retention_s: float | None = None
    remote_bytes_max: int | None = None

    def __post_init__(self) -> None:
        if self.offload_age_s_min is not None and self.offload_age_s_min < 0:
            raise ValueError(f"offload_age_s_min {self.offload_age_s_min} < 0")
        if self.local_use_ratio_max is not None and not 0 < self.local_use_ratio_max <= 1:
            raise ValueError(f"local_use_ratio_max {self.local_use_ratio_max} is not in (0, 1]")
        if self.uploads_max < 1:
            raise ValueError(f"uploads_max {self.uploads_max} < 1")
        if self.local_keep_bytes < 0:
            raise ValueError(f"local_keep_bytes {self.local_keep_bytes} < 0")
        if self.remote_retention_s is not None and self.remote_retention_s <= 0:
            raise ValueError(f"remote_retention_s {self.remote_retention_s} <= 0")
        if self.remote_bytes_max is not None and self.remote_bytes_max <= 0:
            raise ValueError(f"remote_bytes_max {self.remote_bytes_max} <= 0")


@dataclass(frozen=True, slots=True)
class DiskUse:
    """Bytes used and the capacity of the volume holding the commit log."""

    used_bytes: int
    capacity_bytes: int


def _ordered(files: Sequence[SealedFile]) -> list[SealedFile]:
    ordered = sorted(files, key=lambda f: f.base_offset)
    for earlier, later in itertools.pairwise(ordered):
        if earlier.end_offset > later.base_offset:
            raise ValueError(f"sealed files overlap: {earlier} and {later}")
    return ordered


def plan_offload(
    files: Sequence[SealedFile],
    manifest: manifests.Manifest,
    policy: TierPolicy,
    *,
    committed_offset: int,
    disk: DiskUse,
    now_ms: int,
) -> list[int]:
    """Base offsets of the files to upload now, oldest first (see the module docstring)."""
    end = manifest.end_offset
    candidates: list[SealedFile] = []
    for sealed in _ordered(files):
        if manifest.find(sealed.base_offset) is not None:
            continue
        gap = manifest.gap_at(sealed.base_offset)
        if gap is not None and sealed.end_offset <= gap.to_offset:
            continue  # a copy of a file the group recorded as a gap: never tiered
        if end is not None and sealed.base_offset != end:
            break  # a gap after the tier's end, or a file the tier already passed: not contiguous
        if sealed.end_offset > committed_offset:
            break
        candidates.append(sealed)
        end = sealed.end_offset
    chosen: list[int] = []
    used_bytes = disk.used_bytes
    for sealed in candidates[: policy.uploads_max]:
        old = policy.offload_age_s_min is not None and (
            now_ms - sealed.sealed_at_ms >= policy.offload_age_s_min * 1000
        )
        full = policy.local_use_ratio_max is not None and (
            used_bytes > policy.local_use_ratio_max * disk.capacity_bytes
        )
        if not (old or full):
            break
        chosen.append(sealed.base_offset)
        used_bytes -= sealed.size_bytes
    return chosen


def plan_gap(
    files: Sequence[SealedFile], manifest: manifests.Manifest, *, committed_offset: int
) -> manifests.RecordGap | None:
    """The gap between the tier's end and the oldest sealed file, when that file starts after
    the tier's end and wholly below the commit offset (so nothing before it can change); None
    otherwise. The caller records it only after checking the bucket holds no object there."""
    end = manifest.end_offset
    ordered = _ordered(files)
    if end is None or not ordered:
        return None
    oldest = ordered[0]
    if oldest.base_offset <= end or oldest.end_offset > committed_offset:
        return None
    return manifests.RecordGap(end, oldest.base_offset)


def plan_local_deletes(
    files: Sequence[SealedFile], manifest: manifests.Manifest, policy: TierPolicy
) -> list[int]:
    """Base offsets of local files that may be deleted: recorded by the manifest with the same
    size, minus the newest ``local_keep_bytes`` of them."""
    offloaded = [
        sealed
        for sealed in _ordered(files)
        if (obj := manifest.find(sealed.base_offset)) is not None
        and obj.size_bytes == sealed.size_bytes
    ]
    kept_bytes = 0
    keep: set[int] = set()
    for sealed in reversed(offloaded):
        if kept_bytes + sealed.size_bytes > policy.local_keep_bytes:
            break
        kept_bytes += sealed.size_bytes
        keep.add(sealed.base_offset)
    return [sealed.base_offset for sealed in offloaded if sealed.base_offset not in keep]


def plan_remote_expiry(
    manifest: manifests.Manifest,
    policy: TierPolicy,
    *,
    local_start_offset: int | None,
    now_ms: int,
) -> manifests.ExpireObjects | None:
    """The expiry change remote retention asks for now, or ``None``.

    ``local_start_offset`` is the first offset still on local disk (``None`` if the local log is
    empty); objects at or after it are never expired by the tier's rules.
    """
    total_bytes = manifest.total_bytes()
    up_to: int | None = None
    for obj in manifest.objects:
        if local_start_offset is not None and obj.end_offset > local_start_offset:
            break
        too_big = policy.remote_bytes_max is not None and total_bytes > policy.remote_bytes_max
        too_old = policy.remote_retention_s is not None and (
            now_ms - obj.uploaded_at_ms > policy.remote_retention_s * 1000
        )
        if not (too_big or too_old):
            break
        total_bytes -= obj.size_bytes
        up_to = obj.end_offset
    return None if up_to is None else manifests.ExpireObjects(up_to)
