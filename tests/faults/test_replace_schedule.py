"""The ``replace`` nemesis in the seeded schedule (:func:`e2e.faults.nemesis.schedule`, pure) and
the check of the group at the end (:func:`e2e.faults.checker.check_members`)."""

from __future__ import annotations

import itertools

from e2e.faults import checker, nemesis

KINDS = ("halves", "leader-isolated", "leader-peers", "minority", "kill", "lose-unfsynced")


def test_replace_is_drawn_at_most_replace_max_times_with_a_target_and_a_way() -> None:
    drawn = 0
    for seed in range(200):
        faults = nemesis.schedule(seed, 60.0, 3, ("replace",))
        replaces = [f for f in faults if f.kind == "replace"]
        assert len(replaces) <= nemesis.REPLACE_MAX, (seed, faults)
        for fault in replaces:
            assert fault.params["target"] in ("leader", 1, 2, 3)
            assert isinstance(fault.params["lost_disk"], bool)
        drawn += len(replaces)
    assert drawn >= 200  # alone, every run has at least one


def test_replace_overlaps_network_faults_and_never_another_process_fault() -> None:
    faults = nemesis.schedule(813, 60.0, 3, (*KINDS, "replace"))
    process = [f for f in faults if f.kind in nemesis.PROCESS]
    for a, b in itertools.pairwise(process):
        assert a.stop <= b.start, (a, b)
    replaced = [f for f in faults if f.kind == "replace"]
    assert replaced
    network = [f for f in faults if f.kind in nemesis.NETWORK]
    assert any(n.start < r.stop and r.start < n.stop for r in replaced for n in network)


def test_schedules_without_replace_are_unchanged_by_it() -> None:
    """``replace`` is appended to the process stream: a seed's schedule over the older kinds
    replays as before (the smoke's seed 3 and one of the fourth batch)."""
    smoke = nemesis.schedule(3, 30.0, 3, ("follower-cut", "pause-follower", "kill-follower"))
    assert [(f.start, f.stop, f.kind) for f in smoke] == [
        (7.43, 16.41, "follower-cut"), (9.49, 19.15, "kill-follower")
    ]  # fmt: skip
    before = tuple(k for k in nemesis.ALL if k != "replace")  # `all` of the fourth batch
    seed_702 = nemesis.schedule(702, 60.0, 3, before)
    assert [(f.start, f.stop, f.describe()) for f in seed_702[:3]] == [
        (8.51, 12.37, "disk-full(target=1)"),
        (10.59, 22.31, "leader-peers"),
        (17.66, 31.44, "kill(target=leader)"),
    ]  # docs/architecture.md, fourth batch


def test_the_group_at_the_end_must_be_exactly_the_members_kept() -> None:
    good = checker.Verdict()
    checker.check_members(good, [1, 3, 5], [1, 3, 5], False, {2: True})
    assert good.valid
    assert good.figures["members_replaced"] == 1

    stale = checker.Verdict()
    checker.check_members(stale, [1, 3, 5], [1, 2, 3, 5], True, {2: False})
    assert len(stale.violations) == 3
    assert "lists [1, 2, 3, 5], expected [1, 3, 5]" in stale.violations[0]
    assert "in flight" in stale.violations[1]
    assert "stores still on disk: [2]" in stale.violations[2]


def test_a_member_already_being_replaced_is_not_replaced_again() -> None:
    """Seed 904: the leader, whose replacement waited for its removal, was drawn again; the
    group ended with both successors. Another slot's holder is taken instead."""
    assert nemesis.replaced_node(3, [1, 2, 3], set()) == 3
    assert nemesis.replaced_node(3, [1, 2, 3], {3}) == 1
    assert nemesis.replaced_node(1, [1, 2, 3], {1, 3}) == 2
    assert nemesis.replaced_node(4, [1, 2, 3], set()) == 1  # the membership spare leads
