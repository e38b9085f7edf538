"""The crash-safe offload of one sealed commit-log file.

Protocol (each step is a :class:`Boundary` where a crash may happen; the tests crash a real
process at every one and resume):

1. ``BEFORE_UPLOAD`` — the file's size and MD5 are computed from the local copy. If the
   manifest already records the file, skip to step 5 (a crash after step 4 resumes here). A file
   the manifest could not record (empty, or not starting at the tier's end) is refused here,
   before any upload, so the bucket never gets an object the manifest cannot hold.
2. If the bucket already holds the key with the same size and ETag (= MD5 of a single-part
   upload), skip the PUT (a crash after step 2 resumes here); otherwise PUT the file with
   ``Content-MD5``, so the server itself rejects a body that arrived damaged
   (``MID_UPLOAD`` is reported while the body is read; then ``AFTER_UPLOAD``).
3. Verify: a fresh HEAD must show the local size and MD5; otherwise
   :class:`errors.UploadNotVerified` and nothing is recorded (``AFTER_VERIFY``).
4. Record: propose :class:`manifests.RecordObject` to the manifest log (in the broker, a Raft
   entry; it returns once committed and applied) (``AFTER_RECORD``).
5. Delete the local copy — only if the manifest records it with the local size and MD5 — with a
   durable unlink (``AFTER_DELETE``). :func:`delete_local` is this step alone, for the planner's
   ``plan_local_deletes`` (which may keep recent offloaded files as a local cache).

So the order "bucket holds it, verified" → "manifest says so" → "local copy gone" holds at every
instant, and a re-run after a crash anywhere neither loses the file nor records it twice (the
manifest's ``apply`` is idempotent, and an object already in the bucket is verified, not
re-uploaded).

:class:`FileManifestLog` is the manifest log for a single node and for the tests: the encoded
manifest in one file, replaced atomically (tmp, fsync, rename, fsync dir) by
``store/durable.py``. The broker will put the same changes through its Raft log instead.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gannet.node.store import durable
from gannet.node.store.tier import buckets, errors, manifests, naming

_READ_CHUNK_BYTES = 1 << 20


class Boundary(enum.Enum):
    """The points between the steps of an offload, reported to ``on_boundary``."""

    BEFORE_UPLOAD = "before-upload"
    MID_UPLOAD = "mid-upload"
    AFTER_UPLOAD = "after-upload"
    AFTER_VERIFY = "after-verify"
    AFTER_RECORD = "after-record"
    AFTER_DELETE = "after-delete"


class ManifestLog(Protocol):
    """Where manifest changes are made durable and agreed (the Raft log in the broker)."""

    def current(self) -> manifests.Manifest: ...

    def propose(self, change: manifests.Change) -> manifests.Manifest: ...


class FileManifestLog:
    """A :class:`ManifestLog` kept in one file, replaced atomically on every change."""

    def __init__(self, path: Path, prefix: str) -> None:
        self.path = path
        self._manifest = (
            manifests.decode(path.read_bytes())
            if path.exists()
            else manifests.Manifest(naming.check_prefix(prefix))
        )
        if self._manifest.prefix != prefix:
            raise errors.ManifestConflict(
                f"manifest {path} is for prefix {self._manifest.prefix!r}, not {prefix!r}"
            )

    def current(self) -> manifests.Manifest:
        return self._manifest

    def propose(self, change: manifests.Change) -> manifests.Manifest:
        updated = manifests.apply(self._manifest, change)
        if updated != self._manifest:
            durable.write_file_atomically(self.path, manifests.encode(updated), keep_backup=False)
            self._manifest = updated
        return updated


@dataclass(frozen=True, slots=True)
class Offloaded:
    """What one :func:`offload` did: the recorded object and which steps ran this time."""

    obj: manifests.TierObject
    uploaded: bool
    deleted: bool


def _ignore(_: Boundary) -> None:
    return None


def file_md5(path: Path) -> bytes:
    """The MD5 digest of a file, read in 1 MiB chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as file:
        while chunk := file.read(_READ_CHUNK_BYTES):
            digest.update(chunk)
    return digest.digest()


