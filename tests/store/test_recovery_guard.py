"""Recovery cuts a torn tail but refuses to cut flushed data (``recovering`` docstring, step 4).

Each case damages a closed store the way a disk or an operator can, then opens it: by default
the open is refused with a message naming the file, the offset, the bytes at stake and
``--force-recover``, and nothing on disk changes; with ``force_recover`` the cut happens and the
removed bytes are kept under ``quarantine/``. Truncations are counted by cause.
"""

from __future__ import annotations

import hashlib
import random
import struct
from pathlib import Path

import pytest

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import CorruptionError, RecoveryRefused
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.upkeep import verifying

FILE_SIZE = 64 * 1024


def cfg(root: Path, **kw: object) -> StoreConfig:
    kw.setdefault("flush_mode", FlushMode.SYNC_FLUSH)
    return StoreConfig.for_tests(root, **kw)


def fill(root: Path, n: int = 20) -> list[tuple[int, int]]:
    """A cleanly closed store of ``n`` 1 kB messages; returns (offset, size) of each."""
    with MessageStore(cfg(root)).open() as store:
        results = [
            store.put_message(Message(topic="TopicA", body=b"x" * 1000, queue_id=0))
            for _ in range(n)
        ]
        assert store.wait_dispatched(results[-1].end_offset)
    return [(r.wrote_offset, r.wrote_bytes) for r in results]


