"""A real ``gannet broker run`` offloading to a real SeaweedFS, SIGKILLed mid-offload.

The broker runs with 1 MiB commit-log files, one upload per pass every 0.2 s and no local
copy kept. The official RocketMQ Python client writes about 8 MiB (every acknowledged body
remembered) while files are offloaded only after an hour; the broker restarts with
``--tier-offload-after-s 0`` and is SIGKILLed while the manifest grows (twice, at different
points of the offload), restarted, and left to finish. Then:

- the tier is contiguous from offset 0, and every commit-log file deleted locally is in the
  manifest and in the bucket byte for byte (MD5 and size of the manifest; the bytes read back);
- the bucket holds exactly the manifest's objects (no duplicates, no orphans);
- the records of bucket objects + local files hold every acknowledged body exactly once, and a
  consumer group (the official SimpleConsumer, created before the sends) receives every
  acknowledged body exactly once through the broker, which reads the offloaded files from the
  bucket (its store's tier reader follows the broker's manifest log);
- the broker, stopped cleanly, leaves a local store ``gannet store verify`` finds clean;
- ``/metrics`` counted the offloaded files and no failure.

Then the broker restarts with ``--tier-remote-bytes-max`` of three files: the oldest objects
are expired through the manifest and then deleted from the bucket (exactly the manifest's
objects stay), QueryOffset BEGINNING moves up to the tier's new start, the manifest's copy in
the bucket equals the broker's manifest, and ``gannet store verify --deep`` without
``--tier-manifest`` (reading that copy) passes, and exits 1 once an object is overwritten with
damaged bytes through boto3.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import botocore.config
import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from e2e.tier import seaweedfs
from gannet.node.cli import calls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.log import layout, records
from gannet.node.store.tier import applied, buckets, manifests, naming
from gannet.node.testing import small_stores

pytestmark = pytest.mark.timeout(240)

TOPIC = "TierTopic"
GROUP = "GTier"
BODY_BYTES = 16 * 1024
MESSAGES = 500  # ~8 MiB of records: 7 sealed 1 MiB files
WAIT_S = 60.0
CLIENT_ID = (("x-mq-client-id", "tests@1@0@tier"),)


class BrokerProcess:
    """One ``gannet broker run`` with a tier, started and killed by the test."""

    def __init__(self, data_dir: Path, seaweed: seaweedfs.SeaweedS3, prefix: str) -> None:
        self.data_dir = data_dir
        self.credentials = data_dir.parent / "tier-credentials"
        self.credentials.write_text(
            f"aws_access_key_id = {seaweed.access_key}\n"
            f"aws_secret_access_key = {seaweed.secret_key}\n"
        )
        self.metrics_port = seaweedfs.free_port()
        self.args = [
            sys.executable, "-m", "gannet.node.cli", "broker", "run",
            "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", "--file-size-mb", "1",
            *small_stores.INDEX_ARGS, "--flush", "async",
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
            "--tier-endpoint", seaweed.endpoint_url, "--tier-bucket", seaweedfs.BUCKET,
            "--tier-prefix", prefix, "--tier-credentials-file", str(self.credentials),
            "--tier-offload-after-s", "3600", "--tier-uploads-per-pass", "1",
            "--tier-pass-interval-s", "0.2", "--auto-create-topics", "--event-loop", "asyncio",
        ]  # fmt: skip
        self.proc: subprocess.Popen[str] | None = None
        self.endpoint = ""
        self.output: list[str] = []

    def offload_now(self) -> None:
        """From the next start on, offload every sealed file at once."""
        self.args[self.args.index("--tier-offload-after-s") + 1] = "0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            if "broker serving" in line:
                break
        match = re.search(r"on (127\.0\.0\.1:\d+)", "".join(self.output[-5:]))
        assert match, "".join(self.output)
        self.endpoint = match.group(1)
        os.set_blocking(self.proc.stdout.fileno(), False)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> str:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rest, _ = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, rest
        return rest

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return str(answer.read().decode())


def _manifest(data_dir: Path) -> manifests.Manifest | None:
    path = applied.manifest_path(data_dir)
    return manifests.decode(path.read_bytes()) if path.exists() else None


def _objects(data_dir: Path) -> int:
    manifest = _manifest(data_dir)
    return len(manifest.objects) if manifest is not None else 0


def _await(condition: object, what: str, timeout_s: float = WAIT_S) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)  # polling a file another process writes, with a deadline


def _send(endpoint: str, count: int) -> list[bytes]:
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    producer = Producer(config, (TOPIC,))
    producer.startup()
    acknowledged = []
    try:
        for number in range(count):
            message = Message()
            message.topic = TOPIC
            message.body = f"m{number:06d}:".encode() + bytes([number % 251]) * BODY_BYTES
            producer.send(message)
            acknowledged.append(message.body)
    finally:
        producer.shutdown()
    return acknowledged


def _consume(endpoint: str, count: int) -> list[bytes]:
    """Every body the group receives (acked), until ``count`` or two empty receives."""
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=30)
    consumer = SimpleConsumer(config, GROUP, {TOPIC: FilterExpression()}, await_duration=1)
    consumer.startup()
    got: list[bytes] = []
    empty = 0
    try:
        while len(got) < count and empty < 2:
            batch = consumer.receive(32, 30)
            empty = 0 if batch else empty + 1
            for message in batch:
                got.append(message.body)
                consumer.ack(message)
    finally:
        consumer.shutdown()
    return got


def _bodies(data: bytes) -> Iterator[bytes]:
    """The bodies of the records of one commit-log file's bytes, up to its BLANK or zeros."""
    position = 0
    while position + layout.BLANK.size <= len(data):
        total, magic = layout.BLANK.unpack_from(data, position)
        if total <= 0 or magic == layout.MAGIC_BLANK:
            return
        message = records.decode(data, position)
        if message.topic == TOPIC:
            yield message.body
        position += total


