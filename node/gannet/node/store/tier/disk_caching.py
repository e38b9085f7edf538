"""The tier's block cache on local disk: ``<store>/tiercache/``, bounded in bytes, LRU.

Who uses it: :class:`~gannet.node.store.tier.reading.TierReader` of a broker (``gannet broker
run --tier-cache-bytes``), behind its in-memory :class:`~.caching.BlockCache`. A block fetched
from the bucket is written here too, so it survives a broker restart and a cache much larger
than memory costs no RAM. ``gannet store get`` and the other CLI readers keep the memory cache
only (a CLI run is too short to profit and must not write into a store it only reads).

Format of one block file, ``<20-digit object base offset>.<8-digit block index>.blk``::

    magic "GTB1" (4 bytes) | block length (u32 big-endian) | CRC32 of the block (u32) | block

A block file is only trusted whole: it is written under a temporary name (``.tmp-...``) and
renamed into place (``durable.publish_unsynced``; no fsync, a cache may lose files in a crash),
its size is checked against the header when the directory is loaded at start-up, and its CRC32
on every read. A file that fails either check (a partial write, a torn page, a disk error) is
deleted and reported as a miss, so the block is fetched again; leftover temporary files are
deleted at start-up.

The bound: ``bytes_max`` counts whole files (header included), and space is reserved before a
file is written, so the files and the writes in flight never exceed it; the least recently
used files are deleted first to make room. Recency is each file's mtime, touched on a hit, so
the LRU order survives restarts too. A failed write (disk full, I/O error) is dropped: the block
was already handed to its reader, only the cache misses it.

Thread-safe: one lock around the index; file IO runs outside it (a file evicted between the
lookup and the read is a miss).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from gannet.node.invariants import invariant
from gannet.node.store import durable
from gannet.node.store.tier.caching import BlockKey

DIR_NAME = "tiercache"
_MAGIC = b"GTB1"
_HEADER = struct.Struct(">4sII")
_SUFFIX = ".blk"
_TEMP_PREFIX = ".tmp-"


def file_name(key: BlockKey) -> str:
    """The file name of a block: ``<20-digit base offset>.<8-digit index>.blk``."""
    base, index = key
    return f"{base:020d}.{index:08d}{_SUFFIX}"


def key_of(name: str) -> BlockKey | None:
    """The block key of a file name, None for a name this cache did not write."""
    if not name.endswith(_SUFFIX):
        return None
    parts = name[: -len(_SUFFIX)].split(".")
    if len(parts) != 2 or len(parts[0]) != 20 or len(parts[1]) != 8:
        return None
    if not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def encode(block: bytes) -> bytes:
    """A block file's bytes (module docstring)."""
    return _HEADER.pack(_MAGIC, len(block), zlib.crc32(block)) + block


def decode(data: bytes) -> bytes | None:
    """The block of a file's bytes, None when the header or the CRC32 does not match."""
    if len(data) < _HEADER.size:
        return None
    magic, length, crc = _HEADER.unpack_from(data)
    block = data[_HEADER.size :]
    if magic != _MAGIC or length != len(block) or zlib.crc32(block) != crc:
        return None
    return block


@dataclass(frozen=True, slots=True)
class DiskCacheStatistics:
    """Counters since the cache was opened, and what it holds now."""

    hits: int
    misses: int
    discarded: int
    """Files deleted because they were partial or damaged (at load or on read)."""
    write_failures: int
    used_bytes: int
    files: int


