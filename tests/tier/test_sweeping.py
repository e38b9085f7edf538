"""The orphan sweep's rules (pure): what it deletes, and that it never deletes an object an
upload in flight may still record."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.node.store.tier import buckets, manifests, naming, sweeping

PREFIX = "gannet/c1/g0"
MD5 = "0123456789abcdef0123456789abcdef"
SIZE = 1000
NOW_MS = 10**12
GRACE_S = 3600.0
OLD_MS = NOW_MS - 2 * 3_600_000
YOUNG_MS = NOW_MS - 1000


def manifest_of(*indexes: int) -> manifests.Manifest:
    return manifests.Manifest(
        PREFIX, tuple(manifests.TierObject(i * SIZE, SIZE, MD5, 1) for i in indexes)
    )


def listed(base: int, at_ms: int = YOUNG_MS) -> buckets.ListedObject:
    return buckets.ListedObject(naming.commitlog_key(PREFIX, base), SIZE, at_ms)


def key(base: int) -> str:
    return naming.commitlog_key(PREFIX, base)


def sweep(manifest: manifests.Manifest, *objects: buckets.ListedObject) -> sweeping.SweepPlan:
    return sweeping.plan_sweep(
        manifest,
        objects,
        next_base=manifest.end_offset if manifest.end_offset is not None else 7 * SIZE,
        now_ms=NOW_MS,
        grace_s=GRACE_S,
    )


def test_objects_below_the_tier_end_go_at_once_recorded_ones_stay() -> None:
    manifest = manifest_of(2, 3, 4)  # the tier holds [2000, 5000)
    plan = sweep(
        manifest,
        listed(0),  # expired: a crash between expire and delete
        listed(1 * SIZE),
        listed(2 * SIZE),  # recorded
        listed(2 * SIZE + 500),  # inside a recorded object's range
        listed(3 * SIZE),  # recorded
        listed(4 * SIZE),  # recorded
    )
    assert plan.below_end == (key(0), key(SIZE), key(2 * SIZE + 500))
    assert plan.stale == ()
    assert plan.doomed == plan.below_end


def test_the_next_upload_and_young_objects_past_the_end_stay() -> None:
    manifest = manifest_of(0, 1)  # ends at 2000: the next upload writes 2000
    plan = sweep(
        manifest,
        listed(2 * SIZE, OLD_MS),  # the next upload's object (a crash before its record): kept
        listed(3 * SIZE, YOUNG_MS),  # young: may be an upload in flight
        listed(4 * SIZE, OLD_MS),  # old and not next: an upload that never got recorded
    )
    assert plan.below_end == ()
    assert plan.stale == (key(4 * SIZE),)


def test_an_empty_tier_sweeps_only_old_objects_that_are_not_next() -> None:
    plan = sweep(manifests.Manifest(PREFIX), listed(0, OLD_MS), listed(7 * SIZE, OLD_MS))
    assert plan.doomed == (key(0),), "7000 is the oldest local file: the next upload"
    assert sweep(manifests.Manifest(PREFIX), listed(0, YOUNG_MS)).doomed == ()


def test_foreign_keys_are_reported_never_deleted() -> None:
    stray = buckets.ListedObject(f"{PREFIX}/commitlog/notes.txt", 3, OLD_MS)
    plan = sweep(manifest_of(0), stray)
    assert plan.foreign == (stray.key,)
    assert plan.doomed == ()
    with pytest.raises(ValueError, match="grace period 0 s is not positive"):
        sweeping.plan_sweep(manifest_of(0), [], next_base=0, now_ms=NOW_MS, grace_s=0)


@settings(max_examples=150)
@given(
    recorded=st.integers(0, 6),
    start=st.integers(0, 3),
    keys=st.lists(
        st.tuples(st.integers(0, 12), st.booleans()), max_size=12, unique_by=lambda k: k[0]
    ),
)
def test_never_a_recorded_object_nor_one_an_upload_may_still_record(
    recorded: int, start: int, keys: list[tuple[int, bool]]
) -> None:
    """Whatever the listing: recorded keys stay; an unrecorded key at or past the end stays
    unless older than the grace period and not the next upload's; a key below the end goes."""
    manifest = manifest_of(*range(start, start + recorded))
    objects = [listed(base * SIZE // 2, OLD_MS if old else YOUNG_MS) for base, old in keys]
    plan = sweep(manifest, *objects)
    doomed = set(plan.doomed)
    recorded_keys = {key(o.base_offset) for o in manifest.objects}
    end = manifest.end_offset
    next_base = end if end is not None else 7 * SIZE
    for item in objects:
        base = naming.parse_commitlog_key(PREFIX, item.key)
        if item.key in recorded_keys:
            assert item.key not in doomed
        elif end is not None and base < end:
            assert item.key in doomed, "never recordable: a record starts at the end"
        elif base == next_base or item.last_modified_ms == YOUNG_MS:
            assert item.key not in doomed, "an upload in flight may record it"
        else:
            assert item.key in doomed
