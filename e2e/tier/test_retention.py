"""Remote retention, the orphan sweep and the manifest's bucket copy, against a real SeaweedFS.

The broker's own tier loop (:class:`~gannet.node.store.tier.offloading.Offloader` over
:class:`~gannet.node.broker.tiering.StoreSide`, the single node's manifest log) runs pass by
pass on a real store of 64 KiB commit-log files, with a clock the test moves:

- offload, then remote retention by bytes: the manifest forgets the oldest objects first and
  only then are they deleted, so the bucket ends holding exactly the manifest's objects; the
  newest object stays; reads of expired offsets find nothing (a cleaned record), the queues'
  minimum offsets (what QueryOffset BEGINNING and GET_MIN_OFFSET answer) move up to the first
  message at the tier's new start, and a pull from there reads the tier; the manifest's copy
  in the bucket equals the manifest after every change; the counters count it;
- the sweep deletes unrecorded objects below the tier's end and old ones past it, and leaves
  the next upload's object, young objects past the end and keys that are not commit-log names;
- a real process SIGKILLed between the expiry's commit and the deletes, and between two
  deletes: the manifest never names a deleted object, and after a restart (whose first pass
  sweeps) the bucket holds exactly the manifest's objects.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.tier import seaweedfs
from e2e.tier.retention_child import offloader
from gannet.node.broker.tiering import ManifestSource
from gannet.node.store.config import StoreConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.tier import (
    buckets,
    errors,
    manifest_copy,
    manifests,
    naming,
    reading,
    routing,
)

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
TOPIC = "TierRetention"
MESSAGES = 1200
FILE_BYTES = 64 * 1024
HOUR_MS = 3_600_000


def now_ms() -> int:
    """A second from now: the files just written are old enough to offload at once, and the
    bucket's objects' ages (the sweep's grace period) count from the same clock."""
    return time.time_ns() // 1_000_000 + 1000


@dataclass
class Filled:
    config: StoreConfig
    offsets: dict[int, list[int]]  # queue id -> commit offsets in queue order


def fill(root: Path) -> Filled:
    config = StoreConfig.for_tests(root)
    offsets: dict[int, list[int]] = {0: [], 1: []}
    with MessageStore(config).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=2, write_queue_nums=2))
        for i in range(MESSAGES):
            body = f"retained message {i} ".encode() * (1 + i % 30)
            result = store.put_message(Message(TOPIC, body, queue_id=i % 2))
            offsets[i % 2].append(result.wrote_offset)
        assert store.dispatch_caught_up()
        assert len(store.commitlog.files.files) >= 7
    return Filled(config, offsets)


def commitlog_keys(bucket: buckets.S3Bucket, prefix: str) -> list[str]:
    return sorted(bucket.list_keys(naming.commitlog_dir_key(prefix)))


def manifest_keys(manifest: manifests.Manifest) -> list[str]:
    return [naming.commitlog_key(manifest.prefix, o.base_offset) for o in manifest.objects]


def bucket_copy(bucket: buckets.S3Bucket, prefix: str) -> manifests.Manifest:
    return manifest_copy.read_copy(bucket, prefix)


@pytest.fixture
def filled(tmp_path: Path) -> Filled:
    return fill(tmp_path / "store")


@pytest.fixture
def clock(filled: Filled) -> list[int]:
    """The loop's clock (after the store was written), moved by the test."""
    return [now_ms()]


