"""The message store end to end in one process: append, roll, dispatch, read, query, recover,
truncate, clean up, refuse bad input."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest

from gannet.node.store import querying
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import (
    CorruptionError,
    DiskFull,
    MessageTooLarge,
    PropertiesTooLarge,
    RecoveryRefused,
    TopicNameIllegal,
)
from gannet.node.store.log.layout import MAGIC_BLANK
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.consume_queues import Boundary
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.upkeep import verifying

pytestmark = pytest.mark.usefixtures("put_path")  # native and Python put paths


def cfg(root: Path, **kw: object) -> StoreConfig:
    kw.setdefault("flush_mode", FlushMode.SYNC_FLUSH)
    return StoreConfig.for_tests(root, **kw)


def msg(i: int, *, topic: str = "TopicA", queue_id: int = 0, size: int = 1000) -> Message:
    body = (f"m{i}:".encode() + b"x" * size)[:size]
    return Message(
        topic=topic,
        body=body,
        queue_id=queue_id,
        properties={"KEYS": f"key{i} common", "TAGS": f"tag{i % 2}"},
    )


def open_store(root: Path, **kw: object) -> MessageStore:
    return MessageStore(cfg(root, **kw)).open()


def put_all(store: MessageStore, n: int, **kw: object):
    results = [store.put_message(msg(i, **kw)) for i in range(n)]  # type: ignore[arg-type]
    assert store.wait_dispatched(results[-1].end_offset)
    return results


def test_append_rolls_files_with_a_blank_record_and_dispatches(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        results = put_all(store, 100)
        files = sorted((tmp_path / "commitlog").iterdir())
        assert [f.name for f in files[:2]] == ["00000000000000000000", "00000000000000065536"]
        assert all(f.stat().st_size == 65536 for f in files)
        # the first file ends with a BLANK: remaining length, then the magic
        last_in_first = max(
            (r for r in results if r.end_offset <= 65536), key=lambda r: r.end_offset
        )
        blank_at = last_in_first.end_offset
        raw = files[0].read_bytes()
        remaining, magic = struct.unpack_from(">ii", raw, blank_at)
        assert (remaining, magic) == (65536 - blank_at, MAGIC_BLANK)
        assert [r.queue_offset for r in results] == list(range(100))
        got = store.get_messages("TopicA", 0, 0, 32)
        assert got.status is GetStatus.FOUND
        assert [m.queue_offset for m in got.messages] == list(range(32))
        assert got.next_begin_offset == 32
        assert store.max_offset_in_queue("TopicA", 0) == 100


def test_get_statuses_follow_rocketmq_rules(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        put_all(store, 5)
        assert store.get_messages("Nope", 0, 0, 1).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.get_messages("TopicA", 0, 5, 1).status is GetStatus.OFFSET_OVERFLOW_ONE
        bad = store.get_messages("TopicA", 0, 9, 1)
        assert (bad.status, bad.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 5)
        odd = store.get_messages("TopicA", 0, 0, 5, lambda u: u.tags_code == hash_of("tag1"))
        assert [m.queue_offset for m in odd.messages] == [1, 3]


def hash_of(tag: str) -> int:
    from gannet.node.store.hashing import java_string_hash

    return java_string_hash(tag)


def test_sync_flush_answers_after_fdatasync_and_shares_syncs(tmp_path: Path) -> None:
    with open_store(tmp_path, commitlog_file_size_bytes=1024 * 1024) as store:
        errors: list[BaseException] = []
        ends: list[int] = []

        def worker(w: int) -> None:
            try:
                for i in range(50):
                    r = store.put_message(msg(w * 1000 + i, size=200))
                    assert store.commitlog.flushed_offset() >= r.end_offset
                    ends.append(r.end_offset)
            except BaseException as exc:  # pragma: no cover - surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(set(ends)) == 800
        assert store.flush is not None
        assert store.flush.flush_count < 800  # group commit: fewer syncs than writes


def test_restart_keeps_messages_and_continues_queue_offsets(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        put_all(store, 30)
    assert not (tmp_path / "abort").exists()
    with open_store(tmp_path) as store:
        assert store.last_exit_ok
        assert store.put_message(msg(30)).queue_offset == 30
        m = querying.by_queue_offset(store, "TopicA", 0, 7)
        assert m is not None
        assert m.body.startswith(b"m7:")


def test_abnormal_exit_recovers_and_undispatched_records_keep_their_offsets(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    put_all(store, 40)
    store.abandon()
    assert (tmp_path / "abort").exists()
    with open_store(tmp_path) as store:
        assert not store.last_exit_ok
        assert store.put_message(msg(40)).queue_offset == 40
        assert store.wait_dispatched(store.commitlog.max_offset())
        assert store.max_offset_in_queue("TopicA", 0) == 41
    assert verifying.verify(tmp_path).clean


def test_crash_between_creating_a_queue_file_and_writing_its_unit_loses_no_entry(
    tmp_path: Path,
) -> None:
    """Dispatch killed after it created queue 1's first file for record 1, before it wrote the
    unit (creating a file syncs its directory: a wide window). Recovery finds that queue empty
    and cuts it; the re-dispatch from record 1 must rebuild it, not skip its records as
    already built."""
    store = open_store(tmp_path)
    results = [store.put_message(msg(i, queue_id=i % 2)) for i in range(4)]
    assert store.wait_dispatched(results[-1].end_offset)
    store.abandon()
    cq_dir = tmp_path / "consumequeue" / "TopicA"
    with open(cq_dir / "0" / f"{0:020d}", "r+b") as f:  # record 2 was not dispatched yet
        f.seek(20)
        f.write(bytes(20))
    with open(cq_dir / "1" / f"{0:020d}", "r+b") as f:  # the file exists, its unit does not
        f.write(bytes(40))
    with open_store(tmp_path) as store:
        assert not store.last_exit_ok
        assert store.wait_dispatched(store.commitlog.max_offset())
        for i, r in enumerate(results):
            assert r.queue_offset == i // 2
            found = querying.by_queue_offset(store, "TopicA", i % 2, r.queue_offset)
            assert found is not None, f"record {i} has no consume-queue entry"
            assert found.physical_offset == r.wrote_offset
        assert store.max_offset_in_queue("TopicA", 1) == 2
        assert store.put_message(msg(4, queue_id=1)).queue_offset == 2
    assert verifying.verify(tmp_path).clean


def _last_record(tmp_path: Path) -> tuple[Path, int, int]:
    with open_store(tmp_path) as store:
        results = put_all(store, 20)
    last = results[-1]
    path = tmp_path / "commitlog" / f"{(last.wrote_offset // 65536) * 65536:020d}"
    return path, last.wrote_offset % 65536, last.wrote_bytes


@pytest.mark.parametrize("damage", ["torn", "zeroed", "bitflip", "garbage-after"])
def test_damaged_tail_is_cut_at_the_last_valid_record(tmp_path: Path, damage: str) -> None:
    path, pos, size = _last_record(tmp_path)
    with open(path, "r+b") as f:
        if damage == "torn":
            f.seek(pos + size // 2)
            f.write(b"\xab" * (size // 2))
        elif damage == "zeroed":
            f.seek(pos + 100)
            f.write(bytes(size - 100))
        elif damage == "bitflip":
            f.seek(pos + 200)
            byte = f.read(1)[0]
            f.seek(pos + 200)
            f.write(bytes([byte ^ 0x10]))
        else:
            f.seek(pos + size)
            f.write(b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + b"\x55" * 200)
    (tmp_path / "abort").write_text("1")
    # a crash: the checkpoint last saw the log flushed up to the record before the last one
    set_flushed_floor(tmp_path, path_start(path) + pos)
    with open_store(tmp_path) as store:
        rec = store.recovery
        assert rec is not None
        if damage == "garbage-after":
            assert rec.process_offset == (pos + size) + path_start(path)
            assert store.max_offset_in_queue("TopicA", 0) == 20
        else:
            assert rec.damaged, rec.stop_reason
            assert rec.process_offset == pos + path_start(path)
            assert store.max_offset_in_queue("TopicA", 0) == 19
            assert store.put_message(msg(99)).queue_offset == 19
    assert verifying.verify(tmp_path).clean


def path_start(path: Path) -> int:
    return int(path.name)


def set_flushed_floor(root: Path, offset: int) -> None:
    """Write the checkpoint's flushedPhyOffset (@40) as a crash would have left it."""
    with open(root / "checkpoint", "r+b") as f:
        f.seek(40)
        f.write(struct.pack(">q", offset))


