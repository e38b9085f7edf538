"""The tier reader's threads: read-ahead in the background, never ahead of a reader's own block,
and deferred waits that hold no thread of asyncio's pool while the bucket hangs.

The bucket here is an in-memory one whose GETs of chosen objects can be held (a hung bucket
without the 10 s start of a real server); the same reader runs against SeaweedFS in
``e2e/tier/test_reading.py`` and ``test_store_reads.py``.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gannet.node.store.tier import deferring, errors, manifests, naming, reading

PREFIX = "gannet/t/g0"
OBJECT_BYTES = 16 * 1024
BLOCK_BYTES = 1024
TIMEOUT_S = 10.0


class HeldBucket:
    """Objects in memory; GETs of a held object wait until released (``get_range`` only)."""

    def __init__(self, objects: int) -> None:
        self.data = {
            naming.commitlog_key(PREFIX, i * OBJECT_BYTES): bytes([i]) * OBJECT_BYTES
            for i in range(objects)
        }
        self.held: dict[str, tuple[threading.Event, int]] = {}
        self.waiting = threading.Semaphore(0)
        self.gets: list[tuple[str, int, int]] = []

    def hold(self, base_offset: int, start_min: int = 0) -> threading.Event:
        """Hold GETs of the object from ``start_min`` on until the event is set."""
        release = threading.Event()
        self.held[naming.commitlog_key(PREFIX, base_offset)] = (release, start_min)
        return release

    def get_range(self, key: str, start: int, size_bytes: int) -> bytes:
        self.gets.append((key, start, size_bytes))
        release, start_min = self.held.get(key, (None, 0))
        if release is not None and start >= start_min:
            self.waiting.release()
            if not release.wait(TIMEOUT_S):
                raise errors.TierUnavailable(f"{key}: read timed out")
        return self.data[key][start : start + size_bytes]


def manifest_of(objects: int) -> manifests.Manifest:
    return manifests.Manifest(
        PREFIX,
        tuple(
            manifests.TierObject(i * OBJECT_BYTES, OBJECT_BYTES, "0" * 32, 1)
            for i in range(objects)
        ),
    )


def reader_of(bucket: HeldBucket, objects: int, **options: int) -> reading.TierReader:
    manifest = manifest_of(objects)
    return reading.TierReader(
        bucket,  # type: ignore[arg-type]  # get_range is all a reader uses
        lambda: manifest,
        block_bytes=BLOCK_BYTES,
        readahead_blocks=4,
        **options,  # type: ignore[arg-type]
    )


def test_interleaved_sequential_readers_each_get_read_ahead_in_the_background() -> None:
    bucket = HeldBucket(3)
    reader = reader_of(bucket, 3)
    blocks = OBJECT_BYTES // BLOCK_BYTES
    for index in range(blocks):  # three consumers, round robin, one block each per turn
        for obj in range(3):
            assert reader.read(obj * OBJECT_BYTES + index * BLOCK_BYTES, 8) == bytes([obj]) * 8
    assert reader.wait_idle(TIMEOUT_S)
    statistics = reader.statistics()
    assert statistics.fetched_bytes == 3 * OBJECT_BYTES  # every block once
    assert statistics.readahead_fetches > 0
    assert statistics.fetches <= 3 * (2 + blocks // 2)  # without read-ahead: 3 * blocks
    assert sum(statistics.fetch_seconds_counts) == statistics.fetches


def test_a_reader_never_waits_behind_queued_read_ahead() -> None:
    bucket = HeldBucket(2)
    reader = reader_of(bucket, 2, readahead_fetches_max=1, readahead_queue_max=1)
    reader.read(0, 8)
    release = bucket.hold(0, start_min=2 * BLOCK_BYTES)
    reader.read(BLOCK_BYTES, 8)  # sequential: its read-ahead GET of object 0 hangs
    assert bucket.waiting.acquire(timeout=TIMEOUT_S)
    assert reader.read(OBJECT_BYTES, 8) == b"\x01" * 8  # object 1, block 0
    # Sequential in object 1: its read-ahead cannot even be queued (the queue holds one job).
    assert reader.read(OBJECT_BYTES + BLOCK_BYTES, 8) == b"\x01" * 8
    assert reader.read(OBJECT_BYTES + 2 * BLOCK_BYTES, 8) == b"\x01" * 8
    assert reader.statistics().readahead_dropped >= 1
    release.set()
    assert reader.wait_idle(TIMEOUT_S)
    assert reader.read(2 * BLOCK_BYTES, 8) == b"\x00" * 8
    assert reader.statistics().readahead_fetches == 1


def test_deferred_tier_reads_hold_no_thread_of_the_default_pool() -> None:
    """Eight readers of a hung bucket, a default pool of two threads: a call at the head still
    runs at once, because every tier read waits on the loop, not in a pool thread."""
    bucket = HeldBucket(8)
    reader = reader_of(bucket, 8, fetches_max=8)
    release = threading.Event()
    for obj in range(8):
        bucket.held[naming.commitlog_key(PREFIX, obj * OBJECT_BYTES)] = (release, 0)

    async def scenario() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2))
        tier_reads = [
            asyncio.ensure_future(
                deferring.call(functools.partial(reader.read, obj * OBJECT_BYTES, 8))
            )
            for obj in range(8)
        ]
        for _ in range(8):
            assert await asyncio.to_thread(bucket.waiting.acquire, True, TIMEOUT_S)
        head = await asyncio.wait_for(asyncio.to_thread(lambda: "head"), 1.0)
        assert head == "head"
        assert not any(read.done() for read in tier_reads)
        release.set()
        got = await asyncio.wait_for(asyncio.gather(*tier_reads), TIMEOUT_S)
        assert got == [bytes([obj]) * 8 for obj in range(8)]

    asyncio.run(scenario())


def test_a_failed_fetch_reaches_the_deferred_caller_and_nothing_is_cached(tmp_path: Path) -> None:
    bucket = HeldBucket(1)
    reader = reader_of(bucket, 1)
    release = bucket.hold(0)

    def fail_soon() -> None:
        assert bucket.waiting.acquire(timeout=TIMEOUT_S)
        bucket.data.clear()  # the GET will find nothing: a KeyError inside the bucket
        release.set()

    threading.Thread(target=fail_soon).start()
    with pytest.raises(errors.TierError, match="tier file 0"):
        asyncio.run(deferring.call(lambda: reader.read(0, 8)))
    assert reader.statistics().cached_bytes == 0
    assert reader.statistics().read_errors == {"other": 1}


def test_closing_the_reader_fails_a_waiting_read_retryably() -> None:
    bucket = HeldBucket(1)
    reader = reader_of(bucket, 1)
    release = bucket.hold(0)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            reader.read(0, 8)
        except errors.TierError as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=read)
    waiting.start()
    assert bucket.waiting.acquire(timeout=TIMEOUT_S)
    reader.close()
    waiting.join(TIMEOUT_S)
    (failure,) = outcome
    assert isinstance(failure, errors.TierUnavailable)
    assert "closed" in str(failure)
    release.set()  # the GET in flight completes into a closed reader: nothing breaks
