"""The short version of ``make e2e-groups`` (:mod:`e2e.groups.scenario`): 2 broker groups × 3
replicas as real processes, the official producer across both groups' queues, SIGKILL of group
``broker-0``'s leader: group ``broker-1`` keeps acknowledging, ``broker-0`` recovers, nothing
acknowledged is lost in either group, and every member's store verifies clean."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from e2e.groups import scenario

pytestmark = pytest.mark.timeout(240)


def test_killing_one_groups_leader_leaves_the_other_group_serving(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    result = scenario.run(tmp_path, after_s=1.0, rate_per_s=100.0, seed=seed)
    print(result.summary())
    print(result.timeline)
    assert result.lost == 0
    assert not result.store_failures, result.store_failures
    assert result.acknowledged["broker-0"] > scenario.STEADY_ACKS
    assert result.acknowledged["broker-1"] > scenario.STEADY_ACKS
    assert result.group1_gap_s <= scenario.GAP_LIMIT_S, result.timeline
