"""The crash-safe offload against a real SeaweedFS server.

A real process offloads three 1 MiB commit-log files and is killed with SIGKILL at every
boundary of the protocol (before upload, mid-upload, after upload, after verify, after the
manifest record, after the local delete), on the first and on the second file. After each crash
the test checks the safety invariant — **every local file that is gone is recorded by the
manifest, and the bucket holds it byte for byte** — then resumes in this process and checks that
nothing was lost or duplicated: three objects, three contiguous manifest entries, no local files.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.tier import seaweedfs
from gannet.node.store.tier import buckets, errors, manifests, naming, uploading

FILE_BYTES = 1 << 20
FILES = 3
REPO = Path(__file__).resolve().parents[2]


def make_files(directory: Path) -> dict[Path, bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[Path, bytes] = {}
    for index in range(FILES):
        data = os.urandom(FILE_BYTES)
        path = directory / naming.commitlog_file_name(index * FILE_BYTES)
        path.write_bytes(data)
        files[path] = data
    return files


def check_safe(
    files: dict[Path, bytes], log_path: Path, bucket: buckets.S3Bucket, prefix: str
) -> None:
    """Every missing local file is in the manifest and in the bucket, byte for byte; every
    manifest entry is in the bucket with its size and MD5."""
    manifest = (
        manifests.decode(log_path.read_bytes()) if log_path.exists() else manifests.Manifest(prefix)
    )
    for obj in manifest.objects:
        head = bucket.head(naming.commitlog_key(prefix, obj.base_offset))
        assert head == buckets.ObjectHead(obj.size_bytes, obj.md5_hex)
    for path, data in files.items():
        if path.exists():
            assert path.read_bytes() == data
            continue
        recorded = manifest.find(naming.parse_commitlog_file_name(path.name))
        assert recorded is not None, f"{path.name} was deleted but the manifest does not record it"
        key = naming.commitlog_key(prefix, recorded.base_offset)
        assert bucket.get_range(key, 0, FILE_BYTES) == data


def check_complete(
    files: dict[Path, bytes], log_path: Path, bucket: buckets.S3Bucket, prefix: str
) -> None:
    manifest = manifests.decode(log_path.read_bytes())
    assert [obj.base_offset for obj in manifest.objects] == [i * FILE_BYTES for i in range(FILES)]
    assert bucket.list_keys(f"{prefix}/") == [
        naming.commitlog_key(prefix, i * FILE_BYTES) for i in range(FILES)
    ]
    assert not any(path.exists() for path in files)
    check_safe(files, log_path, bucket, prefix)


def offload_all(
    files: dict[Path, bytes], bucket: buckets.S3Bucket, log: uploading.ManifestLog
) -> None:
    for path in sorted(files):
        if path.exists():
            uploading.offload(path, bucket=bucket, log=log, now_ms=2)


def test_offload_uploads_verifies_records_then_deletes(
    bucket: buckets.S3Bucket, prefix: str, tmp_path: Path
) -> None:
    files = make_files(tmp_path / "commitlog")
    log = uploading.FileManifestLog(tmp_path / "manifest.json", prefix)
    seen: list[uploading.Boundary] = []
    first = sorted(files)[0]
    done = uploading.offload(first, bucket=bucket, log=log, now_ms=5, on_boundary=seen.append)
    assert seen == list(uploading.Boundary)
    assert done == uploading.Offloaded(
        manifests.TierObject(0, FILE_BYTES, hashlib.md5(files[first]).hexdigest(), 5),
        uploaded=True,
        deleted=True,
    )
    offload_all(files, bucket, log)
    check_complete(files, tmp_path / "manifest.json", bucket, prefix)
    # A second manifest log over the same file sees the same manifest (what a restart sees).
    assert uploading.FileManifestLog(tmp_path / "manifest.json", prefix).current() == log.current()


@pytest.mark.parametrize("occurrence", [1, 2])
@pytest.mark.parametrize("boundary", list(uploading.Boundary), ids=lambda b: b.value)
def test_a_crash_at_any_boundary_loses_nothing_and_duplicates_nothing(
    seaweed: seaweedfs.SeaweedS3,
    bucket: buckets.S3Bucket,
    prefix: str,
    tmp_path: Path,
    boundary: uploading.Boundary,
    occurrence: int,
) -> None:
    files = make_files(tmp_path / "commitlog")
    log_path = tmp_path / "manifest.json"
    config = tmp_path / "child.json"
    bucket_config = seaweed.bucket_config(seaweedfs.BUCKET)
    config.write_text(
        json.dumps(
            {
                "bucket": {
                    "endpoint_url": bucket_config.endpoint_url,
                    "bucket": bucket_config.bucket,
                    "access_key": bucket_config.access_key,
                    "secret_key": bucket_config.secret_key,
                },
                "manifest": str(log_path),
                "prefix": prefix,
                "files": [str(path) for path in sorted(files)],
                "crash_at": boundary.value,
                "occurrence": occurrence,
            }
        )
    )
    child = subprocess.run(
        [sys.executable, "-m", "e2e.tier.offload_child", str(config)],
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    check_safe(files, log_path, bucket, prefix)
    offload_all(files, bucket, uploading.FileManifestLog(log_path, prefix))
    check_complete(files, log_path, bucket, prefix)


class _WrongBodyBucket:
    """A real bucket whose PUT sends other bytes than the file's (a damaged upload that the
    server's Content-MD5 check would normally catch, here sent without it)."""

    def __init__(self, real: buckets.S3Bucket, tmp_path: Path) -> None:
        self.real = real
        self.tmp_path = tmp_path

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def put_file(self, key: str, path: Path, *, md5_digest: bytes, on_read: object = None) -> str:
        other = self.tmp_path / "other"
        other.write_bytes(b"not the file")
        return self.real.put_file(key, other, md5_digest=hashlib.md5(b"not the file").digest())


