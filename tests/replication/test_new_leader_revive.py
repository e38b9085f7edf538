"""A new leader does not revive a checkpoint whose ACK is still parked in the timer.

Fault-injection seed 210 replayed (``e2e/faults``): a message popped, its invisible time
changed and acked at 3.3 s, all committed, was delivered again at 26.2 s. The old leader's
timer had delivered the new checkpoint into the revive log (due one second before its revive
time) but not yet the ACK (due at the revive time) when it was paused. The new leader's Pop
thread started a revive pass before its timer thread had enqueued and fired the parked backlog:
``TimerStore.is_caught_up`` is true for a wheel whose read cursor never started (a member that
had not led since it opened), so the pass took ``now`` as its end time and revived the acked
checkpoint. Revive now waits for :meth:`TimerService.delivered_until`.

In process: the new leader's store is a copy of the old one's bytes (``append_replicated``)
whose timers never ran.
"""

from __future__ import annotations

from pathlib import Path

from gannet.node.pop.config import PopConfig
from tests.pop.pop_harness import GROUP, TOPIC
from tests.replication.store_copies import Takeover, settle

CONFIG = PopConfig(revive_queue_count=1, buffer_merge_enabled=False)


def test_a_new_leader_waits_for_the_parked_ack_before_reviving(tmp_path: Path) -> None:
    with Takeover(tmp_path, CONFIG) as t:
        h = t.old
        h.produce(1, queue_id=0)
        (m0,) = h.pop(invisible_ms=10_000).messages
        h.broker.ack(GROUP, TOPIC, m0.receipt_handle, now_ms=h.now)
        h.advance(10_000)  # the CK (due 1 s before its revive time) is delivered, its ACK not
        new, pop = t.take_over()
        now = h.now + 20_000
        revived = sum(p.revived for p in pop.revive(now))  # before the timer's first tick
        settle(new)
        new.timers.tick(now)  # the old leader's parked CK and ACK come due here
        settle(new)
        revived += sum(p.revived for p in pop.revive(now))
        settle(new)
        assert revived == 0
        assert pop.statistics().revived_total == 0
        # handled, as acked: the CK and its ACK, and the copies the new timer delivered again
        assert pop.reviver(0).progress() + 1 == new.max_offset_in_queue(pop.reviver(0).topic, 0)
