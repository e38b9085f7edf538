"""Pure manifest building for a GannetCluster, and the Kubernetes client's pure helpers."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gannet.operator import kube, manifests, specs

K8S_VERSION = "1.33"


def build(replicas: int = 3, **spec: Any) -> list[dict[str, Any]]:
    return manifests.build(
        "main",
        "demo",
        "uid-1",
        specs.cluster_spec({"replicas": replicas, **spec}),
        replicas=replicas,
    )


def by_kind(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    return next(
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    )


def test_every_object_validates_against_kubernetes_schemas() -> None:
    objects = build(metrics={"serviceMonitor": {"enabled": True}})
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        "ConfigMap",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "Service",
        "ServiceMonitor",
        "StatefulSet",
    ]
    for obj in objects:
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        if obj["kind"] == "ServiceMonitor":
            continue  # a CRD kind; kubernetes-validate knows built-in kinds only
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_service_monitor_labels_series_as_the_dashboards_select_them() -> None:
    monitor = by_kind(build(metrics={"serviceMonitor": {"enabled": True}}), "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    labels = {r["targetLabel"]: r["replacement"] for r in endpoint["relabelings"]}
    assert labels == {"job": "gannet-broker", "cluster": "main"}


def test_cleanup_ratio_defaults_match_the_store() -> None:
    import dataclasses

    from gannet.node.store.config import StoreConfig

    defaults = {f.name: f.default for f in dataclasses.fields(StoreConfig)}
    cleanup = specs.cluster_spec({"replicas": 1}).cleanup
    assert cleanup.disk_warning_ratio == defaults["disk_warning_ratio"]
    assert cleanup.disk_clean_forcibly_ratio == defaults["disk_clean_forcibly_ratio"]


def test_ephemeral_storage_and_no_metrics() -> None:
    objects = build(1, storage={"type": "ephemeral"}, metrics={"enabled": False})
    sts = by_kind(objects, "StatefulSet")
    assert "volumeClaimTemplates" not in sts["spec"]
    volumes = sts["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "emptyDir": {}} in volumes
    assert [v["name"] for v in volumes] == ["tmp", "members", "groups", "peer-secret", "data"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["tcpSocket"] == {"port": "client"}
    assert by_kind(objects, "ConfigMap")["data"]["GANNET_METRICS_LISTEN"] == ""
    client = by_kind(objects, "Service", "main-client")
    assert [p["name"] for p in client["spec"]["ports"]] == ["client"]
    assert all(o["kind"] != "ServiceMonitor" for o in objects)
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("metrics", [True, False])
def test_a_member_that_knows_no_leader_leaves_the_client_service_at_its_first_failed_probe(
    metrics: bool,
) -> None:
    """Issue 34: kube-proxy draws a pod for each new connection and passes a refusal on, so a
    cut-off member (``/readyz`` 503, its client port closed) must leave the Service within a
    second, before a one-address client (the Node.js client) reconnects a second time."""
    objects = build(metrics={"enabled": metrics})
    container = by_kind(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    ready = container["readinessProbe"]
    assert (ready["periodSeconds"], ready["failureThreshold"]) == (1, 1)
    if metrics:
        assert ready["httpGet"] == {"path": "/readyz", "port": "metrics"}
    else:  # the closed client port fails it
        assert ready["tcpSocket"] == {"port": "client"}


@pytest.mark.parametrize(
    ("spec", "flags"),
    [
        ({}, []),
        ({"autoCreateTopics": True}, ["--auto-create-topics"]),
        ({"autoCreateGroups": True}, ["--auto-create-groups"]),
    ],
)
def test_auto_create_flags_follow_the_spec(spec: dict[str, Any], flags: list[str]) -> None:
    args = by_kind(build(1, **spec), "StatefulSet")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert [a for a in args if a.startswith("--auto-create")] == flags


def test_index_hash_slots_reach_the_broker_only_when_set() -> None:
    """A small node sets spec.indexHashSlots (deploy/examples); unset, the broker's default."""

    def args(**spec: Any) -> list[str]:
        container = by_kind(build(1, **spec), "StatefulSet")["spec"]["template"]["spec"]
        return list(container["containers"][0]["args"])

    assert "--index-hash-slots" not in args()
    found = args(indexHashSlots=4096)
    assert found[found.index("--index-hash-slots") + 1] == "4096"
    with pytest.raises(specs.SpecError, match=r"spec\.indexHashSlots"):
        specs.cluster_spec({"indexHashSlots": 8})


def test_config_change_changes_the_pod_template() -> None:
    sync = by_kind(build(flushMode="sync"), "StatefulSet")
    async_ = by_kind(build(flushMode="async"), "StatefulSet")
    key = manifests.CONFIG_HASH_ANNOTATION
    assert (
        sync["spec"]["template"]["metadata"]["annotations"][key]
        != async_["spec"]["template"]["metadata"]["annotations"][key]
    )


