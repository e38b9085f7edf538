"""``MessageStore.reset_to``: the store side of catch-up below the leader's retention.

A real store directory with 64 KiB commit-log files: the log is wiped and restarts empty at a
file-aligned offset (first file named by it), consume queues and index are gone, new records
get that physical offset, dispatch and reads work, and a reopen (normal and after a crash)
recovers a log whose first file starts above 0. A misaligned offset is refused by name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import StoreError
from gannet.node.store.log import records
from gannet.node.store.log.mapped_files import offset_to_file_name
from gannet.node.store.message_store import MessageStore

pytestmark = pytest.mark.timeout(60)


def _fill(store: MessageStore, topic: str, count: int, size_bytes: int) -> None:
    for i in range(count):
        store.put_messages([records.Message(topic=topic, body=bytes([i % 251]) * size_bytes)])


def _bodies(store: MessageStore, topic: str) -> list[bytes]:
    got = store.get_messages(topic, 0, 0, 1000)
    out = []
    for stored in got.messages:
        message = store.read_message(stored.commit_offset)
        assert message is not None
        out.append(message.body)
    return out


def test_reset_restarts_an_empty_log_at_an_aligned_offset_and_recovers(tmp_path: Path) -> None:
    config = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    size = config.commitlog_file_size_bytes
    start = 5 * size
    with MessageStore(config).open() as store:
        _fill(store, "Old", 40, 4000)  # about 2.5 files
        assert store.commitlog.max_offset() > 2 * size
        assert store.wait_dispatched(store.commitlog.max_offset(), 10)
        with pytest.raises(
            StoreError, match=f"not a multiple of the commit-log file size \\({size}"
        ):
            store.reset_to(start + 100)
        store.reset_to(start)
        assert store.commitlog.min_offset() == start
        assert store.commitlog.max_offset() == start
        names = sorted(p.name for p in config.commitlog_dir.iterdir())
        assert names == [offset_to_file_name(start)]
        assert store.queues.queues() == []
        assert store.get_messages("Old", 0, 0, 10).messages == []
        assert store.max_offset_in_queue("Old", 0) == 0
        store.put_messages([records.Message(topic="New", body=b"after-reset")])
        assert store.wait_dispatched(store.commitlog.max_offset(), 10)
        got = store.get_messages("New", 0, 0, 10).messages
        assert [m.commit_offset for m in got] == [start]
        assert _bodies(store, "New") == [b"after-reset"]
        _fill(store, "New", 20, 4000)  # rolls into the next file
        end = store.commitlog.max_offset()
        assert store.wait_dispatched(end, 10)
        expected = _bodies(store, "New")
        assert len(expected) == 21
    with MessageStore(config).open() as store:  # normal restart
        assert store.commitlog.min_offset() == start
        assert store.commitlog.max_offset() == end
        assert _bodies(store, "New") == expected
        store.put_messages([records.Message(topic="New", body=b"more")])
        expected.append(b"more")
        end = store.commitlog.max_offset()
        assert store.wait_dispatched(end, 10)
        store.abandon()  # a crash: abnormal recovery of a log starting at `start`
    with MessageStore(config).open() as store:
        assert store.commitlog.min_offset() == start
        assert store.commitlog.max_offset() == end
        assert store.wait_dispatched(end, 10)
        assert _bodies(store, "New") == expected
