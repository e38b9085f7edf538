"""A real store with its oldest commit-log files offloaded to the tier and deleted locally
(the ``written`` fixture of ``conftest.py``), and helpers over it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gannet.node.store.config import StoreConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.tier import buckets, uploading

TOPIC = "TierReads"
MESSAGES = 600
FILES_OFFLOADED = 2


@dataclass
class Written:
    config: StoreConfig
    log: uploading.FileManifestLog
    raw: dict[int, bytes]  # commit offset -> the record as stored before the offload
    by_queue: dict[int, list[int]]  # queue id -> commit offsets in queue order
    store_ms: dict[int, int]  # commit offset -> store timestamp


def write_offloaded_store(bucket: buckets.S3Bucket, prefix: str, tmp_path: Path) -> Written:
    config = StoreConfig.for_tests(tmp_path / "store")
    raw: dict[int, bytes] = {}
    by_queue: dict[int, list[int]] = {0: [], 1: []}
    store_ms: dict[int, int] = {}
    with MessageStore(config).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=2, write_queue_nums=2))
        for i in range(MESSAGES):
            body = f"tiered message {i} ".encode() * (1 + i % 40)
            msg = Message(TOPIC, body, queue_id=i % 2, properties={"KEYS": f"key{i}"})
            result = store.put_message(msg)
            by_queue[i % 2].append(result.wrote_offset)
        assert store.dispatch_caught_up()
        for offsets in by_queue.values():
            for offset in offsets:
                stored = store.read_message(offset)
                assert stored is not None
                data = store.read_stored(offset, stored.store_size)
                assert data is not None
                raw[offset], store_ms[offset] = data, stored.store_timestamp_ms
        assert len(store.commitlog.files.files) > FILES_OFFLOADED + 1
    log = uploading.FileManifestLog(tmp_path / "manifest.json", prefix)
    bucket_ = bucket
    for path in sorted(config.commitlog_dir.iterdir())[:FILES_OFFLOADED]:
        done = uploading.offload(path, bucket=bucket_, log=log, now_ms=1)
        assert done.deleted
        assert not path.exists()
    return Written(config, log, raw, by_queue, store_ms)


def tier_offsets(written: Written) -> list[int]:
    end = written.log.current().end_offset
    assert end is not None
    return sorted(o for o in written.raw if o < end)
