"""The Grafana dashboards and the chart's alert rules: committed files equal what
``deploy/dashboards/build.py`` builds, every panel has a unit, a description and valid PromQL
that names only metrics a broker (or the operator, by contract) exports, and the chart's
PrometheusRule template renders the same groups as the plain rules file."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from rocketmq.grpc_protocol import Code

from deploy.dashboards import build
from gannet.node.metrics import offload_collecting, raft_collecting, tier_collecting
from gannet.node.protocol.gen import admin_pb2
from gannet.node.store.tier.offloading import OffloadFigures
from gannet.node.store.tier.reading import ReadStatistics
from gannet.operator import metrics as operator_metrics

from .conftest import REPO, RPC_TIMEOUT_S, create_topic, metrics_port, run_promtool, samples, scrape
from .conftest import send as send_messages
from .test_consumers import Peer, Status, receive

RULES = REPO / "deploy" / "prometheus" / "gannet-rules.yml"
METRIC_NAME = re.compile(r"\b(?:gannet_[a-z0-9_]+|process_[a-z_]+|up)\b(?=\s*[{\[)])")
VARIABLES = {
    "$cluster": ".+",
    "$broker": ".+",
    "$topic": ".+",
    "$group": ".+",
    "$__rate_interval": "1m",
}


def expressions() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, expr) of every target."""
    return [
        (str(d.uid), str(panel.title), expr)
        for d in build.dashboards()
        for panel in build.panels(d)
        for expr in build.expressions(panel)
    ]


def rule_expressions() -> list[tuple[str, str]]:
    document = yaml.safe_load(RULES.read_text())
    return [
        (rule["alert"], rule["expr"]) for group in document["groups"] for rule in group["rules"]
    ]


