"""Membership changes of broker processes through the CLI under official-client load, short
version (``make e2e-membership`` runs the full one: 3 → 5 → 3, a member whose data directory
was deleted replaced under a new id, the leader removed, a new member added).

Here (:mod:`e2e.replication.membership`, ``full=False``): node 4 starts with ``--join`` and is
added by ``gannet cluster member add`` (learner, caught up, promoted), then the leader is
removed with ``gannet cluster member remove``; the producer writes throughout. At the end: one
leader per term, every acknowledged message on every remaining member, their commit logs
byte-identical up to the commit offset, ``gannet store verify`` clean on each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.replication import membership

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_add_a_member_then_remove_the_leader_under_load(tmp_path: Path) -> None:
    result = membership.run(tmp_path, full=False)
    assert result.members == sorted(result.members)
    assert len(result.members) == 3
    assert result.report is not None  # verify() raised if anything acknowledged was lost
    assert result.report.acknowledged > 40, result.summary()
    assert sum("store verify" in s for s in result.steps) == 3, result.summary()
