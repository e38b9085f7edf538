"""The disk ratio is ``df``'s ``Use%``: used / (used + available), root-reserved blocks in
neither term (``disk_space``). The report this answers: brokers on Kubernetes logged ``disk
full … 91% used`` while ``df`` showed 72-80 %, because the reserved blocks counted as used."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gannet.node.store.upkeep import disk_space
from gannet.node.store.upkeep.cleaning import CleanPolicy, space_state
from gannet.node.store.upkeep.disk_space import DiskSpace, space_of

FOUR_KIB = 4096


@pytest.mark.parametrize(
    ("blocks", "free", "available", "ratio"),
    [
        (1000, 250, 250, 0.75),  # no reserve (tmpfs, XFS): as (total - free) / total
        (1000, 240, 190, 760 / 950),  # 5 % reserved for root: 80.0 %, not 81 %
        (1000, 280, 30, 720 / 750),  # a quarter reserved: 96 %, not 97 %
        (1000, 50, 0, 1.0),  # full up to the reserve: df says 100 %
        (1000, 1000, 950, 0.0),  # empty
        (0, 0, 0, 0.0),  # no blocks at all (df prints "-")
        (1000, 1010, 1010, 0.0),  # inconsistent counts mid-update: never negative
    ],
)
def test_the_ratio_is_dfs_use_percent(blocks: int, free: int, available: int, ratio: float) -> None:
    space = space_of(
        fragment_size_bytes=FOUR_KIB,
        total_blocks=blocks,
        free_blocks=free,
        available_blocks=available,
    )
    assert space.used_ratio == pytest.approx(ratio, abs=1e-12)
    assert space.used_bytes == max(blocks - free, 0) * FOUR_KIB
    assert space.available_bytes == available * FOUR_KIB


def test_reserved_blocks_no_longer_push_the_ratio_past_the_warning_ratio() -> None:
    """A volume with a fifth of it reserved for root that df shows 88 % full: the old reading,
    (total - available) / total, was 90.4 % and refused writes; df's ratio is below 0.90."""
    space = space_of(
        fragment_size_bytes=FOUR_KIB, total_blocks=1000, free_blocks=296, available_blocks=96
    )
    assert space.used_ratio == pytest.approx(0.88)
    policy = CleanPolicy(72.0, "04", 75, 0.90, 0.85)
    assert not space_state(space.used_ratio, policy, forcibly_enabled=True).warning
    old_ratio = (1000 - 96) / 1000
    assert space_state(old_ratio, policy, forcibly_enabled=True).warning


def test_the_ratio_does_not_depend_on_the_block_size() -> None:
    small = space_of(
        fragment_size_bytes=1024, total_blocks=4000, free_blocks=960, available_blocks=760
    )
    large = space_of(
        fragment_size_bytes=FOUR_KIB, total_blocks=1000, free_blocks=240, available_blocks=190
    )
    assert small == large == DiskSpace(used_bytes=3040 * 1024, available_bytes=760 * 1024)


def test_measure_reads_fragments_not_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``f_frsize`` is the unit of the block counts; ``f_bsize`` (the preferred I/O size)
    may differ."""
    fake = os.statvfs_result((65536, 1024, 4000, 960, 760, 0, 0, 0, 0, 255))
    seen: list[str] = []

    def statvfs(path: str) -> os.statvfs_result:
        seen.append(path)
        return fake

    monkeypatch.setattr(os, "statvfs", statvfs)
    space = disk_space.measure(str(tmp_path))
    assert seen == [str(tmp_path)]
    assert space == DiskSpace(used_bytes=3040 * 1024, available_bytes=760 * 1024)
    assert disk_space.disk_used_ratio(str(tmp_path)) == pytest.approx(0.80)


def test_a_real_filesystem_measures_between_zero_and_one(tmp_path: Path) -> None:
    space = disk_space.measure(str(tmp_path))
    assert space.used_bytes >= 0
    assert space.available_bytes >= 0
    assert 0.0 <= space.used_ratio <= 1.0
