"""What the uploader refuses before it talks to any bucket (no server needed: the bucket here
points at a port nothing listens on, so a call to it would fail with TierUnavailable instead)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gannet.node.store.tier import buckets, errors, manifests, naming, uploading

PREFIX = "gannet/c1/g0"


def dead_bucket() -> buckets.S3Bucket:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return buckets.S3Bucket(
        buckets.BucketConfig(
            endpoint_url=f"http://127.0.0.1:{port}",
            bucket="b",
            access_key="a",
            secret_key="s",
            attempts_max=1,
        )
    )


def test_a_file_that_does_not_continue_the_tier_is_refused_before_upload(tmp_path: Path) -> None:
    log = uploading.FileManifestLog(tmp_path / "manifest.json", PREFIX)
    log.propose(manifests.RecordObject(manifests.TierObject(0, 100, "0" * 32, 1)))
    path = tmp_path / naming.commitlog_file_name(200)
    path.write_bytes(b"x" * 100)
    with pytest.raises(
        errors.ManifestConflict, match="does not continue the tier, which ends at 100"
    ):
        uploading.offload(path, bucket=dead_bucket(), log=log, now_ms=1)
    assert path.exists()


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    log = uploading.FileManifestLog(tmp_path / "manifest.json", PREFIX)
    path = tmp_path / naming.commitlog_file_name(0)
    path.write_bytes(b"")
    with pytest.raises(errors.ManifestConflict, match="is empty"):
        uploading.offload(path, bucket=dead_bucket(), log=log, now_ms=1)


def test_a_recorded_file_is_deleted_without_the_bucket(tmp_path: Path) -> None:
    """Resuming after a crash between record and delete needs no bucket at all."""
    path = tmp_path / naming.commitlog_file_name(0)
    path.write_bytes(b"sealed bytes")
    log = uploading.FileManifestLog(tmp_path / "manifest.json", PREFIX)
    md5 = uploading.file_md5(path).hex()
    log.propose(manifests.RecordObject(manifests.TierObject(0, len(b"sealed bytes"), md5, 1)))
    done = uploading.offload(path, bucket=dead_bucket(), log=log, now_ms=2)
    assert (done.uploaded, done.deleted) == (False, True)
    assert not path.exists()


def test_a_manifest_for_another_prefix_is_refused(tmp_path: Path) -> None:
    uploading.FileManifestLog(tmp_path / "manifest.json", PREFIX).propose(
        manifests.RecordObject(manifests.TierObject(0, 1, "0" * 32, 1))
    )
    with pytest.raises(errors.ManifestConflict, match="is for prefix 'gannet/c1/g0', not 'other'"):
        uploading.FileManifestLog(tmp_path / "manifest.json", "other")