def offload(
    path: Path,
    *,
    bucket: buckets.Bucket,
    log: ManifestLog,
    now_ms: int,
    delete: bool = True,
    on_boundary: Callable[[Boundary], None] = _ignore,
) -> Offloaded:
    """Upload, verify, record and (with ``delete``) remove the sealed commit-log file ``path``."""
    base_offset = naming.parse_commitlog_file_name(path.name)
    size_bytes = path.stat().st_size
    md5_digest = file_md5(path)
    on_boundary(Boundary.BEFORE_UPLOAD)
    manifest = log.current()
    recorded = manifest.find(base_offset)
    uploaded = False
    if recorded is None:
        _check_continues(manifest, path, base_offset, size_bytes)
        key = naming.commitlog_key(manifest.prefix, base_offset)
        uploaded = _upload_unless_held(bucket, key, path, size_bytes, md5_digest, on_boundary)
        _verify(bucket, key, size_bytes, md5_digest)
        on_boundary(Boundary.AFTER_VERIFY)
        obj = manifests.TierObject(base_offset, size_bytes, md5_digest.hex(), now_ms)
        manifest = log.propose(manifests.RecordObject(obj))
        on_boundary(Boundary.AFTER_RECORD)
    deleted = delete and delete_local(path, manifest, md5_digest=md5_digest)
    if deleted:
        on_boundary(Boundary.AFTER_DELETE)
    recorded = manifest.find(base_offset)
    if recorded is None:
        raise errors.ManifestConflict(f"manifest lost {path.name} right after recording it")
    return Offloaded(recorded, uploaded, deleted)


def _check_continues(
    manifest: manifests.Manifest, path: Path, base_offset: int, size_bytes: int
) -> None:
    """Refuse before any upload what the manifest could not record (no orphan objects)."""
    if size_bytes <= 0:
        raise errors.ManifestConflict(f"{path} is empty: nothing to offload")
    end = manifest.end_offset
    if end is not None and base_offset != end:
        raise errors.ManifestConflict(
            f"{path.name} does not continue the tier, which ends at {end}: offload oldest first"
        )


def _upload_unless_held(
    bucket: buckets.Bucket,
    key: str,
    path: Path,
    size_bytes: int,
    md5_digest: bytes,
    on_boundary: Callable[[Boundary], None],
) -> bool:
    head = bucket.head(key)
    if head is not None and (head.size_bytes, head.etag) == (size_bytes, md5_digest.hex()):
        return False  # uploaded before a crash: verify it, do not send it again
    half_bytes = max(1, size_bytes // 2)
    reported = False

    def on_read(done_bytes: int) -> None:
        nonlocal reported
        if not reported and done_bytes >= half_bytes:
            reported = True
            on_boundary(Boundary.MID_UPLOAD)

    etag = bucket.put_file(key, path, md5_digest=md5_digest, on_read=on_read)
    on_boundary(Boundary.AFTER_UPLOAD)
    if etag != md5_digest.hex():
        raise errors.UploadNotVerified(
            f"PUT {key}: ETag {etag} is not the file's MD5 {md5_digest.hex()}"
        )
    return True


def _verify(bucket: buckets.Bucket, key: str, size_bytes: int, md5_digest: bytes) -> None:
    head = bucket.head(key)
    if head is None:
        raise errors.UploadNotVerified(f"{key}: the bucket does not hold it after the upload")
    if head.size_bytes != size_bytes or head.etag != md5_digest.hex():
        raise errors.UploadNotVerified(
            f"{key}: bucket has {head.size_bytes} bytes ETag {head.etag}, local file has"
            f" {size_bytes} bytes MD5 {md5_digest.hex()}"
        )


def delete_local(
    path: Path, manifest: manifests.Manifest, *, md5_digest: bytes | None = None
) -> bool:
    """Durably delete ``path`` if the manifest records it with the same size and MD5.

    Returns whether it was deleted. A file the manifest records with another size or MD5 is a
    :class:`errors.ManifestConflict` and stays. ``md5_digest`` spares re-reading the file when
    the caller has just computed it.
    """
    recorded = manifest.find(naming.parse_commitlog_file_name(path.name))
    if recorded is None or not path.exists():
        return False
    digest = file_md5(path) if md5_digest is None else md5_digest
    if (recorded.size_bytes, recorded.md5_hex) != (path.stat().st_size, digest.hex()):
        raise errors.ManifestConflict(
            f"{path}: manifest records {recorded.size_bytes} bytes md5 {recorded.md5_hex}, the"
            f" local file has {path.stat().st_size} bytes md5 {digest.hex()}; keeping it"
        )
    durable.remove_file(path)
    return True
