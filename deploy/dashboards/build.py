"""Builds Gannet's Grafana dashboards and the chart's copy of the alert rules.

Run ``python -m deploy.dashboards.build`` (or ``make dashboards``) after editing a panel here;
``tests/metrics/test_dashboards.py`` fails when the committed files differ from what this
module builds, when a panel lacks a unit or a description, or when an expression names a
``gannet_*`` metric that no broker or operator exports. ``e2e/prometheus`` evaluates every
expression against a real Prometheus.

Outputs:

* ``charts/gannet/dashboards/<uid>.json`` — one Grafana dashboard per :class:`Dashboard`
  (``schemaVersion`` 39, Prometheus datasource chosen by the ``datasource`` variable);
* ``charts/gannet/files/gannet-rules.yml`` — a byte copy of ``deploy/prometheus/gannet-rules.yml``
  that ``charts/gannet/templates/prometheusrule.yaml`` renders with ``.Files.Get``.

Label conventions the expressions rely on (see ``docs/metrics.md``): every broker and operator
series carries a ``cluster`` target label (the GannetCluster name; attached by the scrape
config) and ``instance``; ``topic`` and ``group`` come from the broker.

Each panel is plain data (:class:`Panel`: title, description, unit, PromQL targets); the
JSON layout (grid positions, field config, datasource references) is generated so every
dashboard looks the same. A panel's ``requires`` names what must run for it to have data
(``raft``: replication wired; ``operator``: the operator scraped) — the e2e test reports those
it could not check.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS_DIR = REPO / "charts" / "gannet" / "dashboards"
RULES_SOURCE = REPO / "deploy" / "prometheus" / "gannet-rules.yml"
RULES_CHART_COPY = REPO / "charts" / "gannet" / "files" / "gannet-rules.yml"
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}

C = 'cluster=~"$cluster"'
T = 'topic=~"$topic"'
G = 'group=~"$group"'
RI = "$__rate_interval"

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


@dataclass(frozen=True, slots=True)
class Target:
    expr: str
    legend: str = ""


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]
    kind: str = "timeseries"  # timeseries | stat | table | bargauge
    width: int = 12
    height: int = 8
    requires: str = ""  # "", "raft", "operator"
    stack: bool = False
    thresholds: tuple[tuple[float, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True, slots=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    variables: tuple[str, ...] = ("cluster",)
    tags: tuple[str, ...] = field(default=("gannet",))

    def panels(self) -> Iterator[Panel]:
        for row in self.rows:
            yield from row.panels


def t(expr: str, legend: str = "") -> Target:
    return Target(expr, legend)


def p(title: str, description: str, unit: str, *targets: Target, **kw: Any) -> Panel:
    return Panel(title, description, unit, tuple(targets), **kw)


MSGS = "suffix: msg/s"
MSGS_COUNT = "suffix: msgs"
OPS = "reqps"


def _cluster_overview() -> Dashboard:
    status = Row(
        "Status",
        (
            p(
                "Brokers up",
                "Broker metrics endpoints Prometheus scraped successfully (up == 1).",
                "none",
                t(f'sum(up{{job=~"gannet.*", {C}}})'),
                kind="stat",
                width=4,
                height=4,
            ),
            p(
                "Brokers ready",
                "Brokers whose /readyz answers 200 (store recovered, Raft leader known, serving).",
                "none",
                t(f"sum(gannet_broker_ready{{{C}}})"),
                kind="stat",
                width=4,
                height=4,
            ),
            p(
                "Leaders",
                "Raft leaders in the cluster: exactly 1 is healthy, 0 means no writes.",
                "none",
                t(f'sum(gannet_raft_role{{role="leader", {C}}})'),
                kind="stat",
                width=4,
                height=4,
                requires="raft",
                thresholds=((0, "red"), (1, "green"), (2, "red")),
            ),
            p(
                "Messages in",
                "Messages appended by SendMessage per second, whole cluster.",
                MSGS,
                t(f"sum(rate(gannet_messages_in_total{{{C}}}[{RI}]))"),
                kind="stat",
                width=4,
                height=4,
            ),
            p(
                "Messages out",
                "Messages handed to consumers per second, whole cluster.",
                MSGS,
                t(f"sum(rate(gannet_messages_out_total{{{C}}}[{RI}]))"),
                kind="stat",
                width=4,
                height=4,
            ),
            p(
                "Max disk used",
                "Highest disk usage ratio of any broker's store partition.",
                "percentunit",
                t(f"max(gannet_store_disk_used_ratio{{{C}}})"),
                kind="stat",
                width=4,
                height=4,
                thresholds=((0, "green"), (0.75, "orange"), (0.85, "red")),
            ),
        ),
    )
    traffic = Row(
        "Throughput and latency",
        (
            p(
                "Messages per second",
                "Messages in (SendMessage) and out (ReceiveMessage) per second, by broker.",
                MSGS,
                t(
                    f"sum by (instance) (rate(gannet_messages_in_total{{{C}}}[{RI}]))",
                    "in {{instance}}",
                ),
                t(
                    f"sum by (instance) (rate(gannet_messages_out_total{{{C}}}[{RI}]))",
                    "out {{instance}}",
                ),
            ),
            p(
                "Bytes per second",
                "Message body bytes in and out per second, by broker.",
                "Bps",
                t(
                    f"sum by (instance) (rate(gannet_bytes_in_total{{{C}}}[{RI}]))",
                    "in {{instance}}",
                ),
                t(
                    f"sum by (instance) (rate(gannet_bytes_out_total{{{C}}}[{RI}]))",
                    "out {{instance}}",
                ),
            ),
            p(
                "SendMessage latency",
                "p50 and p99 time to answer SendMessage (durable per the flush mode).",
                "s",
                t(_quantile(0.5, "SendMessage"), "p50"),
                t(_quantile(0.99, "SendMessage"), "p99"),
            ),
            p(
                "RPC latency p99 by method",
                "p99 time to answer each unary v2 RPC.",
                "s",
                t(
                    "histogram_quantile(0.99, sum by (rpc, le) "
                    f"(rate(gannet_rpc_duration_seconds_bucket{{{C}}}[{RI}])))",
                    "{{rpc}}",
                ),
            ),
            p(
                "Errors per second",
                "Unary v2 RPCs answered with a status other than OK, by method and code.",
                OPS,
                t(
                    f'sum by (rpc, code) (rate(gannet_rpc_duration_seconds_count{{code!="OK", {C}}}'
                    f"[{RI}]))",
                    "{{rpc}} {{code}}",
                ),
            ),
            p(
                "gRPC calls in flight",
                "Calls being served now against the server's concurrency limit (beyond it: "
                "RESOURCE_EXHAUSTED).",
                "none",
                t(f"sum by (instance) (gannet_grpc_inflight_requests{{{C}}})", "{{instance}}"),
                t(f"max(gannet_grpc_inflight_requests_limit{{{C}}})", "limit"),
            ),
        ),
    )
    nodes = Row(
        "Brokers",
        (
            p(
                "Leader map",
                "1 where the broker is the Raft leader, 0 where it follows.",
                "none",
                t(f'max by (instance) (gannet_raft_role{{role="leader", {C}}})', "{{instance}}"),
                kind="bargauge",
                requires="raft",
            ),
            p(
                "Disk used",
                "Store partition usage per broker against the clean-forcibly ratio.",
                "percentunit",
                t(f"max by (instance) (gannet_store_disk_used_ratio{{{C}}})", "{{instance}}"),
                t(f"max(gannet_store_disk_clean_forcibly_ratio{{{C}}})", "clean forcibly"),
            ),
            p(
                "CPU",
                "Broker process CPU use (1 = one core).",
                "percentunit",
                t(f'rate(process_cpu_seconds_total{{job=~"gannet.*", {C}}}[{RI}])', "{{instance}}"),
            ),
            p(
                "Memory",
                "Broker process resident memory.",
                "bytes",
                t(f'process_resident_memory_bytes{{job=~"gannet.*", {C}}}', "{{instance}}"),
            ),
        ),
    )
    return Dashboard(
        "gannet-cluster",
        "Gannet / Cluster overview",
        "Throughput, latency, errors, disk and leadership of one Gannet cluster.",
        (status, traffic, nodes),
    )


def _quantile(q: float, rpc: str) -> str:
    return (
        f"histogram_quantile({q}, sum by (le) (rate(gannet_rpc_duration_seconds_bucket"
        f'{{rpc="{rpc}", {C}}}[{RI}])))'
    )


def _topics() -> Dashboard:
    tg = f"{C}, {T}, {G}"
    flow = Row(
        "Traffic",
        (
            p(
                "Messages in by topic",
                "Messages appended per second, by topic.",
                MSGS,
                t(
                    f"sum by (topic) (rate(gannet_messages_in_total{{{C}, {T}}}[{RI}]))",
                    "{{topic}}",
                ),
            ),
            p(
                "Messages out by topic and group",
                "Messages handed to each consumer group per second.",
                MSGS,
                t(
                    f"sum by (topic, group) (rate(gannet_messages_out_total{{{tg}}}[{RI}]))",
                    "{{topic}} / {{group}}",
                ),
            ),
            p(
                "Bytes in by topic",
                "Message body bytes appended per second, by topic.",
                "Bps",
                t(f"sum by (topic) (rate(gannet_bytes_in_total{{{C}, {T}}}[{RI}]))", "{{topic}}"),
            ),
            p(
                "Message size",
                "p50 and p99 body size of the messages appended (all topics).",
                "bytes",
                t(
                    "histogram_quantile(0.5, sum by (le) "
                    f"(rate(gannet_message_size_bytes_bucket{{{C}}}[{RI}])))",
                    "p50",
                ),
                t(
                    "histogram_quantile(0.99, sum by (le) "
                    f"(rate(gannet_message_size_bytes_bucket{{{C}}}[{RI}])))",
                    "p99",
                ),
            ),
        ),
    )
    lag = Row(
        "Consumer groups",
        (
            p(
                "Consumer lag (messages)",
                "Messages not yet consumed (ready + in flight), by topic and group.",
                MSGS_COUNT,
                t(
                    f"sum by (topic, group) (gannet_consumer_lag_messages{{{tg}}})",
                    "{{topic}} / {{group}}",
                ),
            ),
            p(
                "Consumer lag (time)",
                "Age of the oldest message the group has not been handed yet.",
                "s",
                t(
                    f"max by (topic, group) (gannet_consumer_lag_seconds{{{tg}}})",
                    "{{topic}} / {{group}}",
                ),
            ),
            p(
                "Ready messages",
                "Stored messages waiting to be handed to the group.",
                MSGS_COUNT,
                t(
                    f"sum by (topic, group) (gannet_consumer_ready_messages{{{tg}}})",
                    "{{topic}} / {{group}}",
                ),
            ),
            p(
                "In-flight messages",
                "Messages received by the group and not yet acked (invisible).",
                MSGS_COUNT,
                t(
                    f"sum by (topic, group) (gannet_consumer_inflight_messages{{{tg}}})",
                    "{{topic}} / {{group}}",
                ),
            ),
            p(
                "Retries",
                "Messages redelivered through the group's retry topic, per second.",
                MSGS,
                t(
                    f"sum by (topic, group) (rate(gannet_consumer_retry_messages_total{{{tg}}}"
                    f"[{RI}]))",
                    "{{topic}} / {{group}}",
                ),
            ),
            p(
                "Dead-lettered",
                "Messages moved to %DLQ%<group> in the last hour (max retries reached or "
                "forwarded by the client).",
                MSGS_COUNT,
                t(
                    f"sum by (group) (increase(gannet_consumer_dlq_messages_total{{{C}, {G}}}"
                    "[1h]))",
                    "{{group}}",
                ),
            ),
            p(
                "Lag table",
                "Current lag, ready and in-flight messages of every topic and group.",
                "none",
                t(f"sum by (topic, group) (gannet_consumer_lag_messages{{{tg}}})", "lag"),
                kind="table",
                width=24,
            ),
        ),
    )
    return Dashboard(
        "gannet-topics",
        "Gannet / Topics and consumer groups",
        "Per-topic traffic and per-group lag, in-flight messages, retries and dead letters.",
        (flow, lag),
        variables=("cluster", "topic", "group"),
    )


def _pop() -> Dashboard:
    row = Row(
        "Pop",
        (
            p(
                "Checkpoints in memory",
                "Pop checkpoints tracked until their revive time, and those held only in "
                "memory (buffer merge: not yet written to the revive queue).",
                "none",
                t(
                    f"sum by (instance) (gannet_pop_checkpoints_tracked{{{C}}})",
                    "tracked {{instance}}",
                ),
                t(
                    f"sum by (instance) (gannet_pop_checkpoints_buffered{{{C}}})",
                    "buffered {{instance}}",
                ),
            ),
            p(
                "Checkpoints never written",
                "Checkpoints fully acked in memory before they had to be written, per second "
                "(the write traffic buffer merge saves).",
                OPS,
                t(
                    "sum by (instance) (rate(gannet_pop_checkpoints_dropped_without_write_total"
                    f"{{{C}}}[{RI}]))",
                    "{{instance}}",
                ),
            ),
            p(
                "Long polls waiting",
                "ReceiveMessage calls waiting for a message (the Pop request queue).",
                "none",
                t(f"sum by (instance) (gannet_pop_poll_waiters{{{C}}})", "{{instance}}"),
            ),
            p(
                "Offset queues",
                "Queues with pops waiting for their consumer offset to be committed.",
                "none",
                t(f"sum by (instance) (gannet_pop_offset_queues{{{C}}})", "{{instance}}"),
            ),
        ),
    )
    revive = Row(
        "Revive",
        (
            p(
                "Revive in",
                "Checkpoint and ack messages delivered into each revive queue per second.",
                MSGS,
                t(
                    f"sum by (queue) (rate(gannet_pop_revive_in_messages_total{{{C}}}[{RI}]))",
                    "queue {{queue}}",
                ),
            ),
            p(
                "Revive out",
                "Messages revive wrote back per second: retry topic, DLQ, or re-put.",
                MSGS,
                t(
                    f"sum by (result) (rate(gannet_pop_revive_out_messages_total{{{C}}}[{RI}]))",
                    "{{result}}",
                ),
                stack=True,
            ),
            p(
                "Revive lag (messages)",
                "Revive-queue messages not yet handled, by revive queue.",
                MSGS_COUNT,
                t(f"max by (queue) (gannet_pop_revive_lag_messages{{{C}}})", "queue {{queue}}"),
            ),
            p(
                "Revive lag (time)",
                "Age of the oldest unhandled revive-queue message: how late redelivery runs.",
                "s",
                t(f"max by (queue) (gannet_pop_revive_lag_seconds{{{C}}})", "queue {{queue}}"),
            ),
            p(
                "Ack latency",
                "p99 time to answer AckMessage and ChangeInvisibleDuration.",
                "s",
                t(_quantile(0.99, "AckMessage"), "AckMessage p99"),
            ),
        ),
    )
    return Dashboard(
        "gannet-pop",
        "Gannet / Pop and revive",
        "Pop consumption internals: in-memory checkpoints, long polls and revive queues.",
        (row, revive),
    )


def _raft() -> Dashboard:
    row = Row(
        "Raft",
        (
            p(
                "Role",
                "1 for each node's current Raft role.",
                "none",
                t(
                    f"max by (instance, role) (gannet_raft_role{{{C}}}) == 1",
                    "{{instance}} {{role}}",
                ),
                kind="table",
                requires="raft",
            ),
            p(
                "Term",
                "Current Raft term per node; a climbing term means repeated elections.",
                "none",
                t(f"max by (instance) (gannet_raft_term{{{C}}})", "{{instance}}"),
                requires="raft",
            ),
            p(
                "Commit offset",
                "Commit-log offset durable on a majority, per node.",
                "bytes",
                t(f"max by (instance) (gannet_raft_commit_offset_bytes{{{C}}})", "{{instance}}"),
                requires="raft",
            ),
            p(
                "Replication rate",
                "Committed bytes per second (the leader's commit offset growth).",
                "Bps",
                t(
                    f"max by (instance) (rate(gannet_raft_commit_offset_bytes{{{C}}}[{RI}]))",
                    "{{instance}}",
                ),
                requires="raft",
            ),
            p(
                "Follower lag",
                "Bytes each follower is behind the leader's log (the leader's view).",
                "bytes",
                t(f"max by (peer) (gannet_raft_follower_lag_bytes{{{C}}})", "{{peer}}"),
                requires="raft",
            ),
            p(
                "Elections and leader changes",
                "Elections started and leader changes seen per hour.",
                "none",
                t(f"sum(increase(gannet_raft_elections_total{{{C}}}[1h]))", "elections"),
                t(f"sum(increase(gannet_raft_leader_changes_total{{{C}}}[1h]))", "leader changes"),
                requires="raft",
            ),
            p(
                "Unreachable followers",
                "Followers the leader cannot reach on the peer port.",
                "none",
                t(f"count(gannet_raft_peer_reachable{{{C}}} == 0) or vector(0)", "unreachable"),
                kind="stat",
                requires="raft",
            ),
        ),
    )
    return Dashboard(
        "gannet-raft",
        "Gannet / Raft replication",
        "Leadership, terms, commit progress and follower lag of the Raft group.",
        (row,),
    )


def _storage() -> Dashboard:
    row = Row(
        "Store",
        (
            p(
                "Commit-log size",
                "Disk taken by the (preallocated) commit-log files, per broker.",
                "bytes",
                t(f"max by (instance) (gannet_store_commitlog_size_bytes{{{C}}})", "{{instance}}"),
            ),
            p(
                "Write rate",
                "Commit-log bytes appended per second (records, not bodies).",
                "Bps",
                t(
                    f"max by (instance) (rate(gannet_store_max_offset_bytes{{{C}}}[{RI}]))",
                    "{{instance}}",
                ),
            ),
            p(
                "Disk used vs thresholds",
                "Partition usage against the warning (writes refused) and clean-forcibly "
                "(early deletion) ratios.",
                "percentunit",
                t(f"max by (instance) (gannet_store_disk_used_ratio{{{C}}})", "used {{instance}}"),
                t(f"max(gannet_store_disk_warning_ratio{{{C}}})", "warning"),
                t(f"max(gannet_store_disk_clean_forcibly_ratio{{{C}}})", "clean forcibly"),
            ),
            p(
                "Flush and dispatch lag",
                "Bytes written but not yet synced, and committed but not yet in the consume "
                "queues.",
                "bytes",
                t(f"max by (instance) (gannet_store_flush_lag_bytes{{{C}}})", "flush {{instance}}"),
                t(
                    f"max by (instance) (gannet_store_dispatch_lag_bytes{{{C}}})",
                    "dispatch {{instance}}",
                ),
            ),
            p(
                "Timer backlog",
                "Delayed messages parked in the timer store, not yet due.",
                MSGS_COUNT,
                t(
                    f"sum by (instance) (gannet_store_timer_backlog_messages{{{C}}})",
                    "{{instance}}",
                ),
            ),
            p(
                "Store files",
                "Commit-log files, consume queues and index files.",
                "none",
                t(f"sum(gannet_store_commitlog_files{{{C}}})", "commit-log files"),
                t(f"sum(gannet_store_consume_queues{{{C}}})", "consume queues"),
                t(f"sum(gannet_store_index_files{{{C}}})", "index files"),
            ),
        ),
    )
    cleanup = Row(
        "Cleanup",
        (
            p(
                "Files removed",
                "Files deleted by cleanup per hour, by kind.",
                "none",
                t(
                    f"sum by (kind) (increase(gannet_cleanup_files_removed_total{{{C}}}[1h]))",
                    "{{kind}}",
                ),
            ),
            p(
                "Bytes removed",
                "Commit-log bytes deleted by cleanup per hour.",
                "bytes",
                t(f"sum(increase(gannet_cleanup_bytes_removed_total{{{C}}}[1h]))", "removed"),
            ),
            p(
                "Cleanup runs",
                "Cleanup passes per hour, by trigger (idle: nothing was due).",
                "none",
                t(
                    f"sum by (reason) (increase(gannet_cleanup_runs_total{{{C}}}[1h]))",
                    "{{reason}}",
                ),
                stack=True,
            ),
            p(
                "Writable",
                "1 while every broker's store accepts writes (not full, no failed fsync).",
                "none",
                t(f"min(gannet_store_writable{{{C}}})", "writable"),
                kind="stat",
                thresholds=((0, "red"), (1, "green")),
            ),
        ),
    )
    return Dashboard(
        "gannet-storage",
        "Gannet / Storage and cleanup",
        "Commit-log size and growth, disk thresholds, flush/dispatch lag, timer store and cleanup.",
        (row, cleanup),
    )


def _operator() -> Dashboard:
    row = Row(
        "Operator",
        (
            p(
                "Resources",
                "Custom resources the operator manages, by kind.",
                "none",
                t("sum by (kind) (gannet_operator_resources)", "{{kind}}"),
                kind="bargauge",
                requires="operator",
            ),
            p(
                "Reconciliations",
                "Reconciliations per second, by kind and result.",
                OPS,
                t(
                    f"sum by (kind, result) (rate(gannet_operator_reconciliations_total[{RI}]))",
                    "{{kind}} {{result}}",
                ),
                requires="operator",
            ),
            p(
                "Failed and refused reconciliations",
                "Reconciliations that failed (broker or API error, retried) or were refused "
                "(a condition says why, e.g. a queue shrink) in the last hour, by kind.",
                "none",
                t(
                    "sum by (kind, result) (increase(gannet_operator_reconciliations_total"
                    '{result!="success"}[1h]))',
                    "{{kind}} {{result}}",
                ),
                requires="operator",
            ),
            p(
                "Reconcile duration",
                "p50 and p99 time of one reconciliation.",
                "s",
                t(
                    "histogram_quantile(0.5, sum by (le) "
                    f"(rate(gannet_operator_reconcile_duration_seconds_bucket[{RI}])))",
                    "p50",
                ),
                t(
                    "histogram_quantile(0.99, sum by (le) "
                    f"(rate(gannet_operator_reconcile_duration_seconds_bucket[{RI}])))",
                    "p99",
                ),
                requires="operator",
            ),
        ),
    )
    return Dashboard(
        "gannet-operator",
        "Gannet / Operator",
        "The kopf operator: managed resources and reconciliation results and times.",
        (row,),
        variables=(),
    )


def dashboards() -> list[Dashboard]:
    return [_cluster_overview(), _topics(), _pop(), _raft(), _storage(), _operator()]


# ---------------------------------------------------------------------- JSON
def _variables(names: tuple[str, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
        }
    ]
    queries = {
        "cluster": "label_values(gannet_broker_ready, cluster)",
        "topic": 'label_values(gannet_messages_in_total{cluster=~"$cluster"}, topic)',
        "group": 'label_values(gannet_consumer_lag_messages{cluster=~"$cluster"}, group)',
    }
    for name in names:
        out.append(
            {
                "name": name,
                "label": name.capitalize(),
                "type": "query",
                "datasource": DS,
                "query": {"query": queries[name], "refId": f"{name}-values"},
                "definition": queries[name],
                "refresh": 2,
                "multi": True,
                "includeAll": True,
                "allValue": ".*",
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "sort": 1,
                "hide": 0,
            }
        )
    return out


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if panel.thresholds:
        steps = [
            {"color": color, "value": None if i == 0 else value}
            for i, (value, color) in enumerate(panel.thresholds)
        ]
    defaults: dict[str, Any] = {
        "unit": panel.unit,
        "thresholds": {"mode": "absolute", "steps": steps},
        "color": {"mode": "thresholds" if panel.kind != "timeseries" else "palette-classic"},
    }
    if panel.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10,
            "showPoints": "never",
            "stacking": {"mode": "normal" if panel.stack else "none", "group": "A"},
        }
    options: dict[str, Any]
    if panel.kind == "timeseries":
        options = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif panel.kind == "table":
        options = {"showHeader": True, "cellHeight": "sm"}
    else:
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "auto",
        }
    targets = []
    for i, target in enumerate(panel.targets):
        entry: dict[str, Any] = {
            "datasource": DS,
            "expr": target.expr,
            "legendFormat": target.legend or "__auto",
            "refId": chr(ord("A") + i),
            "range": panel.kind != "table",
            "instant": panel.kind == "table",
        }
        if panel.kind == "table":
            entry["format"] = "table"
        targets.append(entry)
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DS,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": targets,
    }


def dashboard_json(dashboard: Dashboard) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    next_id = 1
    y = 0
    for row in dashboard.rows:
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        x = 0
        line_height = 0
        for panel in row.panels:
            if x + panel.width > 24:
                x = 0
                y += line_height
                line_height = 0
            panels.append(_panel_json(panel, next_id, x, y))
            next_id += 1
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": list(dashboard.tags),
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": _variables(dashboard.variables)},
        "panels": panels,
    }


def rendered() -> dict[Path, str]:
    """Every output file and its content."""
    out = {
        DASHBOARDS_DIR / f"{d.uid}.json": json.dumps(dashboard_json(d), indent=2) + "\n"
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
