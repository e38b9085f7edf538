"""The membership rules of ``RaftCore`` (``gannet.node.raft.membership``), one at a time, on
small simulated groups (``gannet.node.testing.raft_sim``) with every invariant checked."""

from __future__ import annotations

from gannet.node.raft.membership import Membership, MembershipEntry
from gannet.node.raft.messages import Busy, ByteOffset, NodeId, Proposed, ResetLogStart, Term
from gannet.node.raft.ready import Role
from gannet.node.testing.raft_checks import Checker
from gannet.node.testing.raft_sim import MEMBERSHIP_RECORD_ID_BASE, Cluster

N1, N2, N3, N4 = (NodeId(i) for i in range(1, 5))


class Group:
    def __init__(self, voters: int, spares: int = 1) -> None:
        self.cluster = Cluster(voters, seed=3, timing={"check_quorum": False}, spare_count=spares)
        self.checker = Checker(self.cluster)
        self.record_id = 0

    def settle(self, rounds: int = 20) -> None:
        for _ in range(rounds):
            while self.cluster.in_flight:
                self.cluster.deliver(self.cluster.in_flight.pop(0))
                self.checker.check()
            for node_id in self.cluster.up_ids():
                self.cluster.sync(node_id)
            self.checker.check()

    def elect(self, node_id: NodeId) -> None:
        self.cluster.core(node_id).campaign()
        self.cluster.drain(node_id)
        self.settle()

    def change(self, leader: NodeId, voters: set[NodeId], learners: set[NodeId]) -> object:
        self.record_id += 1
        membership = Membership(frozenset(voters), frozenset(learners))
        outcome = self.cluster.propose_membership(
            leader, MEMBERSHIP_RECORD_ID_BASE + self.record_id, membership
        )
        self.settle()
        return outcome

    def write(self, leader: NodeId) -> None:
        self.record_id += 1
        assert isinstance(self.cluster.propose(leader, self.record_id, 30), Proposed)
        self.settle()


def test_a_joining_node_never_campaigns_and_a_learner_never_counts() -> None:
    g = Group(3)
    for _ in range(50):
        g.cluster.tick(N4)
    assert g.cluster.core(N4).role is Role.FOLLOWER
    assert g.cluster.core(N4).term == 0
    g.elect(N1)
    assert isinstance(g.change(N1, {N1, N2, N3}, {N4}), Proposed)
    assert g.cluster.core(N4).members.current.learners == {N4}
    g.cluster.crash(N2)
    g.cluster.crash(N3)  # leader + learner are not a quorum of {1, 2, 3}
    committed = g.cluster.core(N1).committed_offset
    g.cluster.propose(N1, 999, 30)
    g.settle()
    assert g.cluster.core(N1).committed_offset == committed
    g.cluster.core(N4).campaign()  # a learner ignores even an explicit campaign
    assert g.cluster.core(N4).role is Role.FOLLOWER


def test_one_change_at_a_time_and_only_after_a_commit_of_the_leaders_term() -> None:
    g = Group(3)
    g.cluster.core(N1).campaign()
    g.cluster.drain(N1)
    while g.cluster.in_flight:  # elected, but its no-op is not committed yet
        message = g.cluster.in_flight.pop(0)
        g.cluster.deliver(message)
        if g.cluster.core(N1).role is Role.LEADER:
            break
    core = g.cluster.core(N1)
    membership = Membership(frozenset({N1, N2, N3}), frozenset({N4}))
    early = core.propose_membership(b"x" * 20, membership)
    assert isinstance(early, Busy)
    assert "not committed an entry of its term" in early.reason
    g.cluster.drain(N1)
    g.settle()
    assert isinstance(g.change(N1, {N1, N2, N3}, {N4}), Proposed)
    g.cluster.group_of = {N2: 1, N3: 1, N4: 1}  # the promotion cannot commit
    assert isinstance(g.change(N1, {N1, N2, N3, N4}, set()), Proposed)
    refused = g.change(N1, {N1, N2, N3, N4}, set())
    assert isinstance(refused, Busy)
    assert "in flight" in refused.reason
    g.cluster.group_of = {}
    for _ in range(5):  # heartbeats: the lost ranges are sent again
        g.cluster.tick(N1)
        g.settle(2)
    assert g.cluster.core(N1).members.current.voters == {N1, N2, N3, N4}
    two = g.change(N1, {N1}, set())
    assert isinstance(two, Busy)
    assert "one voter at a time" in two.reason


def test_a_removed_leader_leads_until_its_removal_commits_then_hands_over() -> None:
    g = Group(3, spares=0)
    g.elect(N1)
    g.write(N1)
    assert isinstance(g.change(N1, {N2, N3}, set()), Proposed)
    g.cluster.tick(N1)
    g.settle()
    leaders = g.cluster.leaders()
    assert leaders in ([N2], [N3])  # TimeoutNow: the most caught-up voter took over at once
    for _ in range(100):
        g.cluster.tick(N1)
        g.settle(1)
    assert g.cluster.core(N1).role is Role.FOLLOWER  # never campaigns once removed
    g.write(leaders[0])


def test_the_configuration_survives_a_restart_and_ignores_a_new_bootstrap() -> None:
    g = Group(3)
    g.elect(N1)
    g.change(N1, {N1, N2, N3}, {N4})
    g.change(N1, {N1, N2, N3, N4}, set())
    g.cluster.crash(N2)
    g.cluster.nodes[N2].voters = (N1, N2)  # another --peers on restart: ignored
    g.cluster.restart(N2)
    assert g.cluster.core(N2).members.current.voters == {N1, N2, N3, N4}


def test_a_reset_follower_receives_the_configuration_in_force() -> None:
    g = Group(3)
    g.elect(N1)
    g.change(N1, {N1, N2, N3}, {N4})
    g.cluster.crash(N4)
    for _ in range(5):
        g.write(N1)
    leader = g.cluster.core(N1)
    start = leader.committed_offset
    leader.compact_log(ByteOffset(start))
    g.cluster.drain(N1)
    g.cluster.nodes[N4].log.__init__()  # type: ignore[misc]  # its disk is gone
    g.cluster.restart(N4)
    sent = []
    for _ in range(5):
        g.cluster.tick(N1)
        while g.cluster.in_flight:
            message = g.cluster.in_flight.pop(0)
            sent.append(message)
            g.cluster.deliver(message)
    resets = [m for m in sent if isinstance(m, ResetLogStart)]
    assert resets
    assert resets[0].membership is not None
    assert resets[0].membership.membership == Membership(frozenset({N1, N2, N3}), frozenset({N4}))
    assert g.cluster.core(N4).members.entries() == (resets[0].membership,)
    assert isinstance(resets[0].membership, MembershipEntry)
    assert resets[0].term == Term(1)
