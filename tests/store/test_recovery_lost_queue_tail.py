"""A crash that drops one consume queue's unsynced tail, but not another's, is repaired.

Fault-injection seed 620 (``e2e/faults``, ``lose-unfsynced``: a killed member loses what it had
not fsynced, file by file): the config queue's consume queue lost its last entries while other
queues kept theirs. Recovery started dispatch at the highest queue end, so the config queue's
records in between were never dispatched again, and every later entry of that queue landed
one place off (``store verify``: "an entry pointing at commit-log offset … instead"). Dispatch
now starts at the first record its own consume queue lacks (``recovering`` step 1).
"""

from __future__ import annotations

import os
from pathlib import Path

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.consume_queues import CQ_UNIT_SIZE_BYTES
from gannet.node.store.upkeep import verifying

BEHIND, AHEAD = "LostTail", "KeptTail"


def open_store(root: Path) -> MessageStore:
    return MessageStore(StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)).open()


def test_a_queue_that_lost_its_unsynced_tail_is_dispatched_again(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        for i in range(10):
            store.put_message(Message(topic=BEHIND, body=f"b{i}".encode()))
            last = store.put_message(Message(topic=AHEAD, body=f"a{i}".encode()))
        assert store.wait_dispatched(last.end_offset)
        store._flush_structures()  # every queue synced, as the housekeeping thread does
        store.abandon()  # a crash: abort file left
    cq = tmp_path / "consumequeue" / BEHIND / "0" / f"{0:020d}"
    with open(cq, "r+b") as f:  # the last 4 entries were never synced: gone
        f.seek(6 * CQ_UNIT_SIZE_BYTES)
        f.write(bytes(4 * CQ_UNIT_SIZE_BYTES))
        os.fsync(f.fileno())
    with open_store(tmp_path) as store:
        assert not store.last_exit_ok
        assert store.max_offset_in_queue(BEHIND, 0) == 10
        got = store.get_messages(BEHIND, 0, 0, 32)
        assert [m.queue_offset for m in got.messages] == list(range(10))
        store.put_message(Message(topic=BEHIND, body=b"after"))  # lands at offset 10
        store.put_message(Message(topic=AHEAD, body=b"after"))
        assert store.wait_dispatched(store.commitlog.max_offset())
        assert store.max_offset_in_queue(BEHIND, 0) == 11
    report = verifying.verify(tmp_path)
    assert report.clean, report
