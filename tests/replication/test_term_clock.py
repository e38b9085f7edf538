"""A new leader's lease clock never starts far ahead of the former leader's (fault seed 1210).

Fault seed 1210: member 3 won an election while the clock nemesis held its wall clock 24.4 s
ahead, took that as its term's lease clock (:mod:`gannet.node.store.steady_clock`) and judged a
FIFO lease the former leader had handed out 8 s before its end as over: the message went to a
second consumer during the first one's lease. Now the leader stamps its clock on every
heartbeat and append, followers keep the freshest, and an election caps the wall clock at it.

In-process group of three (``conftest``), each member with its own lease clock over a wall
clock the test steps: the followers' wall clocks are stepped 24.4 s ahead, the leader is
crashed, and whichever follower wins must start its term within the cap of the crashed leader's
clock — not at its own wall clock. Without the stamps (or without the cap) it starts 24.4 s
ahead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gannet.node.store import steady_clock
from gannet.node.store.steady_clock import SteadyClock

from .conftest import Cluster

pytestmark = pytest.mark.timeout(120)

STEP_S = 24.4
NS_PER_S = 1_000_000_000


class _SteppedWall:
    """The real wall clock plus a step the test sets."""

    def __init__(self) -> None:
        self.step_ns = 0

    def __call__(self) -> int:
        return time.time_ns() + self.step_ns


def _follows(cluster: Cluster, node_id: int, leader_id: int) -> Callable[[], bool]:
    def follows() -> bool:
        leader = cluster.raft(node_id).leader()
        return leader is not None and leader.node_id == leader_id

    return follows


def test_a_member_elected_with_its_wall_clock_ahead_starts_at_the_former_leaders_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster(tmp_path, 3)
    walls = {peer.node_id: _SteppedWall() for peer in cluster.peers}
    clocks = {node_id: SteadyClock(wall) for node_id, wall in walls.items()}
    try:
        for node_id, clock in clocks.items():
            monkeypatch.setattr(steady_clock, "CLOCK", clock)
            cluster.start(node_id)
            assert cluster.raft(node_id).lease_clock is clock
        old = cluster.leader()
        old_term = cluster.raft(old).status().term
        followers = [i for i in sorted(cluster.nodes) if i != old]
        for node_id in followers:
            # The leader's appends and heartbeats have reached each follower...
            cluster.wait(node_id, _follows(cluster, node_id, old))
            walls[node_id].step_ns = int(STEP_S * NS_PER_S)  # ...then its wall clock jumps
        cluster.crash(old)
        new = cluster.leader(among=followers)
        assert cluster.raft(new).status().term > old_term
        ahead_ms = clocks[new].now_ms() - clocks[old].now_ms()
        assert ahead_ms <= steady_clock.AHEAD_OF_FORMER_LEADER_MAX_MS + 50, (
            f"member {new}'s term clock starts {ahead_ms} ms ahead of the former leader's "
            f"(its wall clock is {STEP_S} s ahead)"
        )
        assert clocks[new].offset_ms() < -(STEP_S * 1000) + 1_000  # behind its own wall clock
    finally:
        cluster.stop_all()
