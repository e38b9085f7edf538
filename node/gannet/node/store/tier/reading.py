"""Ranged reads of offloaded commit-log offsets, through a bounded block cache.

Who calls it: (next slice) the store's read paths — Pop, pull, ``store get``, queries by id, key
and time — when a commit-log offset is below the first local file. Here it is exercised by
``e2e/tier/test_reading.py`` against a real S3 server.

How: :meth:`TierReader.read` maps the offset to its object with the replicated manifest
(``Manifest.locate``), splits the wanted range into aligned blocks of ``block_bytes`` and serves
each from the :class:`caching.BlockCache` or, on a miss, from one ranged GET. **Read-ahead**: a
miss on the block right after the previously read block of the same object (a sequential
consumer) fetches that block and the next ``readahead_blocks`` in the same GET, so a consumer
far behind makes one request per ``(1 + readahead_blocks) x block_bytes``. The cache bound and
the fetch size bound the memory a reader may hold; bucket errors propagate as the tier's errors
(:class:`errors.TierUnavailable` is retryable), and nothing is cached from a failed fetch.

A RocketMQ record never spans two commit-log files (the blank record fills the end), so a read
that crosses an object's end is refused. :meth:`TierReader.read_record` reads TOTALSIZE, then
the record. Counters come from :meth:`TierReader.statistics` (a frozen snapshot), for the
metrics of :mod:`gannet.node.metrics.tier` (``docs/metrics.md``), with the failed reads counted
by reason (:func:`error_reason`). Thread-safe: one lock around cache and counters; fetches
happen outside it, and at most ``fetches_max`` run at once: a read that finds every slot taken
fails at once with :class:`errors.TierUnavailable` ("busy") instead of queueing, so consumers
far behind hold at most ``fetches_max`` threads of the broker on a slow bucket.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gannet.node.store.tier import buckets, caching, errors, manifests, naming

_TOTAL_SIZE = struct.Struct(">i")


class OffsetNotInTier(errors.TierError):
    """The offset is not in the tier's range (expired, or never offloaded)."""

    retryable = False


@dataclass(frozen=True, slots=True)
class ReadStatistics:
    """Counters since the reader was made."""

    cache_hits: int
    cache_misses: int
    fetches: int
    fetched_bytes: int
    cached_bytes: int
    read_errors: Mapping[str, int] = field(default_factory=dict)
    """Failed fetches by reason (:func:`error_reason`)."""


ERROR_REASONS = ("unavailable", "busy", "credentials", "rejected", "short_read", "other")


def error_reason(exc: errors.TierError) -> str:
    """The ``reason`` label of a failed tier read (one of :data:`ERROR_REASONS`)."""
    if isinstance(exc, FetchesBusy):
        return "busy"
    if isinstance(exc, ShortRead):
        return "short_read"
    return errors.bucket_reason(exc) or "other"


class FetchesBusy(errors.TierUnavailable):
    """Every fetch slot of the reader is taken (a slow bucket); retry later."""


class ShortRead(errors.TierUnavailable):
    """A ranged GET answered fewer bytes than asked."""


