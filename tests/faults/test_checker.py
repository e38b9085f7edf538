"""The fault harness's Pop and transaction checkers (:mod:`e2e.faults.checker`) on small
hand-written histories: what fails a run and what is only counted."""

from __future__ import annotations

from typing import Any

from e2e.faults import checker
from e2e.faults.history import Event, Sample
from e2e.faults.nemesis import Fault
from gannet.node.store.log.records import Message


def _ev(t: float, type_: str, f: str, process: str = "pq", **value: Any) -> Event:
    return Event(t, process, type_, f, value)


def _receive(t: float, *copies: tuple[str, str, int]) -> list[Event]:
    messages = [{"key": "k", "id": i, "copy": c, "attempt": a} for i, c, a in copies]
    return [_ev(t, "invoke", "receive"), _ev(t + 0.01, "ok", "receive", messages=messages)]


def _ack(t: float, message_id: str, copy: str) -> list[Event]:
    return [_ev(t, "invoke", "ack", id=message_id, copy=copy),
            _ev(t + 0.01, "ok", "ack", id=message_id, copy=copy)]  # fmt: skip


def test_a_new_copy_revived_from_an_unacked_original_is_counted_not_failed() -> None:
    events = [
        *_receive(1.0, ("m", "1/0/0", 2), ("m", "1/0/1", 2)),  # two revives of the original
        *_ack(1.1, "m", "1/0/0"),
        *_ack(1.2, "m", "1/0/1"),
        *_receive(5.0, ("m", "1/0/13", 2)),  # a third revive of the original, after the acks
        *_ack(5.1, "m", "1/0/13"),
    ]
    verdict = checker.Verdict()
    checker.check_pop(verdict, "pop", events, "pq")
    assert verdict.violations == []
    assert verdict.figures["pop_copies_after_ack"] == 1
    assert verdict.figures["pop_copies"] == 3


def test_a_copy_revived_from_an_unacked_copy_of_the_same_attempt_is_counted() -> None:
    """Fault seed 601: two attempt-2 copies, one acked and one whose ack was lost; an attempt-3
    copy after the ack may come from the unacked one."""
    events = [
        *_receive(1.0, ("m", "1/0/8", 2)),
        _ev(1.1, "invoke", "ack", id="m", copy="1/0/8"),
        _ev(1.2, "info", "ack", id="m", copy="1/0/8"),
        *_receive(12.0, ("m", "1/0/19", 2)),
        *_ack(12.1, "m", "1/0/19"),
        *_receive(16.0, ("m", "1/0/22", 3)),
    ]
    verdict = checker.Verdict()
    checker.check_pop(verdict, "pop", events, "pq")
    assert verdict.violations == []
    assert verdict.figures["pop_copies_after_ack"] == 1


def test_an_acked_copy_delivered_again_or_revived_from_fails() -> None:
    again = [*_receive(1.0, ("m", "0/3/137", 1)), *_ack(1.1, "m", "0/3/137"),
             *_receive(20.0, ("m", "0/3/137", 1))]  # fmt: skip
    revived = [*_receive(1.0, ("m", "0/3/137", 1)), *_ack(1.1, "m", "0/3/137"),
               *_receive(20.0, ("m", "1/0/4", 2))]  # fmt: skip
    for events in (again, revived):
        verdict = checker.Verdict()
        checker.check_pop(verdict, "pop", events, "pq")
        assert len(verdict.violations) == 1, verdict.violations
        assert "delivered after its ack was answered" in verdict.violations[0]


