"""End-to-end: a real Prometheus scrapes Gannet brokers under load from the official RocketMQ
client, then every PromQL expression of every dashboard panel and alert rule is evaluated
through Prometheus's HTTP API.

Timeline (about 25 s on a single node, 50 s on three):

1. Start the cluster — a local 3-node Raft group of ``gannet broker run`` processes
   (:func:`harness.start_three_nodes`, the default) or a single broker — and Prometheus
   (1 s scrape and rule evaluation, ``cluster="e2e"`` on every target).
2. Load: the official ``Producer`` sends to two topics; two ``SimpleConsumer`` groups receive
   and ack, one of them leaving every 10th message un-acked (10 s invisible time), so revive
   redelivers it through the retry topic.
3. **Silence check**: every alert expression returns nothing while the cluster is healthy.
4. Faults: 10 050 messages for a group that stopped consuming (consumer lag above the alert
   threshold), one message forwarded to the dead-letter queue, sends to a missing topic
   (error panel).
5. **Dashboards**: every panel expression (``$broker`` set to the cluster's broker group
   by name, the other variables to match everything, ``$__rate_interval`` = 30 s) must return
   data — except panels that need Raft replication or the operator when the cluster exports
   neither; those are listed as not checked. Since nearly every expression selects
   ``broker="<the group>"``, this proves the brokers label every series they serve; the
   ``broker`` values Prometheus holds are reported too (one per broker group).
6. **Alerts fire**: the consumer-lag and dead-letter expressions return series; then a
   follower is killed and the broker-down expression returns it; on three nodes the leader is
   killed next and the no-leader expression returns the cluster; the operator, whose broker is
   gone, fails its reconciles and the reconcile-failure expression returns them. The ``for:``
   durations are left to ``promtool test rules`` (deploy/prometheus/gannet-rules.test.yml).

The operator (:mod:`operating`: ``gannet operator run`` against the KMock API emulator,
reconciling a GannetCluster, a Topic and a ConsumerGroup and refusing a Topic shrink) is
scraped by the same Prometheus, so the Operator dashboard is checked with real data too.

Run ``make e2e-prometheus`` or ``python -m e2e.prometheus.scenario``; tests/metrics runs it
too when the prometheus binary is present. :func:`run` returns a :class:`Report`; an optional
``on_loaded`` callback sees Prometheus and the load window before the faults (the dashboard
pictures of docs/metrics.md are drawn there, :mod:`e2e.prometheus.render`).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import yaml
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from deploy.dashboards import build
from e2e.prometheus import harness, operating
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.upkeep import disk_space

CLIENT_ID = (("x-mq-client-id", "e2e@1@0@prometheus"),)
RPC_TIMEOUT_S = 15.0
RATE_INTERVAL = "30s"
VARIABLES = {
    "$cluster": ".+",
    "$broker": ".+",  # run() narrows it to the cluster's broker group
    "$topic": ".+",
    "$group": ".+",
    "$__rate_interval": RATE_INTERVAL,
}
LAG_MESSAGES = 10_050  # above GannetConsumerLagHigh's 10000
PROVOKED = ("GannetConsumerLagHigh", "GannetDeadLetters", "GannetBrokerDown")
DISK_CLEAN_FORCIBLY_RATIO = 0.85  # the store's default, as gannet_store_disk_clean_forcibly_ratio
_ids = itertools.count()


@dataclass
class Report:
    panels_checked: list[str] = field(default_factory=list)
    panels_empty: list[str] = field(default_factory=list)
    panels_not_checked: list[str] = field(default_factory=list)  # need raft / operator
    alerts_silent_when_healthy: list[str] = field(default_factory=list)
    alerts_noisy_when_healthy: list[str] = field(default_factory=list)
    alerts_fired: list[str] = field(default_factory=list)
    alerts_not_fired: list[str] = field(default_factory=list)
    alerts_not_provoked: list[str] = field(default_factory=list)
    double_counted: list[str] = field(default_factory=list)  # consumer series on 2+ nodes
    broker_groups: list[str] = field(default_factory=list)  # `broker` values Prometheus holds
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (
            self.panels_empty
            or self.alerts_noisy_when_healthy
            or self.alerts_not_fired
            or self.double_counted
        )

    def text(self) -> str:
        lines = [
            f"panels with data: {len(self.panels_checked)}",
            f"panels EMPTY: {self.panels_empty}",
            f"panels not checked (need Raft or the operator): {self.panels_not_checked}",
            f"alerts silent while healthy: {len(self.alerts_silent_when_healthy)}",
            f"alerts NOISY while healthy: {self.alerts_noisy_when_healthy}",
            f"alerts fired on provoked faults: {self.alerts_fired}",
            f"alerts NOT fired: {self.alerts_not_fired}",
            f"alerts not provoked here: {self.alerts_not_provoked}",
            f"consumer series exported by more than one node: {self.double_counted}",
            f"broker groups labelled on the scraped series: {self.broker_groups}",
            f"took {self.seconds:.1f} s",
        ]
        return "\n".join(lines)


def substituted(expr: str, broker: str = VARIABLES["$broker"]) -> str:
    """``expr`` with the dashboard variables replaced; ``broker``: the ``$broker`` regex."""
    for name, value in {**VARIABLES, "$broker": broker}.items():
        expr = expr.replace(name, value)
    return expr


def alert_rules() -> list[tuple[str, str]]:
    document = yaml.safe_load(harness.RULES.read_text())
    return [(r["alert"], r["expr"]) for g in document["groups"] for r in g["rules"]]


# ---------------------------------------------------------------------- load
class Load:
    """Official-client traffic: a producer per topic, two consumer groups, until stopped."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.sent = 0
        self.acked = 0
        self.left_unacked = 0

    def start(self) -> None:
        self._spawn(self._produce, ("Orders", "Payments"))
        self._spawn(self._consume, "billing", "Orders", 10)
        self._spawn(self._consume, "audit", "Payments", 0)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except BaseException as exc:  # reported by stop()
                self.errors.append(exc)

        thread = threading.Thread(target=guarded, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _produce(self, topics: tuple[str, ...]) -> None:
        producer = Producer(self.config, topics)
        producer.startup()
        try:
            for i in itertools.count():
                if self.stopping.is_set():
                    return
                message = Message()
                message.topic = topics[i % len(topics)]
                message.body = b"e2e-" + b"x" * (64 + (i * 37) % 4000)
                message.tag = "TagA"
                producer.send(message)
                self.sent += 1
                self.stopping.wait(0.004)
        finally:
            producer.shutdown()

    def _consume(self, group: str, topic: str, leave_every: int) -> None:
        consumer = SimpleConsumer(self.config, group, {topic: FilterExpression("*")})
        consumer.startup()
        try:
            seen = 0
            while not self.stopping.is_set():
                for message in consumer.receive(16, 10):
                    seen += 1
                    if leave_every and seen % leave_every == 0:
                        self.left_unacked += 1
                        continue
                    consumer.ack(message)
                    self.acked += 1
        finally:
            consumer.shutdown()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=30)
        if self.errors:
            raise RuntimeError(f"load failed: {self.errors[0]!r}") from self.errors[0]


