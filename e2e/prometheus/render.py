"""Pictures of the main Grafana dashboards for docs/metrics.md, drawn with matplotlib from the very
panel expressions of ``deploy/dashboards/build.py``, evaluated by a real Prometheus over the
load of :mod:`e2e.prometheus.scenario` on a local 3-node cluster (``query_range``, 1 s step).

Each picture is one dashboard, drawn for a reader who looks once: the stat panels as a strip of
tiles with their last value; below, one plot per time-series panel (its title and unit, one
line per returned series, labelled by the panel's legend format). Whole-number panels (terms,
elections, counts) are steps on an integer axis that includes zero; a flat line is drawn against
zero and labelled "... throughout" instead of filling a hair-thin axis; percentages span 0-100 %;
0/1 panels such as the leader map are a per-node state strip (leader or follower over time).
Panels that need the operator are skipped when nothing exports them. :func:`figure_of` draws
from series alone (``tests/metrics/test_render.py`` checks the choices).

``python -m e2e.prometheus.render [--load-s 60]`` writes ``docs/img/dashboard-<uid>.png``.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from deploy.dashboards import build
from e2e.prometheus import harness, scenario

OUT_DIR = harness.REPO / "docs" / "img"
RENDERED = ("gannet-cluster", "gannet-topics", "gannet-pop", "gannet-raft", "gannet-storage")
RATE_INTERVAL = "5s"
STEP_S = 1.0
COLUMNS = 3

Series = list[tuple[str, list[float], list[float]]]  # (legend, seconds from start, values)
_BINARY = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def _scale(unit: str, values: list[float]) -> tuple[float, str]:
    """``(divisor, label)`` that shows ``values`` (all of one panel) in a readable unit;
    ``unit`` is the panel's Grafana unit id."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    top = max(finite, default=0.0)
    if unit == "percentunit":
        return 0.01, "%"
    if unit in ("bytes", "Bps"):
        suffix = "/s" if unit == "Bps" else ""
        for factor, name in _BINARY:
            if top >= factor:
                return factor, name + suffix
        return 1.0, "B" + suffix
    if unit == "s":
        return (0.001, "ms") if 0 < top < 0.1 else (1.0, "s")
    if unit.startswith("suffix:"):
        return 1.0, unit.split(":", 1)[1].strip()
    return 1.0, {"reqps": "req/s", "none": ""}.get(unit, unit)


def _legend(template: str, metric: dict[str, str]) -> str:
    if not template or template == "__auto":
        return ",".join(f"{k}={v}" for k, v in sorted(metric.items())) or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), template)


def _series(prometheus: harness.Prometheus, panel: build.Panel, start: float, end: float) -> Series:
    out = []
    for target, legend in build.targets(panel):
        expr = scenario.substituted(target).replace(scenario.RATE_INTERVAL, RATE_INTERVAL)
        for result in prometheus.query_range(expr, start, end, STEP_S):
            times = [float(t) - start for t, _ in result["values"]]
            values = [float(v) for _, v in result["values"]]
            out.append((_legend(legend, result["metric"]), times, values))
    return out


# Panels whose values are states, not amounts: the names of 1 and 0 in a per-node state strip.
STATE_NAMES = {"Leader map": ("leader", "follower")}
STATE_COLOURS = ("#2e7d32", "#cfd8dc")  # green for 1, grey for 0 (named in the title)
STAT_TILES_PER_ROW = 6


def style(panel: build.Panel, found: Series) -> str:
    """How a panel is drawn: ``stat`` (a tile with the last value), ``state`` (a strip per
    series: which were 1 when), ``integer`` (steps on an integer axis: terms, counts) or
    ``line``."""
    values = [v for _, _, vs in found for v in vs if math.isfinite(v)]
    if panel.title in STATE_NAMES or (
        panel.type_val == "bargauge" and values and set(values) <= {0.0, 1.0}
    ):
        return "state"
    if panel.type_val in ("stat", "bargauge"):
        return "stat"
    if values and build.unit(panel) == "none" and all(v == int(v) for v in values):
        return "integer"
    return "line"


def draw(
    prometheus: harness.Prometheus, dashboard: build.Dashboard, start: float, end: float
) -> Figure:
    """One figure of ``dashboard`` over [start, end] (epoch seconds)."""
    panels: list[tuple[build.Panel, Series]] = []
    for panel in build.panels(dashboard):
        if panel.type_val == "table":
            continue
        found = _series(prometheus, panel, start, end)
        if found or not build.requires(panel):
            panels.append((panel, found))
    return figure_of(f"{dashboard.title} — e2e load on a local 3-node cluster", panels)


def figure_of(title: str, panels: list[tuple[build.Panel, Series]]) -> Figure:
    """Stat panels as a strip of tiles on top, every other panel in a grid below."""
    tiles = [(p, f) for p, f in panels if style(p, f) == "stat"]
    plots = [(p, f) for p, f in panels if style(p, f) != "stat"]
    tile_rows = math.ceil(len(tiles) / STAT_TILES_PER_ROW)
    plot_rows = math.ceil(len(plots) / COLUMNS)
    ratios = [0.42] * tile_rows + [1.0] * plot_rows
    figure = plt.figure(figsize=(5.2 * COLUMNS, 0.6 + 1.2 * tile_rows + 2.7 * plot_rows))
    grid = figure.add_gridspec(len(ratios), 1, height_ratios=ratios)
    figure.suptitle(title, fontsize=13)
    for row in range(tile_rows):
        chunk = tiles[row * STAT_TILES_PER_ROW : (row + 1) * STAT_TILES_PER_ROW]
        cells = grid[row].subgridspec(1, STAT_TILES_PER_ROW)
        for column, (panel, found) in enumerate(chunk):
            _tile(figure.add_subplot(cells[column]), panel, found)
    for row in range(plot_rows):
        chunk = plots[row * COLUMNS : (row + 1) * COLUMNS]
        cells = grid[tile_rows + row].subgridspec(1, COLUMNS)
        for column, (panel, found) in enumerate(chunk):
            _plot(figure.add_subplot(cells[column]), panel, found)
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    return figure


