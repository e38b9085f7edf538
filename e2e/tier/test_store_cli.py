"""``gannet store inspect|verify|get`` over a tiered store, against a real SeaweedFS bucket.

The store of ``test_store_reads.written`` (two of its files offloaded and deleted locally) is
inspected and verified with the ``--tier-*`` options: the offloaded files are listed beside the
local ones, every object matches the manifest (``--deep``: every record walked), an offloaded
message is printed; then the bucket is damaged (an object replaced, one deleted, a stray one
added) and ``verify`` exits 1 naming each; a dead endpoint exits 4, a wrong secret 5, a missing
option 2.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from click.testing import CliRunner, Result

from e2e.tier import seaweedfs
from e2e.tier.stores import Written, tier_offsets
from gannet.node.cli.root import main
from gannet.node.store.tier import buckets, naming


def tier_args(
    server: seaweedfs.SeaweedS3,
    written: Written,
    tmp_path: Path,
    *,
    endpoint: str | None = None,
    secret: str | None = None,
) -> list[str]:
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[default]\n"
        f"aws_access_key_id = {server.access_key}\n"
        f"aws_secret_access_key = {secret or server.secret_key}\n"
    )
    return [
        "--tier-bucket",
        seaweedfs.BUCKET,
        "--tier-endpoint",
        endpoint or server.endpoint_url,
        "--tier-credentials-file",
        str(credentials),
        "--tier-prefix",
        written.log.current().prefix,
        "--tier-manifest",
        str(written.log.path),
    ]


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_inspect_verify_and_get_understand_a_tiered_store(
    seaweed: seaweedfs.SeaweedS3, bucket: buckets.S3Bucket, written: Written, tmp_path: Path
) -> None:
    store_dir = str(written.config.root_dir)
    args = tier_args(seaweed, written, tmp_path)
    manifest = written.log.current()
    file_bytes = written.config.commitlog_file_size_bytes

    inspected = run("store", "inspect", store_dir, *args, "-o", "json")
    assert inspected.exit_code == 0, inspected.output
    tier = json.loads(inspected.output)["tier"]
    assert [f["name"] for f in tier["files"]] == [
        naming.commitlog_file_name(0),
        naming.commitlog_file_name(file_bytes),
    ]
    assert [f["local"] for f in tier["files"]] == [False, False]
    assert (tier["start_offset"], tier["end_offset"]) == (0, 2 * file_bytes)
    assert tier["readable_from"] == 0
    assert tier["objects_not_in_manifest"] == []
    table = run("store", "inspect", store_dir, *args)
    assert table.exit_code == 0, table.output
    assert f"{seaweedfs.BUCKET}/{manifest.prefix}/commitlog/" in table.output
    assert naming.commitlog_file_name(file_bytes) in table.output

    verified = run("store", "verify", store_dir, *args, "--deep", "-o", "json")
    assert verified.exit_code == 0, verified.output
    report = json.loads(verified.output)
    assert report["clean"] is True
    objects = report["tier"]["objects"]
    assert [o["status"] for o in objects] == ["ok", "ok"]
    assert sum(o["records_ok"] for o in objects) == len(tier_offsets(written))

    first = tier_offsets(written)[0]
    got = run("store", "get", store_dir, "--offset", str(first), *args, "-o", "json")
    assert got.exit_code == 0, got.output
    (message,) = json.loads(got.output)
    assert message["commit_offset"] == first
    assert run("store", "get", store_dir, "--offset", str(first)).exit_code == 1  # no tier

    # Damage: object 1 replaced by other bytes, object 0 deleted, a stray object added.
    objects_ = manifest.objects
    other = tmp_path / "other"
    other.write_bytes(bytes(objects_[1].size_bytes))
    key1 = naming.commitlog_key(manifest.prefix, objects_[1].base_offset)
    bucket.put_file(key1, other, md5_digest=hashlib.md5(other.read_bytes()).digest())
    bucket.delete(naming.commitlog_key(manifest.prefix, objects_[0].base_offset))
    stray = naming.commitlog_key(manifest.prefix, 2 * file_bytes)
    bucket.put_file(stray, other, md5_digest=hashlib.md5(other.read_bytes()).digest())
    damaged = run("store", "verify", store_dir, *args, "-o", "json")
    assert damaged.exit_code == 1, damaged.output
    report = json.loads(damaged.output)
    statuses = [o["status"] for o in report["tier"]["objects"]]
    assert statuses[0] == "missing from the bucket"
    assert "ETag" in statuses[1]
    assert report["tier"]["objects_not_in_manifest"] == [stray]
    assert report["clean"] is False


def test_bucket_errors_and_bad_options_exit_with_their_codes(
    seaweed: seaweedfs.SeaweedS3, written: Written, tmp_path: Path
) -> None:
    store_dir = str(written.config.root_dir)
    dead = f"http://127.0.0.1:{seaweedfs.free_port()}"
    unreachable = run(
        "store", "verify", store_dir, *tier_args(seaweed, written, tmp_path, endpoint=dead)
    )
    assert unreachable.exit_code == 4, unreachable.output
    assert "unreachable" in unreachable.output
    refused = run(
        "store", "verify", store_dir, *tier_args(seaweed, written, tmp_path, secret="wrong")
    )
    assert refused.exit_code == 5, refused.output
    partial = run("store", "inspect", store_dir, "--tier-bucket", seaweedfs.BUCKET)
    assert partial.exit_code == 2
    assert "--tier-endpoint" in partial.output
    assert run("store", "verify", store_dir, "--deep").exit_code == 2
    # No --tier-manifest: the bucket's copy is read; the written store's loop wrote none.
    without = tier_args(seaweed, written, tmp_path)[:-2]
    absent = run("store", "verify", store_dir, *without)
    assert absent.exit_code == 2, absent.output
    where = f"s3://{seaweedfs.BUCKET}/{naming.manifest_key(written.log.current().prefix)}"
    assert f"no manifest in the bucket at {where}; pass --tier-manifest" in " ".join(
        absent.output.split()
    ), absent.output
    alone = run("store", "inspect", store_dir, "--tier-manifest", str(written.log.path))
    assert alone.exit_code == 2, alone.output
    assert "--tier-manifest needs the other --tier-* options" in alone.output
