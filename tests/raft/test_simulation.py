"""Seeded whole-cluster simulations of the Raft core (``gannet.node.testing.raft_runs``).

Every seed draws a group size (1, 3 or 5), limits and a fault mix, plays 400 random events
(message delay, reordering, loss and duplication, partitions, crashes that lose unsynced
bytes, restarts, leadership transfers, proposals) with all invariants of
``gannet.node.testing.raft_checks`` checked after every event, then heals and requires
convergence with every acknowledged record on every node.

``SEED_COUNT`` seeds (500, about 20 s) run in the normal suite. A failure prints its seed
and the command that re-runs it alone:

    GANNET_SIM_SEED=<seed> .venv/bin/pytest -q tests/raft/test_simulation.py -k one_seed

``GANNET_SIM_SEEDS=<n>`` runs more seeds (for example 5000 before a release).
"""

from __future__ import annotations

import os

import pytest

from gannet.node.testing.raft_runs import run_simulation

SEED_COUNT = int(os.environ.get("GANNET_SIM_SEEDS", "500"))
SEEDS_PER_CHUNK = 50


@pytest.mark.skipif("GANNET_SIM_SEED" not in os.environ, reason="set GANNET_SIM_SEED=<seed>")
def test_one_seed() -> None:
    stats = run_simulation(int(os.environ["GANNET_SIM_SEED"]))
    print(stats)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range((SEED_COUNT + SEEDS_PER_CHUNK - 1) // SEEDS_PER_CHUNK))
def test_simulated_clusters_keep_every_invariant(chunk: int) -> None:
    first = chunk * SEEDS_PER_CHUNK
    acked = 0
    for seed in range(first, min(first + SEEDS_PER_CHUNK, SEED_COUNT)):
        acked += run_simulation(seed).proposals_acked
    # The runs must do real work, not only survive faults.
    assert acked > SEEDS_PER_CHUNK


def test_a_run_is_deterministic() -> None:
    assert run_simulation(7) == run_simulation(7)


def test_a_failure_names_its_seed_and_how_to_rerun_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from gannet.node.testing import raft_checks
    from gannet.node.testing.raft_sim import SimulationFailure

    calls = []

    def failing_check(self: raft_checks.Checker) -> None:
        calls.append(1)
        if len(calls) == 5:
            raise SimulationFailure("single_leader_per_term: injected")

    monkeypatch.setattr(raft_checks.Checker, "check", failing_check)
    with pytest.raises(SimulationFailure) as failure:
        run_simulation(1234)
    text = str(failure.value)
    assert "seed 1234 failed at event" in text
    assert "GANNET_SIM_SEED=1234" in text
    assert "injected" in text
