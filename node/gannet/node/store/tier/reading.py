"""Ranged reads of offloaded commit-log offsets, through block caches, with read-ahead.

Who calls it: the store's read paths (:mod:`.routing`) — Pop, pull, ``store get``, queries by
id, key and time — when a commit-log offset is below the first local file; exercised against a
real S3 server by ``e2e/tier/test_reading.py`` and ``test_store_reads.py``.

How: :meth:`TierReader.read` maps the offset to its object with the replicated manifest
(``Manifest.locate``), splits the wanted range into aligned blocks of ``block_bytes`` and serves
each from the in-memory :class:`caching.BlockCache`, else from the optional on-disk
:class:`disk_caching.DiskBlockCache` (a broker's ``<store>/tiercache/``), else from one ranged
GET. Nothing is cached from a failed fetch; bucket errors propagate as the tier's errors
(:class:`errors.TierUnavailable` is retryable).

**Fetches run on the reader's own threads**, never in the caller's: a pool of ``fetches_max``
threads for the blocks readers wait for and a pool of ``readahead_fetches_max`` threads for
read-ahead. A miss takes a fetch slot without waiting (every slot taken: :class:`FetchesBusy`,
retryable, at once) and hands the GET to the pool; a second reader of a block already in flight
waits for that fetch instead of sending another. The caller then waits for the block's future —
or, inside :func:`deferring_waits` (the protocol layers' store calls,
:mod:`.deferring`), does not wait at all: :class:`BlockPending` carries the future up to the
event loop, which awaits it without holding any thread and runs the call again once the block
is cached. So a hung bucket holds at most the reader's own ``fetches_max +
readahead_fetches_max`` threads, never the default pool's threads that serve reads at the head.

**Read-ahead per consumer.** :class:`streams.SequentialStreams` recognises each sequential
reader among interleaved ones; a read that continues a stream makes sure the next
``readahead_blocks`` blocks of its object are cached or on their way, by queueing one
background GET for the missing ones (when fewer than half are ready, so a steady reader costs
one GET per about ``readahead_blocks / 2`` blocks). The reader returns as soon as its own block
is there; read-ahead lands in the caches later. Read-ahead is bounded: at most
``readahead_queue_max`` jobs queued or running, more are dropped (counted); a queued job
registers its blocks as "in flight" only when it starts, so a reader never waits behind a
read-ahead that has not started — it fetches its block itself.

A RocketMQ record never spans two commit-log files (the blank record fills the end), so a read
that crosses an object's end is refused. :meth:`TierReader.read_record` reads TOTALSIZE, then
the record. Counters and the fetch-time histogram come from :meth:`TierReader.statistics` (a
frozen snapshot) for :mod:`gannet.node.metrics.tier_collecting` (``docs/metrics.md``), failed
fetches counted by reason (:func:`error_reason`). Thread-safe: one lock around the memory cache,
the streams, the in-flight table and the counters; no GET and no disk IO runs under it.
"""

from __future__ import annotations

import bisect
import contextlib
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from gannet.node.store.tier import (
    buckets,
    caching,
    disk_caching,
    errors,
    manifests,
    naming,
    streams,
)

_TOTAL_SIZE = struct.Struct(">i")

FETCH_SECONDS_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Upper bounds of the fetch-time histogram's buckets (``gannet_tier_fetch_seconds``)."""


class OffsetNotInTier(errors.TierError):
    """The offset is not in the tier's range (expired, or never offloaded)."""

    retryable = False


