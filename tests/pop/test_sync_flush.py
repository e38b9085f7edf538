"""Pop and ack against a SYNC_FLUSH store with its threads running: concurrent ackers share
group commits (acks wait for durability outside the buffer lock) and nothing deadlocks."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from gannet.node.domain.committing import pop_flush_wait
from gannet.node.pop.config import PopConfig
from gannet.node.pop.service import PopBroker
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.errors import FlushTimeout
from gannet.node.store.log.commitlog import now_ms
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore


@pytest.mark.parametrize("merge", [True, False])
def test_concurrent_pop_and_ack_with_sync_flush(tmp_path: Path, merge: bool) -> None:
    config = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    store = MessageStore(config).open()
    broker = PopBroker(
        store,
        PopConfig(buffer_merge_enabled=merge),
        wait_durable=pop_flush_wait(store),
        rng=random.Random(3),
    )
    try:
        store.topic_configs.put(TopicConfig("T", read_queue_nums=4, write_queue_nums=4))
        store.group_configs.put(SubscriptionGroupConfig("G"))
        store.put_messages(
            [Message(topic="T", body=f"b{i}".encode(), queue_id=i % 4) for i in range(400)]
        )
        assert store.wait_dispatched(store.commitlog.max_offset(), 10)
        seen: list[str] = []
        failures: list[BaseException] = []
        guard = threading.Lock()

        def consume() -> None:
            try:
                consume_some()
            except BaseException as exc:
                failures.append(exc)

        def consume_some() -> None:
            for _ in range(60):
                got = broker.pop("G", "T", max_msgs=8, invisible_time_ms=60_000, now_ms=now_ms())
                errors = broker.ack_many(
                    "G", "T", [m.receipt_handle for m in got.messages], now_ms=now_ms()
                )
                assert errors == [None] * len(got.messages)
                with guard:
                    seen.extend(m.message.body.decode() for m in got.messages)

        threads = [threading.Thread(target=consume) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert failures == []
        assert len(seen) == len(set(seen))
        assert len(seen) > 100
    finally:
        broker.close()
        store.close()


def test_a_revive_log_write_not_flushed_in_time_is_a_flush_timeout(tmp_path: Path) -> None:
    """Pop's flush wait (the commit rule's blocking entry point) returns once an offset is
    flushed and names the revive-log write when one is not flushed within the timeout."""
    config = StoreConfig.for_tests(
        tmp_path, flush_mode=FlushMode.SYNC_FLUSH, sync_flush_timeout_ms=100
    )
    store = MessageStore(config).open()
    try:
        wait = pop_flush_wait(store)
        _, durable_at = store.put_messages_nowait([Message(topic="T", body=b"x")])
        assert durable_at is not None
        wait(durable_at)  # flushed: returns
        assert store.flush is not None
        assert store.flush.flushed_offset >= durable_at
        wait(None)  # nothing to wait for
        beyond = store.commitlog.max_offset() + 1_000_000  # never written, so never flushed
        with pytest.raises(FlushTimeout, match=rf"revive-log write up to {beyond} not flushed "
                           r"within 0\.1 s"):  # fmt: skip
            wait(beyond)
    finally:
        store.close()