class TierReader:
    """Reads commit-log bytes held by the tier."""

    def __init__(
        self,
        bucket: buckets.Bucket,
        manifest: Callable[[], manifests.Manifest],
        *,
        block_bytes: int = 1 << 20,
        cache_bytes_max: int = 256 << 20,
        readahead_blocks: int = 4,
        fetches_max: int = 4,
    ) -> None:
        if block_bytes <= 0:
            raise ValueError(f"block_bytes {block_bytes} <= 0")
        if readahead_blocks < 0:
            raise ValueError(f"readahead_blocks {readahead_blocks} < 0")
        if fetches_max < 1:
            raise ValueError(f"fetches_max {fetches_max} < 1")
        self._bucket = bucket
        self._manifest = manifest
        self.block_bytes = block_bytes
        self.readahead_blocks = readahead_blocks
        self.fetches_max = fetches_max
        self._fetch_slots = threading.BoundedSemaphore(fetches_max)
        self._errors: dict[str, int] = {}
        self._cache = caching.BlockCache(cache_bytes_max)
        self._lock = threading.Lock()
        self._last_block: caching.BlockKey | None = None
        self._hits = self._misses = self._fetches = self._fetched_bytes = 0

    def statistics(self) -> ReadStatistics:
        with self._lock:
            return ReadStatistics(
                self._hits,
                self._misses,
                self._fetches,
                self._fetched_bytes,
                self._cache.used_bytes,
                dict(self._errors),
            )

    def manifest(self) -> manifests.Manifest:
        """The manifest as the reader sees it now."""
        return self._manifest()

    def read(self, offset: int, size_bytes: int) -> bytes:
        """Commit-log bytes ``[offset, offset + size_bytes)``, all inside one offloaded file."""
        if size_bytes <= 0:
            raise ValueError(f"size_bytes {size_bytes} <= 0")
        manifest = self._manifest()
        obj = manifest.locate(offset)
        if obj is None:
            raise OffsetNotInTier(
                f"commit-log offset {offset} is not in the tier (it holds"
                f" [{manifest.start_offset}, {manifest.end_offset}))"
            )
        if offset + size_bytes > obj.end_offset:
            raise OffsetNotInTier(
                f"range {offset}+{size_bytes} crosses the end of tier file {obj.base_offset}"
                f" at {obj.end_offset}"
            )
        start = offset - obj.base_offset
        first, last = start // self.block_bytes, (start + size_bytes - 1) // self.block_bytes
        try:
            parts = [self._block(obj, index, manifest.prefix) for index in range(first, last + 1)]
        except errors.TierUnavailable as exc:  # the same kind, naming the offset asked for
            raise type(exc)(
                f"commit-log offset {offset} (tier file {obj.base_offset}): {exc}"
            ) from exc
        joined = b"".join(parts)
        begin = start - first * self.block_bytes
        return joined[begin : begin + size_bytes]

    def read_record(self, offset: int) -> bytes:
        """The raw RocketMQ record (or blank record) at commit-log ``offset``."""
        (total_size,) = _TOTAL_SIZE.unpack(self.read(offset, _TOTAL_SIZE.size))
        if total_size < _TOTAL_SIZE.size:
            raise errors.TierError(f"record at {offset}: TOTALSIZE {total_size} is too small")
        return self.read(offset, total_size)

    def forget(self, base_offset: int) -> None:
        """Drop the cached blocks of an object the tier expired."""
        with self._lock:
            self._cache.discard_object(base_offset)

    def _block(self, obj: manifests.TierObject, index: int, prefix: str) -> bytes:
        key = (obj.base_offset, index)
        with self._lock:
            cached = self._cache.get(key)
            sequential = self._last_block == (obj.base_offset, index - 1)
            self._last_block = key
            if cached is not None:
                self._hits += 1
                return cached
            self._misses += 1
        blocks_in_object = -(-obj.size_bytes // self.block_bytes)
        count = min(1 + (self.readahead_blocks if sequential else 0), blocks_in_object - index)
        start = index * self.block_bytes
        size = min(count * self.block_bytes, obj.size_bytes - start)
        try:
            data = self._fetch(naming.commitlog_key(prefix, obj.base_offset), start, size)
            if len(data) != size:
                raise ShortRead(
                    f"tier file {obj.base_offset}: asked {size} bytes at {start}, got {len(data)}"
                )
        except errors.TierError as exc:
            reason = error_reason(exc)
            with self._lock:
                self._errors[reason] = self._errors.get(reason, 0) + 1
            raise
        with self._lock:
            self._fetches += 1
            self._fetched_bytes += size
            for n in range(count):
                block = data[n * self.block_bytes : (n + 1) * self.block_bytes]
                self._cache.put((obj.base_offset, index + n), block)
        return data[: self.block_bytes]

    def _fetch(self, key: str, start: int, size: int) -> bytes:
        if not self._fetch_slots.acquire(blocking=False):
            raise FetchesBusy(
                f"{self.fetches_max} tier fetches are in flight (a slow bucket); retry later"
            )
        try:
            return self._bucket.get_range(key, start, size)
        finally:
            self._fetch_slots.release()


class ManifestSource(Protocol):
    """What a reader needs of the manifest's keeper: the manifest applied so far.
    ``uploading.FileManifestLog`` satisfies it, as will the Raft-backed manifest log."""

    def current(self) -> manifests.Manifest: ...


def reader_of(
    config: buckets.BucketConfig,
    source: ManifestSource,
    *,
    block_bytes: int = 1 << 20,
    cache_bytes_max: int = 256 << 20,
    readahead_blocks: int = 4,
    fetches_max: int = 4,
) -> TierReader:
    """A reader of the tier in ``config``'s bucket, following ``source``'s manifest (the
    broker's wiring calls this and hands the reader to ``MessageStore(..., tier=reader)``)."""
    return TierReader(
        buckets.S3Bucket(config),
        source.current,
        block_bytes=block_bytes,
        cache_bytes_max=cache_bytes_max,
        readahead_blocks=readahead_blocks,
        fetches_max=fetches_max,
    )
