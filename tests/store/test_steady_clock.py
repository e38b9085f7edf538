"""The lease clock (:mod:`gannet.node.store.steady_clock`), pure: a step of the wall clock does
not move it between anchors; an anchor takes the wall clock again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gannet.node.store import properties as props
from gannet.node.store import steady_clock
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.steady_clock import SteadyClock
from gannet.node.store.timers import delivery

MS = 1_000_000


class _Clocks:
    def __init__(self) -> None:
        self.wall_ns = 1_700_000_000_000 * MS
        self.monotonic_ns = 5_000 * MS

    def advance(self, ms: int) -> None:
        self.wall_ns += ms * MS
        self.monotonic_ns += ms * MS


def test_steps_of_the_wall_clock_do_not_move_it_and_an_anchor_takes_them() -> None:
    clocks = _Clocks()
    clock = SteadyClock(lambda: clocks.wall_ns, lambda: clocks.monotonic_ns)
    start = clock.now_ms()
    assert start == 1_700_000_000_000
    clocks.advance(250)
    assert clock.now_ms() == start + 250
    clocks.wall_ns += 59_000 * MS  # a step forward
    assert clock.now_ms() == start + 250
    assert clock.offset_ms() == -59_000
    clocks.wall_ns -= 120_000 * MS  # and back, past where it was
    clocks.advance(10)
    assert clock.now_ms() == start + 260
    clock.anchor()  # a new term, no leader heard: the wall clock as it is now
    assert clock.now_ms() == start + 260 - 61_000
    assert clock.offset_ms() == 0


def test_a_new_term_starts_no_more_than_a_little_ahead_of_the_former_leader() -> None:
    """Fault seed 1210: a member elected while its wall clock stood 24.4 s fast took that as its
    term's clock and judged a FIFO lease 8 s from its end as over. Followers observe the
    leader's clock; an election caps the wall clock at that plus the time since."""
    clocks = _Clocks()
    clock = SteadyClock(lambda: clocks.wall_ns, lambda: clocks.monotonic_ns)
    leader_ms = clocks.wall_ns // MS - 40  # the leader's clock runs 40 ms behind this wall
    clock.observe(2, leader_ms)
    clocks.advance(3_000)  # heard nothing for 3 s (the leader was cut off)
    clocks.wall_ns += 24_400 * MS  # then this member's wall clock is stepped ahead
    behind_ms = clock.anchor(3)
    cap = leader_ms + 3_000 + steady_clock.AHEAD_OF_FORMER_LEADER_MAX_MS
    assert clock.now_ms() == cap
    assert behind_ms == 24_400 + 40 - steady_clock.AHEAD_OF_FORMER_LEADER_MAX_MS
    clocks.advance(100)
    assert clock.now_ms() == cap + 100  # and runs on monotonically


def test_a_wall_clock_at_or_behind_the_former_leader_is_taken_as_it_is() -> None:
    clocks = _Clocks()
    clock = SteadyClock(lambda: clocks.wall_ns, lambda: clocks.monotonic_ns)
    clock.observe(5, clocks.wall_ns // MS + 100)  # the leader is 100 ms ahead: within the cap
    assert clock.anchor(6) == 0
    assert clock.now_ms() == clocks.wall_ns // MS
    clock.observe(7, clocks.wall_ns // MS + 30_000)  # a leader 30 s ahead (a fast clock)
    clocks.wall_ns -= 5_000 * MS  # and this wall clock stepped back: a lease only lasts longer
    assert clock.anchor(8) == 0
    assert clock.now_ms() == clocks.wall_ns // MS


def test_the_freshest_stamp_of_the_newest_term_counts_and_a_deposed_leader_is_ignored() -> None:
    clocks = _Clocks()
    clock = SteadyClock(lambda: clocks.wall_ns, lambda: clocks.monotonic_ns)
    now_ms = clocks.wall_ns // MS
    clock.observe(4, now_ms - 10_000)
    clock.observe(4, now_ms - 20_000)  # a copy delayed in flight (another lane): older news
    clock.observe(3, now_ms)  # the leader of term 3, deposed, still sending
    clocks.wall_ns += 60_000 * MS
    clock.anchor(5)
    assert clock.now_ms() == now_ms - 10_000 + steady_clock.AHEAD_OF_FORMER_LEADER_MAX_MS
    # Its own term is what the next election here is held to; older terms stay ignored.
    clock.observe(4, now_ms + 50_000)
    clocks.advance(1_000)
    clock.anchor(6)  # each election may move the clock ahead of the last term's by the cap
    ahead_ms = 2 * steady_clock.AHEAD_OF_FORMER_LEADER_MAX_MS
    assert clock.now_ms() == now_ms - 10_000 + 1_000 + ahead_ms


def test_a_delivery_time_ahead_of_the_steady_clock_is_parked_whatever_the_wall_clock_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault seed 210 (+59 s clock strobe on the leader): a Pop checkpoint due in 12 s by the
    steady clock was judged due by the stepped wall clock, written straight to the revive log,
    and its delivery time moved revive's end time past leases still live: acknowledged messages
    were revived before their ACKs arrived. Timer routing reads the steady clock."""
    store = MessageStore(StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.ASYNC_FLUSH))
    store.open(start_services=False)
    try:
        real_ns = time.time_ns
        monkeypatch.setattr(time, "time_ns", lambda: real_ns() + 59_000_000_000)
        monkeypatch.setattr(time, "time", lambda: real_ns() / 1e9 + 59)
        deliver_ms = steady_clock.now_ms() + 12_000
        message = Message(topic="Orders", body=b"ck", queue_id=0,
                          properties={props.TIMER_DELIVER_MS: str(deliver_ms)})  # fmt: skip
        store.put_message(message)
        store.dispatch.set_commit_offset(store.commitlog.max_offset())
        store.dispatch.dispatch_available()
        assert store.get_messages(delivery.TIMER_TOPIC, 0, 0, 1).status is GetStatus.FOUND
        assert store.get_messages("Orders", 0, 0, 1).status is not GetStatus.FOUND
    finally:
        store.close()
