"""The chart's NOTES.txt (printed by ``helm install``) hands a chart user resources to apply as
YAML in the text itself, since a chart user has no copy of the repository's deploy/examples:
the YAML between ``kubectl apply -f - <<'EOF'`` and ``EOF`` parses, validates against the CRDs,
lands in a watched namespace and names the cluster it creates or the chart created."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest
import yaml

from deploy import render
from tests.operator import crd_schemas

START = "kubectl apply -f - <<'EOF'\n"
ALL = ["GannetCluster", "Topic", "ConsumerGroup"]


def notes(values: dict[str, Any]) -> str:
    chart = helm_python.Chart.load(str(render.CHART))
    try:
        files = chart.render(values, name="gannet", namespace="gannet", is_install=True)
    finally:
        chart.close()
    (path,) = [p for p in files if p.endswith("NOTES.txt")]
    return str(files[path])


def applied(text: str) -> list[dict[str, Any]]:
    assert text.count(START) == 1, text
    body = text.split(START, 1)[1].split("\nEOF\n", 1)[0]
    return [d for d in yaml.safe_load_all(body) if d]


@pytest.mark.parametrize(
    ("values", "kinds", "namespace"),
    [
        ({}, ALL, "gannet"),
        ({"security": {"auth": {"enabled": False}}}, ALL, "gannet"),
        ({"operator": {"watchNamespaces": ["team-a"]}}, ALL, "team-a"),
        ({"cluster": {"enabled": True, "name": "main"}}, ["Topic", "ConsumerGroup"], "gannet"),
    ],
    ids=["defaults", "no-auth", "watched-namespace", "chart-cluster"],
)
def test_notes_print_resources_to_apply(
    values: dict[str, Any], kinds: list[str], namespace: str
) -> None:
    text = notes(values)
    assert "deploy/examples" not in text
    assert "charts/gannet/crds" not in text
    documents = applied(text)
    assert [d["kind"] for d in documents] == kinds
    cluster = values.get("cluster", {}).get("name", "gannet")
    for document in documents:
        assert crd_schemas.errors(document) == [], document
        assert document["metadata"]["namespace"] == namespace
        if document["kind"] == "GannetCluster":
            assert document["metadata"]["name"] == cluster
            assert document["spec"]["image"] == "ghcr.io/gannet/gannet:0.1.0"
        else:
            assert document["spec"]["cluster"] == cluster


def test_auth_on_cluster_uses_the_generated_admin_secret() -> None:
    (cluster, _, _) = applied(notes({}))
    assert cluster["spec"]["security"]["auth"] == {
        "enabled": True,
        "credentialsSecret": "gannet-gannet-admin",
        "operatorCredentialsSecret": "gannet-gannet-admin",
    }
    assert "security" not in applied(notes({"security": {"auth": {"enabled": False}}}))[0]["spec"]
