"""Pure cluster planning: rolling steps, revive-queue changes, cron schedules (membership is
tested in test_membership_planning)."""

from __future__ import annotations

import datetime as dt

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.operator import cluster_planning as cp
from gannet.operator import schedules


def pods(*specs: tuple[str, str, bool]) -> list[cp.PodView]:
    return [cp.PodView(name, revision, ready) for name, revision, ready in specs]


def test_roll_goes_followers_first_highest_ordinal_first_leader_last() -> None:
    current = pods(("c-0", "old", True), ("c-1", "old", True), ("c-2", "old", True))
    step = cp.next_roll_step(current, update_revision="new", replicas=3, leader_pod="c-2")
    assert step == cp.DeletePod("c-1")
    current = pods(("c-0", "old", True), ("c-1", "new", True), ("c-2", "old", True))
    assert cp.next_roll_step(current, update_revision="new", replicas=3, leader_pod="c-2") == (
        cp.DeletePod("c-0")
    )
    current = pods(("c-0", "new", True), ("c-1", "new", True), ("c-2", "old", True))
    assert cp.next_roll_step(current, update_revision="new", replicas=3, leader_pod="c-2") == (
        cp.TransferLeadership("c-2")
    )
    assert cp.next_roll_step(current, update_revision="new", replicas=3, leader_pod="c-0") == (
        cp.DeletePod("c-2")
    )


def test_roll_waits_for_every_member_to_be_ready() -> None:
    current = pods(("c-0", "old", True), ("c-1", "new", False), ("c-2", "old", True))
    step = cp.next_roll_step(current, update_revision="new", replicas=3, leader_pod="c-0")
    assert isinstance(step, cp.Wait)
    assert "c-1" in step.reason


@given(
    st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=7),
    st.integers(0, 6),
)
def test_roll_never_restarts_a_leader_or_a_pod_while_another_is_down(
    states: list[tuple[bool, bool]], leader_ordinal: int
) -> None:
    current = [
        cp.PodView(f"c-{i}", "new" if updated else "old", ready)
        for i, (updated, ready) in enumerate(states)
    ]
    leader = f"c-{leader_ordinal}" if leader_ordinal < len(states) else None
    step = cp.next_roll_step(
        current, update_revision="new", replicas=len(states), leader_pod=leader
    )
    if isinstance(step, cp.DeletePod):
        assert all(p.ready for p in current)
        assert step.name != leader or len(current) == 1
        assert next(p for p in current if p.name == step.name).revision == "old"
    if all(p.revision == "new" for p in current):
        assert step == cp.Done()


def test_revive_change() -> None:
    assert cp.revive_change(8, None) == 8
    assert cp.revive_change(8, cp.ReviveView(8, ())) is None
    assert cp.revive_change(4, cp.ReviveView(8, ())) == 4


def test_ordinals() -> None:
    assert cp.ordinal("main-12") == 12
    assert cp.ordinal("main") == -1


START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_schedule_runs_once_per_slot_and_skips_missed_ones() -> None:
    first = schedules.decide("0 4 * * *", now=START, next_run=None)
    assert first == schedules.Decision(False, START.replace(hour=4))
    early = schedules.decide("0 4 * * *", now=START.replace(hour=3), next_run=first.next_run)
    assert early == first
    # Three days late: one run now, then the next slot after now (no backlog replay).
    late = START + dt.timedelta(days=3, hours=5)
    due = schedules.decide("0 4 * * *", now=late, next_run=first.next_run)
    assert due.run
    assert due.next_run == START + dt.timedelta(days=4, hours=4)
    assert schedules.decide(None, now=late, next_run=None) == schedules.Decision(False, None)


def test_changed_schedule_is_rescheduled_from_now() -> None:
    decision = schedules.decide("30 * * * *", now=START, next_run=START.replace(hour=4))
    assert decision == schedules.Decision(False, START.replace(minute=30))


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["*/5 * * * *", "0 4 * * *", "15 2 * * 1", "0 0 1 * *"]),
    st.integers(0, 10**8),
    st.lists(st.integers(1, 10**6), min_size=1, max_size=20),
)
def test_schedule_never_runs_twice_in_a_slot(
    schedule: str, offset_s: int, steps: list[int]
) -> None:
    now = START + dt.timedelta(seconds=offset_s)
    next_run: dt.datetime | None = None
    runs: list[dt.datetime] = []
    for step in steps:
        decision = schedules.decide(schedule, now=now, next_run=next_run)
        if decision.run:
            assert next_run is not None
            assert now >= next_run
            runs.append(now)
        assert decision.next_run is not None
        assert decision.next_run > now
        next_run = decision.next_run
        now += dt.timedelta(seconds=step)
    # The slot of a run is the latest scheduled time at or before it.
    slots = [
        croniter(schedule, run + dt.timedelta(seconds=1)).get_prev(dt.datetime) for run in runs
    ]
    assert len(slots) == len(set(slots))


@pytest.mark.parametrize("text", ["", None, "yesterday", 5])
def test_parse_time_rejects_junk(text: object) -> None:
    assert schedules.parse_time(text) is None


# ---------------------------------------------------------------- Ready over broker groups
def test_ready_is_false_naming_every_broker_group_without_a_leader() -> None:
    def row(group: int, leader: str, phase: str = "Serving") -> dict[str, object]:
        return {"group": group, "brokerName": f"broker-{group}", "leader": leader, "phase": phase}

    served = [row(0, "wide-0"), row(1, "wide-g1-1")]
    assert cp.ready_condition(desired=3, ready=3, groups=served).status is True
    unled = [row(0, "wide-0"), row(1, ""), row(2, "", "Draining")]
    found = cp.ready_condition(desired=3, ready=3, groups=unled)
    assert (found.status, found.reason) == (False, cp.GROUP_WITHOUT_LEADER)
    assert (
        found.message
        == "3/3 ready; no leader in broker group broker-1 (Serving), broker-2 (Draining)"
    )
    # Members not ready come first; a one-group cluster keeps its plain rule.
    assert cp.ready_condition(desired=3, ready=2, groups=unled).reason == "MembersNotReady"
    assert cp.ready_condition(desired=3, ready=3, groups=[row(0, "")]).status is True
