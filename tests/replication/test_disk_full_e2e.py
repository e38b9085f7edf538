"""The leader's disk really fills up, short version of ``make e2e``'s ``disk-full`` scenario.

Three broker processes, node 1's store on its own small tmpfs filled past the warning ratio
(:mod:`e2e.replication.disk_full`): the official Producer's sends are refused with the store's
disk-full error (through the leader and through a follower), reads keep working, node 1 keeps
leading, and once the space is freed sends are acknowledged again with nothing lost. It runs in
the suite so that the scenario's expectations follow the broker's refusal text (the full
``make e2e`` is not part of ``make test``). Mounting a tmpfs needs root; without it the test
is skipped with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.replication import scenario

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def test_a_full_leader_disk_refuses_writes_by_name_and_loses_nothing(tmp_path: Path) -> None:
    outcome = scenario.run_one("disk-full", tmp_path / "disk-full")
    if outcome.skipped:
        pytest.skip(outcome.error)
    assert outcome.passed, outcome.error
    assert outcome.acknowledged > 0
    assert outcome.duplicates == 0
