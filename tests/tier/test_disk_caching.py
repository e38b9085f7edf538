"""The tier's disk cache: whole files only, LRU within its byte bound, kept across reopening."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gannet.node.store.tier import disk_caching

HEADER_BYTES = 12


def _block(n: int, size: int = 100) -> bytes:
    return bytes([n % 256]) * size


def test_blocks_survive_reopening_and_the_lru_order_too(tmp_path: Path) -> None:
    cache = disk_caching.DiskBlockCache(tmp_path, 3 * (100 + HEADER_BYTES))
    for i in range(3):
        cache.put((0, i), _block(i))
    assert cache.get((0, 0)) == _block(0)  # (0, 1) is now the least recently used
    stamp = 1_000_000_000
    for i, key in enumerate([(0, 1), (0, 2), (0, 0)]):  # make mtimes strictly ordered
        os.utime(tmp_path / disk_caching.file_name(key), ns=(stamp + i, stamp + i))
    again = disk_caching.DiskBlockCache(tmp_path, 3 * (100 + HEADER_BYTES))
    assert again.statistics().files == 3
    again.put((7, 0), _block(7))  # evicts (0, 1), the least recently used before the restart
    assert again.get((0, 1)) is None
    assert [again.get((0, i)) for i in (0, 2)] == [_block(0), _block(2)]
    assert again.get((7, 0)) == _block(7)
    statistics = again.statistics()
    assert statistics.used_bytes == 3 * (100 + HEADER_BYTES)
    assert sum(f.stat().st_size for f in tmp_path.iterdir()) == statistics.used_bytes
    assert (statistics.hits, statistics.misses) == (3, 1)


def test_partial_and_damaged_files_are_discarded(tmp_path: Path) -> None:
    cache = disk_caching.DiskBlockCache(tmp_path, 1 << 20)
    for i in range(3):
        cache.put((0, i), _block(i))
    partial = tmp_path / disk_caching.file_name((0, 0))
    partial.write_bytes(partial.read_bytes()[:50])  # a write cut short
    damaged = tmp_path / disk_caching.file_name((0, 1))
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0xFF  # a flipped bit: the size is right, the CRC32 is not
    damaged.write_bytes(bytes(data))
    (tmp_path / ".tmp-1-0").write_bytes(b"left by a crash")
    (tmp_path / "notes.txt").write_bytes(b"not ours")
    again = disk_caching.DiskBlockCache(tmp_path, 1 << 20)
    assert again.statistics().discarded == 1  # the partial one, at load
    assert not partial.exists()
    assert not (tmp_path / ".tmp-1-0").exists()
    assert again.get((0, 1)) is None  # the damaged one, on read
    assert not damaged.exists()
    assert again.get((0, 2)) == _block(2)
    assert again.statistics().discarded == 2
    assert (tmp_path / "notes.txt").exists()
    again.put((0, 1), _block(1))  # fetched again
    assert again.get((0, 1)) == _block(1)


def test_the_bound_holds_and_oversized_blocks_are_not_kept(tmp_path: Path) -> None:
    cache = disk_caching.DiskBlockCache(tmp_path, 250)
    cache.put((0, 0), _block(0, 300))
    assert cache.statistics().files == 0
    for i in range(10):
        cache.put((1, i), _block(i))
        assert cache.statistics().used_bytes <= 250
        assert sum(f.stat().st_size for f in tmp_path.iterdir()) <= 250
    assert cache.statistics().files == 2
    smaller = disk_caching.DiskBlockCache(tmp_path, 120)  # reopened with a smaller bound
    assert smaller.statistics().files == 1
    assert smaller.get((1, 9)) == _block(9)
    smaller.discard_object(1)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="bytes_max"):
        disk_caching.DiskBlockCache(tmp_path, 0)


def test_file_names_round_trip() -> None:
    assert disk_caching.file_name((1073741824, 3)) == "00000000001073741824.00000003.blk"
    assert disk_caching.key_of("00000000001073741824.00000003.blk") == (1073741824, 3)
    assert disk_caching.key_of("1073741824.3.blk") is None
    assert disk_caching.decode(disk_caching.encode(b"abc")) == b"abc"
    assert disk_caching.decode(b"GTB1") is None
