"""The manifest's copy in the bucket: ``<prefix>/manifest.json``, written by the leader.

After each change the manifest log committed (``propose`` returned: the Raft entry is
committed and applied, or the single node's file replaced), the leader writes the manifest
bytes of :mod:`.manifests` to ``<prefix>/manifest.json`` (:func:`.naming.manifest_key`). So a
reader with only the bucket — ``gannet store inspect/verify/get/query`` without
``--tier-manifest``, or a group rebuilt after losing every member — finds what the tier holds.

The copy may **lag** the manifest (a failed or interrupted write is retried on the next pass; a
deposed leader's late write may briefly put an older manifest back) but is never **ahead** of
what the log committed: only manifests a successful ``propose`` returned are written, and, when
a leadership starts, the applied manifest, which then holds only committed changes (a serving
Raft leader has committed every entry of its log before it serves; a single node's file is the
commit). After a ``propose`` that failed without a refusal (commit uncertain), the applied
manifest may hold a change not committed, so nothing is written until a later ``propose``
succeeds.

A reader of the copy therefore may find objects already expired from it missing in the bucket
(the copy lagged an expiry), never an object the copy names that was not recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gannet.node.store.tier import buckets, errors, manifests, naming, uploading

log = logging.getLogger(__name__)


def _nothing() -> None:
    return None


class ManifestCopy:
    """What the leader wrote to the bucket, and what it may write next (module docstring)."""

    def __init__(
        self, bucket: buckets.Bucket, prefix: str, *, on_write: Callable[[], None] = _nothing
    ) -> None:
        self.bucket = bucket
        self.key = naming.manifest_key(prefix)
        self.on_write = on_write
        """Told after each write of the copy (the loop's counter)."""
        self._committed: manifests.Manifest | None = None
        self._written: manifests.Manifest | None = None
        self._uncertain = False

    def committed(self, manifest: manifests.Manifest) -> None:
        """``manifest`` is committed (a ``propose`` returned it)."""
        self._committed = manifest
        self._uncertain = False

    def uncertain(self) -> None:
        """A ``propose`` failed after it may have appended: the applied manifest may be ahead."""
        self._uncertain = True

    def lead(self, applied: manifests.Manifest) -> None:
        """A leader pass: at the start of a leadership, ``applied`` is committed (module doc)."""
        if self._committed is None and not self._uncertain:
            self._committed = applied

    def follow(self) -> None:
        """Not the leader (any more): the next leadership starts from what it finds."""
        self._committed = None
        self._written = None

    def sync(self) -> bool:
        """Write the committed manifest if the bucket's copy may differ; returns whether it
        wrote. Bucket errors propagate (the next pass retries)."""
        manifest = self._committed
        if manifest is None or manifest == self._written:
            return False
        self.bucket.put_bytes(self.key, manifests.encode(manifest))
        self._written = manifest
        self.on_write()
        return True


class CopiedManifestLog:
    """A :class:`uploading.ManifestLog` that writes the bucket's copy after each committed
    change (a failed write is left to :meth:`ManifestCopy.sync` on the next pass)."""

    def __init__(self, inner: uploading.ManifestLog, copy: ManifestCopy) -> None:
        self.inner = inner
        self.copy = copy

    def current(self) -> manifests.Manifest:
        return self.inner.current()

    def propose(self, change: manifests.Change) -> manifests.Manifest:
        try:
            updated = self.inner.propose(change)
        except errors.ManifestConflict:
            raise  # refused before anything was appended
        except Exception:
            self.copy.uncertain()
            raise
        self.copy.committed(updated)
        try:
            self.copy.sync()
        except errors.TierError as exc:
            log.warning(
                "tier: the manifest copy %s was not written (%s); retried", self.copy.key, exc
            )
        return updated


class NoManifestCopy(LookupError):
    """The bucket holds no manifest copy under the prefix."""


def read_copy(bucket: buckets.Bucket, prefix: str) -> manifests.Manifest:
    """The manifest copy under ``prefix``; :class:`NoManifestCopy` when absent,
    :class:`errors.ManifestCorrupt` when it does not decode or is for another prefix."""
    key = naming.manifest_key(prefix)
    data = bucket.get_bytes(key)
    if data is None:
        raise NoManifestCopy(key)
    manifest = manifests.decode(data)
    if manifest.prefix != prefix:
        raise errors.ManifestCorrupt(
            f"{key}: the manifest copy is for prefix {manifest.prefix!r}, not {prefix!r}"
        )
    return manifest
