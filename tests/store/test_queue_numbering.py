"""A queue's numbering: a failed append never leaves a hole, ``verify`` reports a shifted
queue with topic, queue and offset, and recovery refuses a store written with a hole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import CorruptionError, MessageIllegal
from gannet.node.store.log.commitlog import queue_key
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.upkeep import verifying

pytestmark = pytest.mark.usefixtures("put_path")  # native and Python put paths

TOPIC = "HostT"


def open_store(root: Path) -> MessageStore:
    return MessageStore(StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)).open()


def good(i: int) -> Message:
    return Message(topic=TOPIC, body=f"m{i}".encode(), properties={"UNIQ_KEY": f"u{i}"})


@pytest.mark.parametrize(
    "field",
    [
        {"born_timestamp_ms": -(2**63) * 1000},
        {"born_timestamp_ms": 2**63},
        {"flag": 2**31},
        {"reconsume_times": -(2**31) - 1},
        {"prepared_transaction_offset": 2**64},
    ],
)
def test_a_record_that_cannot_be_packed_reserves_nothing(tmp_path: Path, field) -> None:
    with open_store(tmp_path) as store:
        first = store.put_message(good(0))
        bad = good(1)
        for name, value in field.items():
            setattr(bad, name, value)
        with pytest.raises(MessageIllegal, match="must fit"):
            store.put_messages([good(2), bad])  # the whole batch is refused
        after = store.put_message(good(3))
        assert (first.queue_offset, after.queue_offset) == (0, 1)
        assert store.commitlog.queue_offsets[queue_key(TOPIC, 0)] == 2
        assert store.wait_dispatched(after.end_offset)
    assert verifying.verify(tmp_path).clean


def test_append_packs_everything_before_reserving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, put_path: str
) -> None:
    """Even a failure the field checks do not foresee leaves no reserved offset behind."""
    from gannet.node.store.log import native, packing

    with open_store(tmp_path) as store:
        store.put_message(good(0))
        real = packing.pack_record_into
        calls = {"n": 0}

        def failing(*args: object, **kw: object) -> None:
            calls["n"] += 1
            if calls["n"] == 2:
                raise ValueError("simulated encoder failure")
            real(*args, **kw)  # type: ignore[arg-type]

        class Corrupting:  # the native path: the second record's fields no longer add up
            def __init__(self, codec: Any) -> None:
                self.codec = codec

            def __getattr__(self, name: str) -> Any:
                return getattr(self.codec, name)

            def encode_all(self, msgs: list[Message], *args: Any) -> list[Any]:
                batch: list[Any] = self.codec.encode_all(msgs, *args)
                if len(batch) == 2:
                    fields, key = batch[1]
                    batch[1] = ((*fields[:11], b"", *fields[12:]), key)
                    calls["n"] = 2
                return batch

        if put_path == "native":
            monkeypatch.setattr(native, "codec", Corrupting(native.codec))
        monkeypatch.setattr(packing, "pack_record_into", failing)
        with pytest.raises(ValueError, match=r"simulated|do not add up to their TOTALSIZE"):
            store.put_messages([good(1), good(2)])
        assert calls["n"] == 2
        monkeypatch.setattr(packing, "pack_record_into", real)
        monkeypatch.setattr(native, "codec", getattr(native.codec, "codec", native.codec))
        after = store.put_message(good(3))
        assert after.queue_offset == 1
        assert store.wait_dispatched(after.end_offset)
    assert verifying.verify(tmp_path).clean


def _write_with_hole(root: Path) -> None:
    """What the old append path left on disk: offsets 0, 1, (reserved, failed), 3, 4."""
    with open_store(root) as store:
        store.put_message(good(0))
        store.put_message(good(1))
        store.commitlog.queue_offsets[queue_key(TOPIC, 0)] += 1  # the lost reservation
        for i in (3, 4):
            res = store.put_message(good(i))
        assert store.wait_dispatched(res.end_offset)


def test_verify_reports_a_shifted_queue(tmp_path: Path) -> None:
    _write_with_hole(tmp_path)
    report = verifying.verify(tmp_path)
    shifted = [d for d in report.damage if "numbering is shifted" in d.reason]
    assert [(d.where, d.start) for d in shifted] == [
        (f"consumequeue/{TOPIC}/0", 2),
        (f"consumequeue/{TOPIC}/0", 3),
    ]
    assert f"topic {TOPIC} queue 0 offset 2" in shifted[0].reason
    assert "queue offset 3" in shifted[0].reason


def test_recovery_refuses_a_shifted_queue(tmp_path: Path) -> None:
    _write_with_hole(tmp_path)
    with pytest.raises(CorruptionError, match=f"topic {TOPIC} queue 0: the entry at offset 3"):
        open_store(tmp_path)


def test_recovery_refuses_a_hole_in_the_undispatched_tail(tmp_path: Path) -> None:
    _write_with_hole(tmp_path)
    # Lose the consume queue: recovery rebuilds it from the records and meets the hole.
    for f in (tmp_path / "consumequeue" / TOPIC / "0").iterdir():
        f.unlink()
    (tmp_path / "abort").write_bytes(b"")
    with pytest.raises(CorruptionError, match="has queue offset 3, but the queue continues"):
        open_store(tmp_path)


def test_a_clean_store_reopens(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        for i in range(5):
            res = store.put_message(good(i))
        assert store.wait_dispatched(res.end_offset)
    (tmp_path / "abort").write_bytes(b"")
    with open_store(tmp_path) as store:
        assert store.put_message(good(5)).queue_offset == 5


def test_a_topic_deleted_and_created_again_reopens(tmp_path: Path) -> None:
    """The old topic's records (higher offsets, in the file recovery scans) lie before the new
    queue's: not a hole."""
    with open_store(tmp_path) as store:
        for _ in range(80):  # 1 KB each: two 64 KiB commit-log files
            res = store.put_message(Message(topic=TOPIC, body=bytes(1000)))
        assert res.wrote_offset >= 65536
        assert store.wait_dispatched(res.end_offset)
        store.queues.destroy_topic(TOPIC)
        store.commitlog.remove_queue_offsets(lambda key: key.startswith(f"{TOPIC}-"))
        for i in range(2):
            res = store.put_message(good(10 + i))
        assert res.queue_offset == 1
        assert store.wait_dispatched(res.end_offset)
    with open_store(tmp_path) as store:  # a clean exit: recovery scans the last file only
        assert store.put_message(good(20)).queue_offset == 2


