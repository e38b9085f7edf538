"""Builds Gannet's Grafana dashboards and the chart's copy of the alert rules.

Run ``python -m deploy.dashboards.build`` (or ``make dashboards``) after editing a panel;
``tests/metrics/test_dashboards.py`` fails when the committed files differ from what this
module builds, when a panel lacks a unit or a description, or when an expression names a
``gannet_*`` metric that no broker or operator exports. ``e2e/prometheus`` evaluates every
expression against a real Prometheus.

The dashboards are built with Grafana's own builders (``grafana-foundation-sdk``, pinned in
``pyproject.toml``; that build targets Grafana 11.6, dashboard ``schemaVersion`` 41): the look
is :mod:`deploy.dashboards.kit`, the panels and their PromQL are
:mod:`deploy.dashboards.traffic` (Cluster overview with its per-broker-group row, Topics and
consumer groups) and :mod:`deploy.dashboards.internals` (Pop, Raft, Storage, Operator).

Outputs:

* ``charts/gannet/dashboards/<uid>.json`` — one Grafana dashboard each (Prometheus datasource
  chosen by the ``datasource`` variable);
* ``charts/gannet/files/gannet-rules.yml`` — a byte copy of ``deploy/prometheus/gannet-rules.yml``
  that ``charts/gannet/templates/prometheusrule.yaml`` renders with ``.Files.Get``.

Label conventions the expressions rely on (see ``docs/metrics.md``): every broker and operator
series carries a ``cluster`` target label (the GannetCluster name; attached by the scrape
config) and ``instance``; every broker sample carries ``broker`` (its broker group, added by
the broker itself); ``topic`` and ``group`` (the consumer group) come from the broker.
A panel's :func:`~deploy.dashboards.kit.requires` says what must run for it to have data
(``raft``: replication wired; ``operator``: the operator scraped) — the e2e test reports those
it could not check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as models

from deploy.dashboards import internals, traffic
from deploy.dashboards.kit import expressions, panels, requires, targets, unit

__all__ = [
    "Dashboard",
    "Panel",
    "dashboards",
    "expressions",
    "main",
    "panels",
    "rendered",
    "requires",
    "targets",
    "unit",
]

Dashboard = models.Dashboard
Panel = models.Panel

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS_DIR = REPO / "charts" / "gannet" / "dashboards"
RULES_SOURCE = REPO / "deploy" / "prometheus" / "gannet-rules.yml"
RULES_CHART_COPY = REPO / "charts" / "gannet" / "files" / "gannet-rules.yml"

# Metric names that are not gannet_* but may appear in expressions.
FOREIGN_METRICS = frozenset(
    {"up", "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"}
)
# The operator's metrics (gannet.operator.metrics; tests/metrics checks them against it).
OPERATOR_METRICS = frozenset(
    {
        "gannet_operator_reconciliations_total",
        "gannet_operator_reconcile_duration_seconds_bucket",
        "gannet_operator_reconcile_duration_seconds_sum",
        "gannet_operator_reconcile_duration_seconds_count",
        "gannet_operator_resources",
    }
)


def dashboards() -> list[models.Dashboard]:
    return [
        traffic.cluster_overview(),
        traffic.topics(),
        internals.pop(),
        internals.raft(),
        internals.storage(),
        internals.operator(),
    ]


def rendered() -> dict[Path, str]:
    """Every output file and its content."""
    out = {
        DASHBOARDS_DIR / f"{d.uid}.json": json.dumps(d, cls=JSONEncoder, indent=2) + "\n"
        for d in dashboards()
    }
    out[RULES_CHART_COPY] = RULES_SOURCE.read_text()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build Gannet's Grafana dashboards.")
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for path in stale:
        verb = "stale" if args.check else "wrote"
        print(f"{verb}: {path.relative_to(REPO)}")
    if args.check and stale:
        print("run: python -m deploy.dashboards.build", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