@dataclass(frozen=True, slots=True)
class ReadStatistics:
    """Counters since the reader was made."""

    cache_hits: int
    """Blocks served from the memory cache."""
    cache_misses: int
    """Blocks not in the memory cache (served from disk, an in-flight fetch or a new GET)."""
    fetches: int
    """Ranged GETs that succeeded, read-ahead included."""
    fetched_bytes: int
    cached_bytes: int
    """Bytes the memory cache holds."""
    read_errors: Mapping[str, int] = field(default_factory=dict)
    """Failed fetches by reason (:func:`error_reason`)."""
    disk_cache_hits: int = 0
    disk_cache_misses: int = 0
    disk_cached_bytes: int = 0
    disk_cache_discarded: int = 0
    """Disk-cache files found partial or damaged and deleted (the block is fetched again)."""
    readahead_fetches: int = 0
    readahead_dropped: int = 0
    """Read-ahead jobs not queued because ``readahead_queue_max`` were queued or running."""
    fetch_seconds_counts: tuple[int, ...] = ()
    """GETs per bucket of :data:`FETCH_SECONDS_BOUNDS` (not cumulative), plus one past the
    last bound; failed GETs included."""
    fetch_seconds_sum: float = 0.0


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


class BlockPending(errors.TierUnavailable):
    """Raised instead of waiting, inside :func:`deferring_waits`: the block is being fetched;
    await ``future`` (it completes with the block or the fetch's error) and read again."""

    def __init__(self, message: str, future: Future[bytes]) -> None:
        super().__init__(message)
        self.future = future


_deferring = threading.local()


@contextlib.contextmanager
def deferring_waits() -> Iterator[None]:
    """Within this block, a read that would wait for a fetch raises :class:`BlockPending`
    (this thread only)."""
    before = getattr(_deferring, "on", False)
    _deferring.on = True
    try:
        yield
    finally:
        _deferring.on = before


def _defers() -> bool:
    return bool(getattr(_deferring, "on", False))


