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
from gannet.node.store.tier import buckets, errors, naming, reading, uploading

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
    first = reader.statistics()
    last_record_end = written[-1][0] + len(reader.read_record(written[-1][0]))
    blocks_read = sum(
        -(-min(FILE_BYTES, last_record_end - i * FILE_BYTES) // BLOCK_BYTES) for i in range(3)
    )
    # Each block was fetched once, and read-ahead fetched several per GET.
    assert first.fetched_bytes <= 3 * FILE_BYTES
    assert first.cache_misses < blocks_read
    assert first.fetches == first.cache_misses
    assert first.fetches <= -(-blocks_read // 4) + 3  # about one GET per 4 blocks (+1 per file)
    # A second pass is served from the cache alone.
    for offset, body in written:
        assert records.decode(reader.read_record(offset)).body == body
    second = reader.statistics()
    assert (second.fetches, second.fetched_bytes) == (first.fetches, first.fetched_bytes)
    assert second.cache_hits > first.cache_hits


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
