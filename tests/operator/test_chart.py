"""The Helm chart: lints, renders for several value sets, every rendered object validates
against the Kubernetes schemas (kubernetes-validate) or, for Gannet kinds, the CRD schema;
RBAC stays least-privilege; dashboards become labelled ConfigMaps; values.schema.json rejects
bad values; deploy/gannet.yaml is a current render."""

from __future__ import annotations

from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from deploy import render
from tests.operator import crd_schemas

K8S_VERSION = "1.33"
CHART = str(render.CHART)
DASHBOARDS = sorted((render.CHART / "dashboards").glob("*.json"))
# Kinds of other operators' CRDs: kubernetes-validate has no schema for them.
FOREIGN_KINDS = {"ServiceMonitor", "PrometheusRule"}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "namespaced": {"operator": {"watchNamespaces": ["team-a", "team-b"], "verbose": True}},
    "everything": {
        "cluster": {"enabled": True, "spec": {"replicas": 5, "cleanup": {"schedule": "0 3 * * *"}}},
        "metrics": {
            "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
            "prometheusRule": {"enabled": True},
        },
        "image": {"tag": "dev"},
        "imagePullSecrets": [{"name": "registry"}],
    },
    "bare": {
        "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "ops"},
        "dashboards": {"enabled": False},
    },
}


def rendered(values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = helm_python.Chart.load(CHART)
    try:
        files = chart.render(values, name="gannet", namespace="gannet", is_install=True)
    finally:
        chart.close()
    found: list[dict[str, Any]] = []
    for path, text in files.items():
        if path.endswith(".yaml"):
            found += [d for d in yaml.safe_load_all(text) if d]
    return found


def test_chart_lints_clean() -> None:
    report = helm_python.lint(CHART)
    assert report["errors"] == []
    # Severity 1 is INFO ("icon is recommended"); warnings (2) and errors (3+) fail.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_rendered_object_validates(name: str) -> None:
    documents = rendered(VALUE_SETS[name])
    assert documents
    for document in documents:
        kind = document["kind"]
        if kind in crd_schemas.crds():
            assert crd_schemas.errors(document) == []
        elif kind in FOREIGN_KINDS:
            assert document["apiVersion"] == "monitoring.coreos.com/v1"
            assert document["metadata"]["name"]
        else:
            kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def test_crds_validate_as_kubernetes_objects() -> None:
    chart = helm_python.Chart.load(CHART)
    try:
        crds = [yaml.safe_load(str(c["data"])) for c in chart.crds]
    finally:
        chart.close()
    assert sorted(c["spec"]["names"]["kind"] for c in crds) == [
        "ConsumerGroup",
        "GannetCluster",
        "Topic",
    ]
    for crd in crds:
        kubernetes_validate.validate(crd, K8S_VERSION, strict=True)


def kinds(documents: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in documents)


def test_optional_parts_follow_the_values() -> None:
    defaults = rendered({})
    assert "GannetCluster" not in kinds(defaults)
    assert not FOREIGN_KINDS & set(kinds(defaults))
    everything = rendered(VALUE_SETS["everything"])
    assert {"GannetCluster", "ServiceMonitor", "PrometheusRule"} <= set(kinds(everything))
    cluster = next(d for d in everything if d["kind"] == "GannetCluster")
    assert cluster["spec"]["replicas"] == 5
    deployment = next(d for d in everything if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "ghcr.io/gannet/gannet:dev"
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    bare = rendered(VALUE_SETS["bare"])
    assert not {"ClusterRole", "Role", "ServiceAccount", "ConfigMap"} & set(kinds(bare))
    deployment = next(d for d in bare if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "ops"


def test_operator_deployment_runs_one_operator_with_a_liveness_probe() -> None:
    documents = rendered(VALUE_SETS["namespaced"])
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["operator", "run"]
    assert container["args"].count("--namespace") == 2
    assert "--verbose" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def rules(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for d in documents if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]


def test_rbac_is_least_privilege() -> None:
    cluster_wide = rendered({})
    assert kinds(cluster_wide).count("ClusterRole") == 1
    namespaced = rendered(VALUE_SETS["namespaced"])
    assert "ClusterRole" not in kinds(namespaced)
    roles = [d for d in namespaced if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for documents in (cluster_wide, namespaced):
        for rule in rules(documents):
            assert "*" not in rule["verbs"]
            assert "*" not in rule["resources"]
            assert "secrets" not in rule["resources"]
            if "gannet.io" in rule["apiGroups"]:
                assert not {"create", "delete"} & set(rule["verbs"])
            if "delete" in rule["verbs"]:
                assert rule["resources"] == ["pods"]  # rolling restarts only


def test_dashboards_become_labelled_config_maps() -> None:
    maps = [d for d in rendered({}) if d["kind"] == "ConfigMap"]
    assert len(maps) == len(DASHBOARDS)
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((key, text),) = config_map["data"].items()
        assert text == (render.CHART / "dashboards" / key).read_text().rstrip("\n")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"operator": {"replicas": "two"}}, "/operator/replicas"),
        ({"operator": {"replicas": 2}}, "/operator/replicas"),
        ({"operatr": {}}, "operatr"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"operator": {"refreshIntervalSeconds": 0}}, "/operator/refreshIntervalSeconds"),
        ({"operator": {"watchNamespaces": ["Bad_Name"]}}, "/operator/watchNamespaces"),
    ],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match=message):
        rendered(values)


def test_deploy_manifests_are_current() -> None:
    assert render.OUTPUT.read_text() == render.render(), "run `python -m deploy.render`"
    documents = [d for d in yaml.safe_load_all(render.OUTPUT.read_text()) if d]
    assert documents[0]["kind"] == "Namespace"
    assert kinds(documents).count("CustomResourceDefinition") == 3
    for document in documents:
        if document["kind"] not in FOREIGN_KINDS:
            kubernetes_validate.validate(document, K8S_VERSION, strict=True)
