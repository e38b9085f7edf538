"""The dashboard pictures of docs/metrics.md (``e2e.prometheus.render``) show what a reader needs
at a glance: drawn here from synthetic series of the real dashboard panels, the Term panel is steps
on an integer axis from zero (not a flat line on a 0.96-1.04 axis), the leader map is a
per-node leader/follower strip (not raw 0/1 values), a flat zero line sits on a 0-1 axis and
says so, and stat panels are a strip of tiles above the plots."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import pytest

from deploy.dashboards import build
from e2e.prometheus import render

TIMES = [float(i) for i in range(20)]
NODES = ["127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:8083"]


def panel(uid: str, title: str) -> build.Panel:
    (dashboard,) = [d for d in build.dashboards() if d.uid == uid]
    (found,) = [p for p in build.panels(dashboard) if p.title == title]
    return found


def axes_titled(figure: Any, title: str) -> Any:
    (ax,) = [a for a in figure.axes if a.get_title().startswith(title)]
    return ax


@pytest.fixture
def figure() -> Any:
    term = panel("gannet-raft", "Term")
    elections = panel("gannet-raft", "Elections and leader changes")
    leaders = panel("gannet-cluster", "Leader map")
    brokers = panel("gannet-cluster", "Brokers up")
    panels = [
        (brokers, [("", TIMES, [3.0] * 20)]),
        (term, [(n, TIMES, [1.0] * 20) for n in NODES]),
        (elections, [("elections", TIMES, [0.0] * 20), ("leader changes", TIMES, [0.0] * 20)]),
        (
            leaders,
            [
                (NODES[0], TIMES, [1.0 if t < 10 else 0.0 for t in TIMES]),
                (NODES[1], TIMES, [0.0 if t < 10 else 1.0 for t in TIMES]),
                (NODES[2], TIMES, [0.0] * 20),
            ],
        ),
    ]
    drawn = render.figure_of("test", panels)
    yield drawn
    plt.close(drawn)


def test_styles_follow_the_values() -> None:
    term = panel("gannet-raft", "Term")
    assert render.style(term, [("a", TIMES, [1.0] * 20)]) == "integer"
    assert render.style(term, [("a", TIMES, [1.5] * 20)]) == "line"
    assert render.style(panel("gannet-cluster", "Leader map"), [("a", TIMES, [0.0, 1.0])]) == (
        "state"
    )
    assert render.style(panel("gannet-cluster", "Brokers up"), [("", TIMES, [3.0])]) == "stat"
    assert render.style(panel("gannet-cluster", "Memory"), [("a", TIMES, [1e8] * 20)]) == "line"


def test_term_is_an_integer_axis_from_zero(figure: Any) -> None:
    ax = axes_titled(figure, "Term")
    low, high = ax.get_ylim()
    assert low == 0.0
    assert high >= 2.0
    assert all(tick == int(tick) for tick in ax.get_yticks())
    assert any("1 throughout" in text.get_text() for text in ax.texts)


def test_flat_zero_line_sits_on_a_zero_to_one_axis(figure: Any) -> None:
    ax = axes_titled(figure, "Elections and leader changes")
    assert ax.get_ylim() == (0.0, 1.0)
    assert any("0 throughout" in text.get_text() for text in ax.texts)


def test_leader_map_is_a_state_strip(figure: Any) -> None:
    ax = axes_titled(figure, "Leader map")
    assert "leader" in ax.get_title()
    assert "follower" in ax.get_title()
    labels = [label.get_text() for label in ax.get_yticklabels()]
    assert labels == [
        f"{NODES[0]}\nnow follower",
        f"{NODES[1]}\nnow leader",
        f"{NODES[2]}\nnow follower",
    ]
    assert not ax.get_lines(), "no raw value lines"
    assert len(ax.collections) == 6  # leader and follower spans per node


def test_stats_are_tiles_above_the_plots(figure: Any) -> None:
    tile = axes_titled(figure, "Brokers up")
    term = axes_titled(figure, "Term")
    assert tile.get_position().y0 > term.get_position().y1
    assert tile.get_position().height < term.get_position().height / 2
    assert [t.get_text() for t in tile.texts] == ["3"]


def test_spans_merge_runs() -> None:
    assert render._spans([0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 0.0, 1.0], 1.0) == [
        (0.0, 2.0),
        (3.0, 1.0),
    ]
    assert render._spans([0.0, 1.0], [0.0, 0.0], 1.0) == []
