"""The tier manifest: which commit-log files the bucket holds, agreed by every group member.

The manifest is the only source of truth for "this file is in the tier". A local commit-log file
may be deleted only once the manifest records it, and the manifest records it only after the
object was verified in the bucket (:mod:`.uploading`). In the broker the manifest is state of
the Raft log: a change (:class:`RecordObject`, :class:`ExpireObjects`) is proposed as an entry and
applied by every member in log order, so members agree without talking to the bucket. This module
is pure: values, :func:`apply`, and the byte formats of the manifest and of a change.

A **gap** (:class:`Gap`, change :class:`RecordGap`) is a commit-log range the tier will never
hold: disk pressure deleted its local files before they were offloaded, and no copy the leader
knows (its disk, an unrecorded object in the bucket) is left. Recording it lets offload continue
after it; a read of an offset in a gap is answered as a removed record.

Invariants (checked by :func:`check` on every value built, decoded or produced by :func:`apply`):

- objects and gaps are ordered and **contiguous together**: each starts where the previous one
  ends (``base_offset + size_bytes``), because files are offloaded oldest first and expired oldest
  first; so the tier covers exactly the commit-log range ``[start_offset, end_offset)``, every
  offset of it in one object or in one recorded gap;
- a gap is never first (the tier starts with an object), is not empty, and never follows another
  gap (adjacent gaps are merged);
- ``size_bytes > 0``; ``md5_hex`` is 32 lowercase hex digits (the MD5 of the whole file, which is
  also the S3 ETag of a single-part upload); ``uploaded_at_ms >= 0``;
- :func:`apply` is idempotent: recording an object already recorded with the same size and MD5
  changes nothing (a proposal retried after a leader change); a different object at a recorded
  offset, or one that does not start at ``end_offset``, is a :class:`ManifestConflict`.

Manifest bytes (UTF-8 JSON, keys sorted, no whitespace; version 1 without gaps, version 2 with
them, so a manifest without gaps stays readable by a Gannet that knows no gaps, and one with
gaps is refused by it with a message naming the version)::

    {"format":"gannet-tier-manifest","objects":[{"base":0,"md5":"<32 hex>","size":1048576,
     "uploadedAtMs":1764900000000}, ...],"prefix":"gannet/c1/g0","version":1}
    {"format":"gannet-tier-manifest","gaps":[{"from":1048576,"to":3145728}],"objects":[...],
     "prefix":"gannet/c1/g0","version":2}

Change bytes (the payload of a Raft entry; version 1; a reader refuses a kind it does not know,
naming it)::

    {"format":"gannet-tier-change","kind":"record","object":{...as above...},"version":1}
    {"format":"gannet-tier-change","kind":"expire","upToOffset":<int>,"version":1}
    {"format":"gannet-tier-change","fromOffset":<int>,"kind":"gap","toOffset":<int>,"version":1}
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from gannet.node.store.tier import errors, naming

MANIFEST_FORMAT = "gannet-tier-manifest"
CHANGE_FORMAT = "gannet-tier-change"
FORMAT_VERSION = 1
GAPS_FORMAT_VERSION = 2
"""The manifest version written when it records gaps (a reader reads both)."""
CHANGE_KINDS = ("record", "expire", "gap")
_MD5_HEX = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class TierObject:
    """One commit-log file, held under the key ``naming.commitlog_key(prefix, base_offset)``."""

    base_offset: int
    size_bytes: int
    md5_hex: str
    uploaded_at_ms: int

    @property
    def end_offset(self) -> int:
        """The commit-log offset just past this file."""
        return self.base_offset + self.size_bytes


@dataclass(frozen=True, slots=True)
class Gap:
    """A commit-log range ``[from_offset, to_offset)`` the tier will never hold (module
    docstring): its files were deleted locally before they were offloaded."""

    from_offset: int
    to_offset: int

    @property
    def size_bytes(self) -> int:
        return self.to_offset - self.from_offset


@dataclass(frozen=True, slots=True)
class Manifest:
    """What the tier of one broker group holds.

    Invariant: ``objects`` and ``gaps`` are contiguous together and ordered, a gap is never
    first nor next to another gap (see the module docstring).
    """

    prefix: str
    objects: tuple[TierObject, ...] = ()
    gaps: tuple[Gap, ...] = ()

    @property
    def start_offset(self) -> int | None:
        """The first commit-log offset held by the tier, ``None`` when it holds nothing."""
        return self.objects[0].base_offset if self.objects else None

    @property
    def end_offset(self) -> int | None:
        """The commit-log offset just past the tier's last file or recorded gap, ``None`` when
        it holds nothing: the next object must start there."""
        if not self.objects:
            return None
        last = self.objects[-1].end_offset
        return max(last, self.gaps[-1].to_offset) if self.gaps else last

    def gap_at(self, offset: int) -> Gap | None:
        """The recorded gap holding commit-log ``offset``, if any."""
        for gap in self.gaps:
            if gap.from_offset <= offset < gap.to_offset:
                return gap
        return None

    def gap_bytes(self) -> int:
        """Bytes of the commit log the tier lacks as recorded gaps."""
        return sum(gap.size_bytes for gap in self.gaps)

    def find(self, base_offset: int) -> TierObject | None:
        """The object recorded for the file starting at ``base_offset``, if any."""
        for obj in self.objects:
            if obj.base_offset == base_offset:
                return obj
        return None

    def locate(self, offset: int) -> TierObject | None:
        """The object whose range ``[base_offset, end_offset)`` holds the commit-log ``offset``."""
        low, high = 0, len(self.objects)
        while low < high:
            mid = (low + high) // 2
            obj = self.objects[mid]
            if offset < obj.base_offset:
                high = mid
            elif offset >= obj.end_offset:
                low = mid + 1
            else:
                return obj
        return None

    def total_bytes(self) -> int:
        return sum(obj.size_bytes for obj in self.objects)


@dataclass(frozen=True, slots=True)
class RecordObject:
    """Change: the bucket holds ``obj`` (verified); it joins the manifest at its end."""

    obj: TierObject


@dataclass(frozen=True, slots=True)
class ExpireObjects:
    """Change: remote retention dropped every object that ends at or before ``up_to_offset``."""

    up_to_offset: int


@dataclass(frozen=True, slots=True)
class RecordGap:
    """Change: ``[from_offset, to_offset)``, from the tier's end on, is gone from every copy
    the leader knows; the tier continues after it."""

    from_offset: int
    to_offset: int


Change = RecordObject | ExpireObjects | RecordGap


def check_object(obj: TierObject) -> None:
    """Raise :class:`errors.ManifestConflict` naming the field if ``obj`` is not valid."""
    naming.commitlog_file_name(obj.base_offset)  # range check with a clear message
    if obj.size_bytes <= 0:
        raise errors.ManifestConflict(
            f"tier object at {obj.base_offset}: size_bytes {obj.size_bytes} <= 0"
        )
    if not _MD5_HEX.fullmatch(obj.md5_hex):
        raise errors.ManifestConflict(
            f"tier object at {obj.base_offset}: md5 {obj.md5_hex!r} is not 32 lowercase hex digits"
        )
    if obj.uploaded_at_ms < 0:
        raise errors.ManifestConflict(f"tier object at {obj.base_offset}: uploaded_at_ms < 0")


def check(manifest: Manifest) -> Manifest:
    """Return ``manifest`` if every invariant holds, else raise :class:`errors.ManifestConflict`."""
    try:
        naming.check_prefix(manifest.prefix)
    except ValueError as exc:
        raise errors.ManifestConflict(str(exc)) from exc
    for obj in manifest.objects:
        check_object(obj)
    spans = sorted(
        [(obj.base_offset, obj.end_offset, False) for obj in manifest.objects]
        + [(gap.from_offset, gap.to_offset, True) for gap in manifest.gaps]
    )
    for gap in manifest.gaps:
        if gap.to_offset <= gap.from_offset:
            raise errors.ManifestConflict(
                f"tier gap [{gap.from_offset}, {gap.to_offset}) is empty or reversed"
            )
    if spans and spans[0][2]:
        raise errors.ManifestConflict(
            f"the tier starts with a gap at {spans[0][0]}; it must start with an object"
        )
    for (base, end, was_gap), (next_base, _, is_gap) in itertools.pairwise(spans):
        if next_base != end:
            raise errors.ManifestConflict(
                f"tier objects and gaps are not contiguous: [{base}, {end}) is followed by one"
                f" starting at {next_base}"
            )
        if was_gap and is_gap:
            raise errors.ManifestConflict(f"tier gaps at {base} and {next_base} are not merged")
    return manifest


def apply(manifest: Manifest, change: Change) -> Manifest:
    """The manifest after ``change``; idempotent for a repeated :class:`RecordObject`."""
    if isinstance(change, RecordObject):
        return _record(manifest, change.obj)
    if isinstance(change, RecordGap):
        return _record_gap(manifest, Gap(change.from_offset, change.to_offset))
    kept = tuple(obj for obj in manifest.objects if obj.end_offset > change.up_to_offset)
    start = kept[0].base_offset if kept else None
    gaps = tuple(g for g in manifest.gaps if start is not None and g.from_offset > start)
    return check(Manifest(manifest.prefix, kept, gaps))


def _record_gap(manifest: Manifest, gap: Gap) -> Manifest:
    """The manifest with ``gap`` at its end (merged with a trailing gap); a gap already
    recorded (a retried proposal) changes nothing."""
    if gap.to_offset <= gap.from_offset:
        raise errors.ManifestConflict(
            f"tier gap [{gap.from_offset}, {gap.to_offset}) is empty or reversed"
        )
    recorded = manifest.gap_at(gap.from_offset)
    if recorded is not None and gap.to_offset <= recorded.to_offset:
        return manifest
    end = manifest.end_offset
    if end is None:
        raise errors.ManifestConflict(
            f"tier gap [{gap.from_offset}, {gap.to_offset}): an empty tier has no gap; offload"
            " starts at the oldest local file"
        )
    if gap.from_offset != end:
        raise errors.ManifestConflict(
            f"tier gap [{gap.from_offset}, {gap.to_offset}) does not start at the tier's end {end}"
        )
    gaps = manifest.gaps
    if gaps and gaps[-1].to_offset == end:  # a trailing gap grows
        gaps = (*gaps[:-1], Gap(gaps[-1].from_offset, gap.to_offset))
    else:
        gaps = (*gaps, gap)
    return check(Manifest(manifest.prefix, manifest.objects, gaps))


def _record(manifest: Manifest, obj: TierObject) -> Manifest:
    check_object(obj)
    recorded = manifest.find(obj.base_offset)
    if recorded is not None:
        if (recorded.size_bytes, recorded.md5_hex) != (obj.size_bytes, obj.md5_hex):
            raise errors.ManifestConflict(
                f"tier object at {obj.base_offset} is recorded with size {recorded.size_bytes} md5"
                f" {recorded.md5_hex}; refusing size {obj.size_bytes} md5 {obj.md5_hex}"
            )
        return manifest
    end = manifest.end_offset
    if end is not None and obj.base_offset != end:
        raise errors.ManifestConflict(
            f"tier object at {obj.base_offset} does not continue the tier, which ends at {end}"
        )
    return check(Manifest(manifest.prefix, (*manifest.objects, obj), manifest.gaps))


def _object_json(obj: TierObject) -> dict[str, object]:
    return {
        "base": obj.base_offset,
        "size": obj.size_bytes,
        "md5": obj.md5_hex,
        "uploadedAtMs": obj.uploaded_at_ms,
    }


def _dumps(value: Mapping[str, object]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def encode(manifest: Manifest) -> bytes:
    """Manifest bytes (module docstring); the manifest is checked first."""
    check(manifest)
    value: dict[str, object] = {
        "format": MANIFEST_FORMAT,
        "version": FORMAT_VERSION,
        "prefix": manifest.prefix,
        "objects": [_object_json(obj) for obj in manifest.objects],
    }
    if manifest.gaps:
        value["version"] = GAPS_FORMAT_VERSION
        value["gaps"] = [{"from": g.from_offset, "to": g.to_offset} for g in manifest.gaps]
    return _dumps(value)


def encode_change(change: Change) -> bytes:
    """Change bytes (module docstring)."""
    body: dict[str, object]
    if isinstance(change, RecordObject):
        check_object(change.obj)
        body = {"kind": "record", "object": _object_json(change.obj)}
    elif isinstance(change, RecordGap):
        body = {"kind": "gap", "fromOffset": change.from_offset, "toOffset": change.to_offset}
    else:
        body = {"kind": "expire", "upToOffset": change.up_to_offset}
    return _dumps({"format": CHANGE_FORMAT, "version": FORMAT_VERSION, **body})


def _load(data: bytes, fmt: str, versions: tuple[int, ...]) -> dict[str, object]:
    try:
        value = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise errors.ManifestCorrupt(f"{fmt}: not UTF-8 JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise errors.ManifestCorrupt(f"{fmt}: top level is {type(value).__name__}, not an object")
    if value.get("format") != fmt:
        raise errors.ManifestCorrupt(f"{fmt}: format is {value.get('format')!r}")
    if value.get("version") not in versions:
        known = " or ".join(str(v) for v in versions)
        raise errors.ManifestCorrupt(
            f"{fmt}: version {value.get('version')!r} is not {known} (written by a newer Gannet?)"
        )
    return value


def _int_field(value: Mapping[str, object], name: str, fmt: str) -> int:
    field = value.get(name)
    if not isinstance(field, int) or isinstance(field, bool):
        raise errors.ManifestCorrupt(f"{fmt}: field {name!r} is {field!r}, not an integer")
    return field


def _decode_object(value: object, fmt: str) -> TierObject:
    if not isinstance(value, dict):
        raise errors.ManifestCorrupt(f"{fmt}: an object entry is {value!r}, not a JSON object")
    md5 = value.get("md5")
    if not isinstance(md5, str):
        raise errors.ManifestCorrupt(f"{fmt}: field 'md5' is {md5!r}, not a string")
    return TierObject(
        base_offset=_int_field(value, "base", fmt),
        size_bytes=_int_field(value, "size", fmt),
        md5_hex=md5,
        uploaded_at_ms=_int_field(value, "uploadedAtMs", fmt),
    )


def decode(data: bytes) -> Manifest:
    """The manifest in ``data``; :class:`errors.ManifestCorrupt` names what is wrong."""
    value = _load(data, MANIFEST_FORMAT, (FORMAT_VERSION, GAPS_FORMAT_VERSION))
    prefix, objects = value.get("prefix"), value.get("objects")
    if not isinstance(prefix, str):
        raise errors.ManifestCorrupt(f"{MANIFEST_FORMAT}: field 'prefix' is {prefix!r}")
    if not isinstance(objects, list):
        raise errors.ManifestCorrupt(
            f"{MANIFEST_FORMAT}: field 'objects' is {objects!r}, not a list"
        )
    gaps = _decode_gaps(value)
    manifest = Manifest(
        prefix, tuple(_decode_object(obj, MANIFEST_FORMAT) for obj in objects), gaps
    )
    try:
        return check(manifest)
    except errors.ManifestConflict as exc:
        raise errors.ManifestCorrupt(f"{MANIFEST_FORMAT}: {exc}") from exc


def _decode_gaps(value: Mapping[str, object]) -> tuple[Gap, ...]:
    gaps = value.get("gaps", [])
    if not isinstance(gaps, list):
        raise errors.ManifestCorrupt(f"{MANIFEST_FORMAT}: field 'gaps' is {gaps!r}, not a list")
    if gaps and value.get("version") != GAPS_FORMAT_VERSION:
        raise errors.ManifestCorrupt(
            f"{MANIFEST_FORMAT}: gaps need version {GAPS_FORMAT_VERSION}, the manifest says"
            f" {value.get('version')!r}"
        )
    decoded = []
    for gap in gaps:
        if not isinstance(gap, dict):
            raise errors.ManifestCorrupt(
                f"{MANIFEST_FORMAT}: a gap entry is {gap!r}, not an object"
            )
        decoded.append(
            Gap(_int_field(gap, "from", MANIFEST_FORMAT), _int_field(gap, "to", MANIFEST_FORMAT))
        )
    return tuple(decoded)


def decode_change(data: bytes) -> Change:
    """The change in ``data``; :class:`errors.ManifestCorrupt` names what is wrong."""
    value = _load(data, CHANGE_FORMAT, (FORMAT_VERSION,))
    kind = value.get("kind")
    if kind == "record":
        obj = _decode_object(value.get("object"), CHANGE_FORMAT)
        try:
            check_object(obj)
        except errors.ManifestConflict as exc:
            raise errors.ManifestCorrupt(f"{CHANGE_FORMAT}: {exc}") from exc
        return RecordObject(obj)
    if kind == "expire":
        return ExpireObjects(_int_field(value, "upToOffset", CHANGE_FORMAT))
    if kind == "gap":
        return RecordGap(
            _int_field(value, "fromOffset", CHANGE_FORMAT),
            _int_field(value, "toOffset", CHANGE_FORMAT),
        )
    raise errors.ManifestCorrupt(
        f"{CHANGE_FORMAT}: kind {kind!r} is not one of {', '.join(CHANGE_KINDS)}"
        " (written by a newer Gannet?)"
    )
