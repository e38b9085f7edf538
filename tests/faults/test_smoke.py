"""The fault harness's smoke run (``make e2e-faults`` runs a hundred of these, 60 s each).

One seeded 23 s run of :mod:`e2e.faults.runner`: three broker processes in network namespaces
under official-client sends and Pop consumers while the nemesis applies the seed's schedule — a
follower cut from its peers by iptables (the client still reaching it), then SIGKILLed while cut
and restarted after the heal. Every checker of :mod:`e2e.faults.checker` must pass: nothing
acknowledged lost, no id stored twice, nothing unexpected, gapless offsets, replicas identical,
``store verify`` clean, Pop and FIFO order, one leader per term, no term rise on the cut-off
member (pre-vote). Outages are printed, not asserted.

Faults that move leadership are left to ``make e2e-faults``: FIFO leases and acks do not
survive a leader change yet (docs/architecture.md, "Faults as Jepsen injects them"), which
would make this smoke fail. The workload includes transactions (committed once, rolled back
never).

Root only (network namespaces, iptables); skipped elsewhere, as test_slow_resolver is. Every
wait in the run awaits a condition under a generous deadline; namespaces and processes are
removed in ``finally`` blocks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.faults import netns, runner

SEED = 182
"""Schedule at 23 s: follower-cut 8.7-14.3 s, kill-follower 10.7-16.6 s (the same member: killed
2 s into the cut, restarted 2.4 s after the heal, as seed 3 does at 30 s, with 6 s of load after
the restart instead of 11)."""
DURATION_S = 23.0
NEMESES = ["follower-cut", "pause-follower", "kill-follower"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(netns.available() is not None, reason=str(netns.available())),
    pytest.mark.timeout(600),
]


def test_a_seeded_run_with_a_follower_cut_off_and_killed_passes_every_checker(
    tmp_path: Path,
) -> None:
    result = runner.one(SEED, DURATION_S, NEMESES, tmp_path)
    print(runner.summary_line(result))
    assert "error" not in result, result["error"]
    kinds = [f["kind"] for f in result["faults"]]
    assert kinds == ["follower-cut", "kill-follower"], (
        f"the schedule of seed {SEED} changed: {kinds}"
    )
    history = (tmp_path / str(SEED) / "history.jsonl").read_text().splitlines()
    started = [json.loads(line) for line in history if '"nemesis", "type": "start"' in line]
    assert len(started) == 2, f"not every fault was applied: {result['nemesis_errors']}"
    assert result["figures"]["jq_acknowledged"] > 0
    assert result["figures"]["jf_acknowledged"] > 0
    assert result["violations"] == [], f"seed {SEED}: {result['violations']}"
    assert result["valid"]
