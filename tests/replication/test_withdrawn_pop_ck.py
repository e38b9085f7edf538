"""A pop answered "leadership lost" whose checkpoint a new leader committed: the new leader does
not pop the same offsets again while that lease is live, and nothing acked comes back.

Fault-injection seed 1000 replayed (``e2e/faults``): ``pt`` popped ``jt`` queue 1 offset 30 on
leader 1 at 32.47 s; leader 1 appended the pop's CK record and was cut from its peers before it
committed; the pop failed ("leadership was lost before the write committed; the message may or
may not survive"), so the pop was withdrawn and the consumer offset stayed at 30. But a follower
had the CK and leader 2 committed it in term 4. Leader 2 popped offset 30 again (a second lease
for the same message), the client acked that copy (answered OK at 36.45 s), and the first CK,
never acked, was revived at 48.50 s: a retry copy delivered after its ack was answered. Every
member now notes the CKs of committed records, and no pop starts behind one
(``gannet.node.pop.ck_floors``).

In process, as ``test_change_rerouted.py``: the follower's store is a copy of the leader's bytes
(``append_replicated``); its Pop broker runs (as a follower) while the CK arrives; the old
leader's durability wait fails as a lost leadership does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gannet.node.pop.config import PopConfig
from gannet.node.pop.service import PopBroker
from gannet.node.store.errors import NotLeading
from gannet.node.store.message_store import MessageStore
from tests.pop.pop_harness import GROUP, TOPIC
from tests.replication.store_copies import Takeover, settle

CONFIG = PopConfig(revive_queue_count=1, buffer_merge_enabled=False)
INVISIBLE_MS = 10_000


def _leadership_lost(_offset: int | None) -> None:
    raise NotLeading("leadership was lost before the write committed")


def _replicate(old: MessageStore, new: MessageStore) -> None:
    """What the old leader appended reaches the follower, and the new leader commits it."""
    end = old.commitlog.max_offset()
    offset = new.commitlog.max_offset()
    while offset < end:
        offset = new.append_replicated(offset, old.read_replicated(offset, end - offset))
    settle(new)


def _bodies(pop: PopBroker, now_ms: int) -> list[tuple[str, int]]:
    got = pop.pop(GROUP, TOPIC, invisible_time_ms=INVISIBLE_MS, now_ms=now_ms)
    return [(m.message.body.decode(), m.delivery_attempt) for m in got.messages]


def test_a_new_leader_does_not_pop_again_what_a_withdrawn_pop_checkpointed(
    tmp_path: Path,
) -> None:
    with Takeover(tmp_path, CONFIG) as t:
        h = t.old
        h.produce(1, queue_id=1)
        new, pop = t.take_over()
        pop.set_leading(False)  # a follower while the old leader pops

        h.broker.ctx.wait_durable = _leadership_lost
        with pytest.raises(NotLeading):
            h.pop(invisible_ms=INVISIBLE_MS)  # CK1 appended; the pop is withdrawn
        assert h.store.consumer_offsets.query(GROUP, TOPIC, 1) == 0

        # The pop's first commit of the queue's offset (0) is replicated as a config record
        # ahead of CK1; these copies run no config log, so the follower takes it here.
        first = h.store.consumer_offsets.query(GROUP, TOPIC, 1)
        new.consumer_offsets.commit(GROUP, TOPIC, 1, first)
        _replicate(h.store, new)  # CK1 reached the follower, committed in the new term
        assert new.consumer_offsets.query(GROUP, TOPIC, 1) == 0
        pop.set_leading(True)
        now = h.now + 3_000

        # CK1's lease is live: offset 0 of queue 1 is not handed out a second time
        assert _bodies(pop, now) == []
        pop.tick(now)
        settle(new)
        assert new.consumer_offsets.query(GROUP, TOPIC, 1) == 1  # committed past CK1

        # CK1 is revived once when due; that copy is acked, and nothing comes back after it
        delivered: list[tuple[str, int]] = []
        acked: set[str] = set()
        for step in range(1, 61):
            at = now + step * 1_000
            new.timers.tick(at)
            settle(new)
            pop.tick(at)
            settle(new)
            got = pop.pop(GROUP, TOPIC, invisible_time_ms=INVISIBLE_MS, now_ms=at)
            settle(new)
            for m in got.messages:
                body = m.message.body.decode()
                assert body not in acked, f"{body} delivered again after its ack was answered"
                delivered.append((body, m.delivery_attempt))
                pop.ack(GROUP, TOPIC, m.receipt_handle, now_ms=at)
                settle(new)
                acked.add(body)
        assert delivered == [("m0", 2)]  # the retry copy of CK1, the only lease
