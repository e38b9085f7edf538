"""Catch-up below the leader's retention: ``compact_log``, ``ResetLogStart``, ``Ready.log_reset``.

Pure cores wired by hand (messages routed in a loop, every Ready advanced): a follower whose
log ends before the leader's log start is told to restart there, its Ready carries the reset,
and ordinary AppendEntries then bring it to the leader's end; a follower never discards
committed bytes; ``EpochLog.compact`` keeps the terms of the remaining bytes.
"""

from __future__ import annotations

from gannet.node.raft.config import Config, InitialState
from gannet.node.raft.core import RaftCore
from gannet.node.raft.epochs import Epoch, EpochLog
from gannet.node.raft.membership import Membership, MembershipEntry
from gannet.node.raft.messages import (
    AppendEntries,
    AppendResponse,
    ByteOffset,
    Message,
    NodeId,
    ResetLogStart,
    Term,
    VoteResponse,
)
from gannet.node.raft.ready import HardState, LogReset, Role
from gannet.node.replication import peer_wire

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)
VOTERS = (N1, N2, N3)


def _core(node: NodeId, initial: InitialState | None = None) -> RaftCore:
    config = Config(
        node_id=node,
        voters=VOTERS,
        random_ticks=lambda n: 0,
        noop_payload=lambda offset, term: b"n" * 8,
        pre_vote=False,
        check_quorum=False,
    )
    return RaftCore(config, initial)


def _follower_of_term_1(last: int) -> RaftCore:
    """Node 2, following node 1 in term 1, its log ``[0, last)`` all of term 1."""
    initial = InitialState(
        hard_state=HardState(Term(1), N1),
        epochs=(Epoch(Term(1), ByteOffset(0)),),
        last_offset=ByteOffset(last),
    )
    return _core(N2, initial)


def _leader_with_retention(start: int, last: int) -> RaftCore:
    """Node 1 holding term-1 bytes [start, last) (retention deleted [0, start)), elected in
    term 2 with node 2's vote; its no-op ends at last + 8."""
    initial = InitialState(
        hard_state=HardState(Term(1), N1),
        epochs=(Epoch(Term(1), ByteOffset(start)),),
        last_offset=ByteOffset(last),
        start_offset=ByteOffset(start),
        start_term=Term(1),
    )
    leader = _core(N1, initial)
    leader.campaign()
    leader.advance(leader.ready())
    leader.step(VoteResponse(N2, N1, Term(2), True))
    return leader


def _run(cores: dict[NodeId, RaftCore], seen: list[Message], rounds: int = 50) -> list[LogReset]:
    """Route messages between ``cores`` until quiet; returns the log resets executed."""
    resets: list[LogReset] = []
    for _ in range(rounds):
        outbox: list[Message] = []
        for core in cores.values():
            while core.has_ready():
                ready = core.ready()
                if ready.log_reset is not None:
                    resets.append(ready.log_reset)
                outbox.extend(ready.messages)
                core.advance(ready)
                core.report_durable(core.log.last_offset)
        if not outbox:
            return resets
        for message in outbox:
            seen.append(message)
            if message.target in cores:
                cores[message.target].step(message)
    raise AssertionError("messages still flowing after 50 rounds")


def test_an_empty_follower_is_reset_to_the_leaders_log_start_then_streamed() -> None:
    leader = _leader_with_retention(start=512, last=1000)
    follower = _core(N2)
    seen: list[Message] = []
    resets = _run({N1: leader, N2: follower}, seen)
    assert resets == [LogReset(ByteOffset(512), Term(1))]
    reset_messages = [m for m in seen if isinstance(m, ResetLogStart)]
    assert reset_messages == [
        ResetLogStart(
            N1,
            N2,
            Term(2),
            ByteOffset(512),
            Term(1),
            ByteOffset(0),
            # the configuration in force at the start travels with the reset
            MembershipEntry(ByteOffset(0), ByteOffset(0), Membership(frozenset({N1, N2, N3}))),
        )
    ]
    appends = [m for m in seen if isinstance(m, AppendEntries) and m.end_offset > m.prev_offset]
    assert appends
    assert all(m.prev_offset >= 512 for m in appends), "bytes before the start sent"
    assert follower.log.start_offset == 512
    assert follower.log.last_offset == leader.log.last_offset == 1008
    assert follower.log.epochs == (
        Epoch(Term(1), ByteOffset(512)),
        Epoch(Term(2), ByteOffset(1000)),
    )
    assert leader.committed_offset == 1008  # the reset follower's durable bytes count
    leader.tick()  # a heartbeat carries the commit
    _run({N1: leader, N2: follower}, seen)
    assert follower.committed_offset == 1008
    assert follower.role is Role.FOLLOWER


