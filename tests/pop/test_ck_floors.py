"""Checkpoint floors (:mod:`gannet.node.pop.ck_floors`): a CK in the log raises its queue's pop
offset only when it continues from the offset reached, and a floor reached is forgotten."""

from __future__ import annotations

from gannet.node.pop.checkpoints import PopCheckPoint
from gannet.node.pop.locks import lock_key
from tests.pop.pop_harness import GROUP, TOPIC, Harness

KEY = lock_key(TOPIC, GROUP, 1)


def _ck(h: Harness, start: int, diffs: tuple[int, ...]) -> PopCheckPoint:
    return PopCheckPoint(
        start_offset=start, pop_time_ms=h.now, invisible_time_ms=10_000, num=len(diffs),
        queue_id=1, topic=TOPIC, cid=GROUP, broker_name="broker-a", offset_diffs=diffs,
    )  # fmt: skip


def test_a_ck_from_the_committed_offset_raises_the_pop_offset(harness: Harness) -> None:
    harness.produce(6, queue_id=1)
    floors = harness.broker.ctx.ck_floors
    harness.store.consumer_offsets.commit(GROUP, TOPIC, 1, 2)
    floors.note(_ck(harness, 2, (0, 2)))  # offsets 2 and 4 (3 filtered out)
    assert floors.floor(KEY) == 5
    got = harness.pop(queue_id=1)
    assert [m.message.queue_offset for m in got.messages] == [5]


def test_a_ck_further_on_does_not_skip_what_no_ck_covers(harness: Harness) -> None:
    harness.produce(6, queue_id=1)
    floors = harness.broker.ctx.ck_floors
    harness.store.consumer_offsets.commit(GROUP, TOPIC, 1, 2)
    floors.note(_ck(harness, 4, (0,)))  # e.g. a change of invisible time of offset 4
    assert floors.floor(KEY) == -1
    floors.note(_ck(harness, 1, (0,)))  # behind the committed offset
    assert floors.floor(KEY) == -1
    floors.note(_ck(harness, 2, (0,)))
    floors.note(_ck(harness, 3, (0,)))  # continues from the floor noted
    assert floors.floor(KEY) == 4


def test_the_leader_commits_a_floor_and_forgets_it(harness: Harness) -> None:
    harness.produce(4, queue_id=1)
    floors = harness.broker.ctx.ck_floors
    floors.note(_ck(harness, 0, (0, 1)))  # nothing committed yet: from the queue's start
    assert floors.floor(KEY) == 2
    harness.broker.ctx.flush_buffer(harness.now)
    assert harness.store.consumer_offsets.query(GROUP, TOPIC, 1) == 2
    assert len(floors) == 0