def test_an_ack_after_a_change_of_unknown_outcome_does_not_cover_a_revived_copy() -> None:
    """Fault seed 1002's replay: a change answered ``info`` had taken effect (a new checkpoint,
    its answer lost); the client acked the old handle, and the copy came back when the
    changed lease ended. After a change answered OK the same history still fails."""
    unknown = [
        *_receive(1.0, ("m", "0/3/81", 1)),
        _ev(7.0, "invoke", "change", id="m", copy="0/3/81"),
        _ev(7.1, "info", "change", id="m", copy="0/3/81"),
        *_ack(7.2, "m", "0/3/81"),
        *_receive(38.0, ("m", "1/0/2", 2)),
        *_ack(38.1, "m", "1/0/2"),
    ]
    verdict = checker.Verdict()
    checker.check_pop(verdict, "pop", unknown, "pq")
    assert verdict.violations == []
    assert verdict.figures["pop_acks_after_unknown_change"] == 1
    assert verdict.figures["pop_copies_after_ack"] == 1
    answered = [e if e.type != "info" else _ev(e.t, "ok", "change", **e.value) for e in unknown]
    verdict = checker.Verdict()
    checker.check_pop(verdict, "pop", answered, "pq")
    assert verdict.violations == ["pop: 1 copies delivered after its ack was answered: ['m@1/0/2']"]


def test_a_copy_delivered_during_its_lease_fails() -> None:
    events = [*_receive(1.0, ("m", "0/0/5", 1)), *_receive(3.0, ("m", "0/0/5", 1))]
    verdict = checker.Verdict()
    checker.check_pop(verdict, "pop", events, "pq")
    assert verdict.violations == ["pop: 1 copies delivered during a live lease: ['m@0/0/5']"]


def _stored(*keys: str) -> dict[int, dict[int, list[Message]]]:
    messages = [Message(topic="jt", body=k.encode(), queue_id=0, queue_offset=i)
                for i, k in enumerate(keys)]  # fmt: skip
    return {1: {0: messages}}


def _transaction(key: str, commit: bool, half: str = "ok", end: str = "ok") -> list[Event]:
    f = "commit" if commit else "rollback"
    return [_ev(0.0, "invoke", "half", "t1", key=key, commit=commit),
            _ev(0.1, half, "half", "t1", key=key),
            _ev(0.2, "invoke", f, "t1", key=key), _ev(0.3, end, f, "t1", key=key)]  # fmt: skip


def test_transactions_committed_once_and_rolled_back_never() -> None:
    events = [*_transaction("t1-1", True), *_transaction("t1-2", False),
              *_transaction("t1-3", True, half="info"),
              *_transaction("t1-4", True, end="info")]  # fmt: skip
    verdict = checker.Verdict()
    checker.check_transactions(verdict, events, "t1", "pt", _stored("t1-1"))
    assert verdict.violations == []
    assert (verdict.figures["tx_committed"], verdict.figures["tx_rolled_back"]) == (1, 1)
    assert verdict.figures["tx_in_doubt_not_stored"] == 1  # t1-4: discarded after checks

    broken = [
        (_stored(), "committed transactions not stored"),
        (_stored("t1-1", "t1-1"), "transactions stored twice"),
        (_stored("t1-1", "t1-2"), "rolled-back transactions stored"),
        (_stored("t1-1", "x-9"), "unexpected transactional messages"),
    ]
    for stored, what in broken:
        verdict = checker.Verdict()
        checker.check_transactions(verdict, events, "t1", "pt", stored)
        assert len(verdict.violations) == 1, verdict.violations
        assert what in verdict.violations[0]


def _sample(t: float, node: int, term: int, role: str = "follower", leader: int = 0) -> Sample:
    return Sample(t, node, role, term, leader, 0)


def _cut(start: float, stop: float, node: int) -> tuple[list[Fault], list[Event]]:
    fault = Fault(start, stop, "halves", {"small": [node], "client_with_small": True})
    return [fault], [_ev(start, "start", "fault", "nemesis", kind="halves",
                         fault=fault.describe(), node=0)]  # fmt: skip


def test_a_cut_off_members_term_rising_during_the_cut_fails() -> None:
    faults, started = _cut(41.0, 50.0, 1)
    samples = [_sample(40.5, 1, 5), _sample(42.0, 1, 5), _sample(44.0, 1, 6, "candidate")]
    verdict = checker.Verdict()
    checker.check_terms(verdict, samples, faults, started)
    assert verdict.violations == [
        "terms: a cut-off member's term rose: ['member 1 term 5->6 in halves']"
    ]
    rose_at_once = [_sample(40.5, 1, 5), _sample(42.0, 1, 6)]  # fresh sample before, then higher
    verdict = checker.Verdict()
    checker.check_terms(verdict, rose_at_once, faults, started)
    assert not verdict.valid