def test_disk_full_mid_batch_gives_back_the_unwritten_offsets(tmp_path: Path, monkeypatch) -> None:
    """The first message of a batch lands in the old file, the second needs a new one that
    cannot be created: the second's offset is given back, so the next message takes it."""
    from gannet.node.store.errors import DiskFull

    with open_store(tmp_path) as store:
        files = store.commitlog.files
        while files.last_file_for_append(0).remaining_bytes > 3000:
            store.put_message(Message(topic=TOPIC, body=bytes(1000)))
        before = store.commitlog.queue_offsets[queue_key(TOPIC, 0)]
        real = type(files).last_file_for_append
        calls = {"n": 0}

        def refusing(self, offset):
            calls["n"] += 1
            if calls["n"] > 1:
                raise DiskFull("simulated: no space for a new commit-log file")
            return real(self, offset)

        monkeypatch.setattr(type(files), "last_file_for_append", refusing)
        batch = [Message(topic=TOPIC, body=bytes(1500)) for _ in range(3)]
        with pytest.raises(DiskFull):
            store.put_messages(batch)
        monkeypatch.setattr(type(files), "last_file_for_append", real)
        assert store.commitlog.queue_offsets[queue_key(TOPIC, 0)] == before + 1
        res = store.put_message(good(99))
        assert res.queue_offset == before + 1
        assert store.wait_dispatched(res.end_offset)
    assert verifying.verify(tmp_path).clean
