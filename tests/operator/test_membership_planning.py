"""The membership planner (pure): one step at a time, in the safe order, and the safety rules
held under randomized schedules (hypothesis) against the model in
:mod:`tests.operator.membership_world`."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.operator import membership_planning as mp
from tests.operator.membership_world import Unsafe, World


def formed(size: int, *, ephemeral: bool = False) -> World:
    world = World(desired=size, ephemeral=ephemeral)
    steps = world.run()
    assert isinstance(steps[0], mp.Bootstrap)
    assert isinstance(steps[1], mp.Seal)
    assert isinstance(steps[-1], mp.Done)
    return world


def membership_calls(steps: list[mp.Step]) -> list[tuple[str, str]]:
    found = []
    for step in steps:
        if isinstance(step, (mp.AddLearner, mp.Promote, mp.RemoveMember)):
            found.append((type(step).__name__, step.record.node_id))
        elif isinstance(step, mp.TransferLeadership):
            found.append(("TransferLeadership", step.away_from.node_id))
    return found


def test_a_new_cluster_bootstraps_with_ids_from_one_then_seals() -> None:
    step = mp.next_step(mp.Observed(desired=3, roster=None, pods=(), group=None))
    assert isinstance(step, mp.Bootstrap)
    assert not step.adopted
    assert [(r.ordinal, r.node_id, r.mode) for r in step.roster.records] == [
        (0, "1", "bootstrap"),
        (1, "2", "bootstrap"),
        (2, "3", "bootstrap"),
    ]
    assert step.roster.records[1].data_dir == "/var/lib/gannet/node-2"
    assert step.roster.next_node_id == 4
    world = formed(3)
    assert world.roster is not None
    assert world.roster.sealed
    assert {r.mode for r in world.roster.records} == {"join"}


def test_pods_from_before_rosters_are_adopted_with_their_ids_and_data() -> None:
    step = mp.next_step(
        mp.Observed(desired=5, roster=None, pods=(), group=None, current_replicas=3)
    )
    assert isinstance(step, mp.Bootstrap)
    assert step.adopted
    assert [r.node_id for r in step.roster.records] == ["1", "2", "3"]
    assert {r.data_dir for r in step.roster.records} == {"/var/lib/gannet"}


def test_no_leader_and_a_forming_group_wait() -> None:
    roster = mp.bootstrap_roster(3)
    step = mp.next_step(mp.Observed(desired=3, roster=roster, pods=(), group=None))
    assert step == mp.Wait("no leader answers ListMembers")
    group = mp.Group(
        members=(mp.MemberState("1", True, 0, True, True), mp.MemberState("2", True, 0, True)),
        leader_id="1",
    )
    step = mp.next_step(mp.Observed(desired=3, roster=roster, pods=(), group=group))
    assert isinstance(step, mp.Wait)
    assert "pod 2 (node 3) not a voter yet" in step.reason


def test_scale_3_to_5_to_3_calls_the_broker_in_order() -> None:
    world = formed(3)
    world.desired = 5
    up = world.run()
    assert membership_calls(up) == [
        ("AddLearner", "4"),
        ("Promote", "4"),
        ("AddLearner", "5"),
        ("Promote", "5"),
    ]
    # Each pod is created (with --join) before its node is added.
    kinds = [type(s).__name__ for s in up]
    assert kinds == [
        "CreatePod",
        "AddLearner",
        "Promote",
        "CreatePod",
        "AddLearner",
        "Promote",
        "Done",
    ]
    assert world.voters() == ["1", "2", "3", "4", "5"]
    world.leader = "5"  # the last pod's node leads: it hands leadership over first
    world.desired = 3
    down = world.run()
    assert membership_calls(down) == [
        ("TransferLeadership", "5"),
        ("RemoveMember", "5"),
        ("RemoveMember", "4"),
    ]
    assert [type(s).__name__ for s in down] == [
        "TransferLeadership",
        "RemoveMember",
        "DeletePod",
        "RemoveMember",
        "DeletePod",
        "Done",
    ]
    assert world.voters() == ["1", "2", "3"]
    assert sorted(world.pods) == [0, 1, 2]
    assert world.roster is not None
    assert world.roster.next_node_id == 6  # ids 4 and 5 are never used again
    world.desired = 4
    world.run()
    assert world.voters() == ["1", "2", "3", "6"]


def test_a_lagging_member_blocks_a_scale_down_with_its_lag_named() -> None:
    world = formed(3)
    world.members["2"].lag_bytes = 12_345_678
    world.desired = 1
    step = world.plan()
    assert isinstance(step, mp.Blocked)
    assert "scale-down from 3 to 1 refused" in step.reason
    assert "node 2 12,345,678 bytes behind" in step.reason
    world.members["2"].lag_bytes = 0
    world.members["2"].reachable = False
    step = world.plan()
    assert isinstance(step, mp.Blocked)
    assert "node 2 unreachable" in step.reason
    # The member being removed may itself be down: removing it is what makes the group whole.
    world.members["2"].reachable = True
    world.members["3"].reachable = False
    step = world.plan()
    assert isinstance(step, mp.RemoveMember)
    assert step.record.node_id == "3"


def test_a_learner_is_promoted_only_when_caught_up_and_reachable() -> None:
    world = formed(3)
    world.desired = 4
    world.carry_out(world.plan())  # CreatePod
    world.carry_out(world.plan())  # AddLearner
    world.members["4"].lag_bytes = 50 << 20
    step = world.plan()
    assert isinstance(step, mp.Wait)
    assert "catching up: 52,428,800 bytes behind" in step.reason
    world.members["4"].lag_bytes = 10
    world.members["2"].reachable = world.members["3"].reachable = False
    step = world.plan()
    assert isinstance(step, mp.Blocked)
    assert "would leave 2 of 4 voters reachable" in step.reason
    world.members["2"].reachable = True
    assert isinstance(world.plan(), mp.Promote)


def test_a_change_in_flight_on_the_broker_is_waited_for() -> None:
    roster = dataclasses.replace(mp.bootstrap_roster(3), sealed=True)
    members = tuple(mp.MemberState(str(i), True, 0, True, i == 1) for i in (1, 2, 3))
    group = mp.Group(members, leader_id="1", change_in_flight=True)
    pods = tuple(mp.PodState(i, f"u{i}", True, f"v{i}") for i in range(3))
    step = mp.next_step(mp.Observed(desired=5, roster=roster, pods=pods, group=group))
    assert step == mp.Wait("the broker reports a membership change in flight")


def test_a_scale_up_undone_before_its_pod_ran_deletes_the_pod_without_a_broker_call() -> None:
    world = formed(3)
    world.desired = 4
    world.carry_out(world.plan())  # CreatePod 3 (node 4)
    world.pods[3] = dataclasses.replace(world.pods[3], up=False)  # e.g. the image never pulls
    assert isinstance(world.plan(), mp.Wait)
    world.desired = 3
    step = world.plan()
    assert isinstance(step, mp.DeletePod)
    assert step.record.node_id == "4"
    world.carry_out(step)
    assert isinstance(world.plan(), mp.Done)
    assert world.calls == []


@pytest.mark.parametrize("ephemeral", [False, True])
def test_a_member_whose_volume_was_lost_comes_back_under_a_new_id(ephemeral: bool) -> None:
    world = formed(3, ephemeral=ephemeral)
    world.run()  # volumes recorded
    assert world.roster is not None
    assert all(r.volume for r in world.roster.records)
    world.lose_volume(1)
    steps = world.run()
    assert membership_calls(steps) == [
        ("RemoveMember", "2"),
        ("AddLearner", "4"),
        ("Promote", "4"),
    ]
    kinds = [type(s).__name__ for s in steps]
    assert kinds == ["RemoveMember", "Reassign", "RestartPod", "AddLearner", "Promote", "Done"]
    assert world.roster.records[1].node_id == "4"
    assert world.roster.records[1].data_dir == "/var/lib/gannet/node-4"
    assert world.voters() == ["1", "3", "4"]


def test_a_lost_volume_of_the_leader_moves_leadership_first() -> None:
    world = formed(3)
    world.run()
    world.lose_volume(0)  # node 1 leads
    world.members["1"].reachable = True  # still answering as leader in this model
    step = world.plan()
    assert isinstance(step, mp.TransferLeadership)
    assert step.away_from.node_id == "1"


def test_a_lost_volume_when_the_rest_lag_is_blocked() -> None:
    world = formed(3)
    world.run()
    world.members["3"].lag_bytes = 9 << 20
    world.lose_volume(1)
    step = world.plan()
    assert isinstance(step, mp.Blocked)
    assert "the volume of pod 1 (node 2) was lost" in step.reason


def test_the_model_catches_an_unsafe_step() -> None:
    """The safety checks of the model can fail: a removal that leaves 1 of 3 reachable."""
    world = formed(4)
    world.members["2"].reachable = world.members["3"].reachable = False
    record = world.roster.records[3] if world.roster else None
    assert record is not None
    with pytest.raises(Unsafe, match="1 of 3 voters reachable"):
        world.carry_out(mp.RemoveMember(record, replace=False))


# --------------------------------------------------------------------------- property tests
@st.composite
def schedules(draw: st.DrawFn) -> tuple[int, list[tuple[int, list[tuple[str, int, int]]]]]:
    """A starting size, then desired sizes, each with faults to inject before every step:
    (what, node index, value) with what in lag / unreachable / heal / leader / volume."""
    start = draw(st.integers(1, 5))
    targets = draw(
        st.lists(
            st.tuples(
                st.integers(1, 7),
                st.lists(
                    st.tuples(
                        st.sampled_from(["lag", "unreachable", "heal", "leader", "volume"]),
                        st.integers(0, 9),
                        st.integers(0, 8 << 20),
                    ),
                    max_size=12,
                ),
            ),
            min_size=1,
            max_size=5,
        )
    )
    return start, targets


def _inject(world: World, fault: tuple[str, int, int]) -> None:
    what, index, value = fault
    nodes = sorted(world.members, key=int)
    if not nodes:
        return
    node = nodes[index % len(nodes)]
    if what == "lag":
        world.members[node].lag_bytes = value
    elif what == "unreachable" and node != world.leader:
        world.members[node].reachable = False
    elif what == "heal":
        world.members[node] = dataclasses.replace(world.members[node], reachable=True, lag_bytes=0)
    elif what == "leader" and world.members[node].voter and world.members[node].reachable:
        world.leader = node
    elif what == "volume" and world.roster is not None and len(world.voters()) >= 3:
        # One disk lost at a time, in a group of 3 or more: losing a majority's disks loses
        # data, which no operator can undo (the planner then stays Blocked, as it should).
        if world.lost:
            return
        record = world.roster.by_node(node)
        if record is not None and record.ordinal in world.pods:
            world.lose_volume(record.ordinal)


def _heal(world: World) -> None:
    for member in world.members.values():
        member.reachable = True
        member.lag_bytes = 0


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_random_schedules_stay_safe_and_converge(
    schedule: tuple[int, list[tuple[int, list[tuple[str, int, int]]]]],
) -> None:
    """Under faults, every step keeps one change at a time and a reachable majority (the model
    raises Unsafe otherwise); once healed, the group converges to the last desired size."""
    start, targets = schedule
    world = formed(start)
    for desired, faults in targets:
        world.desired = desired
        for fault in faults:
            _inject(world, fault)
            step = world.plan()
            if not isinstance(step, (mp.Done, mp.Wait, mp.Blocked)):
                world.carry_out(step)
    _heal(world)
    steps = world.run(steps_max=400)
    assert isinstance(steps[-1], mp.Done), steps[-3:]
    assert world.roster is not None
    assert len(world.voters()) == world.desired
    assert len(world.roster.records) == world.desired
    assert sorted(world.pods) == list(range(world.desired))
    assert {r.node_id for r in world.roster.records} == set(world.voters())
    assert not any(r.leaving for r in world.roster.records)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 8))
def test_scaling_up_then_back_converges_and_never_reuses_an_id(
    start: int, extra: int, leader_index: int
) -> None:
    world = formed(start)
    world.desired = start + extra
    world.run()
    world.leader = world.voters()[leader_index % len(world.voters())]
    world.desired = start
    steps = world.run()
    assert isinstance(steps[-1], mp.Done)
    assert len(world.voters()) == start
    added = [node for call, node in world.calls if call == "AddLearner"]
    assert len(added) == len(set(added)) == extra
