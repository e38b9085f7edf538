"""Where a job's commit log comes from: local segment files, objects of the tier, or both.

A *tiered source* is a broker group's tier (a bucket, a key prefix and the manifest saying which
commit-log files the bucket holds, ``docs/tiered-storage.md`` §2-§3), alone or beside the
group's local store directory. :func:`series` turns the manifest and the local segments into one
contiguous, ordered list of parts: the tier's objects, then the local files that start at or
after the tier's end. A file that is both offloaded and still local (the hot copy the broker
keeps) is read from the tier only, so no record is read twice; local files wholly before the
tier's start (none on a broker: files are offloaded oldest first) come first. The series must
be contiguous — a hole between the tier's end and the first local file (a file deleted under
disk pressure before it was offloaded) or a local file that straddles the tier's end is refused
with :class:`SourceError` naming both sides, before any Spark task runs.

A part of the tier is a :class:`TierSegment`: the object key, its commit-log range and the
bucket's configuration (which pickles, so executors open the bucket themselves; they read the
object by ranged GETs, :mod:`gannet.pipeline.objects`, never through a broker).

The manifest comes from one function, :func:`load_manifest`, given a :class:`ManifestFile` (the
``--tier-manifest`` file: ``<store>/tier/manifest.json`` on a broker or a copy) or a
:class:`ManifestInBucket` (the copy a broker's leader writes to ``<prefix>/manifest.json``
after each change, ``docs/tiered-storage.md`` §3, read by
:func:`gannet.node.store.tier.manifest_copy.read_copy`). The
bucket's key *listing* is not used as a manifest: it says nothing about sizes the broker
verified, and an object uploaded but not yet recorded (a crash between upload and
record) would be read as part of the tier.

Pure apart from :func:`load_manifest` (a file read or one bucket GET). Used by
:mod:`gannet.pipeline.jobs` (``gannet pipeline export|verify`` with ``--tier-*``) and
:mod:`gannet.pipeline.tierreading` (the data source without a broker).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gannet.node.store.tier import buckets, errors, manifest_copy, manifests, naming
from gannet.pipeline import segments
from gannet.pipeline.segments import Segment


class SourceError(ValueError):
    """The tier and the local files do not make one contiguous commit log, or the manifest
    cannot be had; the message names what is wrong."""


@dataclass(frozen=True, slots=True)
class TierBucket:
    """What an executor needs to open the bucket: its configuration (secret included, hidden
    from ``repr``) and the broker group's key prefix."""

    config: buckets.BucketConfig = field(repr=False)
    prefix: str

    def __post_init__(self) -> None:
        naming.check_prefix(self.prefix)


@dataclass(frozen=True, slots=True)
class TierSegment:
    """One offloaded commit-log file: the object ``key`` holding commit-log bytes
    ``[start_offset, start_offset + size_bytes)``. Read on executors by ranged GETs."""

    tier: TierBucket
    key: str
    start_offset: int
    size_bytes: int
    group: str = ""

    @property
    def name(self) -> str:
        """The RocketMQ file name (20 digits), as a local segment's."""
        return self.key.rsplit("/", 1)[-1]

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size_bytes


Part = Segment | TierSegment
"""A piece of a job's commit log: a local file or a tier object."""


@dataclass(frozen=True, slots=True)
class ManifestFile:
    """The manifest bytes in a file (``--tier-manifest``)."""

    path: Path


@dataclass(frozen=True, slots=True)
class ManifestInBucket:
    """The manifest copy at ``<prefix>/manifest.json`` of the tier's bucket."""

    tier: TierBucket


ManifestSource = ManifestFile | ManifestInBucket


