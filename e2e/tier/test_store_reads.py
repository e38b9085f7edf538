"""The store's read paths follow offloaded files into a real SeaweedFS bucket.

A real :class:`MessageStore` with 64 KiB commit-log files takes messages (keys, two queues); the
oldest files are offloaded with ``uploading.offload`` and a ``FileManifestLog`` and deleted
locally; the store reopened with a tier reader serves every message again through its normal
API — by offset, pull (queue reads, bulk records), Pop, query by key, id and time — byte for
byte as stored. A hung bucket (SIGSTOP) fails tier reads retryably while reads and writes at
the head go on; a dead endpoint (nothing listening) fails them retryably too.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from e2e.tier import seaweedfs
from e2e.tier.stores import FILES_OFFLOADED, MESSAGES, TOPIC, Written, tier_offsets
from gannet.node.api import store_statuses
from gannet.node.domain.committing import pop_flush_wait
from gannet.node.pop.service import PopBroker
from gannet.node.store import msgids, querying
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.consume_queues import Boundary
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.tier import buckets, deferring, errors, reading, routing, uploading


def tier_reader(
    server: seaweedfs.SeaweedS3, log: uploading.FileManifestLog, **options: object
) -> reading.TierReader:
    config = server.bucket_config(seaweedfs.BUCKET, **options)  # type: ignore[arg-type]
    return reading.reader_of(config, log, block_bytes=4096, cache_bytes_max=1 << 20)


@pytest.fixture
def tiered(seaweed: seaweedfs.SeaweedS3, written: Written) -> Iterator[MessageStore]:
    with MessageStore(written.config, tier=tier_reader(seaweed, written.log)).open() as store:
        yield store


def test_every_read_path_serves_offloaded_messages_byte_for_byte(
    tiered: MessageStore, written: Written
) -> None:
    store = tiered
    local_start = store.commitlog.min_offset()
    assert local_start == FILES_OFFLOADED * written.config.commitlog_file_size_bytes
    below = tier_offsets(written)
    assert len(below) > 50
    assert store.readable_min_offset() == 0
    # By commit-log offset (message ids, Pop, transactions, timers): every record.
    for offset, data in written.raw.items():
        assert store.read_stored(offset, len(data)) == data
        msg = store.read_message(offset)
        assert msg is not None
        assert msg.physical_offset == offset
        assert store.reads.where(offset) is (
            routing.Where.TIER if offset < local_start else routing.Where.LOCAL
        )
    # Pull: the queue reads, from queue offset 0 (the consume queues stayed local).
    for queue_id, offsets in written.by_queue.items():
        assert store.min_offset_in_queue(TOPIC, queue_id) == 0
        got_offsets: list[int] = []
        next_offset = 0
        while next_offset < len(offsets):
            got = store.get_messages(TOPIC, queue_id, next_offset, 32)
            assert got.status is GetStatus.FOUND, got.status
            for m in got.messages:
                assert m.data == written.raw[m.commit_offset]
                got_offsets.append(m.commit_offset)
            next_offset = got.next_begin_offset
        assert got_offsets == offsets
        bulk = store.get_records(TOPIC, queue_id, 0, 64, 1 << 20)
        assert bulk.status is GetStatus.FOUND
        assert bulk.records_count == 64
        assert bulk.records == b"".join(written.raw[o] for o in offsets[:64])
    # Queries: by key (local index, tiered record), by offset id, by store time.
    first = below[0]
    found = querying.by_key(store, TOPIC, "key0")
    assert [m.physical_offset for m in found.messages] == [first]
    msg_id = msgids.create_offset_msg_id("127.0.0.1", 8081, first)
    by_id = querying.by_offset_msg_id(store, msg_id)
    assert by_id is not None
    assert by_id.physical_offset == first
    tiered_in_q1 = [o for o in written.by_queue[1] if o < local_start]
    tenth = tiered_in_q1[10]
    at = querying.offset_by_time(store, TOPIC, 1, written.store_ms[tenth], Boundary.LOWER)
    assert written.by_queue[1][at] <= tenth
    assert written.store_ms[written.by_queue[1][at]] == written.store_ms[tenth]
    statistics = store.reads.tier.statistics() if store.reads.tier is not None else None
    assert statistics is not None
    assert statistics.fetches > 0
    assert not statistics.read_errors


def test_pop_reads_offloaded_messages(tiered: MessageStore, written: Written) -> None:
    pop = PopBroker(tiered, wait_durable=pop_flush_wait(tiered))
    seen: dict[int, bytes] = {}
    now_ms = int(time.time() * 1000)
    for _ in range(MESSAGES):
        result = pop.pop("g1", TOPIC, max_msgs=32, invisible_time_ms=60_000, now_ms=now_ms)
        if not result.found:
            break
        for popped in result.messages:
            seen[popped.message.physical_offset] = popped.message.body
    assert sorted(seen) == sorted(written.raw)
    for offset in tier_offsets(written):
        stored = tiered.read_message(offset)
        assert stored is not None
        assert seen[offset] == stored.body


def test_a_hung_bucket_fails_tier_reads_retryably_and_never_stalls_the_head(
    seaweed: seaweedfs.SeaweedS3, written: Written
) -> None:
    reader = tier_reader(seaweed, written.log, attempts_max=1, timeout_s=2.0)
    reader_busy = reading.TierReader(
        buckets.S3Bucket(seaweed.bucket_config(seaweedfs.BUCKET, attempts_max=1, timeout_s=2.0)),
        written.log.current,
        block_bytes=4096,
        fetches_max=1,
    )
    below = tier_offsets(written)
    with MessageStore(written.config, tier=reader).open() as store:
        head_queue_offset = len(written.by_queue[0]) - 1
        outcome: list[object] = []
        seaweed.pause()
        try:
            blocked = threading.Thread(
                target=lambda: outcome.append(_attempt(store.read_message, below[0]))
            )
            blocked.start()
            _await(lambda: reader.statistics().cache_misses >= 1, "the tier read to start")
            # While that read waits on the hung bucket: writes and head reads complete.
            began = time.monotonic()
            store.put_message(Message(TOPIC, b"at the head", queue_id=0))
            assert store.dispatch_caught_up()
            got = store.get_messages(TOPIC, 0, head_queue_offset, 2)
            head_s = time.monotonic() - began
            assert got.status is GetStatus.FOUND
            assert b"at the head" in got.messages[-1].data
            assert blocked.is_alive(), "the tier read should still wait on the hung bucket"
            assert head_s < 1.0
            # A second fetch while the only slot is taken fails at once, retryably.
            slow = threading.Thread(target=lambda: _attempt(reader_busy.read_record, below[0]))
            slow.start()
            _await(lambda: reader_busy.statistics().cache_misses >= 1, "the slot to be taken")
            began = time.monotonic()
            with pytest.raises(reading.FetchesBusy):
                reader_busy.read_record(below[-1])
            assert time.monotonic() - began < 0.5
            blocked.join(timeout=10)
            slow.join(timeout=10)
            # Pull below the local start surfaces the same retryable error, not "removed".
            with pytest.raises(errors.TierUnavailable):
                store.get_messages(TOPIC, 0, 0, 4)
        finally:
            seaweed.resume()
        (failure,) = outcome
        assert isinstance(failure, errors.TierUnavailable)
        assert failure.retryable
        assert reader.statistics().read_errors == {"unavailable": 2}
        assert reader_busy.statistics().read_errors == {"busy": 1, "unavailable": 1}
        answer = store_statuses.from_store_error(failure)
        assert answer.code == store_statuses.HA_NOT_AVAILABLE
        assert str(below[0]) in answer.message
        # After the bucket is back, the same reads succeed.
        stored = store.read_message(below[0])
        assert stored is not None
        assert store.read_stored(below[0], stored.store_size) == (written.raw[below[0]])


def test_concurrent_tier_readers_of_a_hung_bucket_hold_no_thread_of_the_head(
    seaweed: seaweedfs.SeaweedS3, written: Written
) -> None:
    """Several consumers far behind (deferred store calls, as the protocol layers make them)
    while the bucket hangs, on a loop whose default pool has two threads: writes and reads at
    the head through that pool still complete in well under a second."""
    reader = tier_reader(seaweed, written.log, attempts_max=1, timeout_s=2.0)
    below = tier_offsets(written)
    far_apart = below[:: max(1, len(below) // reader.fetches_max)][: reader.fetches_max]
    head_queue_offset = len(written.by_queue[0]) - 1

    async def scenario(store: MessageStore) -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2))
        tier_reads = [
            asyncio.ensure_future(deferring.call(functools.partial(store.read_message, offset)))
            for offset in far_apart
        ]
        await _await_async(
            lambda: reader.statistics().cache_misses >= len(far_apart), "the tier reads to start"
        )
        began = time.monotonic()
        for n in range(3):
            await asyncio.to_thread(store.put_message, Message(TOPIC, b"head %d" % n, queue_id=0))
            assert await asyncio.to_thread(store.dispatch_caught_up)
            got = await asyncio.to_thread(store.get_messages, TOPIC, 0, head_queue_offset, 8)
            assert got.status is GetStatus.FOUND
        head_s = time.monotonic() - began
        assert not any(read.done() for read in tier_reads), "the bucket should still hang"
        assert head_s < 1.0
        seaweed.resume()
        outcomes = await asyncio.gather(*tier_reads, return_exceptions=True)
        for outcome in outcomes:  # each failed retryably (read timeout) or read after resume
            assert isinstance(outcome, (Message, errors.TierUnavailable)), outcome
            if isinstance(outcome, errors.TierUnavailable):
                assert outcome.retryable

    with MessageStore(written.config, tier=reader).open() as store:
        seaweed.pause()
        try:
            asyncio.run(scenario(store))
        finally:
            seaweed.resume()
        for offset in far_apart:  # after the bucket is back, every read succeeds
            stored = store.read_message(offset)
            assert stored is not None
            assert stored.physical_offset == offset


async def _await_async(condition: object, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def test_a_dead_endpoint_fails_tier_reads_retryably(written: Written) -> None:
    dead = buckets.BucketConfig(
        endpoint_url=f"http://127.0.0.1:{seaweedfs.free_port()}",
        bucket=seaweedfs.BUCKET,
        access_key="k",
        secret_key="s",
        connect_timeout_s=1.0,
        read_timeout_s=1.0,
        attempts_max=1,
    )
    reader = reading.reader_of(dead, written.log)
    with MessageStore(written.config, tier=reader).open() as store:
        below = tier_offsets(written)
        with pytest.raises(errors.TierUnavailable) as caught:
            store.read_message(below[0])
        assert caught.value.retryable
        last = max(written.raw)
        assert store.read_stored(last, len(written.raw[last])) == written.raw[last]


def _attempt(read: object, offset: int) -> object:
    try:
        return read(offset)  # type: ignore[operator]
    except errors.TierError as exc:
        return exc


def _await(condition: object, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
