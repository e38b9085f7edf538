"""The figures ``make e2e-lossy-links`` reports (:mod:`e2e.replication.lossy_links`), from
made-up samples: leader changes, term rise, reachability flaps, the longest stretch without an
acknowledged send."""

from __future__ import annotations

import pytest

from e2e.replication.lossy_links import Sample, longest_gap_s, raft_figures


def _sample(at_s: float, leader: int, term: int, reachable_2: int = 1) -> Sample:
    roles = {i: "leader" if i == leader else "follower" for i in (1, 2, 3)}
    return Sample(
        at_s,
        roles,
        dict.fromkeys((1, 2, 3), term),
        {i: str(leader) for i in (1, 2, 3)},
        dict.fromkeys((1, 2, 3), 0),
        {(1, 2): reachable_2},
    )


def test_a_steady_leader_has_no_change_and_no_rise() -> None:
    samples = [_sample(t, 1, 4) for t in (0.0, 0.2, 0.4)]
    figures = raft_figures(samples, 0.0, 1.0)
    assert figures["leaders"] == ["1"]
    assert figures["leader_changes"] == 0
    assert figures["term_rise"] == 0
    assert figures["unreachable_flaps"] == {}


def test_changes_rises_and_flaps_are_counted_inside_the_window_only() -> None:
    samples = [
        _sample(-1.0, 3, 2),  # before the loss: not counted
        _sample(0.0, 1, 4),
        _sample(0.2, 1, 4, reachable_2=0),
        _sample(0.4, 2, 5, reachable_2=1),
        _sample(0.6, 2, 5, reachable_2=0),
        _sample(0.8, 1, 6),
    ]
    figures = raft_figures(samples, 0.0, 0.8)
    assert figures["leaders"] == ["1", "2", "1"]
    assert figures["leader_changes"] == 2
    assert figures["term_rise"] == 2
    assert figures["unreachable_flaps"] == {"1->2": 2}


def test_the_longest_gap_is_bounded_by_the_window() -> None:
    assert longest_gap_s([], 10.0, 70.0) == pytest.approx(60.0)
    assert longest_gap_s([5.0, 12.0, 13.0, 30.0, 69.0, 80.0], 10.0, 70.0) == pytest.approx(39.0)
