"""The Raft core's invariant assertions (``raft/node_state.py``) stop a node whose state is
corrupt instead of letting it hand the driver a Ready built on it.

Each test builds a healthy core, corrupts one piece of state the way a bug would, and checks
that the next ``ready()`` (or the edit itself) raises ``InvariantViolation`` naming the rule.
The simulations (``test_simulation.py``, ``test_membership_simulation.py``) run with the same
assertions on and must never trip them.
"""

from __future__ import annotations

import pytest

from gannet.node.invariants import InvariantViolation
from gannet.node.raft.core import RaftCore
from gannet.node.raft.messages import (
    AppendResponse,
    ByteOffset,
    NodeId,
    PreVoteResponse,
    Term,
    VoteRequest,
    VoteResponse,
)
from gannet.node.raft.ready import AppendRange, Role

from .test_core_api import drain, make

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)


@pytest.fixture
def leader() -> RaftCore:
    core = make(voters=(N1, N2, N3))
    core.campaign()  # pre-vote round
    core.step(PreVoteResponse(N2, N1, Term(1), True))
    core.step(VoteResponse(N2, N1, Term(1), True))
    drain(core)
    assert core.role is Role.LEADER
    return core


def test_a_healthy_leader_hands_out_readies(leader: RaftCore) -> None:
    leader.step(AppendResponse(N2, N1, Term(1), True, ByteOffset(8), ByteOffset(8)))
    drain(leader)
    leader.report_durable(ByteOffset(8))
    drain(leader)
    assert leader.committed_offset == 8


def test_a_term_that_went_backwards_stops_the_node(leader: RaftCore) -> None:
    leader.term = Term(0)
    leader.leader_id = N1
    with pytest.raises(InvariantViolation, match="went back"):
        leader.ready()


def test_a_second_vote_in_one_term_stops_the_node() -> None:
    core = make(N3, (N1, N2, N3))
    core.step(VoteRequest(N1, N3, Term(1), Term(0), ByteOffset(0)))
    drain(core)
    assert core.vote == N1
    core.vote = N2  # corrupted: a second vote in term 1
    core.pending_messages.append(VoteRequest(N3, N2, Term(1), Term(0), ByteOffset(0)))
    with pytest.raises(InvariantViolation, match="vote of term 1 changed"):
        core.ready()


def test_granting_a_second_vote_is_refused_at_the_edit() -> None:
    core = make(N3, (N1, N2, N3))
    core.grant_vote(N1)
    with pytest.raises(InvariantViolation, match="second vote"):
        core.grant_vote(N2)


def test_a_commit_beyond_the_log_end_stops_the_node(leader: RaftCore) -> None:
    with pytest.raises(InvariantViolation, match="beyond the log end"):
        leader.set_committed(ByteOffset(leader.log.last_offset + 1))
    leader.committed_offset = ByteOffset(leader.log.last_offset + 1)
    with pytest.raises(InvariantViolation, match="beyond the log end"):
        leader.ready()


def test_a_commit_that_moves_back_stops_the_node(leader: RaftCore) -> None:
    leader.step(AppendResponse(N2, N1, Term(1), True, ByteOffset(8), ByteOffset(8)))
    leader.report_durable(ByteOffset(8))
    drain(leader)
    with pytest.raises(InvariantViolation, match="commit 8 -> 4"):
        leader.set_committed(ByteOffset(4))
    leader.committed_offset = ByteOffset(4)
    with pytest.raises(InvariantViolation, match="commit went backwards"):
        leader.ready()


def test_progress_out_of_order_stops_the_leader(leader: RaftCore) -> None:
    pr = leader.progress[N2]
    pr.next_offset = ByteOffset(leader.log.last_offset + 5)  # past the log end
    with pytest.raises(InvariantViolation, match="out of order"):
        leader.ready()
    pr.next_offset = ByteOffset(0)
    pr.match_offset = ByteOffset(8)  # match beyond next
    with pytest.raises(InvariantViolation, match="out of order"):
        leader.ready()


def test_an_entry_of_an_older_term_cannot_follow_a_newer_one(leader: RaftCore) -> None:
    start = leader.log.last_offset
    with pytest.raises(InvariantViolation, match="terms never decrease"):
        leader.append(AppendRange(start, ByteOffset(start + 4), Term(0), b"abcd"))


def test_an_answer_claiming_bytes_the_leader_never_sent_is_dropped(leader: RaftCore) -> None:
    """A follower cannot push the leader's view of it past the leader's own log (the
    progress invariant would stop the leader): such an answer is ignored."""
    beyond = ByteOffset(leader.log.last_offset + 100)
    leader.step(AppendResponse(N2, N1, Term(1), True, beyond, beyond))
    drain(leader)
    assert leader.progress[N2].match_offset <= leader.log.last_offset
    assert leader.committed_offset == 0
