"""A ChangeInvisibleDuration run twice, on a stopped leader and again on its successor, leaves
no checkpoint that the client's ack does not cover.

Fault-injection seed 630 replayed (``e2e/faults``): ``s1-168`` popped from leader 3 at 11.50 s,
its invisible time changed (answered 12.61 s) and acked with the new handle (answered OK 12.63
s); leader 3 was paused (SIGSTOP) at 11.53 s. A retry copy was delivered at 39.26 s. The change
had reached leader 3 through a follower's forward; leader 3 appended its new checkpoint (and the
ACK of the old handle) and replicated them before it stopped, but never answered. The follower
routed the call again once member 2 led (``api/forwarding.py``: a leader change while the
forwarded call runs), and member 2, which had the first run's records in its log (and committed
them), ran the change again: a second checkpoint with its own pop time, whose handle the client
got and acked. The first run's checkpoint had no ACK and was revived.

In process, as ``test_new_leader_revive.py``: the new leader's store is a copy of the old one's
bytes (``append_replicated``), the old leader's answer is dropped.
"""

from __future__ import annotations

from pathlib import Path

from gannet.node.pop.config import PopConfig
from gannet.node.pop.service import PopBroker
from gannet.node.store.message_store import MessageStore
from tests.pop.pop_harness import GROUP, TOPIC
from tests.replication.store_copies import Takeover, settle

CONFIG = PopConfig(revive_queue_count=1, buffer_merge_enabled=False)


def _revived_in(pop: PopBroker, store: MessageStore, now: int, seconds: int) -> int:
    """Messages revived by ``seconds`` of timer ticks and revive passes, 1 s apart."""
    revived = 0
    for step in range(1, seconds + 1):
        at = now + step * 1_000
        store.timers.tick(at)
        settle(store)
        revived += sum(p.revived for p in pop.revive(at))
        settle(store)
    return revived


def test_a_change_run_again_by_the_next_leader_is_covered_by_the_ack(tmp_path: Path) -> None:
    with Takeover(tmp_path, CONFIG) as t:
        h = t.old
        h.produce(1, queue_id=0)
        (m0,) = h.pop(invisible_ms=10_000).messages
        # The first run, on the leader that stops before it answers.
        lost = h.broker.change_invisible_time(
            GROUP, TOPIC, m0.receipt_handle, invisible_time_ms=12_000, now_ms=h.now + 10
        )
        new, pop = t.take_over()
        now = h.now + 1_100  # routed again once the new leader serves
        handle = pop.change_invisible_time(
            GROUP, TOPIC, m0.receipt_handle, invisible_time_ms=12_000, now_ms=now
        )
        pop.ack(GROUP, TOPIC, handle, now_ms=now + 20)
        settle(new)
        assert _revived_in(pop, new, now, 40) == 0
        assert pop.statistics().revived_total == 0
        reviver = pop.reviver(0)
        assert reviver.progress() + 1 == new.max_offset_in_queue(reviver.topic, 0)
        assert handle == lost  # answered with the first run's checkpoint, not a second one


def test_a_change_run_twice_on_the_new_leader_is_covered_by_the_ack(tmp_path: Path) -> None:
    """Both runs on the new leader (a client's retry after a lost answer), for a handle the
    old leader made: the second finds the checkpoint the first one tracks."""
    with Takeover(tmp_path, CONFIG) as t:
        h = t.old
        h.produce(1, queue_id=0)
        (m0,) = h.pop(invisible_ms=10_000).messages
        new, pop = t.take_over()
        now = h.now + 1_000
        first = pop.change_invisible_time(
            GROUP, TOPIC, m0.receipt_handle, invisible_time_ms=12_000, now_ms=now
        )
        second = pop.change_invisible_time(
            GROUP, TOPIC, m0.receipt_handle, invisible_time_ms=12_000, now_ms=now + 500
        )
        pop.ack(GROUP, TOPIC, second, now_ms=now + 520)
        settle(new)
        assert _revived_in(pop, new, now, 40) == 0
        assert second == first
