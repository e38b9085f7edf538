"""The applied tier manifest of one member: state of the replicated log, kept in one file.

In a replicated broker every member applies the manifest changes of the Raft log
(``rmq_sys_GANNET_CONFIG`` records of op ``tier.change``, :mod:`gannet.node.replication.config_log`)
and installs the manifest carried by a config ``snapshot``; this is where the result lives. The
file is the manifest bytes of :mod:`.manifests` (the same file :class:`.uploading.FileManifestLog`
keeps for a single node, ``<store root>/tier/manifest.json``), replaced atomically (tmp, fsync,
rename, fsync dir) on every change, so a restart starts from the last applied manifest and the
replay of the log from the saved config progress is idempotent (``manifests.apply``).

Thread-safe: the dispatch thread applies, the offload worker and scrapes read.
"""

from __future__ import annotations

import threading
from pathlib import Path

from gannet.node.store import durable
from gannet.node.store.tier import errors, manifests, naming

MANIFEST_FILE_NAME = "manifest.json"


def manifest_path(store_root: Path) -> Path:
    """Where a store's applied (or single-node) manifest is kept."""
    return store_root / "tier" / MANIFEST_FILE_NAME


class AppliedManifest:
    """The last applied manifest (``None`` before any change), persisted in ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._manifest = manifests.decode(path.read_bytes()) if path.exists() else None

    def current(self) -> manifests.Manifest | None:
        with self._lock:
            return self._manifest

    def for_prefix(self, prefix: str) -> manifests.Manifest:
        """The manifest of ``prefix`` (empty before any change); a manifest applied for another
        prefix is a :class:`errors.ManifestConflict` (the bucket layout changed under it)."""
        current = self.current()
        if current is None:
            return manifests.Manifest(naming.check_prefix(prefix))
        if current.prefix != prefix:
            raise errors.ManifestConflict(
                f"the applied tier manifest ({self.path}) is for prefix {current.prefix!r}, not"
                f" {prefix!r}; a tier's prefix cannot change under a store"
            )
        return current

    def apply(self, prefix: str, change: manifests.Change) -> manifests.Manifest:
        """Apply ``change`` to the manifest of ``prefix``, persist it, return the result."""
        with self._lock:
            base = (
                self._manifest
                if self._manifest is not None
                else manifests.Manifest(naming.check_prefix(prefix))
            )
            if base.prefix != prefix:
                raise errors.ManifestConflict(
                    f"a tier change for prefix {prefix!r} reached a manifest of {base.prefix!r}"
                )
            updated = manifests.apply(base, change)
            if updated != self._manifest:
                self._write(updated)
            return updated

    def replace(self, manifest: manifests.Manifest) -> None:
        """Install ``manifest`` as is (a config snapshot)."""
        manifests.check(manifest)
        with self._lock:
            if manifest != self._manifest:
                self._write(manifest)

    def _write(self, manifest: manifests.Manifest) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        durable.write_file_atomically(self.path, manifests.encode(manifest), keep_backup=False)
        self._manifest = manifest
