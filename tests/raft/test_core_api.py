"""The driver-facing API of ``RaftCore``: outcomes, limits and contract checks."""

from __future__ import annotations

import pytest

from gannet.node.invariants import InvariantViolation
from gannet.node.raft.config import Config, InitialState
from gannet.node.raft.core import RaftCore
from gannet.node.raft.epochs import Epoch
from gannet.node.raft.messages import (
    Busy,
    ByteOffset,
    Heartbeat,
    NodeId,
    NotLeader,
    Proposed,
    Term,
    TransferStarted,
    VoteResponse,
)
from gannet.node.raft.ready import HardState, Role

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)


def make(node: NodeId = N1, voters=(N1,), **limits) -> RaftCore:
    config = Config(
        node_id=node,
        voters=voters,
        random_ticks=lambda n: 0,
        noop_payload=lambda offset, term: b"n" * 8,
        **limits,
    )
    return RaftCore(config)


def drain(core: RaftCore) -> None:
    while core.has_ready():
        core.advance(core.ready())


def test_single_node_commits_only_durable_bytes() -> None:
    core = make()
    core.campaign()
    drain(core)
    assert core.role is Role.LEADER
    outcome = core.propose(b"x" * 10)
    assert outcome == Proposed(ByteOffset(8), ByteOffset(18), Term(1))
    drain(core)
    assert core.committed_offset == 0
    core.report_durable(ByteOffset(18))
    rd = core.ready()
    assert rd.committed_offset == 18
    core.advance(rd)


def test_follower_redirects_with_the_leader_it_knows() -> None:
    core = make(N2, (N1, N2, N3))
    assert core.propose(b"x") == NotLeader(NodeId(0))
    core.step(Heartbeat(N1, N2, Term(3), ByteOffset(0)))
    drain(core)
    assert core.propose(b"x") == NotLeader(N1)
    assert core.transfer_leadership(N3) == NotLeader(N1)


def test_uncommitted_bytes_are_bounded() -> None:
    core = make(uncommitted_bytes_max=30)
    core.campaign()
    drain(core)
    assert isinstance(core.propose(b"x" * 20), Proposed)
    assert core.propose(b"x" * 5) == Busy("uncommitted_bytes_max reached")


def test_transfer_needs_a_follower_and_fences_writes() -> None:
    core = make(N1, (N1, N2, N3), check_quorum=False, pre_vote=False)
    core.campaign()
    drain(core)
    core.step(VoteResponse(N2, N1, Term(1), True))
    drain(core)
    assert core.role is Role.LEADER
    assert isinstance(core.transfer_leadership(NodeId(9)), Busy)
    assert core.transfer_leadership(N2) == TransferStarted(N2)
    assert core.propose(b"x") == Busy("leadership transfer in progress")


def test_contract_violations_raise() -> None:
    core = make()
    core.campaign()
    rd = core.ready()
    with pytest.raises(InvariantViolation):
        core.tick()  # input between ready() and advance()
    with pytest.raises(InvariantViolation):
        core.ready()
    core.advance(rd)
    with pytest.raises(InvariantViolation):
        core.step(Heartbeat(N2, N3, Term(1), ByteOffset(0)))  # not addressed to this node
    joiner = make(N1, (N2, N3))  # not a voter of its bootstrap: it waits to be added
    joiner.campaign()
    for _ in range(100):
        joiner.tick()
    assert joiner.role is Role.FOLLOWER
    assert joiner.term == 0


def test_restart_recovers_term_vote_and_epochs() -> None:
    config = Config(
        node_id=N1,
        voters=(N1, N2, N3),
        random_ticks=lambda n: 0,
        noop_payload=lambda offset, term: b"n" * 8,
    )
    initial = InitialState(
        hard_state=HardState(Term(4), N2),
        epochs=(Epoch(Term(1), ByteOffset(0)), Epoch(Term(4), ByteOffset(50))),
        last_offset=ByteOffset(80),
    )
    core = RaftCore(config, initial)
    assert (core.term, core.vote, core.log.last_term) == (4, N2, 4)
    assert core.durable_offset == 80
    assert not core.has_ready()