def _tile(ax: Any, panel: build.Panel, found: Series) -> None:
    """A stat panel: its last value(s), big, in a framed box."""
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_color("#b0bec5")
    ax.set_facecolor("#f5f7f8")
    ax.set_title(panel.title or "", fontsize=9)
    text = []
    for label, _, values in found[:3]:
        divisor, unit = _scale(build.unit(panel), values[-1:])
        shown = f"{values[-1] / divisor:,.3g} {unit}".strip()
        text.append(shown + ("" if len(found) == 1 else f"  {label[:18]}"))
    size = 18 if len(text) <= 1 else 10
    ax.text(0.5, 0.45, "\n".join(text) or "no data", ha="center", va="center", fontsize=size)


def _plot(ax: Any, panel: build.Panel, found: Series) -> None:
    ax.set_title(panel.title or "", fontsize=10)
    ax.tick_params(labelsize=7)
    if not found:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    drawn = style(panel, found)
    if drawn == "state":
        _state_strip(ax, panel, found)
        return
    ax.set_xlabel("s", fontsize=8)
    ax.grid(alpha=0.3)
    shown = found[:8]
    divisor, unit = _scale(build.unit(panel), [v for _, _, values in shown for v in values])
    scaled = [(label, times, [v / divisor for v in values]) for label, times, values in shown]
    for label, times, values in scaled:
        if drawn == "integer":
            ax.step(times, values, where="post", label=label[:40], linewidth=1.4)
        else:
            ax.plot(times, values, label=label[:40], linewidth=1.2)
    ax.set_ylabel(unit, fontsize=8)
    finite = [v for _, _, values in scaled for v in values if math.isfinite(v)]
    low, high = min(finite, default=0.0), max(finite, default=0.0)
    if drawn == "integer":
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(min(0.0, low), max(high + 1, 1.0))
    elif build.unit(panel) == "percentunit":
        ax.set_ylim(0, max(100.0, high * 1.05))  # CPU may pass 100 % on several cores
    elif high - low <= 1e-9 * max(abs(high), 1.0):
        # A flat line: show it against zero instead of on a hair-thin axis around itself.
        ax.set_ylim(min(0.0, low), high * 1.25 if high > 0 else 1.0)
    constant = {values[0] for _, _, values in scaled if values and len(set(values)) == 1}
    if len(constant) == 1 and all(len(set(values)) == 1 for _, _, values in scaled if values):
        (value,) = constant
        note = f"{value:,.4g} {unit}".strip() + " throughout"
        ax.text(0.98, 0.9, note, ha="right", va="top", fontsize=9, transform=ax.transAxes)
    ax.legend(fontsize=6, loc="upper left")


def _state_strip(ax: Any, panel: build.Panel, found: Series) -> None:
    """One horizontal bar per series (a node), coloured by state over time."""
    on_name, off_name = STATE_NAMES.get(panel.title or "", ("1", "0"))
    rows = sorted(found, key=lambda s: s[0])
    labels = [
        f"{label[:24]}\nnow {on_name if vs and vs[-1] == 1 else off_name}" for label, _, vs in rows
    ]
    for row, (_, times, values) in enumerate(rows):
        for state, colour in zip((1.0, 0.0), STATE_COLOURS, strict=True):
            spans = _spans(times, values, state)
            ax.broken_barh(spans, (row - 0.35, 0.7), facecolors=colour)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("s", fontsize=8)
    ax.set_title(f"{panel.title} (green: {on_name}, grey: {off_name})", fontsize=10)


def _spans(times: list[float], values: list[float], state: float) -> list[tuple[float, float]]:
    """``(start, width)`` of each run of ``state`` (a sample lasts until the next one)."""
    spans: list[tuple[float, float]] = []
    step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1.0
    for index, (moment, value) in enumerate(zip(times, values, strict=True)):
        if value != state:
            continue
        width = (times[index + 1] if index + 1 < len(times) else moment + step) - moment
        if spans and math.isclose(spans[-1][0] + spans[-1][1], moment):
            spans[-1] = (spans[-1][0], spans[-1][1] + width)
        else:
            spans.append((moment, width))
    return spans


def render_all(prometheus: harness.Prometheus, start: float, end: float, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for dashboard in build.dashboards():
        if dashboard.uid not in RENDERED:
            continue
        figure = draw(prometheus, dashboard, start, end)
        path = out_dir / f"dashboard-{dashboard.uid}.png"
        figure.savefig(path, dpi=72)
        plt.close(figure)
        print(f"wrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description="Render dashboard pictures for docs/metrics.md.")
    parser.add_argument("--load-s", type=float, default=60.0, help="extra seconds of load")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gannet-render-") as tmp:
        report = scenario.run(
            Path(tmp),
            start_cluster=harness.start_three_nodes,
            on_loaded=lambda prom, start, end: render_all(prom, start, end, args.out),
            extra_load_s=args.load_s,
        )
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
