"""Offload, local-delete and remote-expiry plans (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.node.store.tier import manifests, planning

PREFIX = "gannet/c1/g0"
MD5 = "0123456789abcdef0123456789abcdef"
SIZE = 1000
HOUR_MS = 3_600_000
NOW_MS = 100 * HOUR_MS


def sealed(index: int, age_h: float = 10.0) -> planning.SealedFile:
    return planning.SealedFile(index * SIZE, SIZE, int(NOW_MS - age_h * HOUR_MS))


def manifest_of(*indexes: int, at_ms: int = NOW_MS) -> manifests.Manifest:
    return manifests.Manifest(
        PREFIX, tuple(manifests.TierObject(i * SIZE, SIZE, MD5, at_ms) for i in indexes)
    )


AGE_ONLY = planning.TierPolicy(offload_age_s_min=3600, local_use_ratio_max=None, uploads_max=10)
LOW_DISK = planning.DiskUse(used_bytes=0, capacity_bytes=10**9)


def plan(files: list[planning.SealedFile], manifest: manifests.Manifest, **kw: object) -> list[int]:
    args: dict[str, object] = {"committed_offset": 10**9, "disk": LOW_DISK, "now_ms": NOW_MS}
    args.update(kw)
    policy = args.pop("policy", AGE_ONLY)
    assert isinstance(policy, planning.TierPolicy)
    return planning.plan_offload(files, manifest, policy, **args)  # type: ignore[arg-type]


def test_old_files_are_offloaded_oldest_first_and_young_ones_wait() -> None:
    files = [sealed(2, age_h=0.5), sealed(0), sealed(1)]
    assert plan(files, manifest_of()) == [0, SIZE]


def test_files_the_manifest_holds_are_skipped_and_the_tier_stays_contiguous() -> None:
    files = [sealed(i) for i in range(4)]
    assert plan(files, manifest_of(0, 1)) == [2 * SIZE, 3 * SIZE]
    # File 1 missing locally (deleted by an old retention): the tier ends at 1, 2 cannot follow.
    assert plan([sealed(0), sealed(2)], manifest_of(0)) == []


def test_nothing_past_the_commit_offset_is_offloaded() -> None:
    files = [sealed(i) for i in range(3)]
    assert plan(files, manifest_of(), committed_offset=2 * SIZE - 1) == [0]
    assert plan(files, manifest_of(), committed_offset=2 * SIZE) == [0, SIZE]


def test_a_full_disk_offloads_young_files_until_below_the_ratio() -> None:
    policy = planning.TierPolicy(offload_age_s_min=None, local_use_ratio_max=0.5, uploads_max=10)
    files = [sealed(i, age_h=0) for i in range(5)]
    disk = planning.DiskUse(used_bytes=5 * SIZE, capacity_bytes=7 * SIZE)  # 71 % > 50 %
    # 5000 -> 4000 (57 %) -> 3000 (43 %): two files bring it under the ratio.
    assert plan(files, manifest_of(), policy=policy, disk=disk) == [0, SIZE]


def test_uploads_max_bounds_a_plan() -> None:
    policy = planning.TierPolicy(offload_age_s_min=0, local_use_ratio_max=None, uploads_max=2)
    assert plan([sealed(i) for i in range(5)], manifest_of(), policy=policy) == [0, SIZE]


def test_overlapping_files_are_refused() -> None:
    with pytest.raises(ValueError, match="sealed files overlap"):
        plan([sealed(0), planning.SealedFile(SIZE // 2, SIZE, 0)], manifest_of())


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"offload_age_s_min": -1}, "offload_age_s_min -1 < 0"),
        ({"local_use_ratio_max": 1.5}, r"not in \(0, 1\]"),
        ({"uploads_max": 0}, "uploads_max 0 < 1"),
        ({"local_keep_bytes": -1}, "local_keep_bytes -1 < 0"),
        ({"remote_retention_s": 0}, "remote_retention_s 0 <= 0"),
        ({"remote_bytes_max": 0}, "remote_bytes_max 0 <= 0"),
    ],
)
def test_bad_policies_are_named(kwargs: dict[str, float], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        planning.TierPolicy(**kwargs)  # type: ignore[arg-type]


def test_local_deletes_need_the_manifest_and_keep_the_newest_bytes() -> None:
    files = [sealed(i) for i in range(4)]
    assert planning.plan_local_deletes(files, manifest_of(0, 1, 2), AGE_ONLY) == [0, SIZE, 2 * SIZE]
    keep_two = planning.TierPolicy(local_keep_bytes=2 * SIZE)
    assert planning.plan_local_deletes(files, manifest_of(0, 1, 2), keep_two) == [0]
    other_size = manifests.Manifest(PREFIX, (manifests.TierObject(0, SIZE + 1, MD5, 0),))
    assert planning.plan_local_deletes([sealed(0)], other_size, AGE_ONLY) == []


def test_remote_expiry_by_age_and_bytes_never_reaches_local_files() -> None:
    manifest = manifests.Manifest(
        PREFIX,
        tuple(
            manifests.TierObject(i * SIZE, SIZE, MD5, NOW_MS - (10 - i) * HOUR_MS) for i in range(4)
        ),
    )
    by_age = planning.TierPolicy(remote_retention_s=8.5 * 3600)
    # Uploaded 10 h and 9 h ago are past 8.5 h.
    assert planning.plan_remote_expiry(
        manifest, by_age, local_start_offset=None, now_ms=NOW_MS
    ) == (manifests.ExpireObjects(2 * SIZE))
    by_bytes = planning.TierPolicy(remote_bytes_max=SIZE)
    assert planning.plan_remote_expiry(
        manifest, by_bytes, local_start_offset=None, now_ms=NOW_MS
    ) == manifests.ExpireObjects(3 * SIZE)
    assert planning.plan_remote_expiry(
        manifest, by_bytes, local_start_offset=SIZE, now_ms=NOW_MS
    ) == manifests.ExpireObjects(SIZE)
    assert (
        planning.plan_remote_expiry(
            manifest, planning.TierPolicy(), local_start_offset=None, now_ms=NOW_MS
        )
        is None
    )


@settings(max_examples=300)
@given(
    st.lists(st.tuples(st.booleans(), st.floats(0, 10)), min_size=0, max_size=12),
    st.integers(0, 12),
    st.integers(0, 13 * SIZE),
    st.integers(0, 20 * SIZE),
    st.integers(1, 5),
)
def test_a_plan_always_extends_the_tier_contiguously_below_the_commit_offset(
    local: list[tuple[bool, float]], in_tier: int, committed: int, used: int, uploads_max: int
) -> None:
    files = [sealed(i, age_h) for i, (present, age_h) in enumerate(local) if present]
    manifest = manifest_of(*range(min(in_tier, len(local))))
    policy = planning.TierPolicy(
        offload_age_s_min=3600, local_use_ratio_max=0.5, uploads_max=uploads_max
    )
    disk = planning.DiskUse(used_bytes=used, capacity_bytes=10 * SIZE)
    chosen = plan(files, manifest, policy=policy, committed_offset=committed, disk=disk)
    assert len(chosen) <= uploads_max
    for base in chosen:
        assert base + SIZE <= committed
        assert manifest.find(base) is None
        manifest = manifests.apply(
            manifest, manifests.RecordObject(manifests.TierObject(base, SIZE, MD5, 0))
        )
    for base in planning.plan_local_deletes(files, manifest, policy):
        assert manifest.find(base) is not None


def test_a_gap_is_planned_only_after_the_tier_end_and_below_the_commit_offset() -> None:
    tier = manifest_of(0, 1)
    files = [sealed(4), sealed(5)]
    assert planning.plan_gap(files, tier, committed_offset=10**9) == manifests.RecordGap(
        2 * SIZE, 4 * SIZE
    )
    assert planning.plan_gap(files, tier, committed_offset=5 * SIZE - 1) is None
    assert planning.plan_gap([sealed(2), sealed(3)], tier, committed_offset=10**9) is None
    assert planning.plan_gap(files, manifest_of(), committed_offset=10**9) is None
    assert planning.plan_gap([], tier, committed_offset=10**9) is None
    with_gap = manifests.apply(tier, manifests.RecordGap(2 * SIZE, 4 * SIZE))
    assert planning.plan_gap(files, with_gap, committed_offset=10**9) is None
    assert plan(files, with_gap) == [4 * SIZE, 5 * SIZE]  # offload resumes after the gap


def test_a_members_copy_of_a_file_in_a_recorded_gap_is_skipped() -> None:
    with_gap = manifests.apply(manifest_of(0, 1), manifests.RecordGap(2 * SIZE, 4 * SIZE))
    files = [sealed(3), sealed(4)]  # this member still holds file 3, which the leader lost
    assert plan(files, with_gap) == [4 * SIZE]
    assert planning.plan_local_deletes(files, with_gap, AGE_ONLY) == []
