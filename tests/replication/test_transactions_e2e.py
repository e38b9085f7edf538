"""Transactions through producer and broker crashes with the official Python client, on one
broker process and on a 3-member Raft group (:mod:`e2e.replication.transactions`): orphans are
resolved by the check-back (commit and rollback), a commit sent across a leader SIGKILL lands,
and every committed message is delivered exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.replication import transactions

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.mark.parametrize("size", [1, 3])
def test_crashes_lose_no_committed_transaction_and_deliver_none_twice(
    tmp_path: Path, size: int
) -> None:
    outcome = transactions.run(tmp_path, size)
    assert outcome.received == {b"commit-orphan": 1, b"live-1": 1}, outcome
    assert {b"commit-orphan", b"rollback-orphan"} <= set(outcome.asked), outcome
