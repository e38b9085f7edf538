"""The rule by which a member knows its group no longer counts it
(:mod:`gannet.node.replication.removal`): pure, no cluster."""

from __future__ import annotations

from gannet.node.raft.membership import Membership
from gannet.node.raft.messages import NO_NODE, NodeId, Term
from gannet.node.replication.removal import Standing

ME, LEADER, OTHER = NodeId(3), NodeId(1), NodeId(2)
WITH_ME = Membership(frozenset({LEADER, OTHER, ME}))
WITHOUT_ME = Membership(frozenset({LEADER, OTHER}))


def _removed(standing: Standing, followed: NodeId, term: int, committed: Membership = WITH_ME,
             settled: bool = True) -> bool:  # fmt: skip
    return standing.knows_removed(
        followed=followed, term=Term(term), committed=committed, settled=settled
    )


def test_a_member_counts_until_its_leader_refuses_it() -> None:
    standing = Standing(ME)
    assert not _removed(standing, LEADER, 5)
    assert standing.leader_refused(LEADER, followed=LEADER, term=Term(5))
    assert _removed(standing, LEADER, 5)
    assert not standing.leader_refused(LEADER, followed=LEADER, term=Term(5))  # told already
    assert standing.refusals_total == 1


def test_a_refusal_from_a_member_it_does_not_follow_says_nothing() -> None:
    standing = Standing(ME)
    assert not standing.leader_refused(OTHER, followed=LEADER, term=Term(5))  # a former leader
    assert not standing.leader_refused(LEADER, followed=NO_NODE, term=Term(5))
    assert not _removed(standing, LEADER, 5)
    assert standing.refusals_total == 0


def test_a_leader_streaming_to_it_again_counts_it_again() -> None:
    """Added again (a learner under the same node id): the leader's next message ends it."""
    standing = Standing(ME)
    standing.leader_refused(LEADER, followed=LEADER, term=Term(5))
    standing.heard_from_leader()
    assert not _removed(standing, LEADER, 5)


def test_another_leader_or_term_is_not_disowned_by_an_old_refusal() -> None:
    standing = Standing(ME)
    standing.leader_refused(LEADER, followed=LEADER, term=Term(5))
    assert not _removed(standing, LEADER, 6)  # re-elected: whether it counts us is unknown
    assert not _removed(standing, OTHER, 5)
    assert not _removed(standing, NO_NODE, 5)  # an election: the ordinary port gate rule


def test_without_a_leader_a_committed_configuration_without_it_is_a_removal() -> None:
    """A leader that removed itself steps down once the removal commits: nobody leads for it."""
    standing = Standing(ME)
    assert _removed(standing, NO_NODE, 5, WITHOUT_ME)
    assert not _removed(standing, NO_NODE, 5, WITHOUT_ME, settled=False)  # a later entry
    assert not _removed(standing, NO_NODE, 5, WITH_ME)
    assert not _removed(standing, NO_NODE, 5, Membership(frozenset()))  # --join: none yet


def test_following_a_leader_with_a_configuration_without_it_is_no_removal() -> None:
    """A learner added again catches up through the record of its own removal: its leader
    streams to it, so it is counted."""
    standing = Standing(ME)
    assert not _removed(standing, LEADER, 5, WITHOUT_ME)
