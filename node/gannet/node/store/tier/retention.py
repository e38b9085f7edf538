"""Remote retention on the leader: expire through the manifest log, then delete the objects,
and sweep orphans; on every member, let the queues' minimums follow the tier's start.

Run by the offload loop (:mod:`.offloading`) on its thread, after the pass's uploads:

1. **Copy** (leader): :meth:`.manifest_copy.ManifestCopy.sync` writes the manifest's bucket
   copy if a committed change has not reached it yet (a failed write is retried here).
2. **Expire** (leader): :func:`.planning.plan_remote_expiry` (age since upload, tier bytes,
   never past the first offset still on local disk, never the newest object) gives one
   :class:`.manifests.ExpireObjects`; it is proposed through the manifest log like a
   ``record`` (in a replicated group a Raft entry) and, only once ``propose`` returned (the
   change is committed and applied), the forgotten objects are deleted from the bucket,
   oldest first. So the manifest never sends a reader to a deleted object. A crash or a
   failure between the commit and the last delete leaves orphans below the tier's start,
   which the sweep removes; a sweep follows every expiry (in the same pass, or in the next one
   when a delete failed) and runs at every start.
3. **Sweep** (leader, every ``sweep_interval_s`` and at the first leader pass): the manifest is
   read, then ``<prefix>/commitlog/`` listed, and :func:`.sweeping.plan_sweep` says which
   unrecorded objects no upload can still record; those are deleted.
4. **Queue minimums** (every member): when the tier's start moved up, the store's cleanup
   deletes consume-queue and index files below the new readable minimum and moves the queues'
   minimum offsets there (``CleanService.tier_moved``), so QueryOffset BEGINNING and
   remoting GET_MIN_OFFSET answer the tier's start; a read of an expired offset finds nothing
   and is answered as a cleaned record.

``on_step`` hears ``"after-expire"`` (committed, nothing deleted yet) and ``"after-delete"``
(after each delete) — the crash tests SIGKILL a real process there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gannet.node.store.tier import (
    buckets,
    manifest_copy,
    manifests,
    naming,
    planning,
    sweeping,
    uploading,
)

log = logging.getLogger(__name__)


class RetainedStore(Protocol):
    """What retention needs of the local store."""

    def local_start_offset(self) -> int | None:
        """The first commit-log offset still on local disk (None: the local log is empty)."""
        ...

    def tier_moved(self) -> None:
        """The tier's start moved up: move the queues' minimums (module docstring, 4)."""
        ...


@dataclass(slots=True)
class RetentionFigures:
    """Counters of remote retention (exported as ``gannet_tier_*`` metrics)."""

    expired_objects_total: int = 0
    expired_bytes_total: int = 0
    swept_objects_total: int = 0
    manifest_copies_total: int = 0
    """Counted by :class:`.manifest_copy.ManifestCopy` as it writes (``on_write``)."""


def _ignore(_: str) -> None:
    return None


class RemoteRetention:
    """Steps 1-4 of the module docstring for one broker."""

    def __init__(
        self,
        store: RetainedStore,
        manifest_log: uploading.ManifestLog,
        bucket: buckets.Bucket,
        copy: manifest_copy.ManifestCopy,
        policy: planning.TierPolicy,
        *,
        sweep_interval_s: float,
        orphan_grace_s: float,
        clock_ms: Callable[[], int],
    ) -> None:
        if sweep_interval_s <= 0:
            raise ValueError(f"tier sweep interval {sweep_interval_s} s is not positive")
        if orphan_grace_s <= 0:
            raise ValueError(f"tier orphan grace period {orphan_grace_s} s is not positive")
        self.store = store
        self.manifest_log = manifest_log
        self.bucket = bucket
        self.copy = copy
        self.policy = policy
        self.sweep_interval_s = sweep_interval_s
        self.orphan_grace_s = orphan_grace_s
        self.figures = RetentionFigures()
        self.on_step: Callable[[str], None] = _ignore
        self._clock_ms = clock_ms
        self._next_sweep_ms: int | None = None  # None: at the first leader pass
        self._start_seen: int | None = None

    def leader_pass(self) -> None:
        """Steps 1-3 (module docstring); bucket and log errors propagate to the loop."""
        manifest = self.manifest_log.current()
        self.copy.lead(manifest)
        self.copy.sync()
        self._expire(manifest)
        now_ms = self._clock_ms()
        if self._next_sweep_ms is None or now_ms >= self._next_sweep_ms:
            self.sweep()
            self._next_sweep_ms = now_ms + int(self.sweep_interval_s * 1000)

    def follower_pass(self) -> None:
        self.copy.follow()
        self._next_sweep_ms = None

    def member_pass(self) -> None:
        """Step 4: every member, whether it leads or not."""
        start = self.manifest_log.current().start_offset
        if start is not None and (self._start_seen is None or start > self._start_seen):
            if self._start_seen is not None:
                self.store.tier_moved()
            self._start_seen = start

    def _expire(self, manifest: manifests.Manifest) -> None:
        change = planning.plan_remote_expiry(
            manifest,
            self.policy,
            local_start_offset=self.store.local_start_offset(),
            now_ms=self._clock_ms(),
        )
        if change is None:
            return
        forgotten = [o for o in manifest.objects if o.end_offset <= change.up_to_offset]
        self._next_sweep_ms = None  # a sweep follows (this pass, or the next if a delete fails)
        after = self.manifest_log.propose(change)
        self.store.tier_moved()
        self._start_seen = after.start_offset
        log.info(
            "tier: remote retention expired %d object(s) below offset %d (%d bytes); the tier"
            " now starts at %s",
            len(forgotten),
            change.up_to_offset,
            sum(o.size_bytes for o in forgotten),
            after.start_offset,
        )
        self.on_step("after-expire")
        for obj in forgotten:
            if after.find(obj.base_offset) is not None:
                continue  # never delete what the committed manifest still records
            self.bucket.delete(naming.commitlog_key(manifest.prefix, obj.base_offset))
            self.figures.expired_objects_total += 1
            self.figures.expired_bytes_total += obj.size_bytes
            self.on_step("after-delete")

    def sweep(self) -> sweeping.SweepPlan:
        """List the commit-log directory against the manifest and delete the orphans no upload
        can still record (:func:`sweeping.plan_sweep`)."""
        manifest = self.manifest_log.current()  # before the listing (plan_sweep's contract)
        listed = self.bucket.list_objects(naming.commitlog_dir_key(manifest.prefix))
        plan = sweeping.plan_sweep(
            manifest,
            listed,
            next_base=(
                manifest.end_offset
                if manifest.end_offset is not None
                else self.store.local_start_offset()
            ),
            now_ms=self._clock_ms(),
            grace_s=self.orphan_grace_s,
        )
        for key in plan.doomed:
            self.bucket.delete(key)
            self.figures.swept_objects_total += 1
        if plan.doomed:
            log.warning(
                "tier: swept %d orphan object(s) the manifest does not record (%d below the"
                " tier's end, %d older than %.0f s): %s",
                len(plan.doomed),
                len(plan.below_end),
                len(plan.stale),
                self.orphan_grace_s,
                ", ".join(plan.doomed[:5]) + (" ..." if len(plan.doomed) > 5 else ""),
            )
        if plan.foreign:
            log.warning(
                "tier: %d key(s) under %s are not commit-log names and are left alone: %s",
                len(plan.foreign),
                naming.commitlog_dir_key(manifest.prefix),
                ", ".join(plan.foreign[:5]),
            )
        return plan
