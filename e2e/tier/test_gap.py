"""Offload recovers from a gap: disk pressure deleted files before they were offloaded.

A real store (64 KiB commit-log files, read through a tier reader) and the broker's offload loop
(:class:`Offloader` over :class:`StoreSide`, one pass at a time) against SeaweedFS: the first
file is offloaded; the second reaches the bucket but a "crash" keeps it from the manifest; then
the disk rule (clean-forcibly ratio, ``--delete-unconsumed``) deletes the second and third files
locally before they are recorded. The next pass adopts the second file from the bucket (no
message lost that a copy still holds), records the third as a gap with one warning, and
offload resumes after it. Reads before the gap come from the tier, reads after it from the tier
or disk, reads in it answer removed (``MESSAGE_WAS_REMOVING``, no message); ``gannet store
verify`` reports the gap as information and exits 0, ``store inspect`` lists it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from e2e.tier import seaweedfs
from gannet.node.broker.tiering import StoreSide
from gannet.node.cli import root as cli
from gannet.node.store.config import StoreConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.tier import applied, buckets, manifests, naming, planning, reading, uploading
from gannet.node.store.tier.offloading import Offloader, TierConfig

pytestmark = pytest.mark.timeout(120)

TOPIC = "TierGap"
FILE_BYTES = 64 * 1024


def _tier_range(log: uploading.FileManifestLog) -> tuple[int, int] | None:
    manifest = log.current()
    if manifest.start_offset is None or manifest.end_offset is None:
        return None
    return manifest.start_offset, manifest.end_offset


def test_offload_records_a_gap_and_resumes_after_it(
    seaweed: seaweedfs.SeaweedS3,
    bucket: buckets.S3Bucket,
    prefix: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bucket_config = seaweed.bucket_config(seaweedfs.BUCKET)
    config = StoreConfig.for_tests(tmp_path / "store", delete_files_per_run_max=2)
    log = uploading.FileManifestLog(applied.manifest_path(config.root_dir), prefix)
    tier = reading.reader_of(bucket_config, log, block_bytes=4096, cache_bytes_max=1 << 20)
    policy = planning.TierPolicy(offload_age_s_min=0, local_use_ratio_max=None, uploads_max=1)
    with MessageStore(config, tier=tier).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=1, write_queue_nums=1))
        offsets: list[int] = []
        while len(store.commitlog.files.files) < 7:
            body = f"gap message {len(offsets)} ".encode() * 100
            offsets.append(store.put_message(Message(TOPIC, body, queue_id=0)).wrote_offset)
        assert store.wait_dispatched(store.commitlog.max_offset())
        raw = {o: store.read_stored(o, store.reads.record_size_at(o)) for o in offsets}
        store.cleaner.tier_range = lambda: _tier_range(log)
        side = StoreSide(store, None)
        offloader = Offloader(TierConfig(bucket_config, prefix, policy), side, log, bucket)

        assert offloader.run_pass()  # file 0 to the tier, then deleted locally
        assert log.current().end_offset == FILE_BYTES
        assert store.commitlog.min_offset() == FILE_BYTES

        # File 1 reaches the bucket, but a crash keeps it from the manifest.
        file1 = side.file_path(FILE_BYTES)
        file1_md5 = uploading.file_md5(file1)
        bucket.put_file(naming.commitlog_key(prefix, FILE_BYTES), file1, md5_digest=file1_md5)
        # Disk pressure deletes files 1 and 2 before they are offloaded.
        store.cleaner.set_policy(delete_unconsumed=True)
        store.cleaner.ratio_probe = lambda _: 0.88
        assert store.cleaner.run(manual=False).commitlog_files_deleted == 2
        store.cleaner.ratio_probe = lambda _: 0.10
        assert store.commitlog.min_offset() == 3 * FILE_BYTES

        with caplog.at_level(logging.WARNING, logger="gannet.node.store.tier.offloading"):
            assert offloader.run_pass()
            assert offloader.run_pass()
        manifest = log.current()
        gap = manifests.Gap(2 * FILE_BYTES, 3 * FILE_BYTES)
        assert manifest.gaps == (gap,)
        bases = [o.base_offset for o in manifest.objects]
        assert bases == [0, FILE_BYTES, 3 * FILE_BYTES, 4 * FILE_BYTES]
        assert offloader.figures.gaps_recorded_total == 1
        assert offloader.figures.gap_bytes_total == FILE_BYTES
        assert offloader.figures.failures_total == {}
        warnings = [r.getMessage() for r in caplog.records if "recorded a gap" in r.getMessage()]
        assert len(warnings) == 1, "one warning per gap"
        assert f"[{2 * FILE_BYTES}, {3 * FILE_BYTES})" in warnings[0]
        adopted = manifest.find(FILE_BYTES)
        assert adopted is not None
        assert adopted.md5_hex == file1_md5.hex()
        assert store.commitlog.min_offset() == 5 * FILE_BYTES  # files 3 and 4 deleted locally

        # Reads: before the gap from the tier, in it removed, after it from tier and disk.
        before = [o for o in offsets if o < 2 * FILE_BYTES]
        inside = [o for o in offsets if 2 * FILE_BYTES <= o < 3 * FILE_BYTES]
        after = [o for o in offsets if o >= 3 * FILE_BYTES]
        assert before
        assert inside
        assert after
        for o in before + after:
            assert store.read_stored(o, len(raw[o] or b"")) == raw[o]
            msg = store.read_message(o)
            assert msg is not None
            assert msg.physical_offset == o
        for o in inside:
            assert store.read_message(o) is None
        assert store.readable_min_offset() == 0
        queue_of = {o: i for i, o in enumerate(offsets)}
        first_inside = store.get_messages(TOPIC, 0, queue_of[inside[0]], 4)
        assert first_inside.status is GetStatus.MESSAGE_WAS_REMOVING
        assert first_inside.messages == []
        assert first_inside.next_begin_offset == queue_of[inside[0]] + 4
        got = store.get_messages(TOPIC, 0, 0, len(before) + len(inside) + 2)
        assert got.status is GetStatus.FOUND
        assert [m.commit_offset for m in got.messages] == before + after[:2]

    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[default]\naws_access_key_id = {seaweed.access_key}\n"
        f"aws_secret_access_key = {seaweed.secret_key}\n"
    )
    tier_args = [
        *("--tier-bucket", seaweedfs.BUCKET, "--tier-endpoint", seaweed.endpoint_url),
        *("--tier-credentials-file", str(credentials), "--tier-prefix", prefix),
        *("--tier-manifest", str(applied.manifest_path(config.root_dir))),
    ]
    recorded = [{"from": 2 * FILE_BYTES, "to": 3 * FILE_BYTES, "size": FILE_BYTES}]
    runner = CliRunner()
    verified = runner.invoke(
        cli.main, ["store", "verify", str(config.root_dir), *tier_args, "-o", "json"]
    )
    assert verified.exit_code == 0, verified.output  # a recorded gap is information, not damage
    document = json.loads(verified.output)
    assert document["tier"]["recorded_gaps"] == recorded
    assert document["clean"]
    inspected = runner.invoke(cli.main, ["store", "inspect", str(config.root_dir), *tier_args])
    assert inspected.exit_code == 0, inspected.output
    assert "recorded gaps" in inspected.output
    assert f"[{2 * FILE_BYTES:,}, {3 * FILE_BYTES:,})" in inspected.output
