"""The Helm chart: lints, renders for several value sets, every rendered object validates
against the Kubernetes schemas (kubernetes-validate) or, for Gannet kinds, the CRD schema;
RBAC stays least-privilege; dashboards become labelled ConfigMaps; values.schema.json rejects
bad values; deploy/gannet.yaml is a current render; auth is on by default with a generated admin
Secret that the operator and the chart's brokers share, TLS comes from cert-manager."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import helm_python
import kmock
import kubernetes_validate
import pytest
import yaml

from deploy import render
from gannet.node.protocol import credentials
from gannet.operator import kube, manifests, specs
from tests.operator import crd_schemas
from tests.operator.emulating import ApiServerEmulator

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
        "security": {"auth": {"enabled": False}},
    },
    "auth-on": {"cluster": {"enabled": True}},
    "tls-cert-manager": {
        "cluster": {"enabled": True},
        "security": {
            "tls": {"enabled": True, "certManager": {"issuerRef": {"name": "gannet-ca"}}},
            "peerTls": {
                "enabled": True,
                "certManager": {"issuerRef": {"name": "peers-ca", "kind": "Issuer"}},
            },
        },
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
            if "gannet.io" in rule["apiGroups"]:
                assert not {"create", "delete"} & set(rule["verbs"])
            if "delete" in rule["verbs"]:
                # Rolling restarts and restarts under a new node id; the claim of a removed
                # member (storage.deleteClaim); the objects of a drained broker group.
                assert rule["resources"] in (
                    ["pods"],
                    ["persistentvolumeclaims"],
                    ["statefulsets"],
                    ["services", "configmaps"],
                    ["poddisruptionbudgets"],
                    ["networkpolicies"],
                )
            if "persistentvolumeclaims" in rule["resources"]:
                assert rule["verbs"] == ["get", "list", "delete"]  # never create or change
            if "secrets" in rule["resources"]:
                # Named Secrets only: never list or watch every Secret; create and patch for
                # the generated peer secret of a cluster that names none.
                assert rule == {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "verbs": ["get", "create", "patch"],
                }
        # The operator posts core/v1 Events on its resources (gannet.operator.events).
        for role in [d for d in documents if d["kind"] in ("Role", "ClusterRole")]:
            assert any(
                "" in r["apiGroups"]
                and "events" in r["resources"]
                and {"create", "patch"} <= set(r["verbs"])
                for r in role["rules"]
            ), role["metadata"]


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
        ({"security": {"auth": {"enabled": "yes"}}}, "/security/auth/enabled"),
        ({"security": {"tls": {"secretName": "Bad_Name"}}}, "/security/tls/secretName"),
        (
            {"security": {"peerTls": {"certManager": {"issuerRef": {"kind": "Vault"}}}}},
            "/security/peerTls/certManager/issuerRef/kind",
        ),
        (
            {"cluster": {"spec": {"tier": {"endpoint": "http://s3:8333", "bucket": "b1"}}}},
            "credentialsSecret",
        ),
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


def by_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(d for d in documents if d["kind"] == kind)


def test_auth_is_on_by_default_with_a_generated_admin_secret() -> None:
    documents = rendered(VALUE_SETS["auth-on"])
    secret = by_kind(documents, "Secret")
    assert secret["metadata"]["name"] == "gannet-gannet-admin"
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["accessKey"] == "gannet-admin"
    assert len(data["secretKey"]) == 40
    assert data["secretKey"].isalnum()
    # A fresh install generates a fresh key (helm template has no existing Secret to look up).
    again = by_kind(rendered(VALUE_SETS["auth-on"]), "Secret")
    assert base64.b64decode(again["data"]["secretKey"]).decode() != data["secretKey"]
    # admin.json is a credentials file the broker loads: the admin account with every right.
    directory = Path(tempfile.mkdtemp())
    try:
        (directory / "admin.json").write_text(data["admin.json"])
        (directory / "accessKey").write_text(data["accessKey"])  # as mounted: skipped
        accounts = credentials.load(directory)
    finally:
        shutil.rmtree(directory)
    assert set(accounts) == {"gannet-admin"}
    assert accounts["gannet-admin"].secret_key == data["secretKey"]
    # The operator signs with that key...
    deployment = by_kind(documents, "Deployment")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GANNET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "gannet-gannet-admin",
        "key": "accessKey",
        "optional": True,  # deploy/gannet.yaml starts before its Secret exists
    }
    assert env["GANNET_SECRET_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "secretKey"
    # ...and the chart's brokers require it.
    cluster = by_kind(documents, "GannetCluster")
    security = specs.cluster_spec(cluster["spec"]).security
    assert security.auth.enabled
    assert security.auth.credentials_secret == "gannet-gannet-admin"
    assert security.auth.operator_credentials_secret == "gannet-gannet-admin"
    assert not security.tls.enabled


def test_auth_off_and_an_own_secret_render_no_secret() -> None:
    off = rendered(VALUE_SETS["bare"])
    assert "Secret" not in kinds(off)
    assert "env" not in by_kind(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    own = rendered({"security": {"auth": {"createAdminSecret": False, "adminSecret": "mine"}}})
    assert "Secret" not in kinds(own)
    container = by_kind(own, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "mine"


def test_tls_with_cert_manager_reaches_the_cluster_spec() -> None:
    cluster = by_kind(rendered(VALUE_SETS["tls-cert-manager"]), "GannetCluster")
    security = specs.cluster_spec(cluster["spec"]).security
    assert security.tls.issuer == specs.IssuerRef("gannet-ca", "ClusterIssuer", "cert-manager.io")
    assert security.peer_tls.issuer == specs.IssuerRef("peers-ca", "Issuer", "cert-manager.io")
    objects = manifests.build(
        "gannet", "gannet", "uid", specs.cluster_spec(cluster["spec"]), replicas=3
    )
    names = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Certificate")
    assert names == ["gannet-client-tls", "gannet-peer-tls"]


def test_tier_values_reach_the_brokers_of_the_chart_cluster() -> None:
    tier = {
        "endpoint": "http://seaweedfs.storage.svc:8333",
        "bucket": "gannet-tier",
        "credentialsSecret": {"name": "gannet-s3"},
        "offloadAfterSeconds": 600,
    }
    values = {"cluster": {"enabled": True, "spec": {"tier": tier}}}
    cluster = by_kind(rendered(values), "GannetCluster")
    spec = specs.cluster_spec(cluster["spec"])
    assert spec.tier is not None
    assert (spec.tier.bucket, spec.tier.offload_after_s) == ("gannet-tier", 600.0)
    sts = manifests.stateful_set("gannet", "gannet", "uid", spec, replicas=3)
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--tier-prefix") + 1] == "gannet/gannet/gannet/broker-0"


def test_cluster_spec_security_wins_over_the_chart_values() -> None:
    values = {
        "cluster": {
            "enabled": True,
            "spec": {"security": {"tls": {"enabled": True, "secretName": "own-certs"}}},
        },
        "security": {"tls": {"enabled": True, "certManager": {"issuerRef": {"name": "ca"}}}},
    }
    cluster = by_kind(rendered(values), "GannetCluster")
    assert cluster["spec"]["security"]["tls"]["secretName"] == "own-certs"
    assert cluster["spec"]["security"]["auth"]["enabled"] is True


def test_tls_without_a_source_fails_the_render() -> None:
    values = {"cluster": {"enabled": True}, "security": {"tls": {"enabled": True}}}
    with pytest.raises(helm_python.HelmError, match=r"secretName or certManager\.issuerRef\.name"):
        rendered(values)


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")
def test_upgrade_keeps_an_existing_admin_secret() -> None:
    """Rendered cluster-aware against the KMock API emulator holding the Secret: helm's
    ``lookup`` finds it and the chart keeps its key instead of generating a new one."""

    async def scenario() -> dict[str, str]:
        api = ApiServerEmulator()
        api.resources.load_bundled()
        async with api, kmock.Server(api) as server:
            url = str(server.url).rstrip("/")
            client = kube.Kube.for_server(url, timeout_s=10)
            try:
                await client.apply(
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": "gannet-gannet-admin", "namespace": "gannet"},
                        "data": {"secretKey": base64.b64encode(b"kept-secret-key").decode()},
                    }
                )
            finally:
                await client.close()

            def upgrade() -> dict[str, str]:
                config = helm_python.Config(kube_apiserver=url, namespace="gannet")
                chart = helm_python.Chart.load(CHART)
                try:
                    files: dict[str, str] = config.render(
                        chart, {}, name="gannet", namespace="gannet", is_upgrade=True
                    )
                    return files
                finally:
                    chart.close()
                    config.close()

            return await asyncio.to_thread(upgrade)

    files = asyncio.run(scenario())
    secret = next(
        d
        for path, text in files.items()
        if path.endswith(".yaml")
        for d in yaml.safe_load_all(text)
        if d and d["kind"] == "Secret"
    )
    assert base64.b64decode(secret["data"]["secretKey"]) == b"kept-secret-key"
    admin = json.loads(base64.b64decode(secret["data"]["admin.json"]))
    assert admin["accounts"][0]["secret_key"] == "kept-secret-key"
