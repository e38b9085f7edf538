"""A group left with a member whose configuration is behind still elects (issue 34, seed 912).

The sequence the fault harness's ``replace`` nemesis found, without the harness, on an
in-process group with the peer secret: member C is stopped while leader L adds node 5 (a
``--join`` node: learner, caught up, promoted) and removes member R; then L loses its disk.
C comes back with the configuration {1, 2, 3} from before node 5 existed; C and 5 are two of
the three voters of the latest configuration {L, C, 5} and 5 holds every committed entry. C
must answer 5's (pre-)votes and take its appends although 5 is not in C's configuration: a
leader is elected among {C, 5}, C learns {L, C, 5} from its log, and a write commits on both.
The other side of the rule: a removed member that keeps running with a configuration that still
names it is answered as a stranger, and pre-vote with the leader's lease keeps it from moving
the term or the leader.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from gannet.node.protocol.gen import admin_pb2

from .conftest import TICK_S
from .test_membership import GrowingCluster

pytestmark = pytest.mark.timeout(120)
ELECT_WITHIN_S = 40 * 10 * TICK_S * 2
"""Forty election timeouts (10-20 ticks each): generous for a busy machine; a healthy
election takes one or two."""


@pytest.fixture
def growing(tmp_path: Path) -> Iterator[GrowingCluster]:
    made = GrowingCluster(tmp_path, 3, 2)  # spares 4 and 5; node 5 is the one added
    yield made
    made.stop_all()


def _voters(cluster: GrowingCluster, node_id: int) -> set[int]:
    core = cluster.raft(node_id).core
    assert core is not None
    return set(core.members.current.voters)


def test_member_behind_the_configuration_elects_with_the_added_node(
    growing: GrowingCluster, tmp_path: Path
) -> None:
    growing.start_all()
    leader = growing.leader()
    cut, removed = (i for i in (1, 2, 3) if i != leader)
    growing.create_topic("Before")
    growing.crash(cut)  # cut off: it never hears of node 5
    new = growing.spares[1]
    assert new.node_id == 5
    growing.start(new.node_id)
    add = admin_pb2.AddMemberRequest(
        node_id="5", peer_endpoint=new.peer_endpoint, client_endpoint=new.client_endpoint
    )
    growing.admin(leader, lambda s: s.AddMember(add, timeout=60))
    remove = admin_pb2.RemoveMemberRequest(node_id=str(removed))
    growing.admin(leader, lambda s: s.RemoveMember(remove, timeout=60))
    assert _voters(growing, leader) == {leader, cut, 5}
    growing.wait(5, lambda: _voters(growing, 5) == {leader, cut, 5})
    growing.crash(removed)
    # The leader loses its disk (the operator's lost PVC): gone with every byte it held.
    growing.crash(leader)
    shutil.rmtree(tmp_path / f"node{leader}")
    growing.start(cut)
    assert _voters(growing, cut) == {1, 2, 3}  # behind: predates node 5
    elected = growing.leader(among=[cut, 5], timeout_s=ELECT_WITHIN_S)
    assert elected in (cut, 5)
    growing.wait(cut, lambda: _voters(growing, cut) == {leader, cut, 5})
    # A write commits on both (a majority of {L, C, 5}) and is applied on both.
    growing.create_topic_on(elected, "After")
    end = growing.last_offset(elected)
    for node_id in (cut, 5):
        growing.wait(node_id, lambda n=node_id: growing.commit_offset(n) >= end)  # type: ignore[misc]
        assert growing.nodes[node_id].broker.store.wait_dispatched(end, 20)
        assert "After" in growing.nodes[node_id].broker.store.topic_configs
        transport = growing.raft(node_id).transport
        assert transport.contacts() == frozenset()  # 5 became a member of C's table
    status = growing.raft(cut).status()
    assert {p.node_id for p in status.peers} == {leader, 5}  # no stranger, no removed member


def test_removed_member_that_keeps_running_does_not_disturb_the_leader(
    growing: GrowingCluster,
) -> None:
    """R misses its own removal (partitioned meanwhile), so its configuration still makes it a
    voter and it campaigns; the members now answer it as a stranger, and pre-vote with the
    leader's lease keeps the term and the leader where they are."""
    growing.start_all()
    leader = growing.leader()
    removed = next(i for i in (1, 2, 3) if i != leader)
    kept = next(i for i in (1, 2, 3) if i not in (leader, removed))
    growing.raft(removed).transport.partitioned = True
    remove = admin_pb2.RemoveMemberRequest(node_id=str(removed))
    growing.admin(leader, lambda s: s.RemoveMember(remove, timeout=60))
    assert _voters(growing, leader) == {leader, kept}
    assert removed in _voters(growing, removed)  # it never heard
    term = growing.raft(leader).status().term
    stale = growing.raft(removed)
    growing.wait(removed, lambda: stale.leader() is None)  # its lease ran out: it campaigns
    elections = stale.status().elections_total
    stale.transport.partitioned = False
    refused_before = growing.raft(leader).transport.refusals.by_reason.get("not_a_member", 0)
    # Its pre-votes now reach the members, which answer it as a stranger at its contact.
    growing.wait(leader, lambda: removed in growing.raft(leader).transport.contacts())
    growing.wait(kept, lambda: removed in growing.raft(kept).transport.contacts())
    # Removed, it is sent nothing but answers to its own pre-votes: several rounds of them.
    answers = stale.transport.received_total
    growing.wait(removed, lambda: stale.transport.received_total >= answers + 6)
    assert stale.status().elections_total == elections  # pre-vote never let it campaign
    for node_id in (leader, kept):
        status = growing.raft(node_id).status()
        assert status.term == term
        assert status.leader_id == leader
        assert removed not in {p.node_id for p in status.peers}
    assert growing.raft(leader).transport.refusals.by_reason.get("not_a_member", 0) == (
        refused_before
    )
    growing.create_topic_on(leader, "StillLeading")  # the group still commits
    end = growing.last_offset(leader)
    growing.wait(kept, lambda: growing.commit_offset(kept) >= end)
