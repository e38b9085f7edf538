"""Recovering from a gap: the tier continues after files disk pressure deleted unoffloaded.

Called by the offload loop (:mod:`.offloading`) on the leader before it plans uploads. Disk
pressure may delete sealed commit-log files that were not offloaded yet (the store-full rules
of ``store/upkeep/cleaning.py`` still apply to them); then the oldest local file starts after
the tier's end and the tier cannot continue contiguously. Here the loop records the missing
range as a :class:`~.manifests.RecordGap`, through the same manifest log as ``record`` (the
Raft log in a replicated group), so every member agrees the range is gone and offload resumes
with the oldest local file.

A gap is recorded only when the missing range is gone from every copy this member knows:

- **its own disk**: :func:`planning.plan_gap` names a gap only when the oldest local sealed
  file starts after the tier's end (the leader's local start is past it) and lies wholly below
  the commit offset, so the range before it is committed and no append can reach it;
- **the bucket**: a crash between an upload and its ``record`` leaves a verified object that
  the manifest does not hold. If the bucket holds an object at the tier's end, it is adopted
  (recorded with the size and ETag the bucket reports: a single-part upload's ETag is the MD5
  Gannet sent as ``Content-MD5``, so the server checked it) instead of losing its messages, and
  the check repeats after it. An unreachable bucket fails the pass (``unavailable``): no gap is
  recorded while the bucket cannot say whether it holds the file.

Followers' copies are not searched: only the leader offloads, from its own disk (a follower
that still holds a file inside a recorded gap keeps it until its cleanup removes it; the
planner skips such a file). A gap is final: a later copy of its files is never tiered.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gannet.node.store.tier import buckets, errors, manifests, naming, planning, uploading

_MD5_HEX = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class Recovery:
    """What one :func:`recover` did: objects adopted from the bucket, the gap recorded."""

    adopted: tuple[manifests.TierObject, ...] = ()
    gap: manifests.RecordGap | None = None


def recover(
    files: Sequence[planning.SealedFile],
    *,
    log: uploading.ManifestLog,
    bucket: buckets.Bucket,
    committed_offset: int,
    now_ms: int,
) -> Recovery:
    """Adopt the bucket's unrecorded objects at the tier's end, then record the gap that is
    left (module docstring); nothing when the tier continues with the oldest local file."""
    manifest = log.current()
    planned = planning.plan_gap(files, manifest, committed_offset=committed_offset)
    adopted: list[manifests.TierObject] = []
    while planned is not None:
        held = _held_object(bucket, manifest.prefix, planned, now_ms)
        if held is None:
            break
        manifest = log.propose(manifests.RecordObject(held))
        adopted.append(held)
        planned = planning.plan_gap(files, manifest, committed_offset=committed_offset)
    if planned is not None:
        log.propose(planned)
    return Recovery(tuple(adopted), planned)


def _held_object(
    bucket: buckets.Bucket, prefix: str, gap: manifests.RecordGap, now_ms: int
) -> manifests.TierObject | None:
    """The object the bucket holds at the gap's start, if any; one that cannot be a file of
    the gap is a :class:`errors.ManifestConflict` (nothing is recorded over it)."""
    key = naming.commitlog_key(prefix, gap.from_offset)
    head = bucket.head(key)
    if head is None:
        return None
    etag = head.etag.lower()
    if head.size_bytes <= 0 or gap.from_offset + head.size_bytes > gap.to_offset:
        raise errors.ManifestConflict(
            f"{key}: the bucket holds {head.size_bytes} bytes there, which cannot be the file"
            f" missing between the tier's end {gap.from_offset} and the oldest local file"
            f" {gap.to_offset}; no gap is recorded over it"
        )
    if not _MD5_HEX.fullmatch(etag):
        raise errors.ManifestConflict(
            f"{key}: ETag {head.etag} is not an MD5 (not a single-part upload by Gannet); no gap"
            " is recorded over it"
        )
    return manifests.TierObject(gap.from_offset, head.size_bytes, etag, now_ms)