def test_expiry_forgets_then_deletes_and_queue_minimums_follow_the_tier(
    seaweed: seaweedfs.SeaweedS3,
    bucket: buckets.S3Bucket,
    prefix: str,
    filled: Filled,
    clock: list[int],
) -> None:
    bucket_config = seaweed.bucket_config(seaweedfs.BUCKET)
    source = ManifestSource(filled.config.root_dir, prefix)
    reader = reading.reader_of(bucket_config, source, block_bytes=4096, cache_bytes_max=1 << 20)
    with MessageStore(filled.config, tier=reader).open() as store:
        loop = offloader(
            store, bucket_config, prefix, remote_bytes_max=None, clock_ms=lambda: clock[0]
        )
        source.log = loop.manifest_log
        assert loop.run_pass(), loop.figures.last_failure
        offloaded = loop.manifest_log.current()
        assert len(offloaded.objects) >= 6
        assert commitlog_keys(bucket, prefix) == manifest_keys(offloaded)
        assert bucket_copy(bucket, prefix) == offloaded, "the copy follows each record"
        assert store.min_offset_in_queue(TOPIC, 0) == 0
        assert store.readable_min_offset() == 0

        # Remote retention by bytes: the tier keeps its two newest objects.
        keep = offloaded.objects[-2:]
        loop.remote.policy = dataclasses.replace(
            loop.config.policy, remote_bytes_max=sum(o.size_bytes for o in keep)
        )
        clock[0] += 1000
        assert loop.run_pass(), loop.figures.last_failure
        expired = loop.manifest_log.current()
        assert expired.objects == keep, "the oldest objects expire, the newest stay"
        start = expired.start_offset
        assert start is not None
        assert commitlog_keys(bucket, prefix) == manifest_keys(expired), "deleted after"
        assert bucket_copy(bucket, prefix) == expired
        gone = offloaded.objects[: -len(keep)]
        remote = loop.figures.remote
        assert remote.expired_objects_total == len(gone)
        assert remote.expired_bytes_total == sum(o.size_bytes for o in gone)
        assert remote.manifest_copies_total == len(offloaded.objects) + 1

        assert store.readable_min_offset() == start
        for queue_id, commit_offsets in filled.offsets.items():
            first_kept = next(i for i, off in enumerate(commit_offsets) if off >= start)
            assert first_kept > 0
            assert store.min_offset_in_queue(TOPIC, queue_id) == first_kept, (
                "QueryOffset BEGINNING / GET_MIN_OFFSET answer the tier's new start"
            )
            assert store.read_message(commit_offsets[first_kept - 1]) is None, "expired"
            too_small = store.get_messages(TOPIC, queue_id, 0, 4)
            assert too_small.status is GetStatus.OFFSET_TOO_SMALL, too_small.status
            assert (too_small.min_offset, too_small.next_begin_offset) == (first_kept, first_kept)
            got = store.get_messages(TOPIC, queue_id, first_kept, 4)
            assert got.status is GetStatus.FOUND, got.status
            assert [m.commit_offset for m in got.messages] == commit_offsets[
                first_kept : first_kept + 4
            ], "read from the tier's new start"


class _ExpiringDuringGet:
    """The real bucket, but the tier's expiry lands (the reader's manifest changes) when a
    ranged GET starts: the read located the object before it was expired and deleted."""

    def __init__(self, real: buckets.S3Bucket, seen: list[manifests.Manifest]) -> None:
        self.real = real
        self.seen = seen
        self.after: manifests.Manifest | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def get_range(self, key: str, start: int, size_bytes: int) -> bytes:
        if self.after is not None:
            self.seen[0] = self.after
        return self.real.get_range(key, start, size_bytes)


def test_a_read_racing_an_expiry_finds_the_record_gone_not_an_error(
    seaweed: seaweedfs.SeaweedS3,
    bucket: buckets.S3Bucket,
    prefix: str,
    filled: Filled,
    clock: list[int],
) -> None:
    bucket_config = seaweed.bucket_config(seaweedfs.BUCKET)
    with MessageStore(filled.config).open() as store:
        loop = offloader(
            store, bucket_config, prefix, remote_bytes_max=None, clock_ms=lambda: clock[0]
        )
        assert loop.run_pass(), loop.figures.last_failure
        offloaded = loop.manifest_log.current()
        loop.remote.policy = dataclasses.replace(
            loop.config.policy, remote_bytes_max=offloaded.objects[-1].size_bytes
        )
        assert loop.run_pass(), loop.figures.last_failure
        expired = loop.manifest_log.current()
        first = filled.offsets[0][0]  # in the first object: expired, then deleted
        assert expired.locate(first) is None
        assert offloaded.locate(first) is not None

        seen = [offloaded]  # the reader located the record before the expiry
        racing = _ExpiringDuringGet(bucket, seen)
        tier = reading.TierReader(racing, lambda: seen[0])  # type: ignore[arg-type]
        reads = routing.RecordReads(store.commitlog, tier)
        with pytest.raises(errors.TierRequestRejected, match="NoSuchKey"):
            reads.read_message(first)  # still recorded, yet missing: damage, not "gone"
        racing.after = expired  # the expiry lands during the GET
        assert reads.read_message(first) is None, "gone, as any expired record"
        seen[0] = offloaded
        assert reads.read(first, 64) is None