@pytest.fixture
def broker(tmp_path: Path, seaweed: seaweedfs.SeaweedS3, prefix: str) -> Iterator[BrokerProcess]:
    running = BrokerProcess(tmp_path / "store", seaweed, prefix)
    yield running
    if running.proc is not None and running.proc.poll() is None:
        running.proc.kill()
        running.proc.wait(timeout=30)


def test_broker_killed_mid_offload_loses_nothing_and_duplicates_nothing(
    broker: BrokerProcess, seaweed: seaweedfs.SeaweedS3, bucket: buckets.S3Bucket, prefix: str
) -> None:
    broker.start()
    with calls.channel(broker.endpoint) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        stub.CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=2), timeout=10)
        stub.CreateGroup(admin_pb2.CreateGroupRequest(name=GROUP), timeout=10)
    acknowledged = _send(broker.endpoint, MESSAGES)
    commitlog = broker.data_dir / "commitlog"
    sealed = len(list(commitlog.iterdir())) - 1
    assert sealed >= 6, sorted(p.name for p in commitlog.iterdir())
    assert _objects(broker.data_dir) == 0, "offloaded before the files were an hour old"
    broker.stop()
    broker.offload_now()
    broker.start()

    for kill_at in (2, 4):  # SIGKILL while the offload is under way, twice
        _await(lambda n=kill_at: _objects(broker.data_dir) >= n, f"{kill_at} files offloaded")
        broker.kill()
        assert _objects(broker.data_dir) < sealed, "killed too late: nothing left to offload"
        broker.start()
    _await(lambda: _objects(broker.data_dir) == sealed, f"all {sealed} sealed files offloaded")
    _await(lambda: len(list(commitlog.iterdir())) == 1, "offloaded files deleted locally")

    manifest = _manifest(broker.data_dir)
    assert manifest is not None
    assert manifest.prefix == prefix
    assert manifest.start_offset == 0, "the tier starts at the first file"
    local = sorted(commitlog.iterdir())
    assert [p.name for p in local] == [naming.commitlog_file_name(manifest.end_offset or 0)]
    keys = sorted(bucket.list_keys(prefix + "/commitlog/"))
    assert keys == [naming.commitlog_key(prefix, obj.base_offset) for obj in manifest.objects], (
        "the bucket holds exactly the manifest's objects"
    )
    found: list[bytes] = []
    for obj in manifest.objects:
        data = bucket.get_range(naming.commitlog_key(prefix, obj.base_offset), 0, obj.size_bytes)
        assert len(data) == obj.size_bytes == 1024 * 1024
        assert hashlib.md5(data, usedforsecurity=False).hexdigest() == obj.md5_hex
        found.extend(_bodies(data))
    found.extend(_bodies(local[0].read_bytes()))
    assert len(found) == len(set(found)), "a body is stored twice"
    missing = set(acknowledged) - set(found)
    assert not missing, f"{len(missing)} acknowledged messages are neither local nor in the tier"

    # Consumed through the broker: the records below the local start come from the tier.
    consumed = _consume(broker.endpoint, len(acknowledged))
    assert sorted(consumed) == sorted(acknowledged), "the broker serves every message once"

    figures = broker.metrics()
    assert re.search(
        r'gannet_tier_offload_failures_total\{broker="broker-a",reason="unavailable"\} 0\.0',
        figures,
    )
    offloaded = re.search(r"gannet_tier_offloaded_files_total\{[^}]*\} (\d+)", figures)
    assert offloaded, figures
    assert int(offloaded.group(1)) >= 1, figures
    broker.stop()
    verify = subprocess.run(
        [sys.executable, "-m", "gannet.node.cli", "store", "verify", str(broker.data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    _expire_and_verify_from_the_bucket(broker, seaweed, bucket, prefix)


def _counter(figures: str, name: str) -> float:
    """The value of the one sample of counter ``name`` in a scrape (-1: absent)."""
    found = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", figures, re.M)
    return float(found.group(1)) if found else -1.0


def _store_verify(broker: BrokerProcess, prefix: str) -> subprocess.CompletedProcess[str]:
    """``gannet store verify --deep`` over the broker's store and tier, the manifest read from
    the copy the broker keeps in the bucket (no ``--tier-manifest``)."""
    args = [
        sys.executable, "-m", "gannet.node.cli", "store", "verify", str(broker.data_dir),
        "--deep", "--tier-bucket", seaweedfs.BUCKET,
        "--tier-endpoint", broker.args[broker.args.index("--tier-endpoint") + 1],
        "--tier-credentials-file", str(broker.credentials), "--tier-prefix", prefix,
    ]  # fmt: skip
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def _expire_and_verify_from_the_bucket(
    broker: BrokerProcess, seaweed: seaweedfs.SeaweedS3, bucket: buckets.S3Bucket, prefix: str
) -> None:
    """Remote retention in the real broker, restarted with ``--tier-remote-bytes-max`` of three
    files: the tier keeps its three newest objects, the older ones are deleted from the bucket
    after the manifest forgot them, QueryOffset BEGINNING moves up, the manifest's copy in the
    bucket equals the broker's manifest, and ``gannet store verify --deep`` reading that copy
    passes — until an object is overwritten with damaged bytes (boto3): then it exits 1 naming
    it."""
    index = broker.args.index("--tier-pass-interval-s")
    broker.args[index:index] = ["--tier-remote-bytes-max", str(3 * 1024 * 1024)]
    broker.start()

    def settled() -> bool:
        manifest = _manifest(broker.data_dir)
        return (
            manifest is not None
            and len(manifest.objects) == 3
            and (manifest.start_offset or 0) > 0
            and len(list((broker.data_dir / "commitlog").iterdir())) == 1
        )

    _await(settled, "offloaded, then the oldest expired down to three objects")

    def earliest(queue_id: int) -> int:
        request = service_pb2.QueryOffsetRequest(query_offset_policy=definition_pb2.BEGINNING)
        request.message_queue.topic.name = TOPIC
        request.message_queue.id = queue_id
        with calls.channel(broker.endpoint) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            reply = stub.QueryOffset(request, metadata=CLIENT_ID, timeout=10)
        assert reply.status.code == definition_pb2.OK, reply.status.message
        return int(reply.offset)

    _await(
        lambda: earliest(0) > 0 and earliest(1) > 0,
        "QueryOffset BEGINNING follows the tier's start after the expiry",
    )
    settled_manifest = _manifest(broker.data_dir)
    assert settled_manifest is not None
    expired_count = (settled_manifest.start_offset or 0) // (1024 * 1024)  # 1 MiB files from 0

    def counted() -> bool:  # the deletes and the copy follow the expiry's commit
        figures = broker.metrics()
        return (
            _counter(figures, "gannet_tier_expired_objects_total") == expired_count
            and _counter(figures, "gannet_tier_manifest_copies_total") >= 1
        )

    _await(counted, f"{expired_count} expired objects deleted and counted, the copy written")
    broker.stop()
    manifest = _manifest(broker.data_dir)
    assert manifest == settled_manifest
    assert sorted(bucket.list_keys(prefix + "/commitlog/")) == [
        naming.commitlog_key(prefix, obj.base_offset) for obj in manifest.objects
    ], "the expired objects were deleted, the others kept"
    copy = bucket.get_bytes(naming.manifest_key(prefix))
    assert copy is not None
    assert manifests.decode(copy) == manifest, "the bucket's copy is current"
    assert expired_count >= 2

    clean = _store_verify(broker, prefix)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    damaged = manifest.objects[1]
    key = naming.commitlog_key(prefix, damaged.base_offset)
    data = bytearray(bucket.get_range(key, 0, damaged.size_bytes))
    data[len(data) // 2] ^= 0xFF
    client = boto3.client(
        "s3",
        endpoint_url=seaweed.endpoint_url,
        aws_access_key_id=seaweed.access_key,
        aws_secret_access_key=seaweed.secret_key,
        region_name="us-east-1",
        config=botocore.config.Config(s3={"addressing_style": "path"}),
    )
    client.put_object(Bucket=seaweedfs.BUCKET, Key=key, Body=bytes(data))
    broken = _store_verify(broker, prefix)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert naming.commitlog_file_name(damaged.base_offset) in broken.stdout, broken.stdout
