"""The store side of replication: a follower that writes the leader's raw bytes ends up with a
byte-identical commit log, and can take over with the right queue offsets."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import DiskFull, StoreError
from gannet.node.store.log import records
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.upkeep import verifying


def open_store(root: Path) -> MessageStore:
    config = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    return MessageStore(config, commit_follows_flush=False).open()


def test_follower_copy_is_byte_identical_and_can_lead(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    leader = open_store(tmp_path / "leader")
    follower = open_store(tmp_path / "follower")
    try:
        for i in range(150):
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(10, 2500)))
            leader.put_message(Message(topic=f"T{i % 3}", body=body, queue_id=i % 2))
        end = leader.commitlog.max_offset()
        leader.set_commit_offset(end)  # the Raft layer would, once a majority holds the bytes
        assert leader.wait_dispatched(end)
        offset = 0
        while offset < end:  # ship in ranges cut at random points, records split across calls
            chunk = leader.read_replicated(offset, rng.randrange(1, 9000))
            offset = follower.append_replicated(offset, chunk)
        assert follower.commitlog.max_offset() == end
        for name in ("00000000000000000000", "00000000000000065536", "00000000000000131072"):
            a = (tmp_path / "leader" / "commitlog" / name).read_bytes()
            b = (tmp_path / "follower" / "commitlog" / name).read_bytes()
            assert a == b, name
        follower.set_commit_offset(end)
        assert follower.wait_dispatched(end)
        assert follower.max_offset_in_queue("T1", 1) == leader.max_offset_in_queue("T1", 1) > 0
        # the follower takes over: its queue offsets continue where the leader's stopped
        nxt = follower.put_message(Message(topic="T1", body=b"after", queue_id=1))
        assert nxt.queue_offset == leader.max_offset_in_queue("T1", 1)
    finally:
        leader.close()
        follower.close()
    assert verifying.verify(tmp_path / "follower").clean


def test_raw_append_must_continue_the_log(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        with pytest.raises(StoreError, match="ends at 0"):
            store.append_replicated(100, b"x")
    finally:
        store.close()


def test_a_follower_above_its_warning_ratio_still_takes_the_leaders_bytes(tmp_path: Path) -> None:
    """Disk-full refuses producers (admission), never the leader's replicated bytes: a follower
    that refused them would stop replicating although a majority may have committed them."""
    leader = open_store(tmp_path / "leader")
    follower = open_store(tmp_path / "follower")
    try:
        leader.put_message(Message(topic="T", body=b"committed elsewhere"))
        follower.disk_full = True
        with pytest.raises(DiskFull, match="warning ratio"):
            follower.put_message(Message(topic="T", body=b"producer write"))
        end = leader.commitlog.max_offset()
        assert follower.append_replicated(0, leader.read_replicated(0, end)) == end
    finally:
        leader.close()
        follower.close()


def test_a_cut_keeps_the_queue_offsets_of_the_records_not_dispatched_below_it(
    tmp_path: Path,
) -> None:
    """Fault seed 104: a leader stepped down with records not committed yet and was elected
    again; writing its election record cut the bytes appended past its Raft log, and the cut
    numbered the queues from the consume queues only (what dispatch had reached), so the new
    term's first send took the queue offset of a kept, not yet committed record: two records
    at one queue offset, the second acknowledged but in no consume queue."""
    store = open_store(tmp_path)
    try:
        for i in range(3):
            store.put_message(Message(topic="T", body=b"committed %d" % i, queue_id=3))
        committed = store.commitlog.max_offset()
        store.set_commit_offset(committed)
        assert store.wait_dispatched(committed)
        tail = store.put_message(Message(topic="T", body=b"kept, not committed", queue_id=3))
        kept = store.commitlog.max_offset()
        stray = store.put_message(Message(topic="T", body=b"never proposed", queue_id=3))
        assert (tail.queue_offset, stray.queue_offset) == (3, 4)
        store.truncate(kept)  # the stray bytes cut; the tail stays
        after = store.put_message(Message(topic="T", body=b"next term", queue_id=3))
        assert after.queue_offset == 4
        end = store.commitlog.max_offset()
        store.set_commit_offset(end)  # the new term's commit commits the kept tail too
        assert store.wait_dispatched(end)
        assert store.max_offset_in_queue("T", 3) == 5
        bodies = [records.decode(m.data).body for m in store.get_messages("T", 3, 0, 10).messages]
        assert bodies[3:] == [b"kept, not committed", b"next term"]
    finally:
        store.close()
    assert verifying.verify(tmp_path).clean
