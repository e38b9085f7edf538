"""Tier objects as job parts, without a bucket: the series of tier objects and local files
(:mod:`gannet.pipeline.sources`), and reading an object in windows of ranged reads
(:mod:`gannet.pipeline.objects`), here served from the real segment files of the session store
by :class:`FileRanges` (the ranged GETs against a real S3 server are in
``e2e/tier/test_pipeline.py``)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from gannet.node.store.tier import buckets, manifests, naming
from gannet.pipeline import columns, objects, options, segments, sources
from gannet.pipeline.columns import Chunk
from gannet.pipeline.segments import Damage, Segment
from gannet.pipeline.sources import SourceError, TierBucket, TierSegment

from .conftest import BrokerStore

PREFIX = "gannet/t/g0"
TIER = TierBucket(buckets.BucketConfig("http://127.0.0.1:9", "bucket", "key", "secret"), PREFIX)


class FileRanges:
    """Ranged reads of objects whose bytes are local files (key → path), counting them."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files
        self.reads: list[tuple[int, int]] = []

    def get_range(self, key: str, start: int, size_bytes: int) -> bytes:
        self.reads.append((start, size_bytes))
        with self.files[key].open("rb") as f:
            f.seek(start)
            return f.read(size_bytes)


def _as_object(segment: Segment) -> TierSegment:
    key = naming.commitlog_key(PREFIX, segment.start_offset)
    return TierSegment(TIER, key, segment.start_offset, segment.size_bytes)


def _records(parts: list[tuple[bytes, Chunk | Damage]]) -> list[tuple[int, bytes]]:
    found: list[tuple[int, bytes]] = []
    for _, part in parts:
        assert isinstance(part, Chunk), part
        found += zip(part.commit_offsets.tolist(), part.bodies.to_pylist(), strict=True)
    return found


def _local_records(segment: Segment) -> list[tuple[int, bytes]]:
    found: list[tuple[int, bytes]] = []
    with segments.mapped(segment) as buf:
        for part in columns.chunks(buf, segment):
            assert isinstance(part, Chunk)
            found += zip(part.commit_offsets.tolist(), part.bodies.to_pylist(), strict=True)
    return found


@pytest.mark.parametrize("window_bytes", [1024, 5000, 1 << 20])
def test_an_object_read_in_windows_gives_the_records_of_the_file(
    broker_store: BrokerStore, window_bytes: int
) -> None:
    sealed = segments.find_segments(broker_store.config.root_dir)[:-1]
    for segment in sealed[:2]:
        part = _as_object(segment)
        reads = FileRanges({part.key: Path(segment.path)})
        got = _records(list(objects.chunks(reads, part, window_bytes)))
        assert got == _local_records(segment)
        assert got, "the sealed segment holds records"
        # Each GET is one window, or one record larger than the window (records here are at
        # most ~1.5 KiB); windows start where the previous one's complete records ended.
        assert all(size <= max(window_bytes, 2048) for _, size in reads.reads)
        starts = [start for start, _ in reads.reads]
        assert starts == sorted(starts)