def test_a_follower_holding_the_start_is_not_reset() -> None:
    leader = _leader_with_retention(start=512, last=1000)
    follower = _follower_of_term_1(last=700)
    seen: list[Message] = []
    assert _run({N1: leader, N2: follower}, seen) == []
    assert not any(isinstance(m, ResetLogStart) for m in seen)
    assert follower.log.start_offset == 0
    assert follower.log.last_offset == 1008


def test_after_compact_log_a_far_behind_follower_is_reset() -> None:
    leader = _leader_with_retention(start=0, last=1000)
    follower = _follower_of_term_1(last=100)
    # The follower's answers are held back: the leader has only its probe out.
    while leader.has_ready():
        leader.advance(leader.ready())
    leader.report_durable(leader.log.last_offset)
    leader.compact_log(ByteOffset(600))
    assert leader.log.start_offset == 600
    assert leader.log.start_term == 1
    leader.tick()  # the heartbeat probes again (the first probe was lost)
    seen: list[Message] = []
    resets = _run({N1: leader, N2: follower}, seen)
    assert resets == [LogReset(ByteOffset(600), Term(1))]
    assert follower.log.start_offset == 600
    assert follower.log.last_offset == 1008


def test_a_follower_never_resets_below_its_commit() -> None:
    follower = _core(
        N2,
        InitialState(
            hard_state=HardState(Term(2), N1),
            epochs=(Epoch(Term(1), ByteOffset(0)),),
            last_offset=ByteOffset(900),
            committed_offset=ByteOffset(800),
        ),
    )
    follower.step(ResetLogStart(N1, N2, Term(2), ByteOffset(950), Term(1), ByteOffset(900)))
    ready = follower.ready()
    assert ready.log_reset == LogReset(ByteOffset(950), Term(1))  # 950 > commit 800: reset
    follower.advance(ready)
    assert follower.log.last_offset == 950
    acks = [m for m in ready.messages if isinstance(m, AppendResponse)]
    assert acks
    assert acks[0].success
    assert acks[0].match_offset == 950
    follower.step(ResetLogStart(N1, N2, Term(2), ByteOffset(10), Term(7), ByteOffset(900)))
    ready = follower.ready()
    assert ready.log_reset is None  # 10 is below the commit (950): ignored
    assert not ready.messages
    follower.advance(ready)
    assert follower.log.start_offset == 950


def test_an_append_before_the_log_start_is_refused_with_a_hint_to_search_down() -> None:
    follower = _core(
        N2,
        InitialState(
            hard_state=HardState(Term(2), N1),
            epochs=(Epoch(Term(2), ByteOffset(500)),),
            last_offset=ByteOffset(600),
            start_offset=ByteOffset(500),
            start_term=Term(1),
        ),
    )
    follower.step(
        AppendEntries(
            N1, N2, Term(2), ByteOffset(100), Term(1), ByteOffset(200), Term(1), ByteOffset(0)
        )
    )
    ready = follower.ready()
    assert ready.messages == (
        AppendResponse(
            N2,
            N1,
            Term(2),
            False,
            rejected_prev_offset=ByteOffset(100),
            hint_term=Term(0),
            hint_offset=ByteOffset(0),
        ),
    )


