"""The offload loop against a real store, and cleanup's rules with a tier (fast, no S3 server).

- A dead endpoint (a real refused connection): the pass fails with reason ``unavailable``,
  counted per pass and logged once, local files and writes untouched; a tier whose end is
  below the oldest local file records no gap while the bucket cannot be asked (a gap recorded
  is tested against a real bucket in ``e2e/tier/test_gap.py``).
- Followers' side: :meth:`Offloader.run_pass` on a non-leader deletes exactly the leading files
  the manifest records with the local bytes, through the cleaner; a file recorded with other
  bytes is kept (``conflict``).
- A manifest kept for another prefix fails the broker's start, named.
- Cleanup with a tier: under disk pressure an offloaded file with unconsumed messages goes (the
  tier holds them) and writes stay accepted; expiry deletes only what the tier holds; consume
  queues stay down to the tier's start.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.broker.tiering import StoreSide
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.tier import applied, buckets, errors, manifests, planning, uploading
from gannet.node.store.tier.offloading import Offloader, TierConfig

from ..store.test_cleanup_policy import TOPIC, fill, noon_ms

PREFIX = "gannet/t/g0"
YEAR_MS = 365 * 24 * 3_600_000


def _dead_bucket() -> buckets.BucketConfig:
    return buckets.BucketConfig(
        "http://127.0.0.1:9",  # discard port: nothing listens, the connection is refused
        "b",
        "key",
        "secret",
        connect_timeout_s=0.2,
        read_timeout_s=0.2,
        attempts_max=1,
    )


def _config() -> TierConfig:
    return TierConfig(_dead_bucket(), PREFIX, planning.TierPolicy(offload_age_s_min=0))


class _Follower(StoreSide):
    def is_leader(self) -> bool:
        return False


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(
        StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    ).open() as opened:
        fill(opened)
        yield opened


def _record_first(store: MessageStore, log: uploading.FileManifestLog, count: int) -> None:
    """Record the first ``count`` sealed files as if uploaded (their real size and MD5)."""
    for sealed in StoreSide(store, None).sealed_files()[:count]:
        path = StoreSide(store, None).file_path(sealed.base_offset)
        digest = uploading.file_md5(path).hex()
        obj = manifests.TierObject(sealed.base_offset, sealed.size_bytes, digest, 1)
        log.propose(manifests.RecordObject(obj))


def test_an_unreachable_bucket_fails_passes_logs_once_and_never_blocks_writes(
    store: MessageStore, caplog: pytest.LogCaptureFixture
) -> None:
    log = uploading.FileManifestLog(applied.manifest_path(store.config.root_dir), PREFIX)
    offloader = Offloader(_config(), StoreSide(store, None), log, buckets.S3Bucket(_dead_bucket()))
    files_before = [f.path.name for f in store.commitlog.files.files]
    with caplog.at_level(logging.ERROR, logger="gannet.node.store.tier.offloading"):
        assert [offloader.run_pass() for _ in range(2)] == [False, False]
    assert offloader.figures.failures_total == {"unavailable": 2}
    reported = [r for r in caplog.records if "tier offload failed" in r.getMessage()]
    assert len(reported) == 1, "reported once per reason change"
    assert "unavailable" in reported[0].getMessage()
    assert [f.path.name for f in store.commitlog.files.files] == files_before
    assert log.current().objects == ()
    assert store.put_message(Message(topic=TOPIC, body=b"still accepted")).queue_offset == 120


def test_a_follower_deletes_what_the_manifest_records_and_keeps_a_conflicting_file(
    store: MessageStore,
) -> None:
    log = uploading.FileManifestLog(applied.manifest_path(store.config.root_dir), PREFIX)
    _record_first(store, log, 2)
    side = _Follower(store, None)
    offloader = Offloader(_config(), side, log, buckets.S3Bucket(_dead_bucket()))
    first, second, third = (f.base_offset for f in side.sealed_files()[:3])
    assert offloader.run_pass()  # a follower never talks to the bucket
    assert store.commitlog.min_offset() == third
    assert offloader.figures.local_deleted_files_total == 2
    assert store.get_messages(TOPIC, 0, 0, 1).messages == []  # below the local start: skipped
    assert store.queues.get(TOPIC, 0) is not None
    # A third file recorded with other bytes than the local copy is kept.
    size = side.sealed_files()[0].size_bytes
    log.propose(manifests.RecordObject(manifests.TierObject(third, size, "0" * 32, 1)))
    assert not offloader.run_pass()
    assert offloader.figures.failures_total == {"conflict": 1}
    assert store.commitlog.min_offset() == third
    assert first < second < third


def test_no_gap_is_recorded_while_the_bucket_cannot_say_it_lacks_the_file(
    store: MessageStore,
) -> None:
    log = uploading.FileManifestLog(applied.manifest_path(store.config.root_dir), PREFIX)
    _record_first(store, log, 1)
    store.cleaner.run(manual=True, now_ms=noon_ms() + YEAR_MS)  # no tier told: deletes all
    while len(store.commitlog.files.files) < 2:  # a new sealed file, after the gap
        store.put_message(Message(topic=TOPIC, body=b"o" * 1000))
    offloader = Offloader(_config(), StoreSide(store, None), log, buckets.S3Bucket(_dead_bucket()))
    assert not offloader.run_pass()  # the HEAD of the file after the tier's end fails
    assert offloader.figures.failures_total == {"unavailable": 1}
    assert log.current().gaps == ()
    assert offloader.figures.gaps_recorded_total == 0


def test_cleanup_with_a_tier_counts_only_files_not_offloaded(store: MessageStore) -> None:
    log = uploading.FileManifestLog(applied.manifest_path(store.config.root_dir), PREFIX)
    _record_first(store, log, 2)
    held = log.current()
    assert held.start_offset is not None
    assert held.end_offset is not None
    tier_range = (held.start_offset, held.end_offset)
    store.cleaner.tier_range = lambda: tier_range
    store.consumer_offsets.commit("Workers", TOPIC, 0, 0)  # nothing consumed
    store.consumer_offsets.commit("Workers", TOPIC, 1, 0)
    files = len(store.commitlog.files.files)

    # Expiry (no pressure): only what the tier holds goes.
    store.cleaner.ratio_probe = lambda path: 0.10
    result = store.cleaner.run(manual=True, now_ms=noon_ms() + YEAR_MS)
    assert result.commitlog_files_deleted == 2
    assert store.commitlog.min_offset() == held.end_offset
    assert store.queues.get(TOPIC, 0) is not None
    assert store.queues.get(TOPIC, 0).min_offset_in_queue() == 0  # type: ignore[union-attr]

    # Pressure: the rest is not offloaded and unconsumed, so writes are refused as today.
    store.cleaner.ratio_probe = lambda path: 0.88
    result = store.cleaner.run(manual=False, now_ms=noon_ms())
    assert result.commitlog_files_deleted == 0
    assert store.disk_full
    assert len(store.commitlog.files.files) == files - 2

    # Once the tier holds the next file too, pressure deletes it: nothing unconsumed is lost.
    next_file = store.commitlog.files.files[0]
    size = next_file.file_size
    digest = uploading.file_md5(next_file.path).hex()
    log.propose(manifests.RecordObject(manifests.TierObject(held.end_offset, size, digest, 1)))
    tier_range = (held.start_offset, held.end_offset + size)
    result = store.cleaner.run(manual=False, now_ms=noon_ms())
    assert result.commitlog_files_deleted == 1
    assert result.unconsumed_deleted == {}
    assert store.commitlog.min_offset() == held.end_offset + size


def test_a_broker_refuses_to_start_on_a_manifest_of_another_prefix(tmp_path: Path) -> None:
    root = tmp_path / "store"
    uploading.FileManifestLog(applied.manifest_path(root), "gannet/other/g0").propose(
        manifests.RecordObject(manifests.TierObject(0, 10, "a" * 32, 1))
    )
    store_config = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    with pytest.raises(errors.ManifestConflict, match="is for prefix 'gannet/other/g0'"):
        threads.start(BrokerConfig(store=store_config, listen_port=0, tier=_config()))
    running = threads.start(BrokerConfig(store=store_config, listen_port=0))  # store released
    running.stop()