def _send_raw(stub: service_pb2_grpc.MessagingServiceStub, topic: str, count: int) -> int:
    request = service_pb2.SendMessageRequest()
    for _ in range(count):
        message = request.messages.add(body=b"backlog")
        message.topic.name = topic
        message.system_properties.message_id = f"0102FC000000013E000B13F97E{next(_ids):08X}"
    return int(stub.SendMessage(request, metadata=CLIENT_ID, timeout=RPC_TIMEOUT_S).status.code)


def _receive_raw(
    stub: service_pb2_grpc.MessagingServiceStub, topic: str, group: str
) -> list[definition_pb2.Message]:
    request = service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name=group),
        message_queue=definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic)),
        filter_expression=definition_pb2.FilterExpression(type=definition_pb2.TAG, expression="*"),
        batch_size=1,
    )
    request.invisible_duration.FromSeconds(60)
    frames = stub.ReceiveMessage(request, metadata=CLIENT_ID, timeout=RPC_TIMEOUT_S)
    return [f.message for f in frames if f.WhichOneof("content") == "message"]


def provoke_faults(endpoint: str) -> None:
    """Consumer lag above the threshold, one dead letter, and refused sends."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        assert _send_raw(stub, "Backlog", 1) == Code.OK
        deadline = time.monotonic() + 20
        got: list[definition_pb2.Message] = []
        while not got and time.monotonic() < deadline:
            got = _receive_raw(stub, "Backlog", "reporting")
        if not got:
            raise RuntimeError("group reporting never received its first message")
        for _ in range(LAG_MESSAGES // 150 + 1):
            assert _send_raw(stub, "Backlog", 150) == Code.OK
        forward = service_pb2.ForwardMessageToDeadLetterQueueRequest(
            group=definition_pb2.Resource(name="reporting"),
            topic=definition_pb2.Resource(name="Backlog"),
            receipt_handle=got[0].system_properties.receipt_handle,
            message_id=got[0].system_properties.message_id,
        )
        reply = stub.ForwardMessageToDeadLetterQueue(
            forward, metadata=CLIENT_ID, timeout=RPC_TIMEOUT_S
        )
        assert reply.status.code == Code.OK, reply.status
        for _ in range(3):
            assert _send_raw(stub, "NoSuchTopic", 1) == Code.TOPIC_NOT_FOUND


def create_resources(endpoint: str) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        for topic in ("Orders", "Payments", "Backlog"):
            admin.CreateTopic(
                admin_pb2.CreateTopicRequest(name=topic, queue_nums=4), timeout=RPC_TIMEOUT_S
            )
        for group in ("billing", "audit", "reporting"):
            admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=RPC_TIMEOUT_S)


# ---------------------------------------------------------------------- checks
def _has_data(prometheus: harness.Prometheus, expr: str, broker: str = ".+") -> bool:
    return bool(prometheus.query(substituted(expr, broker)))


def disk_really_above_clean_forcibly(data_dir: Path) -> bool:
    """Whether the disk under the brokers is itself above the clean-forcibly ratio (then the
    disk alert is right to fire: a shared machine, not a healthy cluster)."""
    return disk_space.disk_used_ratio(str(data_dir)) > DISK_CLEAN_FORCIBLY_RATIO


def check_silence(prometheus: harness.Prometheus, report: Report, data_dir: Path) -> None:
    for alert, expr in alert_rules():
        noisy = _has_data(prometheus, expr)
        disk_alert = alert == "GannetDiskAboveCleanForciblyRatio"
        if noisy and disk_alert and disk_really_above_clean_forcibly(data_dir):
            report.alerts_fired.append(alert)  # the test machine's disk is that full
            continue
        (report.alerts_noisy_when_healthy if noisy else report.alerts_silent_when_healthy).append(
            alert
        )


def check_dashboards(prometheus: harness.Prometheus, report: Report, broker: str) -> None:
    """Every panel expression, the broker-group variable set to ``broker`` (a name)."""
    raft = _has_data(prometheus, "gannet_raft_role")
    operator = _has_data(prometheus, "gannet_operator_resources")
    tier = _has_data(prometheus, "gannet_tier_offloaded_files_total")
    for dashboard in build.dashboards():
        for panel in build.panels(dashboard):
            requires = build.requires(panel)
            for i, expr in enumerate(build.expressions(panel)):
                where = f"{dashboard.uid}/{panel.title}#{i}"
                if _has_data(prometheus, expr, broker):
                    report.panels_checked.append(where)
                elif (
                    (requires == "raft" and not raft)
                    or (requires == "operator" and not operator)
                    or (requires == "tier" and not tier)
                ):
                    report.panels_not_checked.append(where)
                else:
                    report.panels_empty.append(where)


def _expect_firing(
    prometheus: harness.Prometheus, report: Report, alert: str, rules: dict[str, str]
) -> None:
    try:
        wait_for_data(prometheus, rules[alert], 20)
        report.alerts_fired.append(alert)
    except TimeoutError:
        report.alerts_not_fired.append(alert)


def wait_for_data(prometheus: harness.Prometheus, expr: str, timeout_s: float) -> None:
    harness.wait_for(lambda: _has_data(prometheus, expr), timeout_s, f"data for {expr}")


def run(
    workdir: Path,
    *,
    start_cluster: Callable[[Path], harness.Cluster] = harness.start_single_node,
    on_loaded: Callable[[harness.Prometheus, float, float], None] | None = None,
    extra_load_s: float = 0.0,
    with_operator: bool = True,
) -> Report:
    """The scenario of the module docstring; ``extra_load_s`` keeps the load running that much
    longer before ``on_loaded`` (longer curves for pictures)."""
    started = time.monotonic()
    report = Report()
    cluster = start_cluster(workdir / "cluster")
    prometheus = None
    load = None
    operator = None
    try:
        operator_targets = []
        if with_operator:
            operator = operating.OperatorUnderTest(workdir / "operator", cluster.client_endpoint)
            operator.start()
            operator_targets.append(operator.metrics_endpoint)
        prometheus = harness.start_prometheus(
            workdir / "prometheus",
            cluster.metrics_endpoints,
            cluster=cluster.name,
            operator_targets=operator_targets,
        )
        nodes = len(cluster.metrics_endpoints)
        harness.wait_for(lambda: prometheus.targets_up() == nodes, 30, "every target up")
        if operator is not None:
            wait_for_data(prometheus, 'up{job="gannet-operator"} == 1', 30)
        create_resources(cluster.client_endpoint)
        load_started = time.time()
        load = Load(cluster.client_endpoint)
        load.start()
        wait_for_data(prometheus, 'gannet_consumer_inflight_messages{group="billing"}', 30)
        wait_for_data(prometheus, f"rate(gannet_messages_out_total[{RATE_INTERVAL}]) > 0", 30)
        check_silence(prometheus, report, workdir)
        # increase() only sees the dead letter if Prometheus stored the group's 0 before it.
        wait_for_data(prometheus, 'gannet_consumer_dlq_messages_total{group="reporting"} == 0', 30)
        provoke_faults(cluster.client_endpoint)
        # Revive redelivers the un-acked billing messages 10 s after their receive.
        wait_for_data(prometheus, "gannet_consumer_retry_messages_total > 0", 40)
        wait_for_data(
            prometheus, f"rate(gannet_consumer_retry_messages_total[{RATE_INTERVAL}])", 10
        )
        check_dashboards(prometheus, report, cluster.broker_name)
        report.broker_groups = sorted(
            series["metric"].get("broker", "")
            for series in prometheus.query('count by (broker) ({__name__=~"gannet_.+"})')
        )
        # Only the node serving Pop (the leader) exports consumer figures; sums stay true.
        for series in prometheus.query(
            "count by (topic, group) (gannet_consumer_lag_messages) > 1"
        ):
            report.double_counted.append(str(series["metric"]))
        rules = dict(alert_rules())
        for alert in ("GannetConsumerLagHigh", "GannetDeadLetters"):
            _expect_firing(prometheus, report, alert, rules)
        if on_loaded is not None:
            load.stopping.wait(extra_load_s)
            on_loaded(prometheus, load_started, time.time())
        load.stop()
        load = None
        cluster.brokers[0].kill()  # a follower when there are several
        _expect_firing(prometheus, report, "GannetBrokerDown", rules)
        if len(cluster.brokers) >= 3:
            cluster.brokers[-1].kill()  # the leader: the last node cannot win an election
            _expect_firing(prometheus, report, "GannetNoLeader", rules)
        if operator is not None:  # its broker is gone: its periodic reconciles now fail
            _expect_firing(prometheus, report, "GannetOperatorReconcileFailures", rules)
        done = {*PROVOKED, *report.alerts_fired}
        report.alerts_not_provoked = [a for a in rules if a not in done]
    finally:
        if load is not None:
            load.stopping.set()
        if prometheus is not None:
            prometheus.stop()
        if operator is not None:
            operator.stop()
        cluster.stop()
    report.seconds = time.monotonic() - started
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description="Prometheus end-to-end check of Gannet.")
    parser.add_argument("--workdir", type=Path, help="keep logs and data here")
    parser.add_argument(
        "--nodes", type=int, choices=(1, 3), default=3, help="brokers (3: a local Raft group)"
    )
    args = parser.parse_args()
    start = harness.start_three_nodes if args.nodes == 3 else harness.start_single_node
    if args.workdir is not None:
        report = run(args.workdir, start_cluster=start)
    else:
        with tempfile.TemporaryDirectory(prefix="gannet-e2e-prometheus-") as tmp:
            report = run(Path(tmp), start_cluster=start)
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