def test_truncated_last_file_is_extended_and_cut(tmp_path: Path) -> None:
    path, pos, size = _last_record(tmp_path)
    os.truncate(path, pos + size // 2)  # after a clean shutdown: damage, not a torn write
    with pytest.raises(RecoveryRefused, match=path.name):
        open_store(tmp_path)
    with open_store(tmp_path, force_recover=True) as store:
        assert store.recovery is not None
        assert store.recovery.process_offset == pos + path_start(path)
        assert path.stat().st_size == 65536
    assert verifying.verify(tmp_path).clean


def test_truncated_middle_file_is_refused_with_its_name(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        put_all(store, 200)
    first = tmp_path / "commitlog" / "00000000000000000000"
    os.truncate(first, 1000)
    with pytest.raises(CorruptionError, match="00000000000000000000"):
        MessageStore(cfg(tmp_path)).open()


def test_truncate_cuts_everything_derived_and_nothing_comes_back(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        results = put_all(store, 60)
        cut = results[45].wrote_offset
        store.truncate(cut)
        assert store.commitlog.max_offset() == cut
        assert store.max_offset_in_queue("TopicA", 0) == 45
        assert not querying.by_key(store, "TopicA", "key50").messages
        r = store.put_message(msg(1000, size=100))
        assert r.queue_offset == 45
        assert r.wrote_offset == cut
        assert store.wait_dispatched(r.end_offset)
    store = open_store(tmp_path)  # a later crash must not bring the cut records back
    store.abandon()
    with open_store(tmp_path) as store:
        assert store.max_offset_in_queue("TopicA", 0) == 46
        assert querying.by_key(store, "TopicA", "key1000").messages
        assert not querying.by_key(store, "TopicA", "key50").messages
    assert verifying.verify(tmp_path).clean


def test_queries_by_id_key_uniq_key_and_time(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        results = put_all(store, 20)
        by_id = querying.by_offset_msg_id(store, results[3].offset_msg_id)
        assert by_id is not None
        assert by_id.body.startswith(b"m3:")
        found = querying.by_key(store, "TopicA", "key7")
        assert [m.body[:3] for m in found.messages] == [b"m7:"]
        assert len(querying.by_key(store, "TopicA", "common").messages) == 20
        uniq = by_id.uniq_key
        assert uniq is not None
        assert len(querying.by_key(store, "TopicA", uniq, unique=True).messages) == 1
        ts = results[10].store_timestamp_ms
        lower = querying.offset_by_time(store, "TopicA", 0, ts, Boundary.LOWER)
        upper = querying.offset_by_time(store, "TopicA", 0, ts, Boundary.UPPER)
        stamps = [r.store_timestamp_ms for r in results]
        assert lower == stamps.index(ts)
        assert upper == len(stamps) - 1 - stamps[::-1].index(ts)
        assert querying.offset_by_time(store, "TopicA", 0, 0) == 0
        assert querying.offset_by_time(store, "TopicA", 0, 2**62) == 20


@pytest.mark.parametrize(
    ("message", "error", "text"),
    [
        (Message(topic="T", body=b"x" * 20000), MessageTooLarge, "16384"),
        (Message(topic="t" * 128, body=b"x"), TopicNameIllegal, "127"),
        (Message(topic="bad topic!", body=b"x"), TopicNameIllegal, "' '"),
        (Message(topic="T", body=b"x", properties={"p": "v" * 33000}), PropertiesTooLarge, "32767"),
    ],
)
def test_bad_input_is_refused_naming_the_problem(
    tmp_path: Path, message: Message, error: type[Exception], text: str
) -> None:
    with open_store(tmp_path) as store:
        with pytest.raises(error, match=text):
            store.put_message(message)
        assert store.commitlog.max_offset() == 0


def test_cleanup_removes_expired_files_and_what_pointed_into_them(tmp_path: Path) -> None:
    with open_store(tmp_path, index_items_max=64, index_hash_slots=16) as store:
        put_all(store, 300)
        files = sorted((tmp_path / "commitlog").iterdir())
        assert len(files) >= 5
        for f in files:
            os.utime(f, (1, 1))  # expired long ago
        index_before = len(store.index.files) if store.index else 0
        deleted = store.clean_now()
        assert deleted == len(files) - 1  # never the active file
        last = store.cleaner.last_result
        assert last is not None
        assert last.bytes_freed == deleted * 65536
        assert store.commitlog.min_offset() == int(files[-1].name)
        assert store.min_offset_in_queue("TopicA", 0) > 0
        assert store.index is not None
        assert len(store.index.files) < index_before
        low = store.get_messages("TopicA", 0, 0, 1)
        assert low.status is GetStatus.OFFSET_TOO_SMALL


def test_full_disk_refuses_writes_but_serves_reads(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        put_all(store, 3)
        store.cleaner.ratio_probe = lambda path: 0.95
        store.cleaner.run(manual=False)
        with pytest.raises(DiskFull, match="warning ratio"):
            store.put_message(msg(3))
        assert store.get_messages("TopicA", 0, 0, 3).status is GetStatus.FOUND
        store.cleaner.ratio_probe = lambda path: 0.40
        store.cleaner.run(manual=False)
        assert store.put_message(msg(3)).queue_offset == 3


def test_second_process_cannot_open_a_locked_store(tmp_path: Path) -> None:
    from gannet.node.store.errors import StoreLocked

    with open_store(tmp_path), pytest.raises(StoreLocked, match="in use"):
        MessageStore(cfg(tmp_path)).open()


def _local_ms(hour: int) -> int:
    import datetime as dt

    when = dt.datetime.now().astimezone().replace(hour=hour, minute=30, second=0, microsecond=0)
    return int(when.timestamp() * 1000)


def test_cleanup_runs_at_delete_when_hours_and_keeps_unexpired_files(tmp_path: Path) -> None:
    with open_store(tmp_path, delete_when="03;04") as store:
        put_all(store, 200)
        store.cleaner.ratio_probe = lambda path: 0.10
        files = sorted((tmp_path / "commitlog").iterdir())
        for f in files[:2]:
            os.utime(f, (1, 1))  # only the two oldest are past fileReservedTime
        idle = store.cleaner.run(manual=False, now_ms=_local_ms(5))
        assert (idle.reason, idle.commitlog_files_deleted) == ("idle", 0)
        due = store.cleaner.run(manual=False, now_ms=_local_ms(4))
        assert (due.reason, due.commitlog_files_deleted) == ("time", 2)
        assert store.commitlog.min_offset() == int(files[2].name)


def test_clean_forcibly_ratio_deletes_unexpired_files_when_allowed(tmp_path: Path) -> None:
    """RocketMQ's behaviour, opted into; the default keeps unconsumed messages
    (tests/store/test_cleanup_policy.py)."""
    with open_store(tmp_path, delete_when="04", delete_unconsumed=True) as store:
        put_all(store, 200)
        files = sorted((tmp_path / "commitlog").iterdir())
        store.cleaner.ratio_probe = lambda path: 0.87  # above 85 %: clean at once
        result = store.cleaner.run(manual=False, now_ms=_local_ms(12))
        assert result.reason == "space"
        assert result.commitlog_files_deleted == min(len(files) - 1, 10)
        assert not store.disk_full  # below the 90 % warning ratio


def test_cleanup_policy_is_validated(tmp_path: Path) -> None:
    from gannet.node.store.errors import StoreError

    with open_store(tmp_path) as store:
        with pytest.raises(StoreError, match="deleteWhen"):
            store.cleaner.set_policy(delete_when="noon")
        assert store.cleaner.set_policy(file_reserved_hours=1.5).file_reserved_hours == 1.5


def test_truncate_refuses_an_offset_inside_a_record_or_outside_the_log(tmp_path: Path) -> None:
    from gannet.node.store.errors import StoreError

    with open_store(tmp_path) as store:
        results = put_all(store, 5)
        with pytest.raises(StoreError, match="not the start of a record"):
            store.truncate(results[2].wrote_offset + 7)
        with pytest.raises(StoreError, match="holds"):
            store.truncate(results[-1].end_offset + 100)
        assert store.commitlog.max_offset() == results[-1].end_offset


def test_failed_fsync_stops_writes_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gannet.node.store.errors import StoreNotWritable

    store = open_store(tmp_path)
    put_all(store, 2)

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken)
    with pytest.raises(StoreNotWritable, match="fsync failed"):
        store.put_message(msg(2))
    monkeypatch.undo()  # even with a healthy disk again, the node must not carry on
    with pytest.raises(StoreNotWritable, match="fatal error"):
        store.put_message(msg(3))
    assert store.get_messages("TopicA", 0, 0, 2).status is GetStatus.FOUND  # reads go on
    store.close()
    assert (tmp_path / "abort").exists()  # the next start recovers abnormally
