"""Inline dispatch (:mod:`gannet.node.store.queues.dispatching`): a send that commits at once
dispatches
its records in the calling thread, the dispatch thread takes what is past the inline limit, and
``wait_dispatched`` callers are woken either way."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gannet.node.store import message_store
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

pytestmark = pytest.mark.usefixtures("put_path")  # native and Python put paths

TOPIC = "dispatch-topic"


def _config(root: Path) -> StoreConfig:
    return StoreConfig(
        root_dir=root,
        flush_mode=FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=1024 * 1024,
        index_hash_slots=1_000,
        index_items_max=4_000,
    )


def _messages(count: int) -> list[Message]:
    return [
        Message(topic=TOPIC, body=f"m{i}".encode(), properties={"KEYS": f"k{i}"}, queue_id=0)
        for i in range(count)
    ]


def test_an_inline_put_is_dispatched_before_it_returns(tmp_path: Path) -> None:
    with MessageStore(_config(tmp_path)).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=1, write_queue_nums=1))
        seen_in: list[str] = []
        store.add_arrival_listener(
            lambda infos: seen_in.extend([threading.current_thread().name] * len(infos))
        )
        results, durable_at = store.put_messages_nowait(_messages(3), dispatch_inline=True)
        assert durable_at is None
        # No waiting: the consume queue already has the three, dispatched by this thread.
        assert store.max_offset_in_queue(TOPIC, 0) == 3
        assert store.dispatch.reput_from == results[-1].end_offset
        assert seen_in == [threading.current_thread().name] * 3
        got = store.get_messages(TOPIC, 0, 0, 10)
        assert [m.commit_offset for m in got.messages] == [r.wrote_offset for r in results]


def test_a_listener_is_called_once_per_dispatched_batch(tmp_path: Path) -> None:
    with MessageStore(_config(tmp_path)).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=1, write_queue_nums=1))
        batches: list[list[int]] = []
        store.add_arrival_listener(lambda infos: batches.append([i.queue_offset for i in infos]))
        store.put_messages_nowait(_messages(3), dispatch_inline=True)
        store.put_messages_nowait(_messages(2), dispatch_inline=True)
        assert batches == [[0, 1, 2], [3, 4]]


def test_a_failing_listener_does_not_stop_dispatch_or_the_others(tmp_path: Path) -> None:
    with MessageStore(_config(tmp_path)).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=1, write_queue_nums=1))
        seen: list[int] = []

        def failing(infos: object) -> None:
            raise RuntimeError("listener bug")

        store.add_arrival_listener(failing)
        store.add_arrival_listener(lambda infos: seen.extend(i.queue_offset for i in infos))
        results, _ = store.put_messages_nowait(_messages(3), dispatch_inline=True)
        assert seen == [0, 1, 2]
        got = store.get_messages(TOPIC, 0, 0, 10)
        assert [m.commit_offset for m in got.messages] == [r.wrote_offset for r in results]


def test_a_plain_put_leaves_dispatch_to_the_thread(tmp_path: Path) -> None:
    with MessageStore(_config(tmp_path)).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=1, write_queue_nums=1))
        seen_in: list[str] = []
        store.add_arrival_listener(
            lambda infos: seen_in.extend([threading.current_thread().name] * len(infos))
        )
        results, _ = store.put_messages_nowait(_messages(2))
        assert store.wait_dispatched(results[-1].end_offset, 10)
        assert seen_in == ["gannet-dispatch", "gannet-dispatch"]


def test_records_past_the_inline_limit_go_to_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_store, "INLINE_DISPATCH_RECORDS_MAX", 2)
    with MessageStore(_config(tmp_path)).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=1, write_queue_nums=1))
        seen_in: list[str] = []
        store.add_arrival_listener(
            lambda infos: seen_in.extend([threading.current_thread().name] * len(infos))
        )
        results, _ = store.put_messages_nowait(_messages(5), dispatch_inline=True)
        assert store.wait_dispatched(results[-1].end_offset, 10)
        me = threading.current_thread().name
        assert seen_in[:2] == [me, me]
        assert seen_in[2:] == ["gannet-dispatch"] * 3
        assert store.max_offset_in_queue(TOPIC, 0) == 5


def test_inline_dispatch_waits_its_turn_behind_a_running_pass(tmp_path: Path) -> None:
    """While another pass holds the pass lock the caller does not block: the thread
    dispatches the records once the pass ends, and a waiter is woken."""
    with MessageStore(_config(tmp_path)).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=1, write_queue_nums=1))
        with store.dispatch.paused():
            results, _ = store.put_messages_nowait(_messages(4), dispatch_inline=True)
            assert store.max_offset_in_queue(TOPIC, 0) == 0  # nothing dispatched yet
        assert store.wait_dispatched(results[-1].end_offset, 10)
        assert store.max_offset_in_queue(TOPIC, 0) == 4


def test_a_failed_pass_is_retried_until_it_passes(tmp_path: Path) -> None:
    """A dispatcher that raises (here: the topic's consume-queue directory cannot be made, a
    file stands at its path, as a full disk refuses a new queue file) must not end dispatch:
    once the path is free the same records are dispatched (fault-harness seed 702)."""
    with MessageStore(_config(tmp_path)).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=1, write_queue_nums=1))
        blocker = store.config.consume_queue_dir / TOPIC
        blocker.parent.mkdir(parents=True, exist_ok=True)
        blocker.write_bytes(b"not a directory")
        results, _ = store.put_messages_nowait(_messages(3))
        end = results[-1].end_offset
        assert not store.dispatch.wait_dispatched(end, 0.5)  # the pass fails, nothing moved
        blocker.unlink()
        assert store.dispatch.wait_dispatched(end, 10.0), "dispatch never resumed"
        assert store.dispatch.failed_passes_total >= 1
        assert store.max_offset_in_queue(TOPIC, 0) == 3
        got = store.get_messages(TOPIC, 0, 0, 10)
        assert [m.commit_offset for m in got.messages] == [r.wrote_offset for r in results]