def load_manifest(
    source: ManifestSource, bucket: buckets.Bucket | None = None
) -> manifests.Manifest:
    """The manifest ``source`` names; :class:`SourceError` when it is unreadable or malformed.
    ``bucket`` (for :class:`ManifestInBucket`) defaults to one opened on its configuration;
    bucket errors (:class:`errors.TierError`) propagate for the caller's exit codes."""
    if isinstance(source, ManifestFile):
        try:
            data = source.path.read_bytes()
        except OSError as exc:
            raise SourceError(f"tier manifest {source.path}: {exc.strerror}") from None
        where = str(source.path)
    else:
        opened = bucket if bucket is not None else buckets.S3Bucket(source.tier.config)
        where = f"{source.tier.config.bucket}/{naming.manifest_key(source.tier.prefix)}"
        try:
            return manifest_copy.read_copy(opened, source.tier.prefix)
        except manifest_copy.NoManifestCopy:
            raise SourceError(
                f"the manifest copy {where} does not exist: give the manifest file "
                "(--tier-manifest / option tierManifest; <store>/tier/manifest.json on a broker)"
            ) from None
        except errors.ManifestCorrupt as exc:
            raise SourceError(f"tier manifest {where}: {exc}") from None
    try:
        return manifests.decode(data)
    except errors.ManifestCorrupt as exc:
        raise SourceError(f"tier manifest {where}: {exc}") from None


def tier_segments(
    tier: TierBucket, manifest: manifests.Manifest, group: str = ""
) -> list[TierSegment]:
    """The manifest's objects as parts, in offset order; the manifest must be ``tier``'s."""
    if manifest.prefix != tier.prefix:
        raise SourceError(f"the manifest is for prefix {manifest.prefix!r}, not {tier.prefix!r}")
    return [
        TierSegment(
            tier, naming.commitlog_key(tier.prefix, obj.base_offset), obj.base_offset,
            obj.size_bytes, group,
        )
        for obj in manifest.objects
    ]  # fmt: skip


def series(tiered: Sequence[TierSegment], local: Sequence[Segment]) -> list[Part]:
    """The tier's objects and the local files as one contiguous commit log (module docstring);
    :class:`SourceError` naming a hole or an overlap."""
    if not tiered:
        return list(local)
    start, end = tiered[0].start_offset, tiered[-1].end_offset
    before = [s for s in local if s.end_offset <= start]
    after = [s for s in local if s.start_offset >= end]
    for s in local:
        inside = start <= s.start_offset and s.end_offset <= end
        if not (inside or s.end_offset <= start or s.start_offset >= end):
            raise SourceError(
                f"local commit-log file {s.name} [{s.start_offset}, {s.end_offset}) straddles "
                f"an end of the tier [{start}, {end}): the tier and the store are not of the "
                "same commit log"
            )
    parts: list[Part] = [*before, *tiered, *after]
    for left, right in itertools.pairwise(parts):
        if right.start_offset != left.end_offset:
            what = "missing" if right.start_offset > left.end_offset else "overlapping"
            raise SourceError(
                f"commit log is not contiguous: {_describe(left)} ends at {left.end_offset}, "
                f"{_describe(right)} starts at {right.start_offset} ({what} bytes"
                + (
                    "; a local file was deleted before it was offloaded)"
                    if isinstance(left, TierSegment) and what == "missing"
                    else ")"
                )
            )
    return parts


def _describe(part: Part) -> str:
    if isinstance(part, TierSegment):
        return f"tier object {part.key}"
    return f"local file {os.path.basename(part.path)}"


@dataclass(frozen=True, slots=True)
class TieredSource:
    """A broker group's commit log in its tier, beside its local store directory or not."""

    tier: TierBucket
    manifest: manifests.Manifest
    store: Path | None = None
    group: str = ""

    def parts(self) -> list[Part]:
        """The contiguous series of :func:`series`; :class:`SourceError` when there is none."""
        local = segments.find_segments(self.store) if self.store is not None else []
        if self.group:
            local = [dataclasses.replace(s, group=self.group) for s in local]
        found = series(tier_segments(self.tier, self.manifest, self.group), local)
        if not found:
            where = f"the tier {self.tier.prefix}" + (f" nor {self.store}" if self.store else "")
            raise SourceError(f"neither {where} holds commit-log files")
        return found
