"""Checks of the offloaded files against the manifest (``gannet store verify`` over a tier).

For each object the manifest records, :func:`audit_object` asks the bucket: a HEAD must show
the recorded size and an ETag equal to the recorded MD5 (a single-part PUT's ETag is the MD5 of
the body, ``docs/tiered-storage.md`` §4). With ``walk`` (``--deep``) the whole object is read
back by ranged GETs of ``chunk_bytes``, its MD5 computed from the bytes themselves, and the
bytes handed to ``walk`` — the store's own record walk, which checks every record's structure,
CRC and PHYSICALOFFSET — so a deep audit proves the object is a readable commit-log file, not
only that the server kept what it was sent. :func:`orphans` lists objects under the prefix the
manifest does not record (left by a crash between upload and record, or by an expiry whose
deletes did not finish).

Bucket errors propagate as the tier's errors (unreachable: ``TierUnavailable``; credentials:
``TierCredentialsRejected``); an object the bucket does not have is a finding, not an error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from gannet.node.store.tier import buckets, manifests, naming

CHUNK_BYTES = 8 << 20
Walk = Callable[[bytes, int], tuple[int, str | None]]
"""``walk(data, base_offset)``: the records found valid, and the first damage (None: clean)."""


@dataclass(frozen=True, slots=True)
class ObjectAudit:
    """What one object's audit found; ``problems`` empty means it matches the manifest."""

    obj: manifests.TierObject
    key: str
    problems: tuple[str, ...]
    records_ok: int | None = None
    """Records the deep walk found valid (None: not walked)."""

    @property
    def ok(self) -> bool:
        return not self.problems


def audit_object(
    bucket: buckets.Bucket,
    prefix: str,
    obj: manifests.TierObject,
    *,
    walk: Walk | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    progress: Callable[[int], None] | None = None,
) -> ObjectAudit:
    """Check one recorded object (module docstring); ``progress`` gets bytes as they are done."""
    key = naming.commitlog_key(prefix, obj.base_offset)
    head = bucket.head(key)
    if head is None:
        if progress is not None:
            progress(obj.size_bytes)
        return ObjectAudit(obj, key, ("missing from the bucket",))
    problems: list[str] = []
    if head.size_bytes != obj.size_bytes:
        problems.append(f"size {head.size_bytes:,} bytes, manifest says {obj.size_bytes:,}")
    if head.etag.lower() != obj.md5_hex:
        problems.append(f"ETag {head.etag}, manifest MD5 {obj.md5_hex}")
    if walk is None or problems:
        if progress is not None:
            progress(obj.size_bytes)
        return ObjectAudit(obj, key, tuple(problems))
    data = bytearray()
    digest = hashlib.md5(usedforsecurity=False)
    while len(data) < obj.size_bytes:
        part = bucket.get_range(key, len(data), min(chunk_bytes, obj.size_bytes - len(data)))
        if not part:
            problems.append(f"read back only {len(data):,} of {obj.size_bytes:,} bytes")
            break
        digest.update(part)
        data += part
        if progress is not None:
            progress(len(part))
    if not problems and digest.hexdigest() != obj.md5_hex:
        problems.append(f"bytes read back have MD5 {digest.hexdigest()}, manifest {obj.md5_hex}")
    records_ok, damage = walk(bytes(data), obj.base_offset)
    if damage is not None:
        problems.append(damage)
    return ObjectAudit(obj, key, tuple(problems), records_ok)


def orphans(bucket: buckets.Bucket, manifest: manifests.Manifest) -> list[str]:
    """Keys under the manifest's commit-log prefix that the manifest does not record."""
    recorded = {naming.commitlog_key(manifest.prefix, o.base_offset) for o in manifest.objects}
    listed = bucket.list_keys(f"{manifest.prefix}/commitlog/")
    return sorted(key for key in listed if key not in recorded)
