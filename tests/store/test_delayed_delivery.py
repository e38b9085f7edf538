"""Delayed delivery through the timer store, driven with a virtual clock (no sleeps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gannet.node.store import properties as props
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import MessageIllegal
from gannet.node.store.log.commitlog import now_ms
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.timers import delivery


def open_store(root: Path) -> MessageStore:
    config = StoreConfig.for_tests(root, flush_mode=FlushMode.ASYNC_FLUSH)
    return MessageStore(config).open(start_services=False)


def settle(store: MessageStore) -> None:
    store.dispatch.set_commit_offset(store.commitlog.max_offset())
    store.dispatch.dispatch_available()


def delayed(deliver_ms: int, i: int = 0) -> Message:
    return Message(
        topic="Orders",
        body=f"d{i}".encode(),
        queue_id=2,
        properties={props.TIMER_DELIVER_MS: str(deliver_ms), "KEYS": f"d{i}"},
    )


def test_delayed_message_is_parked_then_delivered_to_its_real_queue(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        t0 = now_ms()
        store.put_message(delayed(t0 + 10_000))
        settle(store)
        assert store.get_messages("Orders", 2, 0, 1).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        parked = store.get_messages(delivery.TIMER_TOPIC, 0, 0, 1)
        assert parked.status is GetStatus.FOUND
        assert store.timers.tick(t0 + 5_000) == 0  # not yet due
        settle(store)
        assert store.timers.tick(t0 + 12_000) == 1
        settle(store)
        got = store.get_messages("Orders", 2, 0, 4)
        assert got.status is GetStatus.FOUND
        assert len(got.messages) == 1
        m = store.read_message(got.messages[0].commit_offset)
        assert m is not None
        assert m.body == b"d0"
        assert props.REAL_TOPIC not in m.properties
        assert props.TIMER_ENQUEUE_MS in m.properties
        assert store.timers.tick(t0 + 20_000) == 0  # fired exactly once
    finally:
        store.close()


def test_pending_delays_survive_restart(tmp_path: Path) -> None:
    t0 = now_ms()
    store = open_store(tmp_path)
    for i in range(5):
        store.put_message(delayed(t0 + 30_000 + i * 1000, i))
    settle(store)
    store.timers.tick(t0)
    store.close()
    store = open_store(tmp_path)
    try:
        settle(store)
        assert store.timers.tick(t0 + 60_000) == 5
        settle(store)
        assert len(store.get_messages("Orders", 2, 0, 10).messages) == 5
    finally:
        store.close()


def test_delay_beyond_the_maximum_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        with pytest.raises(MessageIllegal, match="timerMaxDelaySec"):
            store.put_message(delayed(now_ms() + 4 * 86_400_000))
    finally:
        store.close()


def test_delivery_in_the_past_is_stored_directly(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        store.put_message(delayed(now_ms() - 1000))
        settle(store)
        assert store.get_messages("Orders", 2, 0, 1).status is GetStatus.FOUND
    finally:
        store.close()
