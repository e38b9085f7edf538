"""``verify`` reports commit-log records that dispatch must have given a consume-queue unit but
whose unit is gone (zeroed or cut off), naming topic, queue, queue offset and commit-log offset;
a clean store, transactional records and a not-yet-dispatched tail stay clean."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log import records
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.upkeep import verifying

TOPIC = "VerifyT"
OTHER = "VerifyO"


def open_store(root: Path) -> MessageStore:
    return MessageStore(StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)).open()


def cq_file(root: Path, topic: str, qid: int) -> Path:
    return root / "consumequeue" / topic / str(qid) / f"{0:020d}"


def write_store(root: Path, n: int = 10) -> dict[tuple[str, int], int]:
    """``n`` messages on TOPIC queue 0, then one on OTHER (so the dispatch reach lies past every
    TOPIC record); returns commit-log offset by (topic, queue offset)."""
    where: dict[tuple[str, int], int] = {}
    with open_store(root) as store:
        for i in range(n):
            res = store.put_message(Message(topic=TOPIC, body=f"m{i}".encode()))
            where[(TOPIC, res.queue_offset)] = res.wrote_offset
        last = store.put_message(Message(topic=OTHER, body=b"last"))
        where[(OTHER, last.queue_offset)] = last.wrote_offset
        assert store.wait_dispatched(last.end_offset)
    return where


def zero_unit(root: Path, topic: str, qid: int, queue_offset: int) -> None:
    fd = os.open(cq_file(root, topic, qid), os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(verifying.CQ_UNIT_SIZE), queue_offset * verifying.CQ_UNIT_SIZE)
    finally:
        os.close(fd)


def test_a_clean_store_has_no_missing_units(tmp_path: Path) -> None:
    write_store(tmp_path)
    report = verifying.verify(tmp_path)
    assert report.clean, report.damage
    assert report.missing_units == 0
    assert report.dispatch_reach == report.commitlog_end


def test_a_zeroed_unit_is_reported_with_topic_queue_and_offsets(tmp_path: Path) -> None:
    where = write_store(tmp_path)
    zero_unit(tmp_path, TOPIC, 0, 9)  # the queue's last unit: nothing after it in the queue
    report = verifying.verify(tmp_path)
    assert report.missing_units == 1
    assert [(d.where, d.start) for d in report.damage] == [(f"consumequeue/{TOPIC}/0", 9)]
    reason = report.damage[0].reason
    assert f"topic {TOPIC} queue 0 offset 9" in reason
    assert f"commit-log offset {where[(TOPIC, 9)]}" in reason


def test_a_zeroed_unit_inside_the_only_queue_is_reported(tmp_path: Path) -> None:
    """One queue only: the units after the hole still give the dispatch reach."""
    with open_store(tmp_path) as store:
        results = [store.put_message(Message(topic=TOPIC, body=f"m{i}".encode())) for i in range(8)]
        assert store.wait_dispatched(results[-1].end_offset)
    zero_unit(tmp_path, TOPIC, 0, 3)
    report = verifying.verify(tmp_path)
    assert report.cq_units_ok == 7
    assert report.missing_units == 1
    assert [d.start for d in report.damage] == [3]
    assert f"commit-log offset {results[3].wrote_offset}" in report.damage[0].reason


def test_a_truncated_queue_file_is_reported(tmp_path: Path) -> None:
    where = write_store(tmp_path)
    os.truncate(cq_file(tmp_path, TOPIC, 0), 7 * verifying.CQ_UNIT_SIZE)
    report = verifying.verify(tmp_path)
    assert report.missing_units == 3
    missing = [d for d in report.damage if "no consume-queue entry" in d.reason]
    assert [d.start for d in missing] == [7, 8, 9]
    assert f"commit-log offset {where[(TOPIC, 8)]}" in missing[1].reason


def test_a_missing_queue_directory_is_reported(tmp_path: Path) -> None:
    write_store(tmp_path, n=2)
    os.remove(cq_file(tmp_path, TOPIC, 0))
    os.rmdir(cq_file(tmp_path, TOPIC, 0).parent)
    report = verifying.verify(tmp_path)
    assert report.missing_units == 2
    assert {d.where for d in report.damage} == {f"consumequeue/{TOPIC}/0"}


def test_reports_are_bounded_with_a_count(tmp_path: Path, monkeypatch) -> None:
    write_store(tmp_path)
    os.truncate(cq_file(tmp_path, TOPIC, 0), 2 * verifying.CQ_UNIT_SIZE)
    monkeypatch.setattr(verifying, "MISSING_REPORTED_MAX", 3)
    report = verifying.verify(tmp_path)
    assert report.missing_units == 8
    assert [d.start for d in report.damage[:3]] == [2, 3, 4]
    assert len(report.damage) == 4
    assert "5 more records without a consume-queue entry" in report.damage[3].reason


def test_an_undispatched_tail_is_not_missing(tmp_path: Path) -> None:
    """Records past the dispatch reach (a crash before dispatch, or past the Raft commit
    offset) have no unit yet; recovery dispatches them, so verify must not report them."""
    with open_store(tmp_path) as store:
        last = None
        for i in range(6):
            last = store.put_message(Message(topic=TOPIC, body=f"m{i}".encode()))
        assert last is not None
        assert store.wait_dispatched(last.end_offset)
    os.truncate(cq_file(tmp_path, TOPIC, 0), 4 * verifying.CQ_UNIT_SIZE)  # drop the last two
    report = verifying.verify(tmp_path)
    assert report.clean, report.damage
    assert report.dispatch_reach < report.commitlog_end


def test_mixed_in_process_sends_verify_clean(tmp_path: Path) -> None:
    """Several topics and queues, transaction prepare/commit/rollback (only the commit gets a
    unit), batches and rolled commit-log files: nothing reported missing."""
    tx = {
        "prepare": records.SYSFLAG_TRANSACTION_PREPARED_TYPE,
        "commit": records.SYSFLAG_TRANSACTION_COMMIT_TYPE,
        "rollback": records.SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    }
    with open_store(tmp_path) as store:
        end = 0
        for i in range(300):
            kind = ("normal", "prepare", "commit", "rollback")[i % 4]
            msg = Message(
                topic=(TOPIC, OTHER)[i % 2],
                queue_id=i % 3,
                body=bytes(200) + str(i).encode(),
                sys_flag=tx.get(kind, 0),
            )
            batch = store.put_messages([msg, Message(topic=OTHER, queue_id=1, body=b"b")])
            end = batch[-1].end_offset
        assert store.wait_dispatched(end)
        assert store.commitlog.min_offset() == 0
        assert end > 64 * 1024  # rolled files
    report = verifying.verify(tmp_path)
    assert report.clean, report.damage[:5]
    assert report.missing_units == 0
    assert report.dispatch_reach == report.commitlog_end


@pytest.mark.parametrize("flag", [records.SYSFLAG_TRANSACTION_PREPARED_TYPE])
def test_a_prepare_without_unit_is_not_missing(tmp_path: Path, flag: int) -> None:
    with open_store(tmp_path) as store:
        store.put_message(Message(topic=TOPIC, body=b"half", sys_flag=flag))
        last = store.put_message(Message(topic=OTHER, body=b"after"))
        assert store.wait_dispatched(last.end_offset)
    assert not cq_file(tmp_path, TOPIC, 0).exists()
    report = verifying.verify(tmp_path)
    assert report.clean, report.damage


def test_a_raft_tail_past_the_commit_offset_is_not_missing(tmp_path: Path) -> None:
    """With Raft, dispatch stops at the commit offset: the records past it have no units."""
    config = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    with MessageStore(config, commit_follows_flush=False).open() as store:
        results = [
            store.put_message(Message(topic=(TOPIC, OTHER)[i % 2], body=f"m{i}".encode()))
            for i in range(10)
        ]
        store.set_commit_offset(results[5].end_offset)
        assert store.wait_dispatched(results[5].end_offset)
    assert store.max_offset_in_queue(TOPIC, 0) == 3  # records 0, 2, 4 dispatched; 6, 8 not
    report = verifying.verify(tmp_path)
    assert report.clean, report.damage
    assert report.dispatch_reach == results[5].end_offset
    zero_unit(tmp_path, TOPIC, 0, 1)
    report = verifying.verify(tmp_path)
    assert [(d.where, d.start) for d in report.damage] == [(f"consumequeue/{TOPIC}/0", 1)]