@given(st.integers(1, 9))
def test_the_size_changes_no_pod_argument_and_the_budget_keeps_a_majority(replicas: int) -> None:
    """Members change through the admin API: the pod template (hence every running pod's
    command line) is the same whatever the size; each pod's node id comes from the roster."""
    objects = build(replicas)
    sts = by_kind(objects, "StatefulSet")
    template = sts["spec"]["template"]
    assert template == by_kind(build(1), "StatefulSet")["spec"]["template"]
    container = template["spec"]["containers"][0]
    assert "--peers" not in container["args"]
    assert "--node-id" not in container["args"]
    assert {"name": "members", "mountPath": "/etc/gannet/members", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert {"name": "members", "configMap": {"name": "main-members"}} in template["spec"]["volumes"]
    assert "GANNET_PEERS" not in by_kind(objects, "ConfigMap")["data"]
    budget = by_kind(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"]
    assert budget >= 1
    if replicas >= 3:
        assert replicas - budget > replicas // 2  # a majority stays up
    assert sts["spec"]["replicas"] == replicas


def test_apply_keeps_immutable_statefulset_fields_as_the_server_has_them() -> None:
    sts = by_kind(build(), "StatefulSet")
    assert kube.apply_body(sts, None) == sts  # a create sends everything
    existing = copy.deepcopy(by_kind(build(), "StatefulSet"))
    existing["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "1Gi"
    existing["spec"]["selector"]["matchLabels"]["extra"] = "kept"
    bigger = by_kind(build(5), "StatefulSet")
    body = kube.apply_body(bigger, existing)
    assert body["spec"]["replicas"] == 5
    assert body["spec"]["template"] == bigger["spec"]["template"]
    for fixed in ("volumeClaimTemplates", "selector", "serviceName"):
        assert body["spec"][fixed] == existing["spec"][fixed]
    assert body["metadata"] == bigger["metadata"]
    service = by_kind(build(), "Service", "main-peers")
    assert kube.apply_body(service, service)["spec"] == service["spec"]


def test_contains_ignores_server_defaults() -> None:
    desired = {"spec": {"ports": [{"port": 1}], "type": "ClusterIP"}}
    existing = {"spec": {"ports": [{"port": 1, "protocol": "TCP"}], "type": "ClusterIP", "x": 1}}
    assert kube.contains(existing, desired)
    assert not kube.contains(existing, {"spec": {"ports": [{"port": 2}]}})
    assert not kube.contains(existing, {"spec": {"ports": [{"port": 1}, {"port": 2}]}})


def test_resource_paths() -> None:
    assert kube.resource_path("v1", "Pod", "ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert (
        kube.resource_path("gannet.io/v1alpha1", "Topic", None) == "/apis/gannet.io/v1alpha1/topics"
    )
    with pytest.raises(ValueError, match="not one the operator manages"):
        kube.resource_path("v1", "Node", "ns")


def test_bad_cluster_spec_names_the_field() -> None:
    with pytest.raises(specs.SpecError, match=r"spec\.replicas is 0; use 1 to 9"):
        specs.cluster_spec({"replicas": 0})
    with pytest.raises(specs.SpecError, match=r"spec\.cleanup\.schedule"):
        specs.cluster_spec({"cleanup": {"schedule": "61 * * * *"}})
    with pytest.raises(specs.SpecError, match=r"spec\.resources\.limits\.gpu"):
        specs.cluster_spec({"resources": {"limits": {"gpu": 1}}})


@pytest.mark.timeout(30)
@pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")
def test_apply_creates_then_leaves_alone_then_patches_mutable_fields() -> None:
    import asyncio

    import kmock

    from tests.operator.emulating import ApiServerEmulator

    async def scenario() -> None:
        api = ApiServerEmulator()
        api.resources.load_bundled()
        async with api, kmock.Server(api) as server:
            client = kube.Kube.for_server(str(server.url), timeout_s=10)
            try:
                sts = by_kind(build(), "StatefulSet")
                assert await client.apply(sts) == "created"
                assert await client.apply(sts) == "unchanged"
                bigger = by_kind(build(5), "StatefulSet")
                assert await client.apply(bigger) == "updated"
                patch = [r for r in api if r.method == kmock.method.PATCH][-1]
                # Server-side apply under the operator's field manager, forced.
                assert patch.headers["Content-Type"] == "application/apply-patch+yaml"
                assert patch.params["fieldManager"] == "gannet-operator"
                assert patch.params["force"].lower() == "true"  # the client sends "True"
                assert patch.data["spec"]["replicas"] == 5
                # The immutable fields go back as the server has them.
                for fixed in ("volumeClaimTemplates", "selector"):
                    assert patch.data["spec"][fixed] == sts["spec"][fixed]
                stored = await client.get("apps/v1", "StatefulSet", "demo", "main")
                assert stored is not None
                assert stored["spec"]["replicas"] == 5
                # A conflict (a writer in between) is retried from a fresh read ...
                api.conflicts[("PATCH", "statefulsets")] = kube.CONFLICT_RETRIES
                assert await client.apply(by_kind(build(4), "StatefulSet")) == "updated"
                stored = await client.get("apps/v1", "StatefulSet", "demo", "main")
                assert stored is not None
                assert stored["spec"]["replicas"] == 4
                # ... a bounded number of times; then it is the caller's error.
                api.conflicts[("PATCH", "statefulsets")] = kube.CONFLICT_RETRIES + 1
                with pytest.raises(kube.KubeError, match="HTTP 409") as caught:
                    await client.apply(by_kind(build(3), "StatefulSet"))
                assert caught.value.status == 409
                api.conflicts[("PATCH", "statefulsets")] = 1
                status = {"readyReplicas": 2}
                stored = await client.patch_status("apps/v1", "StatefulSet", "demo", "main", status)
                assert stored is not None
                assert stored["status"]["readyReplicas"] == 2
                assert await client.get("apps/v1", "StatefulSet", "demo", "other") is None
                with pytest.raises(ValueError, match="v1/Node is not one the operator manages"):
                    await client.apply({**sts, "apiVersion": "v1", "kind": "Node"})
            finally:
                await client.close()

    asyncio.run(scenario())


def test_kopf_logs_in_as_the_client_does(tmp_path: Path) -> None:
    import asyncio

    from kubernetes_asyncio import client

    plain = asyncio.run(kube.configuration("http://127.0.0.1:8001/"))
    info = kube.connection_info(plain)
    assert (info.server, info.token, info.insecure) == ("http://127.0.0.1:8001", None, True)

    settings = client.Configuration()
    settings.host = "https://k8s:6443"
    settings.api_key = {"BearerToken": "Bearer t0k"}
    settings.ssl_ca_cert = str(tmp_path / "ca.crt")
    settings.cert_file = str(tmp_path / "client.crt")
    settings.key_file = str(tmp_path / "client.key")
    info = kube.connection_info(settings)
    assert (info.server, info.scheme, info.token) == ("https://k8s:6443", "Bearer", "t0k")
    assert info.ca_path == str(tmp_path / "ca.crt")
    assert (info.certificate_path, info.private_key_path) == (
        str(tmp_path / "client.crt"),
        str(tmp_path / "client.key"),
    )
    assert not info.insecure


def test_kubeconfig_is_read_when_not_in_a_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://k8s.example:6443"}}],
                "users": [{"name": "u", "user": {"token": "s3cret"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    info = kube.connection_info(asyncio.run(kube.configuration()))
    assert (info.server, info.token) == ("https://k8s.example:6443", "s3cret")

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(kube.KubeError, match="no Kubernetes credentials"):
        asyncio.run(kube.configuration())


def test_peers_authenticate_by_default_and_only_members_reach_the_peer_port() -> None:
    objects = build(3)
    sts = by_kind(objects, "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--peer-secret-file") + 1] == "/etc/gannet/peer-secret/secret"
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["peer-secret"]["secret"]["secretName"] == "main-peer-secret"
    policy = by_kind(objects, "NetworkPolicy")
    peer_rule, open_rule = policy["spec"]["ingress"]
    assert peer_rule["ports"] == [{"port": 8091}]
    assert peer_rule["from"] == [{"podSelector": policy["spec"]["podSelector"]}]
    assert policy["spec"]["podSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    assert "from" not in open_rule
    assert {p["port"] for p in open_rule["ports"]} == {8081, 5557}
    generated = manifests.generated_peer_secret("main", "demo", "uid-1", "t" * 43)
    assert generated["stringData"] == {"secret": "t" * 43}
    kubernetes_validate.validate(generated, K8S_VERSION, strict=True)
    # Peer TLS authenticates the peers: no generated secret unless one is named.
    tls = {"peerTls": {"enabled": True, "secretName": "certs"}}
    with_tls = by_kind(build(3, security=tls), "StatefulSet")
    assert "--peer-secret-file" not in with_tls["spec"]["template"]["spec"]["containers"][0]["args"]
    named = {**tls, "peerSecret": {"secretName": "shared"}}
    both = by_kind(build(3, security=named), "StatefulSet")
    names = [
        v.get("secret", {}).get("secretName") for v in both["spec"]["template"]["spec"]["volumes"]
    ]
    assert "shared" in names