class TierReader:
    """Reads commit-log bytes held by the tier (module docstring)."""

    def __init__(
        self,
        bucket: buckets.Bucket,
        manifest: Callable[[], manifests.Manifest],
        *,
        block_bytes: int = 1 << 20,
        cache_bytes_max: int = 256 << 20,
        readahead_blocks: int = 4,
        fetches_max: int = 4,
        readahead_fetches_max: int = 2,
        readahead_queue_max: int = 16,
        streams_max: int = 64,
        disk_cache: disk_caching.DiskBlockCache | None = None,
    ) -> None:
        if block_bytes <= 0:
            raise ValueError(f"block_bytes {block_bytes} <= 0")
        if readahead_blocks < 0:
            raise ValueError(f"readahead_blocks {readahead_blocks} < 0")
        if fetches_max < 1:
            raise ValueError(f"fetches_max {fetches_max} < 1")
        if readahead_fetches_max < 1:
            raise ValueError(f"readahead_fetches_max {readahead_fetches_max} < 1")
        if readahead_queue_max < 1:
            raise ValueError(f"readahead_queue_max {readahead_queue_max} < 1")
        self._bucket = bucket
        self._manifest = manifest
        self.block_bytes = block_bytes
        self.readahead_blocks = readahead_blocks
        self.fetches_max = fetches_max
        self.readahead_queue_max = readahead_queue_max
        self.disk_cache = disk_cache
        self._fetch_slots = threading.BoundedSemaphore(fetches_max)
        self._fetchers = ThreadPoolExecutor(fetches_max, thread_name_prefix="tier-fetch")
        self._readaheads = ThreadPoolExecutor(
            readahead_fetches_max, thread_name_prefix="tier-readahead"
        )
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._cache = caching.BlockCache(cache_bytes_max)
        self._streams = streams.SequentialStreams(streams_max)
        self._in_flight: dict[caching.BlockKey, Future[bytes]] = {}
        self._readahead_jobs = 0  # queued or running
        self._foreground_jobs = 0  # submitted, until their blocks are on disk too
        self._queued: set[caching.BlockKey] = set()
        """Blocks of queued read-ahead jobs (not yet in flight: no reader waits for them)."""
        self._errors: dict[str, int] = {}
        self._hits = self._misses = self._fetches = self._fetched_bytes = 0
        self._readahead_fetches = self._readahead_dropped = 0
        self._fetch_counts = [0] * (len(FETCH_SECONDS_BOUNDS) + 1)
        self._fetch_seconds = 0.0

    def statistics(self) -> ReadStatistics:
        disk = self.disk_cache.statistics() if self.disk_cache is not None else None
        with self._lock:
            return ReadStatistics(
                self._hits,
                self._misses,
                self._fetches,
                self._fetched_bytes,
                self._cache.used_bytes,
                dict(self._errors),
                disk_cache_hits=disk.hits if disk else 0,
                disk_cache_misses=disk.misses if disk else 0,
                disk_cached_bytes=disk.used_bytes if disk else 0,
                disk_cache_discarded=disk.discarded if disk else 0,
                readahead_fetches=self._readahead_fetches,
                readahead_dropped=self._readahead_dropped,
                fetch_seconds_counts=tuple(self._fetch_counts),
                fetch_seconds_sum=self._fetch_seconds,
            )

    def manifest(self) -> manifests.Manifest:
        """The manifest as the reader sees it now."""
        return self._manifest()

    def close(self) -> None:
        """Stop the fetch threads (fetches in flight finish within the bucket's timeouts); a
        reader still waiting for a block gets a retryable error."""
        self._fetchers.shutdown(wait=False, cancel_futures=True)
        self._readaheads.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            waiting, self._in_flight = list(self._in_flight.values()), {}
        for future in waiting:
            _complete(future, None, errors.TierUnavailable("the tier reader was closed"))

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
            parts = [self._block(manifest, obj, index) for index in range(first, last + 1)]
        except BlockPending:
            raise
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
        """Drop the cached blocks and streams of an object the tier expired."""
        with self._lock:
            self._cache.discard_object(base_offset)
            self._streams.forget_object(base_offset)
        if self.disk_cache is not None:
            self.disk_cache.discard_object(base_offset)

    # ------------------------------------------------------------------ blocks
    def _block(self, manifest: manifests.Manifest, obj: manifests.TierObject, index: int) -> bytes:
        key = (obj.base_offset, index)
        prefix = manifest.prefix
        previous = None
        if index == 0:  # a consumer crossing from the object before continues its stream
            before = manifest.locate(obj.base_offset - 1) if obj.base_offset > 0 else None
            if before is not None:
                previous = (before.base_offset, (before.size_bytes - 1) // self.block_bytes)
        with self._lock:
            run, moved = self._streams.observe(key, previous)
            cached = self._cache.get(key)
            if cached is not None:
                self._hits += 1
            else:
                self._misses += 1
        if run > 0 and moved and self.readahead_blocks > 0:  # once per block of a stream
            self._read_ahead(obj, index, prefix)
        if cached is not None:
            return cached
        if self.disk_cache is not None:
            block = self.disk_cache.get(key)
            if block is not None:
                with self._lock:
                    self._cache.put(key, block)
                return block
        return self._wait(self._foreground_fetch(obj, index, prefix), key)

    def _foreground_fetch(
        self, obj: manifests.TierObject, index: int, prefix: str
    ) -> Future[bytes]:
        """The future of block ``index``: the fetch in flight, else a new one on a free slot."""
        key = (obj.base_offset, index)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:  # arrived since the first look
                done: Future[bytes] = Future()
                done.set_result(cached)
                return done
            future = self._in_flight.get(key)
            if future is not None:
                return future
            if not self._fetch_slots.acquire(blocking=False):
                self._errors["busy"] = self._errors.get("busy", 0) + 1
                raise FetchesBusy(
                    f"{self.fetches_max} tier fetches are in flight (a slow bucket); retry later"
                )
            future = Future()
            self._in_flight[key] = future
            self._foreground_jobs += 1
        try:
            self._fetchers.submit(self._foreground_job, obj, index, future, prefix)
        except RuntimeError:  # closed
            self._fetch_slots.release()
            with self._lock:
                self._in_flight.pop(key, None)
                self._foreground_jobs -= 1
                self._idle.notify_all()
            raise
        return future

    def _wait(self, future: Future[bytes], key: caching.BlockKey) -> bytes:
        if future.done() or not _defers():
            return future.result()
        raise BlockPending(f"tier file {key[0]} block {key[1]} is being fetched", future)

    def _read_ahead(self, obj: manifests.TierObject, index: int, prefix: str) -> None:
        """Queue a background GET of the next blocks when fewer than half are ready."""
        blocks_in_object = -(-obj.size_bytes // self.block_bytes)
        last = min(index + self.readahead_blocks, blocks_in_object - 1)
        if last <= index:
            return
        with self._lock:
            ready = 0
            for ahead in range(index + 1, last + 1):
                key = (obj.base_offset, ahead)
                if key not in self._queued and not self._is_ready_locked(key):
                    break
                ready += 1
            if ready == last - index or ready * 2 >= self.readahead_blocks:
                return
            if self._readahead_jobs >= self.readahead_queue_max:
                self._readahead_dropped += 1
                return
            self._readahead_jobs += 1
            first = index + 1 + ready
            self._queued.update((obj.base_offset, i) for i in range(first, last + 1))
        try:
            self._readaheads.submit(self._start_read_ahead, obj, first, last, prefix)
        except RuntimeError:  # closed
            with self._lock:
                self._queued.difference_update((obj.base_offset, i) for i in range(first, last + 1))
                self._readahead_jobs -= 1
                self._idle.notify_all()

    def _is_ready_locked(self, key: caching.BlockKey) -> bool:
        if key in self._in_flight or self._cache.contains(key):
            return True
        return self.disk_cache is not None and key in self.disk_cache

    def _start_read_ahead(
        self, obj: manifests.TierObject, first: int, last: int, prefix: str
    ) -> None:
        """On a read-ahead thread: register the blocks still missing as in flight, fetch them."""
        try:
            with self._lock:
                self._queued.difference_update((obj.base_offset, i) for i in range(first, last + 1))
                while first <= last and self._is_ready_locked((obj.base_offset, first)):
                    first += 1
                futures: list[Future[bytes]] = []
                for i in range(first, last + 1):  # the leading run of missing blocks only
                    key = (obj.base_offset, i)
                    if self._is_ready_locked(key):
                        break
                    future: Future[bytes] = Future()
                    self._in_flight[key] = future
                    futures.append(future)
                if not futures:
                    return
            self._fetch(obj, first, futures, prefix, readahead=True)
        finally:
            with self._lock:
                self._readahead_jobs -= 1
                self._idle.notify_all()

    def _foreground_job(
        self, obj: manifests.TierObject, index: int, future: Future[bytes], prefix: str
    ) -> None:
        try:
            self._fetch(obj, index, [future], prefix, readahead=False)
        finally:
            with self._lock:
                self._foreground_jobs -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no fetch is queued or running, disk-cache writes included (tests,
        benchmarks); False on timeout."""
        with self._idle:
            return self._idle.wait_for(
                lambda: self._readahead_jobs == 0 and self._foreground_jobs == 0, timeout_s
            )

    def _fetch(
        self,
        obj: manifests.TierObject,
        first: int,
        futures: list[Future[bytes]],
        prefix: str,
        *,
        readahead: bool,
    ) -> None:
        """On a fetch thread: one ranged GET of ``len(futures)`` blocks from ``first``; cache
        them, complete the futures, then write the blocks to the disk cache."""
        start = first * self.block_bytes
        size = min(len(futures) * self.block_bytes, obj.size_bytes - start)
        began = time.monotonic()
        blocks: list[bytes] = []
        try:
            data = self._bucket.get_range(
                naming.commitlog_key(prefix, obj.base_offset), start, size
            )
            if len(data) != size:
                raise ShortRead(
                    f"tier file {obj.base_offset}: asked {size} bytes at {start}, got {len(data)}"
                )
            blocks = [
                data[n * self.block_bytes : (n + 1) * self.block_bytes] for n in range(len(futures))
            ]
        except BaseException as exc:
            failure = (
                exc
                if isinstance(exc, errors.TierError)
                else errors.TierError(f"tier file {obj.base_offset}: {exc!r}")
            )
            if not readahead:  # before the waiters wake: one may fetch its next block at once
                self._fetch_slots.release()
            self._finish(obj.base_offset, first, futures, [], failure, time.monotonic() - began)
            return
        if not readahead:
            self._fetch_slots.release()
        self._finish(obj.base_offset, first, futures, blocks, None, time.monotonic() - began)
        with self._lock:
            self._fetches += 1
            self._fetched_bytes += size
            if readahead:
                self._readahead_fetches += 1
        if self.disk_cache is not None:
            for n, block in enumerate(blocks):
                self.disk_cache.put((obj.base_offset, first + n), block)

    def _finish(
        self,
        base_offset: int,
        first: int,
        futures: list[Future[bytes]],
        blocks: list[bytes],
        failure: errors.TierError | None,
        seconds: float,
    ) -> None:
        with self._lock:
            self._fetch_counts[bisect.bisect_left(FETCH_SECONDS_BOUNDS, seconds)] += 1
            self._fetch_seconds += seconds
            if failure is not None:
                reason = error_reason(failure)
                self._errors[reason] = self._errors.get(reason, 0) + 1
            for n, future in enumerate(futures):
                key = (base_offset, first + n)
                if failure is None:
                    self._cache.put(key, blocks[n])
                if self._in_flight.get(key) is future:
                    del self._in_flight[key]
        for n, future in enumerate(futures):
            _complete(future, blocks[n] if failure is None else None, failure)


def _complete(future: Future[bytes], block: bytes | None, failure: BaseException | None) -> None:
    """Complete ``future`` unless :meth:`TierReader.close` already failed it."""
    try:
        if failure is not None:
            future.set_exception(failure)
        else:
            future.set_result(block if block is not None else b"")
    except InvalidStateError:
        pass


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How a broker's reader caches and reads ahead (``gannet broker run --tier-cache-bytes``,
    ``--tier-memory-cache-bytes``). The memory cache sits in front of the disk cache: it holds
    the blocks readers are in the middle of and the read-ahead windows (five 1 MiB blocks per
    stream by default, so 64 MiB covers a dozen streams) without a system call per record, while
    the disk cache holds the larger working set and survives restarts. 0 disk bytes: no disk
    cache."""

    memory_cache_bytes_max: int = 64 << 20
    disk_cache_bytes_max: int = 1 << 30
    block_bytes: int = 1 << 20
    readahead_blocks: int = 4
    fetches_max: int = 4

    def __post_init__(self) -> None:
        if self.memory_cache_bytes_max < self.block_bytes:
            raise ValueError(
                f"tier memory cache of {self.memory_cache_bytes_max} bytes holds no block of"
                f" {self.block_bytes} bytes"
            )
        if self.disk_cache_bytes_max < 0:
            raise ValueError(f"tier disk cache bytes {self.disk_cache_bytes_max} < 0")


class ManifestSource(Protocol):
    """What a reader needs of the manifest's keeper: the manifest applied so far.
    ``uploading.FileManifestLog`` satisfies it, as does the broker's manifest log."""

    def current(self) -> manifests.Manifest: ...


def reader_of(
    config: buckets.BucketConfig,
    source: ManifestSource,
    *,
    block_bytes: int = 1 << 20,
    cache_bytes_max: int = 256 << 20,
    readahead_blocks: int = 4,
    fetches_max: int = 4,
    disk_cache: disk_caching.DiskBlockCache | None = None,
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
        disk_cache=disk_cache,
    )
