"""The orphan sweep: which objects under ``<prefix>/commitlog/`` the manifest does not record
and no upload can still record — pure, so that every rule is a unit test.

An orphan is left by a crash between an expiry's commit and its deletes (or between two of the
deletes), by a delete that failed, or by an upload that never got recorded. The sweep must
never delete an object a concurrent upload is about to record, so an unrecorded object is
deleted only when one of these holds (``docs/tiered-storage.md`` §6):

- **below the tier's end**: its base offset is below the manifest's ``end_offset``. A record
  must start exactly at the end (:func:`.manifests.apply`), and the end only grows — records
  move it up, expiry never empties the tier (:func:`.planning.plan_remote_expiry` keeps the
  newest object) — so no upload can ever record it; a repeat of a recorded object is
  recorded, hence not an orphan. This covers objects below the tier's start (expired, the
  crash between expire and delete) and keys inside or at the start of another recorded
  object's range. A stale manifest (a deposed leader's) has a smaller end, so it deletes
  less, never more.
- **old and not next**: its base offset is at or above the end (or the tier is empty), it is
  not the object the next upload will write (``next_base``: the tier's end, or with an empty
  tier the oldest local sealed file), and the bucket wrote it more than ``grace_s`` ago. An
  upload writes its object moments before it records it, so an object older than the grace
  period is not one in flight; the next upload's own object is adopted by that upload (its
  HEAD finds it and verifies it, or its PUT replaces it), so it is never swept.

Keys under the directory that are not commit-log names (20 digits) are not the tier's: they are
reported, never deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gannet.node.store.tier import buckets, manifests, naming


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """What a sweep deletes, and why; ``foreign`` keys are left alone."""

    below_end: tuple[str, ...]
    """Unrecorded objects below the tier's end: never recordable."""
    stale: tuple[str, ...]
    """Unrecorded objects at or past the end, older than the grace period, not the next one."""
    foreign: tuple[str, ...]
    """Keys under the commit-log directory that are not commit-log names."""

    @property
    def doomed(self) -> tuple[str, ...]:
        return self.below_end + self.stale


def plan_sweep(
    manifest: manifests.Manifest,
    listed: Sequence[buckets.ListedObject],
    *,
    next_base: int | None,
    now_ms: int,
    grace_s: float,
) -> SweepPlan:
    """Classify ``listed`` (a listing of the manifest's commit-log directory) (module doc).

    ``manifest`` must have been read *before* the listing: an object recorded after that read
    starts at the read manifest's end, so it is not below that end and is younger than the
    grace period."""
    if grace_s <= 0:
        raise ValueError(f"orphan grace period {grace_s} s is not positive")
    recorded = {naming.commitlog_key(manifest.prefix, o.base_offset) for o in manifest.objects}
    end = manifest.end_offset
    below_end: list[str] = []
    stale: list[str] = []
    foreign: list[str] = []
    for item in listed:
        if item.key in recorded:
            continue
        try:
            base = naming.parse_commitlog_key(manifest.prefix, item.key)
        except ValueError:
            foreign.append(item.key)
            continue
        if end is not None and base < end:
            below_end.append(item.key)
        elif base != next_base and now_ms - item.last_modified_ms > grace_s * 1000:
            stale.append(item.key)
    return SweepPlan(tuple(below_end), tuple(stale), tuple(foreign))