def substituted(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def test_committed_files_are_what_the_builder_builds() -> None:
    stale = [
        str(path.relative_to(REPO))
        for path, text in build.rendered().items()
        if not path.exists() or path.read_text() != text
    ]
    assert not stale, f"run `python -m deploy.dashboards.build`: {stale}"
    committed = {p.name for p in build.DASHBOARDS_DIR.glob("*.json")}
    assert committed == {f"{d.uid}.json" for d in build.dashboards()}


def test_the_six_dashboards_exist_with_their_variables() -> None:
    titles = {}
    for path in build.DASHBOARDS_DIR.glob("*.json"):
        document = json.loads(path.read_text())
        assert document["schemaVersion"] == 41  # grafana-foundation-sdk's Grafana 11.6 build
        names = [v["name"] for v in document["templating"]["list"]]
        assert names[0] == "datasource"
        titles[document["title"]] = names
    assert set(titles) == {
        "Gannet / Cluster overview",
        "Gannet / Topics and consumer groups",
        "Gannet / Pop and revive",
        "Gannet / Raft replication",
        "Gannet / Storage and cleanup",
        "Gannet / Operator",
    }
    assert titles["Gannet / Topics and consumer groups"] == [
        "datasource",
        "cluster",
        "broker",
        "topic",
        "group",
    ]
    assert titles["Gannet / Cluster overview"] == ["datasource", "cluster", "broker"]
    assert titles["Gannet / Operator"] == ["datasource"]


def test_broker_dashboards_have_a_per_group_view() -> None:
    """Every broker expression but ``up`` (a target series) is narrowed by the broker-group
    variable, and the Cluster overview has a row of per-group panels split ``by (broker)``."""
    for d in build.dashboards():
        for panel in build.panels(d):
            for expr in build.expressions(panel):
                broker_series = "gannet_" in expr or "process_" in expr
                needs = broker_series and "gannet_operator_" not in expr
                assert ('broker=~"$broker"' in expr) == needs, f"{d.uid}/{panel.title}: {expr}"
    (cluster,) = [d for d in build.dashboards() if d.uid == "gannet-cluster"]
    titles = [p.title for p in cluster.panels or []]
    row = titles.index("Broker groups")
    grouped = titles[row + 1 : row + 7]
    assert grouped == [
        "Leaders per group",
        "Brokers ready per group",
        "Messages in by group",
        "Messages out by group",
        "Consumer lag by group",
        "Disk used by group",
    ]
    for panel in build.panels(cluster):
        if panel.title in grouped:
            ((expr, legend),) = build.targets(panel)
            assert "by (broker" in expr, panel.title
            assert "{{broker}}" in legend, panel.title


def test_every_panel_has_unit_description_and_expressions() -> None:
    for path in build.DASHBOARDS_DIR.glob("*.json"):
        for panel in json.loads(path.read_text())["panels"]:
            if panel["type"] == "row":
                continue
            where = f"{path.name}: {panel['title']}"
            assert panel["fieldConfig"]["defaults"]["unit"], where
            assert len(panel["description"]) > 20, where
            assert panel["targets"], where
            for target in panel["targets"]:
                assert target["expr"].strip(), where
                assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_expression_is_valid_promql(tmp_path: Path, promtool: str) -> None:
    """promtool checks each expression as a recording rule (variables substituted)."""
    rules = [
        {"record": f"check:{i}", "expr": substituted(expr)}
        for i, (_, _, expr) in enumerate(expressions())
    ]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    run_promtool(promtool, "check", "rules", str(path))


def _operator_metric_names() -> set[str]:
    """Sample names the operator's own registry exports (one reconcile observed)."""
    registry = operator_metrics.OperatorMetrics()
    registry.observe("Topic", "failed", 0.1)
    return {s.name for f in registry.registry.collect() for s in f.samples}


def test_operator_contract_matches_the_operator() -> None:
    assert _operator_metric_names() >= build.OPERATOR_METRICS


def _known_metric_names(port: int) -> set[str]:
    names = {name for name, _ in samples(scrape(port))}
    status = Status(peers=[Peer("n2", 1)])
    names |= {s.name for f in raft_collecting.families(status) for s in f.samples}
    # A broker with tiered storage exports these too (the scraped one has no tier).
    names |= {s.name for f in offload_collecting.families(OffloadFigures()) for s in f.samples}
    reads = ReadStatistics(cache_hits=0, cache_misses=0, fetches=0, fetched_bytes=0, cached_bytes=0)
    names |= {s.name for f in tier_collecting.families_of(reads) for s in f.samples}
    return names | _operator_metric_names() | build.FOREIGN_METRICS


def test_expressions_and_rules_name_only_exported_metrics(broker, admin, messaging) -> None:
    topic = create_topic(admin)
    group = f"G-{topic}"
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=RPC_TIMEOUT_S)
    assert send_messages(messaging, topic, [b"x"]).status.code == Code.OK
    store = broker.broker.store
    assert store.wait_dispatched(store.commitlog.max_offset(), timeout_s=10)
    assert receive(messaging, topic, group, 1)
    known = _known_metric_names(metrics_port(broker))
    used = {
        (where, name)
        for *where_parts, expr in expressions()
        for name in METRIC_NAME.findall(expr)
        for where in ["/".join(where_parts)]
    }
    used |= {
        (alert, name) for alert, expr in rule_expressions() for name in METRIC_NAME.findall(expr)
    }
    assert len({name for _, name in used}) > 40
    unknown = sorted((where, name) for where, name in used if name not in known)
    assert not unknown, unknown


def test_chart_prometheus_rule_renders_the_rules_file(tmp_path: Path) -> None:
    helm_python = pytest.importorskip("helm_python")
    chart = tmp_path / "gannet"
    (chart / "templates").mkdir(parents=True)
    (chart / "files").mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: gannet\nversion: 0.1.0\n")
    shutil.copy(REPO / "charts/gannet/templates/prometheusrule.yaml", chart / "templates")
    shutil.copy(build.RULES_CHART_COPY, chart / "files")
    loaded = helm_python.Chart.load(chart)
    values = {"metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "kps"}}}}
    rendered = loaded.render(values, name="r1", namespace="ns", is_install=True)
    document = yaml.safe_load(rendered["gannet/templates/prometheusrule.yaml"])
    assert document["kind"] == "PrometheusRule"
    assert document["metadata"]["labels"]["release"] == "kps"
    assert document["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    off = loaded.render({}, name="r1", namespace="ns", is_install=True)
    assert not off["gannet/templates/prometheusrule.yaml"].strip()
