"""The tier manifest's invariants, byte formats and idempotent apply (pure; no bucket)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.node.store.tier import errors, manifests, naming

PREFIX = "gannet/c1/g0"
MD5 = "0123456789abcdef0123456789abcdef"


def obj(base: int, size: int = 100, md5: str = MD5, at_ms: int = 1) -> manifests.TierObject:
    return manifests.TierObject(base, size, md5, at_ms)


@st.composite
def tier_objects(draw: st.DrawFn) -> list[manifests.TierObject]:
    base = draw(st.integers(0, 10**12))
    sizes = draw(st.lists(st.integers(1, 1 << 30), max_size=8))
    objects = []
    for size in sizes:
        md5 = draw(st.text("0123456789abcdef", min_size=32, max_size=32))
        objects.append(obj(base, size, md5, draw(st.integers(0, 2**53))))
        base += size
    return objects


@settings(max_examples=200)
@given(tier_objects())
def test_recording_in_order_round_trips_through_bytes(objects: list[manifests.TierObject]) -> None:
    manifest = manifests.Manifest(PREFIX)
    for item in objects:
        change = manifests.RecordObject(item)
        assert manifests.decode_change(manifests.encode_change(change)) == change
        manifest = manifests.apply(manifest, change)
        assert manifests.apply(manifest, change) == manifest  # a retried proposal is a no-op
    assert manifest.objects == tuple(objects)
    assert manifests.decode(manifests.encode(manifest)) == manifest
    for item in objects:
        assert manifest.locate(item.base_offset) == item
        assert manifest.locate(item.end_offset - 1) == item
    if objects:
        assert manifest.locate(objects[0].base_offset - 1) is None
        assert manifest.locate(objects[-1].end_offset) is None
        assert manifest.total_bytes() == objects[-1].end_offset - objects[0].base_offset


@settings(max_examples=200)
@given(tier_objects(), st.integers(0, 10**12 + 2**34))
def test_expiry_keeps_a_contiguous_suffix(objects: list[manifests.TierObject], up_to: int) -> None:
    manifest = manifests.check(manifests.Manifest(PREFIX, tuple(objects)))
    change = manifests.ExpireObjects(up_to)
    assert manifests.decode_change(manifests.encode_change(change)) == change
    expired = manifests.apply(manifest, change)
    assert expired.objects == tuple(item for item in objects if item.end_offset > up_to)
    assert manifests.apply(expired, change) == expired


def test_a_gap_or_an_overlap_is_refused() -> None:
    manifest = manifests.apply(manifests.Manifest(PREFIX), manifests.RecordObject(obj(0)))
    with pytest.raises(
        errors.ManifestConflict, match="does not continue the tier, which ends at 100"
    ):
        manifests.apply(manifest, manifests.RecordObject(obj(200)))
    with pytest.raises(errors.ManifestConflict, match="does not continue"):
        manifests.apply(manifest, manifests.RecordObject(obj(50)))
    with pytest.raises(errors.ManifestConflict, match="not contiguous"):
        manifests.check(manifests.Manifest(PREFIX, (obj(0), obj(150))))


def test_a_different_object_at_a_recorded_offset_is_refused() -> None:
    manifest = manifests.apply(manifests.Manifest(PREFIX), manifests.RecordObject(obj(0)))
    with pytest.raises(errors.ManifestConflict, match="recorded with size 100 md5"):
        manifests.apply(manifest, manifests.RecordObject(obj(0, md5="f" * 32)))


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        (obj(0, size=0), "size_bytes 0 <= 0"),
        (obj(0, md5="ABC"), "not 32 lowercase hex"),
        (obj(0, md5="0123456789ABCDEF0123456789ABCDEF"), "not 32 lowercase hex"),
        (obj(0, at_ms=-1), "uploaded_at_ms < 0"),
        (obj(-1), "outside 0..10"),
    ],
)
def test_bad_objects_are_named(item: manifests.TierObject, problem: str) -> None:
    with pytest.raises((errors.ManifestConflict, ValueError), match=problem):
        manifests.apply(manifests.Manifest(PREFIX), manifests.RecordObject(item))


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\xff", "not UTF-8 JSON"),
        (b"[]", "top level is list"),
        (b'{"format":"other","version":1}', "format is 'other'"),
        (b'{"format":"gannet-tier-manifest","version":3}', "version 3 is not 1 or 2"),
        (
            b'{"format":"gannet-tier-manifest","version":1,"prefix":"p","objects":[],'
            b'"gaps":[{"from":1,"to":2}]}',
            "gaps need version 2, the manifest says 1",
        ),
        (
            b'{"format":"gannet-tier-manifest","version":2,"prefix":"p","objects":[],'
            b'"gaps":[{"from":1,"to":2}]}',
            "starts with a gap at 1",
        ),
        (
            b'{"format":"gannet-tier-manifest","version":2,"prefix":"p","objects":[],'
            b'"gaps":[{"from":1}]}',
            "field 'to' is None",
        ),
        (
            b'{"format":"gannet-tier-manifest","version":1,"prefix":"a//b","objects":[]}',
            "segment ''",
        ),
        (b'{"format":"gannet-tier-manifest","version":1,"prefix":"p","objects":{}}', "not a list"),
        (
            b'{"format":"gannet-tier-manifest","version":1,"prefix":"p","objects":[{"base":"0"}]}',
            "field 'md5'",
        ),
        (
            b'{"format":"gannet-tier-manifest","version":1,"prefix":"p","objects":'
            b'[{"base":true,"md5":"' + MD5.encode() + b'","size":1,"uploadedAtMs":0}]}',
            "field 'base' is True, not an integer",
        ),
        (
            b'{"format":"gannet-tier-manifest","version":1,"prefix":"p","objects":['
            b'{"base":0,"md5":"' + MD5.encode() + b'","size":1,"uploadedAtMs":0},'
            b'{"base":5,"md5":"' + MD5.encode() + b'","size":1,"uploadedAtMs":0}]}',
            "not contiguous",
        ),
    ],
)
def test_corrupt_manifest_bytes_are_named(data: bytes, problem: str) -> None:
    with pytest.raises(errors.ManifestCorrupt, match=problem):
        manifests.decode(data)


def test_corrupt_change_bytes_are_named() -> None:
    with pytest.raises(
        errors.ManifestCorrupt,
        match=r"kind 'drop' is not one of record, expire, gap \(written by a newer Gannet\?\)",
    ):
        manifests.decode_change(b'{"format":"gannet-tier-change","version":1,"kind":"drop"}')
    with pytest.raises(errors.ManifestCorrupt, match="field 'toOffset' is None"):
        manifests.decode_change(
            b'{"format":"gannet-tier-change","version":1,"kind":"gap","fromOffset":1}'
        )
    with pytest.raises(errors.ManifestCorrupt, match="size_bytes -1"):
        manifests.decode_change(
            b'{"format":"gannet-tier-change","version":1,"kind":"record","object":'
            b'{"base":0,"md5":"' + MD5.encode() + b'","size":-1,"uploadedAtMs":0}}'
        )


def test_the_manifest_format_is_stable() -> None:
    manifest = manifests.Manifest(PREFIX, (obj(1024, 1024, MD5, 7),))
    assert manifests.encode(manifest) == (
        b'{"format":"gannet-tier-manifest","objects":[{"base":1024,"md5":"' + MD5.encode() + b'",'
        b'"size":1024,"uploadedAtMs":7}],"prefix":"gannet/c1/g0","version":1}'
    )


def test_a_gap_continues_the_tier_and_reads_in_it_find_no_object() -> None:
    manifest = manifests.apply(manifests.Manifest(PREFIX), manifests.RecordObject(obj(0)))
    gap = manifests.RecordGap(100, 300)
    assert manifests.decode_change(manifests.encode_change(gap)) == gap
    assert manifests.encode_change(gap) == (
        b'{"format":"gannet-tier-change","fromOffset":100,"kind":"gap","toOffset":300,"version":1}'
    )
    with_gap = manifests.apply(manifest, gap)
    assert with_gap.gaps == (manifests.Gap(100, 300),)
    assert (with_gap.start_offset, with_gap.end_offset) == (0, 300)
    assert manifests.apply(with_gap, gap) == with_gap  # a retried proposal is a no-op
    assert manifests.apply(with_gap, manifests.RecordGap(150, 300)) == with_gap
    # A trailing gap grows instead of a second gap next to it.
    grown = manifests.apply(with_gap, manifests.RecordGap(300, 400))
    assert grown.gaps == (manifests.Gap(100, 400),)
    continued = manifests.apply(grown, manifests.RecordObject(obj(400)))
    assert continued.end_offset == 500
    assert continued.gap_bytes() == 300
    assert continued.locate(99) == obj(0)
    assert continued.locate(400) == obj(400)
    assert continued.locate(100) is None
    assert continued.locate(399) is None
    assert continued.gap_at(250) == manifests.Gap(100, 400)
    assert continued.gap_at(99) is None
    assert manifests.decode(manifests.encode(continued)) == continued
    assert continued.total_bytes() == 200  # a gap holds no bytes in the bucket


def test_bad_gaps_are_refused_named() -> None:
    empty = manifests.Manifest(PREFIX)
    with pytest.raises(errors.ManifestConflict, match="an empty tier has no gap"):
        manifests.apply(empty, manifests.RecordGap(0, 100))
    manifest = manifests.apply(empty, manifests.RecordObject(obj(0)))
    with pytest.raises(errors.ManifestConflict, match="does not start at the tier's end 100"):
        manifests.apply(manifest, manifests.RecordGap(150, 300))
    with pytest.raises(errors.ManifestConflict, match="empty or reversed"):
        manifests.apply(manifest, manifests.RecordGap(100, 100))
    with_gap = manifests.apply(manifest, manifests.RecordGap(100, 300))
    with pytest.raises(
        errors.ManifestConflict, match="does not continue the tier, which ends at 300"
    ):
        manifests.apply(with_gap, manifests.RecordObject(obj(100)))
    with pytest.raises(errors.ManifestConflict, match="not contiguous"):
        manifests.check(manifests.Manifest(PREFIX, (obj(0), obj(300)), (manifests.Gap(100, 250),)))
    with pytest.raises(errors.ManifestConflict, match="not merged"):
        manifests.check(
            manifests.Manifest(
                PREFIX, (obj(0),), (manifests.Gap(100, 200), manifests.Gap(200, 300))
            )
        )


def test_expiry_drops_the_gaps_before_the_new_start() -> None:
    manifest = manifests.Manifest(PREFIX)
    for change in (
        manifests.RecordObject(obj(0)),
        manifests.RecordGap(100, 200),
        manifests.RecordObject(obj(200)),
        manifests.RecordGap(300, 400),
        manifests.RecordObject(obj(400)),
    ):
        manifest = manifests.apply(manifest, change)
    after_first = manifests.apply(manifest, manifests.ExpireObjects(100))
    assert after_first.start_offset == 200
    assert after_first.gaps == (manifests.Gap(300, 400),)
    assert manifests.apply(manifest, manifests.ExpireObjects(500)) == manifests.Manifest(PREFIX)
    trailing = manifests.apply(
        manifests.apply(manifests.Manifest(PREFIX), manifests.RecordObject(obj(0))),
        manifests.RecordGap(100, 200),
    )
    assert manifests.apply(trailing, manifests.ExpireObjects(100)) == manifests.Manifest(PREFIX)


def test_a_manifest_with_gaps_is_version_2_and_one_without_stays_version_1() -> None:
    manifest = manifests.Manifest(PREFIX, (obj(0, 100, MD5, 7),), (manifests.Gap(100, 200),))
    assert manifests.encode(manifest) == (
        b'{"format":"gannet-tier-manifest","gaps":[{"from":100,"to":200}],"objects":[{"base":0,'
        b'"md5":"' + MD5.encode() + b'","size":100,"uploadedAtMs":7}],"prefix":"gannet/c1/g0",'
        b'"version":2}'
    )


@given(st.integers(0, 10**20 - 1))
def test_object_keys_are_rocketmq_file_names(base: int) -> None:
    key = naming.commitlog_key(PREFIX, base)
    assert key == f"{PREFIX}/commitlog/{base:020d}"
    assert naming.parse_commitlog_key(PREFIX, key) == base


@pytest.mark.parametrize(
    ("prefix", "problem"),
    [("", "empty"), ("/a", "segment ''"), ("a/", "segment ''"), ("a b", "segment 'a b'")],
)
def test_bad_prefixes_are_named(prefix: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        naming.commitlog_key(prefix, 0)


def test_bad_keys_and_names_are_named() -> None:
    with pytest.raises(ValueError, match="is not under 'p/commitlog/'"):
        naming.parse_commitlog_key("p", "q/commitlog/00000000000000000000")
    with pytest.raises(ValueError, match="20 decimal digits"):
        naming.parse_commitlog_file_name("0000000000000000000")
    with pytest.raises(ValueError, match="outside"):
        naming.commitlog_file_name(10**20)
