"""Delayed delivery through the timer store, driven with a virtual clock (no sleeps)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gannet.node.store import properties as props
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.topics import PERM_READ, TopicConfig
from gannet.node.store.errors import MessageIllegal
from gannet.node.store.log.commitlog import now_ms
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.timers import delivery
from gannet.node.store.timers.codecs import topic_hash
from gannet.node.store.timers.pending import PendingTimers, TopicTimers


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


# ------------------------------------------------------------ figures a drain waits for
def test_pending_figures_count_per_topic_until_delivered(tmp_path: Path) -> None:
    """Every delayed message of a topic counts until its copy is in the real queue (appended
    and dispatched: a reader of these figures and then of consumer lag never sees a message
    in neither); the latest due time is the last one's (its slot's end)."""
    store = open_store(tmp_path)
    try:
        t0 = now_ms()
        for i in range(3):
            store.put_message(delayed(t0 + 10_000 + i * 5_000, i))
        settle(store)
        store.timers.tick(t0)
        orders = store.timers.pending_of("Orders")
        assert orders.messages == 3
        assert t0 + 20_000 <= orders.last_due_ms <= t0 + 21_000
        assert store.timers.pending_of("Payments").messages == 0
        assert store.timers.tick(t0 + 16_000) == 2
        assert store.max_offset_in_queue("Orders", 2) == 0  # appended, not dispatched yet
        assert store.timers.pending_of("Orders").messages == 3
        settle(store)
        assert store.max_offset_in_queue("Orders", 2) == 2
        assert store.timers.pending_of("Orders").messages == 1
        assert store.timers.tick(t0 + 30_000) == 1
        settle(store)
        assert store.timers.pending_of("Orders") == TopicTimers(0, 0)
    finally:
        store.close()


def test_pending_figures_survive_a_restart_and_a_crash(tmp_path: Path) -> None:
    """The figures are rebuilt from the wheel on open: a restart (clean or not) never shows 0
    while messages wait, and what fired before the restart is not counted again."""
    t0 = now_ms()
    store = open_store(tmp_path)
    for i in range(4):
        store.put_message(delayed(t0 + 10_000 + i * 10_000, i))
    settle(store)
    store.timers.tick(t0)
    assert store.timers.tick(t0 + 12_000) == 1
    store.close()
    store = open_store(tmp_path)
    try:
        assert store.timers.pending_of("Orders").messages == 3
        assert store.timers.pending_of("Orders").last_due_ms >= t0 + 40_000
        assert store.timers.tick(t0 + 25_000) == 1
        store.timers.timer_store.flush()  # type: ignore[union-attr]
    finally:
        store.abandon()
    store = open_store(tmp_path)
    try:
        assert store.timers.pending_of("Orders").messages == 2
        assert store.timers.tick(t0 + 60_000) == 2
        settle(store)
        assert store.timers.pending_of("Orders").messages == 0
    finally:
        store.close()


def test_pending_figures_count_parked_messages_the_wheel_has_not_taken_yet(
    tmp_path: Path,
) -> None:
    """A delayed message dispatched into the timer topic counts before the timer thread's next
    tick: asking takes it into the wheel first (while the timer service runs)."""
    config = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.ASYNC_FLUSH)
    store = MessageStore(config).open(start_services=False)
    try:
        store.timers._thread = threading.Thread(target=lambda: None)  # running, never ticking
        store.put_message(delayed(now_ms() + 60_000))
        settle(store)
        assert store.timers.pending_of("Orders").messages == 1
    finally:
        store.timers._thread = None
        store.close()


def test_rolled_entries_stay_counted_once(tmp_path: Path) -> None:
    """A delay beyond the wheel's window rolls: the entry is parked again (a new message) and
    counted once all along, not 0 in between and not twice after."""
    store = open_store(tmp_path)
    try:
        t0 = now_ms()
        window = store.timers.timer_store.roll_window_ms  # type: ignore[union-attr]
        store.put_message(delayed(t0 + 3 * window, 0))
        settle(store)
        store.timers.tick(t0)
        assert store.timers.pending_of("Orders").messages == 1
        rolled = 0
        clock = t0
        while store.timers.pending_of("Orders").messages and clock < t0 + 5 * window:
            clock += window // 4
            rolled += store.timers.tick(clock)
            assert store.timers.pending_of("Orders").messages in (0, 1)
            settle(store)
        assert rolled >= 2  # at least one roll and the delivery
        assert store.get_messages("Orders", 2, 0, 4).status is GetStatus.FOUND
        assert store.timers.pending_of("Orders").messages == 0
    finally:
        store.close()


def test_a_delayed_message_comes_due_into_a_read_only_queue(tmp_path: Path) -> None:
    """A draining group's topics are read-only; the wheel still delivers into them (else the
    message would be lost with the group)."""
    store = open_store(tmp_path)
    try:
        store.topic_configs.put(TopicConfig("Orders", read_queue_nums=4, write_queue_nums=4))
        t0 = now_ms()
        store.put_message(delayed(t0 + 10_000))
        settle(store)
        store.timers.tick(t0)
        store.topic_configs.put(
            TopicConfig("Orders", read_queue_nums=4, write_queue_nums=4, perm=PERM_READ)
        )
        assert store.timers.tick(t0 + 12_000) == 1
        settle(store)
        assert store.get_messages("Orders", 2, 0, 4).status is GetStatus.FOUND
        assert store.timers.pending_of("Orders").messages == 0
    finally:
        store.close()


def test_pending_core_forgets_a_delivered_copy_once_dispatch_passes_it() -> None:
    """The counting core alone: a delivered copy counts until the dispatched offset given
    reaches its end; a dropped one (its message cleaned up) goes at once; ``rebuilt`` starts
    over. Messages are counted under their topic's hash; readers ask by topic name."""
    pending = PendingTimers()
    orders, payments = topic_hash("Orders"), topic_hash("Payments")
    for i in range(3):
        pending.added(orders, 1_000 + i, commit_offset=100 * i)
    pending.delivered(orders, end_offset=500, dispatched_offset=400)
    pending.delivered(orders, end_offset=600, dispatched_offset=400)
    assert pending.of("Orders", 400) == TopicTimers(3, 1_002)
    assert pending.of("Orders", 500) == TopicTimers(2, 1_002)
    pending.dropped(orders)
    assert pending.all(599) == {orders: TopicTimers(1, 1_002)}
    assert pending.of("Orders", 600) == TopicTimers(0, 0)
    pending.added(orders, 2_000, commit_offset=900)
    pending.delivered(orders, end_offset=700, dispatched_offset=700)  # already dispatched
    assert pending.of("Orders", 700) == TopicTimers(0, 0)
    pending.added(orders, 3_000, commit_offset=1_000)
    pending.delivered(orders, end_offset=1_200, dispatched_offset=1_100)
    pending.rebuilt([(payments, 5_000), (payments, 4_000)])
    assert pending.all(0) == {payments: TopicTimers(2, 5_000)}
    assert pending.of("Payments", 0) == TopicTimers(2, 5_000)
