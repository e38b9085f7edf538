"""Ranged reads of offloaded commit-log files from a real SeaweedFS server.

Real RocketMQ records (the store's own encoder) fill three small commit-log files ending with the
blank record; the files are offloaded with the uploader, then every record is read back by its
physical offset through :class:`reading.TierReader` and decoded by the store's decoder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.tier import seaweedfs
from gannet.node.store.log import records
from gannet.node.store.tier import buckets, disk_caching, errors, naming, reading, uploading

FILE_BYTES = 64 * 1024
BLOCK_BYTES = 4096


def write_commitlog(directory: Path, files: int) -> list[tuple[int, bytes]]:
    """Commit-log files of records; returns (physical offset, body) of every record."""
    directory.mkdir(parents=True)
    written: list[tuple[int, bytes]] = []
    queue_offset = 0
    for index in range(files):
        base = index * FILE_BYTES
        data = bytearray()
        while True:
            body = f"message {queue_offset} ".encode() * (1 + queue_offset % 40)
            msg = records.Message(
                "TierTopic", body, queue_offset=queue_offset, physical_offset=base + len(data)
            )
            record = records.encode(msg, body_size_max_bytes=1 << 20)
            if len(data) + len(record) + 8 > FILE_BYTES:
                break
            written.append((base + len(data), body))
            data += record
            queue_offset += 1
        data += records.blank_record(FILE_BYTES - len(data))
        data += bytes(FILE_BYTES - len(data))
        (directory / naming.commitlog_file_name(base)).write_bytes(bytes(data))
    return written


@pytest.fixture
def offloaded(
    bucket: buckets.S3Bucket, prefix: str, tmp_path: Path
) -> tuple[uploading.FileManifestLog, list[tuple[int, bytes]]]:
    written = write_commitlog(tmp_path / "commitlog", files=3)
    log = uploading.FileManifestLog(tmp_path / "manifest.json", prefix)
    for path in sorted((tmp_path / "commitlog").iterdir()):
        uploading.offload(path, bucket=bucket, log=log, now_ms=1)
    assert not any((tmp_path / "commitlog").iterdir())
    return log, written


def test_every_record_reads_back_from_the_tier_with_read_ahead(
    bucket: buckets.S3Bucket, offloaded: tuple[uploading.FileManifestLog, list[tuple[int, bytes]]]
) -> None:
    log, written = offloaded
    reader = reading.TierReader(
        bucket, log.current, block_bytes=BLOCK_BYTES, cache_bytes_max=1 << 20, readahead_blocks=3
    )
    for offset, body in written:
        msg = records.decode(reader.read_record(offset))
        assert (msg.physical_offset, msg.body, msg.topic) == (offset, body, "TierTopic")
    assert reader.wait_idle(10.0)
    first = reader.statistics()
    last_record_end = written[-1][0] + len(reader.read_record(written[-1][0]))
    blocks_read = sum(
        -(-min(FILE_BYTES, last_record_end - i * FILE_BYTES) // BLOCK_BYTES) for i in range(3)
    )
    # Each block was fetched once, read-ahead fetched some of them in the background (how many
    # depends on how fast the GETs are against the decoding here), several per GET.
    assert first.fetched_bytes <= 3 * FILE_BYTES
    assert first.readahead_fetches > 0
    assert first.fetches < blocks_read  # some GETs brought several blocks
    assert sum(first.fetch_seconds_counts) == first.fetches
    # A second pass is served from the cache alone.
    for offset, body in written:
        assert records.decode(reader.read_record(offset)).body == body
    second = reader.statistics()
    assert (second.fetches, second.fetched_bytes) == (first.fetches, first.fetched_bytes)
    assert second.cache_hits > first.cache_hits


def test_interleaved_consumers_each_get_read_ahead(
    bucket: buckets.S3Bucket, offloaded: tuple[uploading.FileManifestLog, list[tuple[int, bytes]]]
) -> None:
    """Three consumers, one per file, read in turns: each keeps its own stream (the reader used
    to remember one last block, so this pattern fetched every block by itself)."""
    log, written = offloaded
    by_file = [[o for o, _ in written if o // FILE_BYTES == i] for i in range(3)]
    bodies = dict(written)
    reader = reading.TierReader(
        bucket, log.current, block_bytes=BLOCK_BYTES, cache_bytes_max=1 << 20, readahead_blocks=4
    )
    for turn in range(max(len(offsets) for offsets in by_file)):
        for offsets in by_file:
            if turn < len(offsets):
                offset = offsets[turn]
                assert records.decode(reader.read_record(offset)).body == bodies[offset]
    assert reader.wait_idle(10.0)
    statistics = reader.statistics()
    blocks = 3 * FILE_BYTES // BLOCK_BYTES
    assert statistics.fetched_bytes <= 3 * FILE_BYTES
    assert statistics.readahead_fetches > 0
    assert statistics.fetches < blocks


def test_the_disk_cache_survives_a_restart_and_refetches_a_damaged_block(
    bucket: buckets.S3Bucket,
    offloaded: tuple[uploading.FileManifestLog, list[tuple[int, bytes]]],
    tmp_path: Path,
) -> None:
    log, written = offloaded
    directory = tmp_path / "store" / disk_caching.DIR_NAME

    def started() -> reading.TierReader:  # a broker's reader after a (re)start
        return reading.TierReader(
            bucket,
            log.current,
            block_bytes=BLOCK_BYTES,
            cache_bytes_max=1 << 20,
            disk_cache=disk_caching.DiskBlockCache(directory, 1 << 20),
        )

    reader = started()
    for offset, body in written:
        assert records.decode(reader.read_record(offset)).body == body
    assert reader.wait_idle(10.0)
    cold = reader.statistics()
    assert cold.disk_cached_bytes > 0
    reader.close()
    damaged = directory / disk_caching.file_name((0, 0))
    data = bytearray(damaged.read_bytes())
    data[100] ^= 0xFF
    damaged.write_bytes(bytes(data))
    warm_reader = started()
    for offset, body in written:
        assert records.decode(warm_reader.read_record(offset)).body == body
    assert warm_reader.wait_idle(10.0)
    warm = warm_reader.statistics()
    assert warm.disk_cache_discarded == 1
    assert (warm.fetches, warm.fetched_bytes) == (1, BLOCK_BYTES)  # the damaged block only
    assert warm.disk_cache_hits > 0
    assert records.decode(warm_reader.read_record(written[0][0])).body == written[0][1]


def test_a_small_cache_stays_within_its_bound(
    bucket: buckets.S3Bucket, offloaded: tuple[uploading.FileManifestLog, list[tuple[int, bytes]]]
) -> None:
    log, written = offloaded
    reader = reading.TierReader(
        bucket,
        log.current,
        block_bytes=BLOCK_BYTES,
        cache_bytes_max=2 * BLOCK_BYTES,
        readahead_blocks=3,
    )
    for offset, body in written[::7]:
        assert records.decode(reader.read_record(offset)).body == body
        assert reader.statistics().cached_bytes <= 2 * BLOCK_BYTES


def test_offsets_outside_the_tier_and_a_dead_bucket_fail_clearly(
    offloaded: tuple[uploading.FileManifestLog, list[tuple[int, bytes]]],
) -> None:
    log, written = offloaded
    dead = buckets.S3Bucket(
        buckets.BucketConfig(
            endpoint_url=f"http://127.0.0.1:{seaweedfs.free_port()}",
            bucket=seaweedfs.BUCKET,
            access_key="a",
            secret_key="s",
            connect_timeout_s=0.5,
            attempts_max=1,
        )
    )
    reader = reading.TierReader(dead, log.current, block_bytes=BLOCK_BYTES)
    with pytest.raises(
        reading.OffsetNotInTier,
        match=r"offset 196608 is not in the tier \(it holds \[0, 196608\)\)",
    ):
        reader.read(3 * FILE_BYTES, 10)
    with pytest.raises(reading.OffsetNotInTier, match="crosses the end of tier file 0"):
        reader.read(FILE_BYTES - 4, 8)
    with pytest.raises(errors.TierUnavailable, match="Could not connect") as caught:
        reader.read_record(written[0][0])
    assert caught.value.retryable
    assert reader.statistics().cached_bytes == 0  # nothing cached from a failed fetch
