"""The store's invariants stop it when its state is broken: state corrupted directly (as a bug
would) trips the assertion that states the invariant, with a message naming the numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import DispatchInfo, Message
from gannet.node.store.message_store import MessageStore


def open_store(root: Path) -> MessageStore:
    config = StoreConfig.for_tests(root, flush_mode=FlushMode.ASYNC_FLUSH)
    return MessageStore(config).open(start_services=False)


def test_a_consume_queue_unit_past_the_end_of_the_log_stops_dispatch(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        store.put_messages_nowait([Message(topic="T", body=b"x")], dispatch_inline=True)
        assert store.get_messages("T", 0, 0, 8).messages  # dispatched as usual
        end = store.commitlog.max_offset()
        # Broken state: a hand-off entry for a record past the end of the log, committed.
        bogus = DispatchInfo("T", 0, end, 100, 0, 0, 1, None, None, 0, 0, {})
        store.dispatch.offer([bogus])
        store.dispatch.commit_offset = end + 100
        with pytest.raises(AssertionError, match="past the end of the commit log"):
            store.dispatch.dispatch_available()
        assert store.max_offset_in_queue("T", 0) == 1  # nothing was written for it
    finally:
        store.abandon()


def test_a_consume_queue_unit_must_name_a_record(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        cq = store.queues.find_or_create("T", 0)
        with pytest.raises(AssertionError, match=r"size 0, queue offset 0\) cannot point"):
            cq.put(100, 0, 0, 0)
        with pytest.raises(AssertionError, match="queue offset -1"):
            cq.put(100, 10, 0, -1)
        assert cq.max_offset_in_queue() == 0
    finally:
        store.abandon()


def test_a_mapped_file_position_stays_inside_the_file(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        store.put_messages_nowait([Message(topic="T", body=b"x")], dispatch_inline=True)
        f = store.commitlog.files.files[-1]
        with pytest.raises(AssertionError, match="outside the file"):
            f.set_positions(f.file_size + 1)
    finally:
        store.abandon()
