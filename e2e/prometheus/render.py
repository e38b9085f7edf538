"""Pictures of the main Grafana dashboards for the README, drawn with matplotlib from the very
panel expressions of ``deploy/dashboards/build.py``, evaluated by a real Prometheus over the
load of :mod:`e2e.prometheus.scenario` on a local 3-node cluster (``query_range``, 1 s step).

Each picture is one dashboard: a grid with one plot per time-series panel (its title and unit,
one line per returned series, labelled by the panel's legend format) and the last value of
each stat panel. Panels that need the operator are skipped when nothing exports them.

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

from deploy.dashboards import build
from e2e.prometheus import harness, scenario

OUT_DIR = harness.REPO / "docs" / "img"
RENDERED = ("gannet-cluster", "gannet-topics", "gannet-pop", "gannet-raft", "gannet-storage")
RATE_INTERVAL = "5s"
STEP_S = 1.0
COLUMNS = 3

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


def _series(
    prometheus: harness.Prometheus, panel: build.Panel, start: float, end: float
) -> list[tuple[str, list[float], list[float]]]:
    out = []
    for target in panel.targets:
        expr = scenario.substituted(target.expr).replace(scenario.RATE_INTERVAL, RATE_INTERVAL)
        for result in prometheus.query_range(expr, start, end, STEP_S):
            times = [float(t) - start for t, _ in result["values"]]
            values = [float(v) for _, v in result["values"]]
            out.append((_legend(target.legend, result["metric"]), times, values))
    return out


def draw(
    prometheus: harness.Prometheus, dashboard: build.Dashboard, start: float, end: float
) -> Figure:
    """One figure of ``dashboard`` over [start, end] (epoch seconds)."""
    panels: list[tuple[build.Panel, list[tuple[str, list[float], list[float]]]]] = []
    for panel in dashboard.panels():
        if panel.kind == "table":
            continue
        found = _series(prometheus, panel, start, end)
        if found or not panel.requires:
            panels.append((panel, found))
    rows = math.ceil(len(panels) / COLUMNS)
    figure, axes = plt.subplots(rows, COLUMNS, figsize=(5.2 * COLUMNS, 2.7 * rows), squeeze=False)
    figure.suptitle(f"{dashboard.title} — e2e load on a local 3-node cluster", fontsize=13)
    for ax, (panel, found) in zip(axes.flat, panels, strict=False):
        _plot(ax, panel, found)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    return figure


def _plot(ax: Any, panel: build.Panel, found: list[tuple[str, list[float], list[float]]]) -> None:
    ax.set_title(panel.title, fontsize=10)
    if panel.kind in ("stat", "bargauge"):
        ax.axis("off")
        text = []
        for label, _, values in found[:4]:
            divisor, unit = _scale(panel.unit, values[-1:])
            shown = f"{values[-1] / divisor:,.3g} {unit}".strip()
            text.append(shown + ("" if len(found) == 1 else f" {label}"))
        ax.text(0.5, 0.5, "\n".join(text) or "no data", ha="center", va="center", fontsize=16)
        return
    divisor, unit = _scale(panel.unit, [v for _, _, values in found[:8] for v in values])
    for label, times, values in found[:8]:
        ax.plot(times, [v / divisor for v in values], label=label[:40], linewidth=1.2)
    ax.set_ylabel(unit, fontsize=8)
    ax.set_xlabel("s", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    if found:
        ax.legend(fontsize=6, loc="upper left")
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)


def render_all(prometheus: harness.Prometheus, start: float, end: float, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for dashboard in build.dashboards():
        if dashboard.uid not in RENDERED:
            continue
        figure = draw(prometheus, dashboard, start, end)
        path = out_dir / f"dashboard-{dashboard.uid}.png"
        figure.savefig(path, dpi=72)
        plt.close(figure)
        print(f"wrote {path.relative_to(harness.REPO)}")


def main() -> int:
    parser = argparse.ArgumentParser(description="Render dashboard pictures for the README.")
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