def test_damage_in_an_object_names_the_key_and_the_range_of_the_local_scan(
    broker_store: BrokerStore, tmp_path: Path
) -> None:
    segment = segments.find_segments(broker_store.config.root_dir)[1]
    copy = tmp_path / segment.name
    shutil.copyfile(segment.path, copy)
    damaged = dataclasses.replace(segment, path=str(copy))
    records = _local_records(damaged)
    position = records[len(records) // 2][0] - segment.start_offset
    raw = bytearray(copy.read_bytes())
    raw[position + 200] ^= 0x01  # a body byte: the body CRC no longer matches
    copy.write_bytes(bytes(raw))
    with segments.mapped(damaged) as buf:
        expected = [p for p in columns.chunks(buf, damaged) if isinstance(p, Damage)]
    assert len(expected) == 1
    part = _as_object(damaged)
    for window_bytes in (1024, 1 << 20):
        found = list(objects.chunks(FileRanges({part.key: copy}), part, window_bytes))
        last = found[-1][1]
        assert isinstance(last, Damage)
        assert (last.segment, last.start_offset, last.reason) == (
            part.key,
            expected[0].start_offset,
            expected[0].reason,
        )
        report = objects.verify_object(part, window_bytes, FileRanges({part.key: copy}))
        assert [(d.segment, d.start_offset, d.end_offset) for d in report.damage] == [
            (part.key, expected[0].start_offset, expected[0].end_offset)
        ]
        assert report.records_ok == len(records) - 1


def test_a_short_object_is_a_retryable_tier_error(
    broker_store: BrokerStore, tmp_path: Path
) -> None:
    segment = segments.find_segments(broker_store.config.root_dir)[0]
    short = tmp_path / "short"
    short.write_bytes(Path(segment.path).read_bytes()[:1000])
    part = _as_object(segment)
    with pytest.raises(Exception, match="1000 bytes answered") as caught:
        list(objects.chunks(FileRanges({part.key: short}), part, 4096))
    assert type(caught.value).__name__ == "TierUnavailable"


def _local(start: int, size: int) -> Segment:
    return Segment(f"/s/{start:020d}", start, size, is_last=False)


def _tiered(*bounds: tuple[int, int]) -> list[TierSegment]:
    objects_ = tuple(manifests.TierObject(b, s, "0" * 32, 1) for b, s in bounds)
    return sources.tier_segments(TIER, manifests.Manifest(PREFIX, objects_))


def test_series_is_the_tier_then_the_local_files_after_it_once_each() -> None:
    tiered = _tiered((0, 100), (100, 100))
    local = [_local(100, 100), _local(200, 100), _local(300, 50)]  # 100: a hot copy
    parts = sources.series(tiered, local)
    assert [(type(p).__name__, p.start_offset) for p in parts] == [
        ("TierSegment", 0),
        ("TierSegment", 100),
        ("Segment", 200),
        ("Segment", 300),
    ]
    assert sources.series([], local) == local
    assert sources.series(tiered, []) == tiered


def test_series_refuses_a_hole_or_a_straddling_file() -> None:
    tiered = _tiered((0, 100), (100, 100))
    hole = r"00100 ends at 200, local file 0{17}300 starts at 300 \(missing bytes; a local"
    with pytest.raises(SourceError, match=hole):
        sources.series(tiered, [_local(300, 100)])
    with pytest.raises(SourceError, match="straddles"):
        sources.series(tiered, [_local(150, 100)])
    with pytest.raises(SourceError, match="prefix 'gannet/other/g0', not 'gannet/t/g0'"):
        sources.tier_segments(TIER, manifests.Manifest("gannet/other/g0"))


def test_the_manifest_file_is_read_and_checked(tmp_path: Path) -> None:
    manifest = manifests.Manifest(PREFIX, (manifests.TierObject(0, 10, "a" * 32, 1),))
    path = tmp_path / "manifest.json"
    path.write_bytes(manifests.encode(manifest))
    assert sources.load_manifest(sources.ManifestFile(path)) == manifest
    path.write_bytes(b'{"format":"gannet-tier-manifest","version":99}')
    with pytest.raises(SourceError, match=f"tier manifest {re.escape(str(path))}: "):
        sources.load_manifest(sources.ManifestFile(path))
    with pytest.raises(SourceError, match="No such file"):
        sources.load_manifest(sources.ManifestFile(tmp_path / "missing"))


def test_tier_read_options_name_what_is_wrong(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text("aws_access_key_id = a\naws_secret_access_key = b\n")
    tier = {
        "tierBucket": "bucket",
        "tierEndpoint": "http://127.0.0.1:9",
        "tierCredentialsFile": str(credentials),
        "tierPrefix": PREFIX,
    }
    assert options.is_tier_read({"storeDir": "/x", "topic": "t"})
    assert not options.is_tier_read({"endpoints": "h:1", "topic": "t"})
    read = options.tier_read_options({**tier, "topic": "t", "queues": "1,0"}, streaming=False)
    assert read.tier is not None
    assert (read.tier.prefix, read.tier.config.access_key, read.queues) == (PREFIX, "a", (0, 1))
    assert read.manifest is None  # the bucket's <prefix>/manifest.json
    refusals = {
        "startingoffsets need a broker": {**tier, "topic": "t", "startingOffsets": "earliest"},
        "missing \\['tierPrefix'\\]": {**tier, "tierPrefix": "", "topic": "t"},
        "option 'topic' is required": {"storeDir": "/x"},
        "not both": {"storeDir": "/x", "endpoints": "127.0.0.1:8081", "topic": "t"},
        "'tierManifest' needs the tier options": {
            "storeDir": "/x",
            "tierManifest": "m",
            "topic": "t",
        },
        "tierCredentialsFile": {**tier, "tierCredentialsFile": str(tmp_path / "no"), "topic": "t"},
    }
    for message, given in refusals.items():
        with pytest.raises(options.OptionError, match=message):
            options.tier_read_options(given, streaming=False)
    with pytest.raises(options.OptionError, match=r"spark\.readStream needs a broker"):
        options.tier_read_options({"storeDir": "/x", "topic": "t"}, streaming=True)