class DiskBlockCache:
    """Blocks in files under ``directory``, least recently used deleted first."""

    def __init__(self, directory: Path, bytes_max: int) -> None:
        if bytes_max <= 0:
            raise ValueError(f"tier disk cache bytes_max {bytes_max} <= 0")
        self.directory = directory
        self.bytes_max = bytes_max
        self._lock = threading.Lock()
        self._files: OrderedDict[BlockKey, int] = OrderedDict()  # key -> file size, LRU first
        self._writing: set[BlockKey] = set()
        self._reserved_bytes = 0
        self._used_bytes = 0
        self._temp_names = itertools.count()
        self._hits = self._misses = self._discarded = self._write_failures = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._load()

    def statistics(self) -> DiskCacheStatistics:
        with self._lock:
            return DiskCacheStatistics(
                self._hits,
                self._misses,
                self._discarded,
                self._write_failures,
                self._used_bytes,
                len(self._files),
            )

    def __contains__(self, key: BlockKey) -> bool:
        with self._lock:
            return key in self._files

    def get(self, key: BlockKey) -> bytes | None:
        """The block, marked as just used; None when not cached or found damaged."""
        with self._lock:
            size = self._files.get(key)
            if size is None:
                self._misses += 1
                return None
            self._files.move_to_end(key)
        path = self.directory / file_name(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # evicted meanwhile
            block = None
        else:
            block = decode(data)
            if block is None:
                self._discard(key, path)
                return None
        if block is None:
            with self._lock:
                self._misses += 1
            return None
        with contextlib.suppress(OSError):  # evicted meanwhile: the block read is whole
            os.utime(path)
        with self._lock:
            self._hits += 1
        return block

    def put(self, key: BlockKey, block: bytes) -> None:
        """Write ``block`` (evicting least recently used files to stay within the bound)."""
        data = encode(block)
        with self._lock:
            if key in self._files or key in self._writing or len(data) > self.bytes_max:
                return
            victims = self._make_room(len(data))
            if victims is None:  # the room is reserved by writes in flight: skip this block
                return
            self._reserved_bytes += len(data)
            self._writing.add(key)
        for victim in victims:
            (self.directory / file_name(victim)).unlink(missing_ok=True)
        temp = self.directory / f"{_TEMP_PREFIX}{os.getpid()}-{next(self._temp_names)}"
        try:
            temp.write_bytes(data)
            durable.publish_unsynced(temp, self.directory / file_name(key))
        except OSError:
            temp.unlink(missing_ok=True)
            with self._lock:
                self._reserved_bytes -= len(data)
                self._writing.discard(key)
                self._write_failures += 1
            return
        with self._lock:
            self._reserved_bytes -= len(data)
            self._writing.discard(key)
            self._files[key] = len(data)
            self._used_bytes += len(data)
            self._check()

    def discard_object(self, base_offset: int) -> None:
        """Delete every block of one object (the tier expired it)."""
        with self._lock:
            keys = [key for key in self._files if key[0] == base_offset]
            for key in keys:
                self._used_bytes -= self._files.pop(key)
        for key in keys:
            (self.directory / file_name(key)).unlink(missing_ok=True)

    def _make_room(self, size_bytes: int) -> list[BlockKey] | None:
        """Under the lock: drop least recently used entries until ``size_bytes`` fits beside
        what is stored and reserved; the victims' files are deleted by the caller."""
        victims: list[BlockKey] = []
        while self._used_bytes + self._reserved_bytes + size_bytes > self.bytes_max:
            if not self._files:
                return None
            victim, victim_size = self._files.popitem(last=False)
            self._used_bytes -= victim_size
            victims.append(victim)
        return victims

    def _discard(self, key: BlockKey, path: Path) -> None:
        path.unlink(missing_ok=True)
        with self._lock:
            size = self._files.pop(key, None)
            if size is not None:
                self._used_bytes -= size
            self._discarded += 1
            self._misses += 1

    def _load(self) -> None:
        """Index the files a previous run left, oldest use first; delete temporary files,
        foreign names are left alone, and files whose size disagrees with their header are
        deleted (their CRC32 is checked when read)."""
        found: list[tuple[int, BlockKey, int]] = []
        for entry in os.scandir(self.directory):
            if entry.name.startswith(_TEMP_PREFIX):
                Path(entry.path).unlink(missing_ok=True)
                continue
            key = key_of(entry.name)
            if key is None or not entry.is_file():
                continue
            stat = entry.stat()
            if not _whole(Path(entry.path), stat.st_size):
                Path(entry.path).unlink(missing_ok=True)
                self._discarded += 1
                continue
            found.append((stat.st_mtime_ns, key, stat.st_size))
        found.sort()
        for _, key, size in found:
            self._files[key] = size
            self._used_bytes += size
        for victim in self._make_room(0) or []:  # a smaller bound than last run's
            (self.directory / file_name(victim)).unlink(missing_ok=True)
        self._check()

    def _check(self) -> None:
        invariant(
            0 <= self._used_bytes + self._reserved_bytes <= self.bytes_max,
            "tier disk cache over its bound",
        )


def _whole(path: Path, size_bytes: int) -> bool:
    if size_bytes < _HEADER.size:
        return False
    try:
        with path.open("rb") as f:
            header = f.read(_HEADER.size)
    except OSError:
        return False
    magic, length, _ = _HEADER.unpack(header)
    return bool(magic == _MAGIC and length + _HEADER.size == size_bytes)