def test_an_object_that_does_not_match_is_never_recorded_and_the_file_stays(
    bucket: buckets.S3Bucket, prefix: str, tmp_path: Path
) -> None:
    files = make_files(tmp_path / "commitlog")
    log = uploading.FileManifestLog(tmp_path / "manifest.json", prefix)
    first = sorted(files)[0]
    wrong: buckets.Bucket = _WrongBodyBucket(bucket, tmp_path)  # type: ignore[assignment]
    with pytest.raises(errors.UploadNotVerified, match="is not the file's MD5"):
        uploading.offload(first, bucket=wrong, log=log, now_ms=1)
    assert first.read_bytes() == files[first]
    assert log.current().objects == ()
    # The next attempt with a working upload replaces the wrong object and completes.
    offload_all(files, bucket, log)
    check_complete(files, tmp_path / "manifest.json", bucket, prefix)


def test_an_unreachable_bucket_keeps_the_file_and_the_manifest(prefix: str, tmp_path: Path) -> None:
    files = make_files(tmp_path / "commitlog")
    log = uploading.FileManifestLog(tmp_path / "manifest.json", prefix)
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
    first = sorted(files)[0]
    with pytest.raises(errors.TierUnavailable) as caught:
        uploading.offload(first, bucket=dead, log=log, now_ms=1)
    assert caught.value.retryable
    assert first.read_bytes() == files[first]
    assert log.current().objects == ()
    assert not (tmp_path / "manifest.json").exists()


def test_a_local_file_that_differs_from_the_manifest_is_kept(
    bucket: buckets.S3Bucket, prefix: str, tmp_path: Path
) -> None:
    files = make_files(tmp_path / "commitlog")
    log = uploading.FileManifestLog(tmp_path / "manifest.json", prefix)
    first = sorted(files)[0]
    uploading.offload(first, bucket=bucket, log=log, now_ms=1, delete=False)
    first.write_bytes(b"x" * FILE_BYTES)  # same size, other bytes
    with pytest.raises(errors.ManifestConflict, match="keeping it"):
        uploading.delete_local(first, log.current())
    assert first.exists()
