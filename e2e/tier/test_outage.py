"""A bucket outage: the S3 server is killed and restarted on the same endpoint and data.

While it is down an offload fails retryably and keeps the file and the manifest, and a read of an
offloaded offset fails retryably and caches nothing; after the restart both complete. Uses its
own server (the session's keeps serving the other tests), so it costs one more start-up.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.tier import seaweedfs
from gannet.node.store.tier import buckets, errors, naming, reading, uploading

FILE_BYTES = 256 * 1024


@pytest.fixture
def own_server() -> Iterator[seaweedfs.SeaweedS3]:
    if not seaweedfs.weed_binary().exists():
        pytest.skip(
            f"{seaweedfs.weed_binary()} is missing: run `python -m e2e.tier.seaweedfs build`"
        )
    with seaweedfs.SeaweedS3() as server:
        yield server


def test_offload_and_reads_fail_retryably_while_down_and_complete_after(
    own_server: seaweedfs.SeaweedS3, tmp_path: Path
) -> None:
    bucket = buckets.S3Bucket(
        own_server.bucket_config(seaweedfs.BUCKET, attempts_max=1, timeout_s=1.0)
    )
    directory = tmp_path / "commitlog"
    directory.mkdir()
    contents = {}
    for index in range(2):
        path = directory / naming.commitlog_file_name(index * FILE_BYTES)
        contents[path] = bytes([index + 1]) * FILE_BYTES
        path.write_bytes(contents[path])
    first, second = sorted(contents)
    log = uploading.FileManifestLog(tmp_path / "manifest.json", "outage/g0")
    uploading.offload(first, bucket=bucket, log=log, now_ms=1)
    reader = reading.TierReader(bucket, log.current, block_bytes=64 * 1024)

    own_server.kill()
    with pytest.raises(errors.TierUnavailable) as caught:
        uploading.offload(second, bucket=bucket, log=log, now_ms=2)
    assert caught.value.retryable
    assert second.read_bytes() == contents[second]
    assert [obj.base_offset for obj in log.current().objects] == [0]
    with pytest.raises(errors.TierUnavailable):
        reader.read(100, 10)
    assert reader.statistics().cached_bytes == 0

    own_server.start()
    assert reader.read(100, 10) == contents[first][100:110]
    uploading.offload(second, bucket=bucket, log=log, now_ms=3)
    assert not second.exists()
    assert reader.read(FILE_BYTES + 5, 4) == contents[second][5:9]
    assert [obj.base_offset for obj in log.current().objects] == [0, FILE_BYTES]