def digest(root: Path) -> dict[str, str]:
    """Content hash of every file of the store (not the lock, nor the abort file's pid)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("lock", "abort")
    }


def flushed_floor(root: Path) -> int:
    with open(root / "checkpoint", "rb") as f:
        f.seek(40)
        value: int = struct.unpack(">q", f.read(8))[0]
    return value


def set_flushed_floor(root: Path, offset: int) -> None:
    with open(root / "checkpoint", "r+b") as f:
        f.seek(40)
        f.write(struct.pack(">q", offset))


def flip(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x10]))


def test_clean_close_records_the_flushed_offset_in_the_checkpoint(tmp_path: Path) -> None:
    records = fill(tmp_path)
    end = records[-1][0] + records[-1][1]
    assert flushed_floor(tmp_path) == end


def test_flipped_bit_below_the_flushed_offset_is_refused_and_nothing_changes(
    tmp_path: Path,
) -> None:
    records = fill(tmp_path)
    offset, _ = records[5]
    first = tmp_path / "commitlog" / f"{0:020d}"
    flip(first, offset + 200)
    (tmp_path / "abort").write_text("1")  # even after a crash: the bytes were flushed
    before = digest(tmp_path)
    with pytest.raises(RecoveryRefused) as refused:
        MessageStore(cfg(tmp_path)).open()
    text = str(refused.value)
    end = records[-1][0] + records[-1][1]
    assert str(first) in text
    assert f"offset {offset:,}" in text
    assert f"remove {end - offset:,} bytes" in text
    assert "flushed to disk" in text
    assert "--force-recover" in text
    assert refused.value.offset == offset
    assert digest(tmp_path) == before  # refused: nothing cut, nothing written
    assert (tmp_path / "abort").exists()
    assert not (tmp_path / "quarantine").exists()


def test_force_recover_cuts_and_keeps_the_removed_bytes(tmp_path: Path) -> None:
    records = fill(tmp_path)
    offset, _ = records[5]
    end = records[-1][0] + records[-1][1]
    first = tmp_path / "commitlog" / f"{0:020d}"
    flip(first, offset + 200)
    damaged = first.read_bytes()[offset:end]
    store = MessageStore(cfg(tmp_path, force_recover=True)).open()
    try:
        assert store.recovery is not None
        assert store.recovery.process_offset == offset
        assert store.max_offset_in_queue("TopicA", 0) == 5
        assert store.truncations.events["recovery"] == 1
        assert store.truncations.bytes["recovery"] == end - offset
        kept = tmp_path / "quarantine" / f"{first.name}.truncated-{offset}"
        assert store.recovery.quarantined == [kept]
        assert kept.read_bytes() == damaged
    finally:
        store.close()
    assert flushed_floor(tmp_path) <= offset + 1000 * 2  # lowered to the cut, then grew again
    assert verifying.verify(tmp_path).clean
    with MessageStore(cfg(tmp_path)).open() as again:  # a normal start after the forced one
        assert again.max_offset_in_queue("TopicA", 0) == 5


def test_torn_tail_above_the_flushed_offset_is_cut_and_counted(tmp_path: Path) -> None:
    records = fill(tmp_path)
    offset, size = records[-1]
    first = tmp_path / "commitlog" / f"{0:020d}"
    with open(first, "r+b") as f:
        f.seek(offset + size // 2)
        f.write(b"\xab" * (size // 2))
    (tmp_path / "abort").write_text("1")
    set_flushed_floor(tmp_path, offset)  # the crash came before the last record was flushed
    with MessageStore(cfg(tmp_path)).open() as store:
        assert store.recovery is not None
        assert store.recovery.process_offset == offset
        assert store.truncations.events["recovery"] == 1
        assert store.truncations.bytes["recovery"] == size
        assert not (tmp_path / "quarantine").exists()


def test_damage_after_a_clean_shutdown_is_refused_even_above_the_floor(tmp_path: Path) -> None:
    records = fill(tmp_path)
    offset, _ = records[-1]
    set_flushed_floor(tmp_path, 0)  # a store written by RocketMQ has no floor
    flip(tmp_path / "commitlog" / f"{0:020d}", offset + 200)
    with pytest.raises(RecoveryRefused, match="shutdown was clean"):
        MessageStore(cfg(tmp_path)).open()
    assert not (tmp_path / "abort").exists()  # a refusal is not a crash


def test_cut_of_more_than_one_file_region_is_refused(tmp_path: Path) -> None:
    records = fill(tmp_path, 150)  # three files
    set_flushed_floor(tmp_path, 0)
    (tmp_path / "abort").write_text("1")
    flip(tmp_path / "commitlog" / f"{0:020d}", records[3][0] + 200)
    with pytest.raises(RecoveryRefused, match="more than one commit-log file"):
        MessageStore(cfg(tmp_path)).open()


def test_garbage_commit_log_with_a_hello_checkpoint_is_refused(tmp_path: Path) -> None:
    """The first-hour report: a random 100 kB file and a checkpoint saying "hello"."""
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    garbage = random.Random(seed).randbytes(100_000)
    (tmp_path / "commitlog").mkdir(parents=True)
    segment = tmp_path / "commitlog" / f"{0:020d}"
    segment.write_bytes(garbage)
    (tmp_path / "checkpoint").write_text("hello")
    config = cfg(tmp_path, commitlog_file_size_bytes=1024 * 1024)
    with pytest.raises(CorruptionError, match=r"checkpoint file .* is corrupt: its length is 5"):
        MessageStore(config).open()
    assert (tmp_path / "checkpoint").read_text() == "hello"
    assert segment.read_bytes() == garbage
    forced = MessageStore(StoreConfig.for_tests(tmp_path, **_forced(config))).open()
    try:
        assert forced.recovery is not None
        assert forced.recovery.process_offset == 0
        kept = tmp_path / "quarantine" / f"{segment.name}.truncated-0"
        assert kept.read_bytes() == garbage.rstrip(b"\0")
        assert forced.truncations.bytes["recovery"] == len(garbage.rstrip(b"\0"))
        assert next(tmp_path.glob("checkpoint.corrupt-*")).read_text() == "hello"
    finally:
        forced.close()


def _forced(config: StoreConfig) -> dict[str, object]:
    return {
        "flush_mode": config.flush_mode,
        "commitlog_file_size_bytes": config.commitlog_file_size_bytes,
        "force_recover": True,
    }


def test_garbage_commit_log_after_a_clean_shutdown_is_refused(tmp_path: Path) -> None:
    """The same garbage with a valid checkpoint and no abort file: refused, not dropped."""
    config = cfg(tmp_path, commitlog_file_size_bytes=1024 * 1024)
    MessageStore(config).open().close()  # a valid, empty store
    segment = tmp_path / "commitlog" / f"{0:020d}"
    segment.write_bytes(b"\xff\xcf\x40\x61" * 25_000 + bytes(1024 * 1024 - 100_000))
    with pytest.raises(RecoveryRefused, match=r"remove 100,000 bytes .*shutdown was clean"):
        MessageStore(config).open()


@pytest.mark.parametrize(
    "content", [b"\xff" * 4096, struct.pack(">qqqqqq", 1, 1, 1, 0, 0, -5) + bytes(4048)]
)
def test_checkpoint_with_impossible_values_is_corrupt(tmp_path: Path, content: bytes) -> None:
    fill(tmp_path, 3)
    (tmp_path / "checkpoint").write_bytes(content)
    with pytest.raises(CorruptionError, match=r"checkpoint file .* is corrupt"):
        MessageStore(cfg(tmp_path)).open()


def test_missing_checkpoint_is_not_a_clean_start(tmp_path: Path) -> None:
    fill(tmp_path, 3)
    (tmp_path / "checkpoint").unlink()
    with MessageStore(cfg(tmp_path)).open() as store:
        assert not store.last_exit_ok  # a full scan, as after a crash
        assert store.max_offset_in_queue("TopicA", 0) == 3


def test_raft_truncation_lowers_the_floor_first_and_is_counted(tmp_path: Path) -> None:
    records = fill(tmp_path)
    cut = records[10][0]
    store = MessageStore(cfg(tmp_path)).open()
    store.truncate(cut)
    assert flushed_floor(tmp_path) == cut  # durable before the cut
    assert store.truncations.events == {"recovery": 0, "divergence": 1, "catch_up": 0}
    end = records[-1][0] + records[-1][1]
    assert store.truncations.bytes["divergence"] == end - cut
    store.abandon()  # a crash right after: the next start must not refuse
    with MessageStore(cfg(tmp_path)).open() as again:
        assert again.max_offset_in_queue("TopicA", 0) == 10


def follower(root: Path) -> MessageStore:
    return MessageStore(cfg(root), commit_follows_flush=False).open()


@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_follower_holding_half_a_record_restarts(tmp_path: Path, stop: str) -> None:
    """A follower gets byte ranges, not records: the floor stays at the last complete record,
    and a cleanly stopped follower with a record's prefix at its tail is not 'damaged'."""
    records = fill(tmp_path / "leader", 6)
    leader = MessageStore(cfg(tmp_path / "leader")).open()
    try:
        last_start, last_size = records[-1]
        data = leader.read_replicated(0, last_start + last_size // 2)
    finally:
        leader.close()
    store = follower(tmp_path / "follower")
    assert store.append_replicated(0, data) == last_start + last_size // 2
    assert store.flush is not None
    assert store.flush.wait_flushed(len(data), 5)
    if stop == "clean":
        store.close()
    else:
        store._flush_structures()  # the checkpoint as the housekeeping thread writes it
        store.abandon()
    assert flushed_floor(tmp_path / "follower") == last_start  # not mid-record
    with follower(tmp_path / "follower") as again:
        assert again.recovery is not None
        assert again.recovery.process_offset == last_start
        assert again.truncations.events["recovery"] == 1


def _garbage(seed_label: str) -> bytes:
    seed = random.randrange(2**32)
    print(f"{seed_label} seed {seed}")
    return random.Random(seed).randbytes(100 * 1024)


def test_lone_short_commit_log_file_without_checkpoint_is_refused_untouched(
    tmp_path: Path,
) -> None:
    """The first-contact report: only ``commitlog/00000000000000000000``, 100 kB of random bytes,
    no checkpoint. Refused before anything is mapped: the file keeps its size and bytes, no
    checkpoint or abort file is left behind. ``--force-recover`` cuts and keeps the bytes."""
    garbage = _garbage("short file")
    (tmp_path / "commitlog").mkdir()
    segment = tmp_path / "commitlog" / f"{0:020d}"
    segment.write_bytes(garbage)
    config = cfg(tmp_path, commitlog_file_size_bytes=1024 * 1024)
    with pytest.raises(RecoveryRefused, match=r"102,400 bytes long, not the configured") as err:
        MessageStore(config).open()
    assert str(segment) in str(err.value)
    assert "--force-recover" in str(err.value)
    assert err.value.offset == 0
    assert err.value.bytes_at_stake == len(garbage.rstrip(b"\0"))
    assert segment.stat().st_size == len(garbage)
    assert segment.read_bytes() == garbage
    assert not (tmp_path / "checkpoint").exists()
    assert not (tmp_path / "abort").exists()
    forced = MessageStore(StoreConfig.for_tests(tmp_path, **_forced(config))).open()
    try:
        assert forced.recovery is not None
        assert forced.recovery.process_offset == 0
        kept = tmp_path / "quarantine" / f"{segment.name}.truncated-0"
        assert kept.read_bytes() == garbage.rstrip(b"\0")
    finally:
        forced.close()


def test_full_size_file_with_no_valid_record_is_refused_even_after_a_crash(
    tmp_path: Path,
) -> None:
    """The same garbage in a file of the configured size, after a crash (abort file), no
    checkpoint: no valid record at all is no torn tail."""
    garbage = _garbage("full-size file")
    (tmp_path / "commitlog").mkdir()
    segment = tmp_path / "commitlog" / f"{0:020d}"
    segment.write_bytes(garbage + bytes(FILE_SIZE - len(garbage) % FILE_SIZE))
    (tmp_path / "abort").write_text("1")
    config = cfg(tmp_path, commitlog_file_size_bytes=len(segment.read_bytes()))
    before = digest(tmp_path)
    with pytest.raises(RecoveryRefused, match=r"holds no valid record at all"):
        MessageStore(config).open()
    assert digest(tmp_path) == before


def test_data_running_into_a_later_file_is_no_torn_tail(tmp_path: Path) -> None:
    """Damage near the end of one file with records in the next: the cut would remove a
    whole later file's data, though less than one file's worth of bytes."""
    records = fill(tmp_path, 70)  # two files: 63 records of 1 kB fit in 64 kB
    second = [r for r in records if r[0] >= FILE_SIZE]
    assert 0 < len(second) < 20, second
    set_flushed_floor(tmp_path, 0)
    (tmp_path / "abort").write_text("1")
    last_in_first = max(r for r in records if r[0] < FILE_SIZE)
    flip(tmp_path / "commitlog" / f"{0:020d}", last_in_first[0] + 200)
    before = digest(tmp_path)
    with pytest.raises(RecoveryRefused, match=r"runs on past .* into a later file"):
        MessageStore(cfg(tmp_path)).open()
    assert digest(tmp_path) == before


def test_short_last_file_of_zeros_is_extended(tmp_path: Path) -> None:
    """A short last file holding nothing (allocation cut by a crash) is no data at stake: the
    store opens (recovery drops the empty file past the end of the log)."""
    fill(tmp_path, 3)
    (tmp_path / "commitlog" / f"{FILE_SIZE:020d}").write_bytes(bytes(4096))
    with MessageStore(cfg(tmp_path)).open() as store:
        assert store.max_offset_in_queue("TopicA", 0) == 3
    zeros = tmp_path / "commitlog" / f"{FILE_SIZE:020d}"
    assert not zeros.exists() or zeros.stat().st_size == FILE_SIZE  # dropped past the cut
