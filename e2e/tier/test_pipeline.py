"""Spark reads offloaded commit-log files straight from a real SeaweedFS bucket.

A real store (the broker's ``MessageStore``, 64 KiB files, two topics and some transactional
prepared records) is copied, then its oldest files are offloaded with the tier's uploader and
deleted locally. ``gannet pipeline export`` over the tier plus the store must write exactly the
rows the export of the copy (all files local) writes; over the bucket alone (manifest read from
the bucket's ``<prefix>/manifest.json``) exactly the rows of the offloaded range; ``gannet
pipeline verify`` finds both clean; ``gannet pipeline rebuild`` over the tier plus the store
writes the consume queues and index files it writes over the copy, byte for byte;
``spark.read.format("gannet")`` with the ``tier*`` and ``storeDir`` options returns the rows it
returns over the copy. An object whose bytes are damaged
(same size, one body byte flipped) is named with its key and byte range by ``verify`` (exit 1),
``export`` and the data source. Spark runs ``local[2]`` in this process.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner, Result

from e2e.tier import seaweedfs
from gannet.node.store.config import StoreConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.log.records import SYSFLAG_TRANSACTION_PREPARED_TYPE, Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.tier import buckets, manifests, naming, uploading

TOPICS = ("Orders", "Audit")
pytestmark = pytest.mark.timeout(600)  # Spark's start and jobs on the busy 2-core machine
MESSAGES = 1200
OFFLOADED = 4


@dataclass
class Offloaded:
    store: Path  # the store, its OFFLOADED oldest files in the tier only
    copy: Path  # the same commit log, every file local
    manifest_path: Path
    manifest: manifests.Manifest
    credentials: Path


def _message(i: int) -> Message:
    topic = TOPICS[i % 5 == 0]
    body = (f"order {i} ".encode() * 30)[: 40 + (i * 53) % 1200]
    properties = {"TAGS": f"tag{i % 3}", "KEYS": f"k{i}"}
    sys_flag = SYSFLAG_TRANSACTION_PREPARED_TYPE if i % 89 == 7 else 0
    return Message(topic, body, queue_id=i % 2, properties=properties, sys_flag=sys_flag)


@pytest.fixture
def offloaded(
    seaweed: seaweedfs.SeaweedS3, bucket: buckets.S3Bucket, prefix: str, tmp_path: Path
) -> Offloaded:
    config = StoreConfig.for_tests(tmp_path / "store")
    with MessageStore(config).open() as store:
        for topic in TOPICS:
            store.topic_configs.put(TopicConfig(topic, read_queue_nums=2, write_queue_nums=2))
        for i in range(MESSAGES):
            store.put_message(_message(i))
        assert store.dispatch_caught_up()
    copy = tmp_path / "copy"
    shutil.copytree(config.commitlog_dir, copy / "commitlog")
    log = uploading.FileManifestLog(tmp_path / "manifest.json", prefix)
    files = sorted(config.commitlog_dir.iterdir())
    assert len(files) > OFFLOADED + 2
    for path in files[:OFFLOADED]:
        assert uploading.offload(path, bucket=bucket, log=log, now_ms=1).deleted
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[default]\naws_access_key_id = {seaweed.access_key}\n"
        f"aws_secret_access_key = {seaweed.secret_key}\n"
    )
    return Offloaded(config.root_dir, copy, log.path, log.current(), credentials)


def tier_args(server: seaweedfs.SeaweedS3, data: Offloaded, *, manifest: bool = True) -> list[str]:
    args = [
        "--tier-bucket", seaweedfs.BUCKET,
        "--tier-endpoint", server.endpoint_url,
        "--tier-credentials-file", str(data.credentials),
        "--tier-prefix", data.manifest.prefix,
    ]  # fmt: skip
    return args + (["--tier-manifest", str(data.manifest_path)] if manifest else [])


def run(*args: str) -> Result:
    from gannet.node.cli.root import main  # noqa: PLC0415

    return CliRunner().invoke(main, ["pipeline", *args, "--master", "local[2]"])


def exported_rows(output: Path) -> list[dict[str, Any]]:
    table = ds.dataset(output, format="parquet", partitioning="hive").to_table()
    return sorted(table.to_pylist(), key=lambda row: row["commit_offset"])


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path (consume queues and index files)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    import gannet.pipeline  # noqa: PLC0415
    from gannet.pipeline import jobs  # noqa: PLC0415

    session = jobs.session("local[2]")
    gannet.pipeline.register(session)
    yield session
    session.stop()  # the JVM's memory back before the next tests of the suite


def local_export(data: Offloaded, tmp_path: Path) -> list[dict[str, Any]]:
    """The rows of the export of the copy (every file local)."""
    local = run("export", str(data.copy), str(tmp_path / "local"))
    assert local.exit_code == 0, local.output
    rows = exported_rows(tmp_path / "local")
    assert {row["topic"] for row in rows} == set(TOPICS)
    assert len(rows) == MESSAGES - len([i for i in range(MESSAGES) if i % 89 == 7])
    return rows


def test_export_and_verify_from_the_bucket_equal_the_local_files(
    seaweed: seaweedfs.SeaweedS3,
    bucket: buckets.S3Bucket,
    offloaded: Offloaded,
    tmp_path: Path,
    spark: Any,
) -> None:
    data = offloaded
    tier_end = data.manifest.end_offset
    assert tier_end is not None
    expected = local_export(data, tmp_path)

    both = run("export", *tier_args(seaweed, data), str(data.store), str(tmp_path / "both"))
    assert both.exit_code == 0, both.output
    assert "4 objects under" in both.output
    assert exported_rows(tmp_path / "both") == expected

    # The bucket alone, its manifest read from <prefix>/manifest.json in the bucket.
    key = f"{data.manifest.prefix}/manifest.json"
    raw = data.manifest_path.read_bytes()
    bucket.put_file(key, data.manifest_path, md5_digest=hashlib.md5(raw).digest())
    alone = run("export", *tier_args(seaweed, data, manifest=False), str(tmp_path / "alone"))
    assert alone.exit_code == 0, alone.output
    in_tier = [row for row in expected if row["commit_offset"] < tier_end]
    assert 0 < len(in_tier) < len(expected)
    assert exported_rows(tmp_path / "alone") == in_tier

    verified = run("verify", str(data.store), *tier_args(seaweed, data))
    assert verified.exit_code == 0, verified.output
    assert "commit log is clean" in verified.output


def test_rebuild_from_the_bucket_equals_the_rebuild_of_the_local_files(
    seaweed: seaweedfs.SeaweedS3, offloaded: Offloaded, tmp_path: Path, spark: Any
) -> None:
    data = offloaded
    sizes = ["--cq-units-per-file", "100", "--index-hash-slots", "64", "--index-items-max", "256"]
    tiered = run(
        "rebuild", str(data.store), str(tmp_path / "r-tier"), *sizes, *tier_args(seaweed, data)
    )
    assert tiered.exit_code == 0, tiered.output
    local = run("rebuild", str(data.copy), str(tmp_path / "r-copy"), *sizes)
    assert local.exit_code == 0, local.output
    assert files_of(tmp_path / "r-tier") == files_of(tmp_path / "r-copy")
    assert any(name.startswith("consumequeue/Orders/") for name in files_of(tmp_path / "r-tier"))


def test_the_data_source_reads_the_bucket_as_the_local_files(
    seaweed: seaweedfs.SeaweedS3, offloaded: Offloaded, tmp_path: Path, spark: Any
) -> None:
    data = offloaded

    def read(**options: str) -> list[Any]:
        frame = spark.read.format("gannet").option("topic", "Orders")
        for name, value in options.items():
            frame = frame.option(name, value)
        return sorted(frame.load().collect(), key=lambda r: (r.queue_id, r.queue_offset))

    from_tier = read(
        tierBucket=seaweedfs.BUCKET,
        tierEndpoint=seaweed.endpoint_url,
        tierCredentialsFile=str(data.credentials),
        tierPrefix=data.manifest.prefix,
        tierManifest=str(data.manifest_path),
        storeDir=str(data.store),
        broker="broker-0",
    )
    from_copy = read(storeDir=str(data.copy), broker="broker-0")
    assert from_tier == from_copy
    expected = [i for i in range(MESSAGES) if TOPICS[i % 5 == 0] == "Orders" and i % 89 != 7]
    assert len(from_tier) == len(expected)
    assert {r.broker for r in from_tier} == {"broker-0"}
    assert [r.body for r in from_tier if r.queue_id == 0] == [
        _message(i).body for i in expected if i % 2 == 0
    ]


def test_a_damaged_object_is_named_by_key_and_range(
    seaweed: seaweedfs.SeaweedS3,
    bucket: buckets.S3Bucket,
    offloaded: Offloaded,
    tmp_path: Path,
    spark: Any,
) -> None:
    data = offloaded
    obj = data.manifest.objects[1]
    key = naming.commitlog_key(data.manifest.prefix, obj.base_offset)
    copy = data.copy / "commitlog" / naming.commitlog_file_name(obj.base_offset)
    raw = bytearray(copy.read_bytes())
    body_byte = raw.index(b"order ", obj.size_bytes // 2)  # in a body near the middle
    raw[body_byte] ^= 0xFF  # (the body CRC covers bodies only: RocketMQ's record format)
    damaged = tmp_path / "damaged"
    damaged.write_bytes(bytes(raw))
    bucket.put_file(key, damaged, md5_digest=hashlib.md5(bytes(raw)).digest())

    verified = run("verify", str(data.store), *tier_args(seaweed, data))
    assert verified.exit_code == 1, verified.output
    assert key in verified.output.replace("\n", "")
    assert "damage found" in verified.output

    exported = run("export", str(data.store), *tier_args(seaweed, data), str(tmp_path / "out"))
    assert exported.exit_code == 1, exported.output
    assert f"commit-log segment {key}: bytes " in exported.output.replace("\n", "")

    frame = (
        spark.read.format("gannet")
        .option("tierBucket", seaweedfs.BUCKET)
        .option("tierEndpoint", seaweed.endpoint_url)
        .option("tierCredentialsFile", str(data.credentials))
        .option("tierPrefix", data.manifest.prefix)
        .option("tierManifest", str(data.manifest_path))
        .option("topic", "Orders")
    )
    with pytest.raises(Exception, match=f"commit-log segment {key}: bytes "):
        frame.load().collect()
