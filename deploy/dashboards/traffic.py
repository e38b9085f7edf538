"""The traffic dashboards: Cluster overview (with the per-broker-group view) and Topics and
consumer groups. Every broker expression filters on ``cluster`` and ``broker`` (the broker
group: every sample a broker serves carries ``broker="<broker name>"``); ``up`` is a target
series without ``broker``, so it filters on ``cluster`` only.

Called by :func:`deploy.dashboards.build.dashboards`; the look is :mod:`deploy.dashboards.kit`.
"""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models

from deploy.dashboards.kit import MSGS, MSGS_COUNT, OPS, Row, dashboard, p, row, t

C = 'cluster=~"$cluster", broker=~"$broker"'
T = 'topic=~"$topic"'
G = 'group=~"$group"'
RI = "$__rate_interval"


def cluster_overview() -> models.Dashboard:
    status = row(
        "Status",
        (
            p(
                "Brokers up",
                "Broker metrics endpoints Prometheus scraped successfully (up == 1).",
                "none",
                t('sum(up{job=~"gannet.*", cluster=~"$cluster"})'),
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
                "Raft leaders in the cluster: one per broker group is healthy (Broker groups row: "
                "which group lacks one).",
                "none",
                t(f'sum(gannet_raft_role{{role="leader", {C}}})'),
                kind="stat",
                width=4,
                height=4,
                thresholds=((0, "red"), (1, "green")),
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
    traffic = row(
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
                t(quantile(0.5, "SendMessage"), "p50"),
                t(quantile(0.99, "SendMessage"), "p99"),
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
    nodes = row(
        "Brokers",
        (
            p(
                "Leader map",
                "1 where the broker is the Raft leader of its group, 0 where it follows.",
                "none",
                t(
                    f'max by (broker, instance) (gannet_raft_role{{role="leader", {C}}})',
                    "{{broker}} {{instance}}",
                ),
                kind="bargauge",
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
    return dashboard(
        "gannet-cluster",
        "Gannet / Cluster overview",
        "Throughput, latency, errors, disk and leadership of one Gannet cluster, whole and per "
        "broker group.",
        (status, _groups(), traffic, nodes),
    )


def _groups() -> Row:
    """The per-group view: each broker group (its own Raft group, store and consumer offsets)
    side by side; the Broker group variable narrows every panel of the dashboard to some."""
    return row(
        "Broker groups",
        (
            p(
                "Leaders per group",
                "Raft leaders of each broker group: 1 is healthy, 0 means the group takes no "
                "writes (an election is running or no majority is up).",
                "none",
                t(f'sum by (broker) (gannet_raft_role{{role="leader", {C}}})', "{{broker}}"),
                kind="stat",
                thresholds=((0, "red"), (1, "green"), (2, "red")),
            ),
            p(
                "Brokers ready per group",
                "Members of each broker group whose /readyz answers 200.",
                "none",
                t(f"sum by (broker) (gannet_broker_ready{{{C}}})", "{{broker}}"),
                kind="stat",
            ),
            p(
                "Messages in by group",
                "Messages appended by SendMessage per second, by broker group (the clients "
                "send to each group's queues directly).",
                MSGS,
                t(f"sum by (broker) (rate(gannet_messages_in_total{{{C}}}[{RI}]))", "{{broker}}"),
            ),
            p(
                "Messages out by group",
                "Messages handed to consumers per second, by broker group.",
                MSGS,
                t(
                    f"sum by (broker) (rate(gannet_messages_out_total{{{C}}}[{RI}]))",
                    "{{broker}}",
                ),
            ),
            p(
                "Consumer lag by group",
                "Messages not yet consumed, by broker group and consumer group (each group's "
                "leader exports its own queues' lag).",
                MSGS_COUNT,
                t(
                    f"sum by (broker, group) (gannet_consumer_lag_messages{{{C}}})",
                    "{{broker}} / {{group}}",
                ),
            ),
            p(
                "Disk used by group",
                "Highest store partition usage among each broker group's members.",
                "percentunit",
                t(f"max by (broker) (gannet_store_disk_used_ratio{{{C}}})", "{{broker}}"),
            ),
        ),
    )


def quantile(q: float, rpc: str) -> str:
    return (
        f"histogram_quantile({q}, sum by (le) (rate(gannet_rpc_duration_seconds_bucket"
        f'{{rpc="{rpc}", {C}}}[{RI}])))'
    )


def topics() -> models.Dashboard:
    tg = f"{C}, {T}, {G}"
    flow = row(
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
    lag = row(
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
    return dashboard(
        "gannet-topics",
        "Gannet / Topics and consumer groups",
        "Per-topic traffic and per-group lag, in-flight messages, retries and dead letters.",
        (flow, lag),
        variables=("cluster", "broker", "topic", "group"),
    )
