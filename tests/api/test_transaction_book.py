"""The transaction book alone: what the log applies, what the leader reserves, when checks
and discards are due (explicit ``now_ms``, no clock)."""

from __future__ import annotations

import pytest

from gannet.node.metrics import transaction_collecting
from gannet.node.transactions.book import (
    CheckLimits,
    EndRefused,
    Resolution,
    TransactionBook,
)

LIMITS = CheckLimits(check_after_ms=1_000, check_interval_ms=500, check_max=2, pending_max=3)


def test_a_resolution_is_written_once_and_a_retry_of_it_is_answered() -> None:
    book = TransactionBook(LIMITS)
    book.half(100, "T", stored_ms=0)
    assert book.begin_end(100, Resolution.COMMIT) is True
    with pytest.raises(EndRefused, match="another request"):
        book.begin_end(100, Resolution.COMMIT)  # in flight: never appended twice
    book.end_done(100)
    assert book.pending_count() == 0
    assert book.begin_end(100, Resolution.COMMIT) is False  # retried: OK, nothing written
    with pytest.raises(EndRefused, match="already been committed"):
        book.begin_end(100, Resolution.ROLLBACK)
    with pytest.raises(EndRefused, match="no open transaction"):
        book.begin_end(200, Resolution.COMMIT)
    assert book.ended_total[Resolution.COMMIT] == 1


def test_a_failed_write_leaves_the_decision_to_the_log() -> None:
    book = TransactionBook(LIMITS)
    book.half(100, "T", stored_ms=0)
    book.begin_end(100, Resolution.COMMIT)
    book.end_failed(100)  # e.g. leadership lost before commit
    assert book.pending_offsets() == {100}
    book.resolve(100, Resolution.COMMIT)  # it committed after all: dispatch applies it
    book.resolve(100, Resolution.ROLLBACK)  # the op record after the copy changes nothing
    assert book.begin_end(100, Resolution.COMMIT) is False
    book.half(100, "T", stored_ms=0)  # a replayed half message of a resolved transaction
    assert book.pending_count() == 0


def test_checks_are_due_after_the_timeout_then_every_interval_then_discarded() -> None:
    book = TransactionBook(LIMITS)
    book.half(100, "T", stored_ms=0)
    assert book.due(999) == ([], [])
    [check], [] = book.due(1_000)
    assert check.half_offset == 100
    assert book.due(1_200) == ([], [])  # proposed, not applied yet: not proposed again
    book.checked(100, checks=1, stored_ms=1_010)  # the check record is dispatched
    assert book.due(1_400) == ([], [])
    [_], [] = book.due(1_510)
    book.checked(100, checks=2, stored_ms=1_520)
    [], [discard] = book.due(2_100)
    assert discard.half_offset == 100
    with pytest.raises(EndRefused):  # reserved for the discard
        book.begin_end(100, Resolution.COMMIT)
    book.end_done(100)
    assert book.ended_total[Resolution.DISCARD] == 1
    with pytest.raises(EndRefused, match="discarded"):
        book.begin_end(100, Resolution.COMMIT)


def test_a_new_leader_checks_from_what_the_log_says() -> None:
    follower = TransactionBook(LIMITS)
    follower.half(100, "T", stored_ms=0)
    follower.checked(100, checks=1, stored_ms=5_000)  # the old leader's check
    assert follower.due(5_100) == ([], [])  # its interval is not over
    [check], [] = follower.due(5_500)
    assert check.checks == 1


def test_metrics_families_name_every_figure() -> None:
    figures = transaction_collecting.TransactionFigures(
        pending=2, checks_sent_total=3, check_records_total=4, resolutions_total={"commit": 5}
    )
    names = {f.name: f for f in transaction_collecting.families(figures)}
    assert names["gannet_transaction_half_messages_pending"].samples[0].value == 2
    assert names["gannet_transaction_checks"].samples[0].value == 3
    [commits] = names["gannet_transaction_resolutions"].samples
    assert (commits.labels, commits.value) == ({"resolution": "commit"}, 5)


def test_a_retried_send_finds_its_half_message_open_or_committed() -> None:
    book = TransactionBook(LIMITS)
    book.half(100, "T", stored_ms=0, message_id="M1", queue_offset=7)
    found = book.sent_half("T", "M1")
    assert found is not None
    assert (found.half_offset, found.queue_offset) == (100, 7)
    assert book.sent_half("Other", "M1") is None
    book.resolve(100, Resolution.COMMIT)
    committed = book.sent_half("T", "M1")  # issue 34: a resend after the commit
    assert committed is not None
    assert committed.half_offset == 100
    book.half(200, "T", stored_ms=0, message_id="M2")
    book.resolve(200, Resolution.ROLLBACK)
    assert book.sent_half("T", "M2") is None  # rolled back: a resend is a new transaction


def test_a_second_half_of_a_committed_id_is_ended_without_a_copy() -> None:
    """Two half messages of one id (a resend stored twice, fault seed 1002): once one is
    committed, the other's commit writes its op record only; while one is being committed,
    a commit of the other is refused."""
    book = TransactionBook(LIMITS)
    book.half(100, "T", stored_ms=0, message_id="M1")
    book.half(200, "T", stored_ms=0, message_id="M1")
    assert book.begin_end(100, Resolution.COMMIT) is True
    with pytest.raises(EndRefused, match="other half message is being committed"):
        book.begin_end(200, Resolution.COMMIT)
    assert not book.stored_by_another(200)
    book.end_done(100)
    assert book.stored_by_another(200)
    assert not book.stored_by_another(100)
    assert book.begin_end(200, Resolution.COMMIT) is True
    book.end_done(200)
    assert book.begin_end(200, Resolution.COMMIT) is False  # a retried end: answered


def test_a_commit_applied_before_its_end_is_done_releases_the_id() -> None:
    """Dispatch may apply the commit copy before the leader's end_done: the id is not left
    reserved (a later end of its other half message would be refused for ever)."""
    book = TransactionBook(LIMITS)
    book.half(100, "T", stored_ms=0, message_id="M1")
    book.half(200, "T", stored_ms=0, message_id="M1")
    assert book.begin_end(100, Resolution.COMMIT) is True
    book.resolve(100, Resolution.COMMIT)  # dispatch of the commit copy
    book.end_done(100)
    assert book.begin_end(200, Resolution.COMMIT) is True
    assert book.stored_by_another(200)


def test_the_op_record_of_a_second_half_counts_as_its_commit() -> None:
    """What a follower applies: the first half's commit copy, then the second's op record."""
    book = TransactionBook(LIMITS)
    book.half(100, "T", stored_ms=0, message_id="M1")
    book.half(200, "T", stored_ms=0, message_id="M1")
    book.resolve(100, Resolution.COMMIT)
    assert book.stored_by_another(200)
    book.resolve(200, Resolution.ROLLBACK)  # its op record
    assert book.pending_count() == 0
    assert book.begin_end(200, Resolution.COMMIT) is False  # a new leader answers a retry OK
