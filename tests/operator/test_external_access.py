"""spec.remoting and spec.external: the pods' ports and arguments, one Service per pod, and the
address book the brokers read (docs/kubernetes.md, "Access from outside")."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from gannet.node.api import external_routes
from gannet.operator import external_access, manifests, specs
from tests.operator import crd_schemas
from tests.operator.test_manifests import K8S_VERSION, build, by_kind

NODE_PORTS: dict[str, Any] = {
    "remoting": {"enabled": True},
    "external": {
        "type": "NodePort",
        "host": "172.18.0.2",
        "nodePorts": {"client": 30081, "remoting": 30911},
    },
}


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    sts = by_kind(objects, "StatefulSet")
    found: dict[str, Any] = sts["spec"]["template"]["spec"]["containers"][0]
    return found


def test_without_the_sections_nothing_changes() -> None:
    objects = build()
    names = [o["metadata"]["name"] for o in objects if o["kind"] in ("Service", "ConfigMap")]
    assert names == ["main-peers", "main-client", "main-config"]
    args = container(objects)["args"]
    assert "--remoting-port" not in args
    assert "--external-addresses" not in args


def test_remoting_opens_its_ports_on_the_pods_the_client_service_and_the_policy() -> None:
    objects = build(remoting={"enabled": True})
    args = container(objects)["args"]
    assert args[args.index("--remoting-port") + 1] == "10911"
    assert args[args.index("--nameserver-port") + 1] == "9876"
    ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    assert ports["remoting"] == 10911
    assert ports["nameserver"] == 9876
    service = by_kind(objects, "Service", "main-client")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "client": 8081,
        "remoting": 10911,
        "nameserver": 9876,
        "metrics": 5557,
    }
    policy = by_kind(objects, "NetworkPolicy")
    open_ports = [p["port"] for p in policy["spec"]["ingress"][1]["ports"]]
    assert open_ports == [8081, 5557, 10911, 9876]


def test_node_port_access_gives_every_pod_a_service_and_the_brokers_a_book() -> None:
    objects = build(**NODE_PORTS)
    for obj in objects:
        if obj["kind"] in ("Service", "ConfigMap", "StatefulSet"):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    for ordinal in range(3):
        service = by_kind(objects, "Service", f"main-{ordinal}-external")
        assert service["spec"]["type"] == "NodePort"
        assert service["spec"]["selector"] == {
            "statefulset.kubernetes.io/pod-name": f"main-{ordinal}"
        }
        assert [(p["targetPort"], p["nodePort"]) for p in service["spec"]["ports"]] == [
            ("client", 30081 + ordinal),
            ("ext-remoting", 30911 + ordinal),
        ]
    text = by_kind(objects, "ConfigMap", "main-external")["data"]["addresses.json"]
    book = external_routes.parse(text)  # what the broker reads
    assert book.client("main-1.main-peers.demo.svc:8081") == ("172.18.0.2", 30082)
    assert book.remoting("main-2.main-peers.demo.svc:8081") == "172.18.0.2:30913"
    args = container(objects)["args"]
    assert args[args.index("--external-addresses") + 1] == "/etc/gannet/external/addresses.json"
    assert args[args.index("--external-remoting-port") + 1] == "10912"
    mounts = {m["name"]: m["mountPath"] for m in container(objects)["volumeMounts"]}
    assert mounts["external"] == external_access.BOOK_DIR


def test_the_book_is_not_in_the_config_hash_and_covers_a_scale_up() -> None:
    small = build(3, **NODE_PORTS)
    grown = manifests.build(
        "main", "demo", "uid-1", specs.cluster_spec({"replicas": 5, **NODE_PORTS}), replicas=3
    )
    names = {o["metadata"]["name"] for o in grown if o["kind"] == "Service"}
    assert {f"main-{i}-external" for i in range(5)} <= names

    def template(objects: list[dict[str, Any]]) -> Any:
        return by_kind(objects, "StatefulSet")["spec"]["template"]["metadata"]["annotations"]

    assert template(small) == template(grown)


def test_load_balancer_access_names_each_pods_advertised_host() -> None:
    hosts = ["lb-0.example.com", "lb-1.example.com", "10.20.0.3"]
    external = {"type": "LoadBalancer", "advertisedHosts": hosts}
    objects = build(external=external)
    service = by_kind(objects, "Service", "main-2-external")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["ports"] == [
        {"name": "client", "port": 8081, "targetPort": "client", "protocol": "TCP"}
    ]
    book = external_routes.parse(
        by_kind(objects, "ConfigMap", "main-external")["data"]["addresses.json"]
    )
    assert book.client("main-0.main-peers.demo.svc:8081") == ("lb-0.example.com", 8081)
    assert book.remoting("main-0.main-peers.demo.svc:8081") is None


def test_the_schema_accepts_the_sections() -> None:
    document = {
        "apiVersion": "gannet.io/v1alpha1",
        "kind": "GannetCluster",
        "metadata": {"name": "main", "namespace": "demo"},
        "spec": {"replicas": 3, **NODE_PORTS},
    }
    assert crd_schemas.errors(document) == []


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"external": {"type": "NodePort", "host": "a"}}, r"nodePorts\.client is missing"),
        (
            {
                "remoting": {"enabled": True},
                "external": {"host": "a", "nodePorts": {"client": 30000}},
            },
            r"nodePorts\.remoting is missing",
        ),
        (
            {"external": {"type": "LoadBalancer", "advertisedHosts": ["a"]}},
            "1 advertisedHosts for 3",
        ),
        ({"external": {"type": "Ingress"}}, r"external\.type is 'Ingress'"),
        ({"external": {"host": "a b", "nodePorts": {"client": 30000}}}, r"external\.host is 'a b'"),
        (
            {"external": {"host": "a", "nodePorts": {"client": 30000, "remoting": 30004}}},
            "overlap",
        ),
        ({"external": {"host": "a", "nodePorts": {"client": 80}}}, r"nodePorts\.client is 80"),
        (
            {"brokerGroups": 2, "external": {"host": "a", "nodePorts": {"client": 30000}}},
            "brokerGroups 2",
        ),
    ],
)
def test_unusable_sections_are_refused_naming_the_field(spec: dict[str, Any], problem: str) -> None:
    with pytest.raises(specs.SpecError, match=problem):
        specs.cluster_spec({"replicas": 3, **spec})
