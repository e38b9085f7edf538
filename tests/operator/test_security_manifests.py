"""spec.security: parsing with errors naming the field, the broker flags and read-only Secret
mounts it produces, and the cert-manager Certificates for client and peer TLS."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from gannet.operator import manifests, specs
from tests.operator import crd_schemas

K8S_VERSION = "1.33"
ISSUER = {"certManager": {"issuerRef": {"name": "gannet-ca", "kind": "ClusterIssuer"}}}
SECURED: dict[str, Any] = {
    "auth": {"enabled": True, "credentialsSecret": "gannet-keys"},
    "tls": {"enabled": True, **ISSUER},
    "peerTls": {"enabled": True, "secretName": "main-peers-certs"},
}


def build(security: dict[str, Any], replicas: int = 3) -> list[dict[str, Any]]:
    spec = specs.cluster_spec({"replicas": replicas, "security": security})
    return manifests.build("main", "demo", "uid-1", spec, replicas=replicas)


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    result: dict[str, Any] = sts["spec"]["template"]["spec"]["containers"][0]
    return result


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_security_is_off_by_default() -> None:
    spec = specs.cluster_spec({})
    assert spec.security == specs.NO_SECURITY
    args = container(build({}))["args"]
    assert not [a for a in args if a.startswith(("--auth", "--tls", "--peer-tls"))]
    assert [o for o in build({}) if o["kind"] == "Certificate"] == []


def test_secured_cluster_mounts_secrets_read_only_and_passes_the_broker_flags() -> None:
    objects = build(SECURED)
    broker = container(objects)
    args = broker["args"]
    assert flag(args, "--auth-file") == manifests.AUTH_DIR
    assert flag(args, "--tls-cert") == f"{manifests.TLS_DIR}/tls.crt"
    assert flag(args, "--tls-key") == f"{manifests.TLS_DIR}/tls.key"
    assert flag(args, "--peer-tls-cert") == f"{manifests.PEER_TLS_DIR}/tls.crt"
    assert flag(args, "--peer-tls-key") == f"{manifests.PEER_TLS_DIR}/tls.key"
    assert flag(args, "--peer-tls-ca") == f"{manifests.PEER_TLS_DIR}/ca.crt"
    mounts = {m["name"]: m for m in broker["volumeMounts"]}
    for volume, path in (
        ("auth", manifests.AUTH_DIR),
        ("tls", manifests.TLS_DIR),
        ("peer-tls", manifests.PEER_TLS_DIR),
    ):
        assert mounts[volume] == {"name": volume, "mountPath": path, "readOnly": True}
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    # The auth directory: the user's credentials plus the cluster key's file (cluster_key).
    sources = volumes["auth"]["projected"]["sources"]
    assert sources[0] == {"secret": {"name": "gannet-keys"}}
    assert sources[1]["secret"]["name"] == "main-cluster-key"
    assert volumes["tls"]["secret"]["secretName"] == "main-client-tls"  # cert-manager's
    assert volumes["peer-tls"]["secret"]["secretName"] == "main-peers-certs"  # the user's
    assert volumes["auth"]["projected"]["defaultMode"] == 0o440
    for obj in objects:
        if obj["kind"] != "Certificate":
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_cert_manager_certificates_cover_every_pod_of_the_headless_service() -> None:
    security = {"tls": {"enabled": True, **ISSUER}, "peerTls": {"enabled": True, **ISSUER}}
    objects = build(security, replicas=3)
    certificates = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Certificate"}
    assert set(certificates) == {"main-client-tls", "main-peer-tls"}
    # Certificates come first, so their Secrets exist before the pods that mount them.
    assert [o["kind"] for o in objects[:2]] == ["Certificate", "Certificate"]
    for name, certificate in certificates.items():
        assert certificate["apiVersion"] == "cert-manager.io/v1"
        spec = certificate["spec"]
        assert spec["secretName"] == name
        assert spec["issuerRef"] == {
            "name": "gannet-ca",
            "kind": "ClusterIssuer",
            "group": "cert-manager.io",
        }
        for ordinal in range(3):
            assert f"main-{ordinal}.main-peers.demo.svc" in spec["dnsNames"]
        assert "*.main-peers.demo.svc" in spec["dnsNames"]
        assert "main-peers.demo.svc" in spec["dnsNames"]  # every pod: a one-address client's
        assert "main-client.demo.svc" in spec["dnsNames"]
        assert certificate["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    # Client certificates dial other groups' mutual-TLS client ports too.
    for name in ("main-peer-tls", "main-client-tls"):
        assert "client auth" in certificates[name]["spec"]["usages"]
        assert "server auth" in certificates[name]["spec"]["usages"]
    # Every group a cluster may have is covered, as the other groups dial it.
    names = certificates["main-client-tls"]["spec"]["dnsNames"]
    last = specs.BROKER_GROUPS_MAX - 1
    for group in (1, last):
        assert f"*.main-g{group}-peers.demo.svc" in names
        assert f"main-g{group}-client.demo.svc" in names
    assert f"main-g{last + 1}-client.demo.svc" not in names
    args = container(objects)["args"]
    assert flag(args, "--peer-tls-ca") == f"{manifests.PEER_TLS_DIR}/ca.crt"


@pytest.mark.parametrize(
    ("security", "field"),
    [
        ({"auth": {"enabled": True}}, "spec.security.auth.credentialsSecret"),
        ({"tls": {"enabled": True}}, "spec.security.tls"),
        (
            {"tls": {"enabled": True, "secretName": "x", **ISSUER}},
            "spec.security.tls",
        ),
        (
            {"peerTls": {"enabled": True, "certManager": {"issuerRef": {"kind": "Issuer"}}}},
            "spec.security.peerTls.certManager.issuerRef.name",
        ),
        (
            {"tls": {"enabled": True, "certManager": {"issuerRef": {"name": "a", "kind": "X"}}}},
            "spec.security.tls.certManager.issuerRef.kind",
        ),
        (
            {"auth": {"enabled": True, "credentialsSecret": "Bad_Name"}},
            "spec.security.auth.credentialsSecret",
        ),
        ({"auth": {"enabled": "yes"}}, "spec.security.auth.enabled"),
    ],
)
def test_bad_security_specs_name_the_field(security: dict[str, Any], field: str) -> None:
    with pytest.raises(specs.SpecError) as caught:
        specs.cluster_spec({"security": security})
    assert str(caught.value).startswith(field), caught.value


def test_the_crd_schema_accepts_the_secured_spec_and_has_the_cel_rules() -> None:
    document = {
        "apiVersion": "gannet.io/v1alpha1",
        "kind": "GannetCluster",
        "metadata": {"name": "main"},
        "spec": {
            "security": {**SECURED, "auth": {**SECURED["auth"], "operatorCredentialsSecret": "op"}}
        },
    }
    assert crd_schemas.errors(document) == []
    security = crd_schemas.schema("GannetCluster")["properties"]["spec"]["properties"]["security"]
    for key in ("auth", "tls", "peerTls"):
        (rule,) = security["properties"][key]["x-kubernetes-validations"]
        assert rule["rule"].startswith("!self.enabled")
