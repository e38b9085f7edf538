"""The S3 edge against a real SeaweedFS server: objects, ranges, and errors by kind."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from e2e.tier import seaweedfs
from gannet.node.store.tier import buckets, errors


def test_put_head_range_list_delete(bucket: buckets.S3Bucket, prefix: str, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    path = tmp_path / "00000000000001048576"
    path.write_bytes(data)
    digest = hashlib.md5(data).digest()
    key = f"{prefix}/commitlog/00000000000001048576"
    assert bucket.head(key) is None
    assert bucket.put_file(key, path, md5_digest=digest) == digest.hex()
    assert bucket.head(key) == buckets.ObjectHead(len(data), digest.hex())
    assert bucket.get_range(key, 1000, 300) == data[1000:1300]
    assert bucket.get_range(key, len(data) - 10, 10) == data[-10:]
    assert bucket.list_keys(f"{prefix}/") == [key]
    assert bucket.list_keys(f"{prefix}-other/") == []
    bucket.delete(key)
    assert bucket.head(key) is None


def test_a_body_whose_md5_differs_is_rejected_by_the_server(
    bucket: buckets.S3Bucket, prefix: str, tmp_path: Path
) -> None:
    path = tmp_path / "00000000000000000000"
    path.write_bytes(b"the bytes on disk")
    with pytest.raises(errors.UploadNotVerified, match="BadDigest"):
        bucket.put_file(f"{prefix}/k", path, md5_digest=hashlib.md5(b"other bytes").digest())
    assert bucket.head(f"{prefix}/k") is None


def test_wrong_credentials_are_named(
    seaweed: seaweedfs.SeaweedS3, bucket: buckets.S3Bucket
) -> None:
    config = seaweed.bucket_config(bucket.config.bucket)
    wrong = buckets.S3Bucket(
        buckets.BucketConfig(
            endpoint_url=config.endpoint_url,
            bucket=config.bucket,
            access_key=config.access_key,
            secret_key="not-the-secret",
        )
    )
    with pytest.raises(
        errors.TierCredentialsRejected, match=r"SignatureDoesNotMatch.*check the tier Secret"
    ):
        wrong.check_access()
    with pytest.raises(errors.TierCredentialsRejected, match="403"):
        wrong.head("any")
    bucket.check_access()  # the right ones pass


def test_an_unreachable_endpoint_fails_retryable_within_its_bound() -> None:
    port = seaweedfs.free_port()  # nothing listens: connections are refused
    dead = buckets.S3Bucket(
        buckets.BucketConfig(
            endpoint_url=f"http://127.0.0.1:{port}",
            bucket="b",
            access_key="a",
            secret_key="s",
            connect_timeout_s=0.5,
            read_timeout_s=0.5,
            attempts_max=2,
        )
    )
    started = time.monotonic()
    with pytest.raises(errors.TierUnavailable, match="Could not connect") as caught:
        dead.get_range("gannet/c1/g0/commitlog/00000000000000000000", 0, 10)
    assert caught.value.retryable
    # 2 attempts x (0.5 s connect) plus botocore's backoff between them (< 1 s each).
    assert time.monotonic() - started < 5.0


def test_a_missing_bucket_is_a_rejected_request_not_an_outage(seaweed: seaweedfs.SeaweedS3) -> None:
    missing = buckets.S3Bucket(seaweed.bucket_config("no-such-bucket"))
    with pytest.raises(errors.TierRequestRejected, match="NoSuchBucket") as caught:
        missing.check_access()
    assert not caught.value.retryable


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"endpoint_url": "127.0.0.1:8333"}, "not an http"),
        ({"bucket": ""}, "bucket name is empty"),
        ({"attempts_max": 0}, "attempts_max 0 < 1"),
    ],
)
def test_bad_bucket_configs_are_named(kwargs: dict[str, object], problem: str) -> None:
    base: dict[str, object] = {
        "endpoint_url": "http://127.0.0.1:1",
        "bucket": "b",
        "access_key": "a",
        "secret_key": "s",
    }
    with pytest.raises(ValueError, match=problem):
        buckets.BucketConfig(**{**base, **kwargs})  # type: ignore[arg-type]
