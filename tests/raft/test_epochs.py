"""Properties of the byte-offset log model (``gannet.node.raft.epochs``).

Histories are generated the way Raft produces them: the leader of each new term starts from a
prefix of some earlier leader's log (what it had replicated) and appends bytes of its own term.
Any two such logs satisfy log matching, and the Kafka-style divergence search between them
must end, move strictly backwards, and land on an offset below which both logs agree byte by
byte; the repair (truncate at the first conflict, append) must make the follower equal the
leader.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.node.invariants import InvariantViolation
from gannet.node.raft.epochs import Epoch, EpochLog
from gannet.node.raft.messages import ByteOffset, Term

Segments = list[tuple[int, int]]  # (term, length_bytes)


@st.composite
def histories(draw: st.DrawFn) -> list[Segments]:
    """One log per term 1..n; term t's log extends a prefix of an earlier term's log."""
    logs: list[Segments] = [[]]
    for term in range(1, draw(st.integers(1, 8)) + 1):
        parent = draw(st.sampled_from(logs))
        keep = draw(st.integers(0, len(parent)))
        logs.append([*parent[:keep], (term, draw(st.integers(1, 5)))])
    return logs


def build(segments: Segments) -> EpochLog:
    log = EpochLog()
    for term, length in segments:
        log.append(log.last_offset, ByteOffset(log.last_offset + length), Term(term))
    return log


def byte_terms(log: EpochLog) -> list[int]:
    return [log.term_at(ByteOffset(offset + 1)) for offset in range(log.last_offset)]


@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_divergence_search_ends_on_a_common_prefix(logs: list[Segments], data: st.DataObject):
    leader = build(data.draw(st.sampled_from(logs)))
    follower = build(data.draw(st.sampled_from(logs)))
    prev = leader.last_offset
    for _ in range(100):
        if follower.matches(prev, leader.term_at(prev)):
            break
        hint_term, hint_offset = follower.divergence_hint(prev, leader.term_at(prev))
        candidate = ByteOffset(min(hint_offset, leader.end_for_term(hint_term)))
        assert candidate < prev
        prev = candidate
    else:
        pytest.fail("divergence search did not end")
    assert byte_terms(leader)[:prev] == byte_terms(follower)[:prev]
    # Repair: cut the follower's first conflicting byte, then append the leader's epochs.
    offset = prev
    while offset < leader.last_offset:
        end = leader.end_of_byte_epoch(offset)
        term = leader.term_at(ByteOffset(offset + 1))
        conflict = follower.first_conflict(offset, end, term)
        if conflict is not None:
            follower.truncate(conflict)
        if end > follower.last_offset:
            follower.append(follower.last_offset, end, term)
        offset = end
    if follower.last_offset > leader.last_offset:
        follower.truncate(leader.last_offset)  # the leader's next term would cut it
    assert byte_terms(follower) == byte_terms(leader)
    assert follower.epochs == leader.epochs


def test_term_lookup_and_epoch_ends() -> None:
    log = build([(1, 10), (3, 5), (4, 1)])
    assert log.epochs == (
        Epoch(Term(1), ByteOffset(0)),
        Epoch(Term(3), ByteOffset(10)),
        Epoch(Term(4), ByteOffset(15)),
    )
    assert [log.term_at(ByteOffset(o)) for o in (0, 1, 10, 11, 15, 16)] == [0, 1, 1, 3, 3, 4]
    assert log.end_for_term(Term(2)) == 10  # Kafka: epoch 1 is the largest <= 2; ends at 10
    assert log.end_for_term(Term(0)) == 0
    assert log.end_for_term(Term(9)) == 16
    assert log.divergence_hint(ByteOffset(16), Term(2)) == (1, 10)


def test_recovered_epochs_drop_terms_without_bytes_and_reject_disorder() -> None:
    log = EpochLog(
        [Epoch(Term(1), ByteOffset(0)), Epoch(Term(2), ByteOffset(8))], last_offset=ByteOffset(8)
    )
    assert log.epochs == (Epoch(Term(1), ByteOffset(0)),)
    with pytest.raises(InvariantViolation):
        EpochLog(
            [Epoch(Term(2), ByteOffset(0)), Epoch(Term(1), ByteOffset(4))],
            last_offset=ByteOffset(8),
        )
    with pytest.raises(InvariantViolation):
        log.truncate(ByteOffset(9))