def test_a_term_won_while_no_sample_was_taken_is_not_counted_as_the_cuts() -> None:
    """Seed 1301: the last sample of member 1 (term 4) was 10.7 s before the cut; meanwhile it
    won term 5 on the majority side, was killed, and restarted into the cut with term 5, which
    stayed there (pre-vote held)."""
    faults, started = _cut(41.2, 49.7, 1)
    samples = [_sample(30.55, 1, 4), _sample(45.8, 1, 5, "pre-candidate"),
               _sample(48.0, 1, 5, "pre-candidate")]  # fmt: skip
    verdict = checker.Verdict()
    checker.check_terms(verdict, samples, faults, started)
    assert verdict.valid, verdict.violations
    assert verdict.figures["cuts_without_a_fresh_sample"] == 1


def test_a_term_taken_from_a_leader_the_member_follows_is_not_inflation() -> None:
    """Seed 1439: member 2 cut from members 1 and 3, but not from member 4 (added by the
    `membership` nemesis before the cut): it followed member 4's term 3."""
    faults, started = _cut(38.3, 51.1, 2)
    samples = [_sample(38.05, 2, 2, "leader", 2), _sample(41.6, 2, 3, "follower", 4)]
    verdict = checker.Verdict()
    checker.check_terms(verdict, samples, faults, started)
    assert verdict.valid, verdict.violations
    inflated = [_sample(38.05, 2, 2, "leader", 2), _sample(41.6, 2, 3, "candidate")]
    verdict = checker.Verdict()
    checker.check_terms(verdict, inflated, faults, started)
    assert not verdict.valid


def test_a_term_the_member_is_seen_leading_was_won_before_the_cut() -> None:
    """Seed 1503: member 3 won term 2 in the 0.19 s between its last sample (term 1) and the
    cut; `leader-peers` cut it as the leader it was, and it stepped down in term 2."""
    fault = Fault(8.78, 13.21, "leader-peers")
    started = [_ev(8.8176, "start", "fault", "nemesis", kind="leader-peers",
                   fault=fault.describe(), node=3)]  # fmt: skip
    samples = [_sample(8.627, 3, 1, "follower", 2), _sample(8.883, 3, 2, "leader", 3),
               _sample(10.924, 3, 2), _sample(11.178, 3, 2)]  # fmt: skip
    verdict = checker.Verdict()
    checker.check_terms(verdict, samples, [fault], started)
    assert verdict.valid, verdict.violations
    inflated = [*samples, _sample(12.0, 3, 3, "pre-candidate", 0)]  # above the term it won
    verdict = checker.Verdict()
    checker.check_terms(verdict, inflated, [fault], started)
    assert verdict.violations == [
        "terms: a cut-off member's term rose: ['member 3 term 2->3 in leader-peers']"
    ]


def test_a_term_the_member_follows_from_the_cuts_start_is_no_inflation() -> None:
    """Seed 1550: leader 3 paused; member 2 voted member 1 into term 3 and acknowledged its
    first append in the 0.1 s between its last sample (term 2) and the `minority` cut, then,
    cut off, went pre-candidate in term 3 (pre-vote held: the term stayed 3)."""
    fault = Fault(25.51, 35.5, "minority", {"members": [2, 3, 1]})
    started = [_ev(25.5462, "start", "fault", "nemesis", kind="minority",
                   fault=fault.describe(), node=2)]  # fmt: skip
    samples = [
        _sample(25.446, 2, 2, "follower", 3),
        _sample(25.701, 2, 3, "follower", 1),
        _sample(26.976, 2, 3, "pre-candidate"),
        _sample(27.231, 2, 3, "pre-candidate"),
    ]
    verdict = checker.Verdict()
    checker.check_terms(verdict, samples, [fault], started)
    assert verdict.valid, verdict.violations
    inflated = [*samples, _sample(30.0, 2, 4, "candidate")]  # its own campaign
    verdict = checker.Verdict()
    checker.check_terms(verdict, inflated, [fault], started)
    assert verdict.violations == [
        "terms: a cut-off member's term rose: ['member 2 term 3->4 in minority']"
    ]