def test_epoch_log_compact_and_reset() -> None:
    log = EpochLog(
        (
            Epoch(Term(1), ByteOffset(0)),
            Epoch(Term(3), ByteOffset(100)),
            Epoch(Term(4), ByteOffset(300)),
        ),
        last_offset=ByteOffset(400),
    )
    log.compact(ByteOffset(150))
    assert (log.start_offset, log.start_term) == (150, 3)
    assert list(log.epochs) == [Epoch(Term(3), ByteOffset(150)), Epoch(Term(4), ByteOffset(300))]
    assert log.term_at(ByteOffset(300)) == 3
    log.compact(ByteOffset(300))
    assert (log.start_offset, log.start_term) == (300, 3)
    assert list(log.epochs) == [Epoch(Term(4), ByteOffset(300))]
    log.compact(ByteOffset(400))
    assert (log.start_offset, log.start_term, log.last_offset) == (400, 4, 400)
    assert list(log.epochs) == []
    log.reset(ByteOffset(1024), Term(9))
    assert (log.start_offset, log.start_term, log.last_offset) == (1024, 9, 1024)
    assert log.last_term == 9
    assert log.matches(ByteOffset(1024), Term(9))
    assert not log.matches(ByteOffset(1000), Term(9))


def test_a_follower_restarted_in_the_same_term_learns_the_commit_without_new_writes() -> None:
    leader = _leader_with_retention(start=0, last=1000)
    follower = _core(N2)
    seen: list[Message] = []
    _run({N1: leader, N2: follower}, seen)
    assert leader.committed_offset == 1008
    restarted = _core(
        N2,
        InitialState(
            hard_state=HardState(follower.term, follower.vote),
            epochs=follower.log.epochs,
            last_offset=follower.log.last_offset,
        ),
    )
    assert restarted.committed_offset == 0
    for _ in range(3):  # heartbeats: the answer's match 0 makes the leader probe again
        leader.tick()
        _run({N1: leader, N2: restarted}, seen)
    assert restarted.committed_offset == 1008


def test_reset_log_start_round_trips_on_the_peer_wire() -> None:
    message = ResetLogStart(N1, N2, Term(4), ByteOffset(1 << 30), Term(3), ByteOffset(5 << 30))
    wire = peer_wire.to_proto(message, "g")
    assert wire.WhichOneof("body") == "reset_log_start"
    assert peer_wire.from_proto(wire) == message
    entry = MembershipEntry(
        ByteOffset(100), ByteOffset(180), Membership(frozenset({N1, N2}), frozenset({N3}), b"{}")
    )
    with_config = ResetLogStart(N1, N2, Term(4), ByteOffset(200), Term(3), ByteOffset(200), entry)
    assert peer_wire.from_proto(peer_wire.to_proto(with_config, "g")) == with_config


def test_an_append_sent_before_the_compaction_catches_the_follower_up_without_a_reset() -> None:
    """The leader compacts while its append to a far-behind follower is still on the way: the
    append (valid bytes of the leader's log) arrives first, so the ResetLogStart behind it
    finds the start held and resets nothing. The follower keeps its older bytes; both logs are
    the same from the leader's start on. (``tests/replication/test_log_reset.py`` heals its
    partitioned member only after such appends are gone, so that it must be reset.)"""
    leader = _leader_with_retention(start=0, last=1000)
    follower = _follower_of_term_1(last=100)
    held: list[Message] = []  # the leader's messages to node 2, in the order sent
    for _ in range(10):  # probe down to where node 2 matches; stop at the first range sent
        while leader.has_ready():
            ready = leader.ready()
            held.extend(m for m in ready.messages if m.target == N2)
            leader.advance(ready)
            leader.report_durable(leader.log.last_offset)
        ranges = [m for m in held if isinstance(m, AppendEntries) and m.prev_offset == 100]
        if ranges:
            break
        for message in held:
            follower.step(message)
        held.clear()
        while follower.has_ready():
            ready = follower.ready()
            follower.advance(ready)
            for message in ready.messages:
                leader.step(message)
    assert [(m.prev_offset, m.end_offset) for m in ranges] == [(100, 1000)]  # term 1's bytes
    leader.compact_log(ByteOffset(600))
    while leader.has_ready():
        ready = leader.ready()
        held.extend(m for m in ready.messages if m.target == N2)
        leader.advance(ready)
    assert isinstance(held[-1], ResetLogStart)
    assert held[-1].start_offset == 600
    for message in held:  # in order, as lane 0 delivers them
        follower.step(message)
    seen: list[Message] = []
    assert _run({N1: leader, N2: follower}, seen) == []  # no reset, then the no-op streamed
    assert (follower.log.start_offset, follower.log.last_offset) == (0, 1008)
    assert follower.log.term_at(ByteOffset(600)) == leader.log.start_term
    assert follower.log.epochs[-1] == leader.log.epochs[-1]