def test_the_sweep_deletes_what_no_upload_can_record_and_nothing_else(
    seaweed: seaweedfs.SeaweedS3,
    bucket: buckets.S3Bucket,
    prefix: str,
    filled: Filled,
    clock: list[int],
) -> None:
    bucket_config = seaweed.bucket_config(seaweedfs.BUCKET)
    with MessageStore(filled.config).open() as store:
        loop = offloader(
            store, bucket_config, prefix, remote_bytes_max=None, clock_ms=lambda: clock[0]
        )
        assert loop.run_pass(), loop.figures.last_failure
        manifest = loop.manifest_log.current()
        end = manifest.end_offset
        assert end is not None
        first = manifest.objects[0]
        below_end = naming.commitlog_key(prefix, first.base_offset + 100)  # inside a recorded one
        next_upload = naming.commitlog_key(prefix, end)
        past_end = naming.commitlog_key(prefix, end + FILE_BYTES)
        foreign = f"{naming.commitlog_dir_key(prefix)}README"
        for key in (below_end, next_upload, past_end, foreign):
            bucket.put_bytes(key, b"left by a crash")
        recorded = manifest_keys(manifest)

        plan = loop.remote.sweep()  # the objects are seconds old: past the end they stay
        assert plan.doomed == (below_end,)
        assert plan.foreign == (foreign,)
        assert commitlog_keys(bucket, prefix) == sorted([*recorded, next_upload, past_end, foreign])

        clock[0] += 2 * HOUR_MS  # past the grace period of an hour
        plan = loop.remote.sweep()
        assert plan.doomed == (past_end,), "the next upload's object is adopted, never swept"
        assert commitlog_keys(bucket, prefix) == sorted([*recorded, next_upload, foreign])
        assert loop.figures.remote.swept_objects_total == 2


def _crash(
    seaweed: seaweedfs.SeaweedS3, tmp_path: Path, store_dir: Path, prefix: str, **at: object
) -> None:
    config = seaweed.bucket_config(seaweedfs.BUCKET)
    path = tmp_path / "child.json"
    path.write_text(
        json.dumps(
            {
                "bucket": {
                    "endpoint_url": config.endpoint_url,
                    "bucket": config.bucket,
                    "access_key": config.access_key,
                    "secret_key": config.secret_key,
                },
                "store": str(store_dir),
                "prefix": prefix,
                **at,
            }
        )
    )
    child = subprocess.run(
        [sys.executable, "-m", "e2e.tier.retention_child", str(path)],
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()


@pytest.mark.parametrize(
    ("step", "occurrence"), [("after-expire", 1), ("after-delete", 1), ("after-delete", 2)]
)
def test_a_crash_between_expiry_and_deletes_leaves_no_orphan_after_a_restart(
    seaweed: seaweedfs.SeaweedS3,
    bucket: buckets.S3Bucket,
    prefix: str,
    filled: Filled,
    tmp_path: Path,
    clock: list[int],
    step: str,
    occurrence: int,
) -> None:
    bucket_config = seaweed.bucket_config(seaweedfs.BUCKET)
    with MessageStore(filled.config).open() as store:
        loop = offloader(
            store, bucket_config, prefix, remote_bytes_max=None, clock_ms=lambda: clock[0]
        )
        assert loop.run_pass(), loop.figures.last_failure
        offloaded = loop.manifest_log.current()
    keep = offloaded.objects[-2:]
    limit = sum(o.size_bytes for o in keep)
    _crash(
        seaweed,
        tmp_path,
        filled.config.root_dir,
        prefix,
        remote_bytes_max=limit,
        now_ms=clock[0] + 1000,
        crash_at=step,
        occurrence=occurrence,
    )
    with MessageStore(filled.config).open() as store:
        loop = offloader(
            store, bucket_config, prefix, remote_bytes_max=limit, clock_ms=lambda: clock[0]
        )
        after_crash = loop.manifest_log.current()
        assert after_crash.objects == keep, "the expiry was committed before the crash"
        held = set(commitlog_keys(bucket, prefix))
        assert set(manifest_keys(after_crash)) <= held, "the manifest never names a deleted object"
        orphans = held - set(manifest_keys(after_crash))
        assert len(orphans) == len(offloaded.objects) - len(keep) - (
            0 if step == "after-expire" else occurrence
        ), "the crash left the expired objects not yet deleted"
        assert loop.run_pass(), loop.figures.last_failure  # the restart's first pass sweeps
        assert loop.figures.remote.swept_objects_total == len(orphans)
        assert commitlog_keys(bucket, prefix) == manifest_keys(loop.manifest_log.current())
        assert loop.manifest_log.current().objects == keep
