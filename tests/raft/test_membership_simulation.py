"""Membership changes under faults: seeded simulations and the 3 → 5 roll of issue 17.

``run_membership_simulation`` (``gannet.node.testing.raft_runs``) mixes single-server changes
(add a learner, promote it, remove a voter — the leader included — or a learner) into the
random partitions, crashes, message loss, reordering and duplication of the plain simulation;
``raft_checks.Checker`` checks after every event: one leader per term, committed prefixes
identical (log matching, no committed byte lost or changed), commit on a durable majority of
the configuration in force, and consecutive configurations' quorums overlapping.

``SEED_COUNT`` seeds run in ``make test`` (a short run of ``EVENT_COUNT`` events each);
``make sim-membership`` runs ``GANNET_MEMBERSHIP_SIM_SEEDS=10000`` seeds of 400 events. A
failure prints its seed and the command that re-runs it alone:

    GANNET_SIM_SEED=<seed> .venv/bin/pytest -q tests/raft/test_membership_simulation.py -k one_seed
"""

from __future__ import annotations

import os

import pytest

from gannet.node.raft.membership import Membership
from gannet.node.raft.messages import NodeId, Proposed
from gannet.node.raft.ready import Role
from gannet.node.testing.raft_checks import Checker
from gannet.node.testing.raft_runs import run_membership_simulation
from gannet.node.testing.raft_sim import MEMBERSHIP_RECORD_ID_BASE, Cluster, SimulationFailure

SEED_COUNT = int(os.environ.get("GANNET_MEMBERSHIP_SIM_SEEDS", "200"))
EVENT_COUNT = int(os.environ.get("GANNET_MEMBERSHIP_SIM_EVENTS", "120"))
SEEDS_PER_CHUNK = 100
N1, N2, N3, N4, N5 = (NodeId(i) for i in range(1, 6))
STRICT = {"pre_vote": False, "check_quorum": False}
"""No PreVote and no leader lease: the schedule below controls every election."""


@pytest.mark.skipif("GANNET_SIM_SEED" not in os.environ, reason="set GANNET_SIM_SEED=<seed>")
def test_one_seed() -> None:
    print(run_membership_simulation(int(os.environ["GANNET_SIM_SEED"])))


@pytest.mark.parametrize("chunk", range((SEED_COUNT + SEEDS_PER_CHUNK - 1) // SEEDS_PER_CHUNK))
def test_membership_changes_under_faults_keep_every_invariant(chunk: int) -> None:
    first = chunk * SEEDS_PER_CHUNK
    changes = acked = 0
    for seed in range(first, min(first + SEEDS_PER_CHUNK, SEED_COUNT)):
        stats = run_membership_simulation(seed, EVENT_COUNT)
        changes += stats.membership_changes
        acked += stats.proposals_acked
    print(f"seeds {first}..{first + SEEDS_PER_CHUNK - 1}: {changes} changes, {acked} acked")
    # The runs must really change membership and write, not only survive faults.
    assert changes > SEEDS_PER_CHUNK // 4
    assert acked > SEEDS_PER_CHUNK


def settle(cluster: Cluster, checker: Checker, rounds: int = 30) -> None:
    """Deliver everything deliverable, sync every disk, repeat; check after each step."""
    for _ in range(rounds):
        while cluster.in_flight:
            cluster.deliver(cluster.in_flight.pop(0))
            checker.check()
        for node_id in cluster.up_ids():
            cluster.sync(node_id)
            checker.check()


def elect(cluster: Cluster, checker: Checker, node_id: NodeId) -> None:
    cluster.core(node_id).campaign()
    cluster.drain(node_id)
    settle(cluster, checker)


def roll_to_five(*, static: bool) -> Cluster:
    """Three members commit writes under leader 1; then the 3 → 5 roll: node 3 restarts with
    ``--peers`` naming five nodes and nodes 4 and 5 start. ``static`` is the old scheme (every
    start takes its voters from ``--peers``; nodes 4 and 5 are voters at once); otherwise 4
    and 5 start to join and node 3 keeps its persisted configuration. Then {1, 2} and
    {3, 4, 5} are cut apart, node 2 campaigns on its side and node 3 on the other."""
    cluster = Cluster(3, seed=17, timing=dict(STRICT), spare_count=2)
    checker = Checker(cluster)
    elect(cluster, checker, N1)
    for record_id in range(1, 6):
        assert isinstance(cluster.propose(N1, record_id, 40), Proposed)
    settle(cluster, checker)
    five = (N1, N2, N3, N4, N5)
    cluster.crash(N3)
    for node_id in (N3, N4, N5):
        node = cluster.nodes[node_id]
        if static:
            node.voters = five
            node.log.memberships = ()  # the old scheme kept no configuration
    for node_id in (N4, N5):
        cluster.crash(node_id)
        cluster.restart(node_id)
    cluster.restart(N3)
    cluster.group_of = {N1: 0, N2: 0, N3: 1, N4: 1, N5: 1}
    elect(cluster, checker, N2)
    elect(cluster, checker, N3)
    return cluster


def test_the_static_scheme_elects_two_leaders_in_one_term_during_a_3_to_5_roll() -> None:
    with pytest.raises(SimulationFailure, match="single_leader_per_term: n2 and n3 both lead"):
        roll_to_five(static=True)


def test_configuration_through_the_log_survives_the_same_schedule_then_grows_to_five() -> None:
    cluster = roll_to_five(static=False)
    checker = Checker(cluster)
    assert cluster.leaders() == [N2]
    assert cluster.core(N3).role is not Role.LEADER
    assert not cluster.core(N4).members.current.voters  # started to join: waits to be added
    cluster.group_of = {}
    settle(cluster, checker)
    leader = cluster.leaders()[0]
    record_id = MEMBERSHIP_RECORD_ID_BASE
    voters = {N1, N2, N3}
    for new in (N4, N5):  # one change at a time: learner, then voter
        for membership in (
            Membership(frozenset(voters), frozenset({new})),
            Membership(frozenset(voters | {new})),
        ):
            record_id += 1
            outcome = cluster.propose_membership(leader, record_id, membership)
            assert isinstance(outcome, Proposed), outcome
            settle(cluster, checker)
        voters.add(new)
    cluster.tick(leader)  # a heartbeat carries the last commit offset to the followers
    settle(cluster, checker)
    for node_id in voters:
        assert cluster.core(node_id).members.current.voters == voters
        assert cluster.core(node_id).committed_offset == cluster.core(leader).log.last_offset
