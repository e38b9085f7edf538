"""The operator against a broker that requires signed requests and serves TLS only (kopf +
KMock, an in-process broker with ``auth_file`` and a certificate from a test CA).

The operator's default key (``gannet operator run --access-key``, the chart's admin Secret)
reconciles a Topic; a wrong key leaves it ``Ready=False reason=Unauthorized`` naming the refusal;
a GannetCluster's ``security.auth.operatorCredentialsSecret`` and its TLS Secret's ``ca.crt``
(read from the API) are used instead of the default.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
from click.testing import CliRunner

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.cli.root import main
from gannet.node.protocol import auth
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.operator import brokers
from tests.operator.conftest import NAMESPACE, Env, operator_env, ready
from tests.operator.stores import stack_store
from tests.security import certs

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]

ADMIN = ("ops-admin", "ops-admin-secret")
ACCOUNTS = {
    "accounts": [
        {
            "access_key": ADMIN[0],
            "secret_key": ADMIN[1],
            "allow": [{"actions": ["pub", "sub", "admin"], "topics": ["*"], "groups": ["*"]}],
        },
        {
            "access_key": "app",
            "secret_key": "app-secret",
            "allow": [{"actions": ["pub"], "topics": ["*"]}],
        },
    ]
}


class Pki:
    def __init__(self, directory: Path) -> None:
        self.ca = certs.authority(directory, "gannet-test-ca")
        self.server_files = self.ca.issue(directory, "broker", server=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[threads.BrokerThread]:
    """A broker requiring signatures (ACCOUNTS, the directory form) on a TLS-only port."""
    root = stack_store(tmp_path_factory.mktemp("secured-broker"))
    keys = tmp_path_factory.mktemp("keys")  # as a Secret mount: one file per entry
    (keys / "accounts.json").write_text(json.dumps(ACCOUNTS))
    config = BrokerConfig(
        store=StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH),
        listen_port=0,
        auth_file=keys,
        tls_cert=pki.server_files.cert_file,
        tls_key=pki.server_files.key_file,
    )
    running = threads.start(config)
    try:
        yield running
    finally:
        running.stop()
        if root.is_relative_to("/dev/shm"):
            shutil.rmtree(root, ignore_errors=True)


def describe(broker: threads.BrokerThread, pki: Pki, name: str) -> admin_pb2.DescribeTopicResponse:
    """The broker's topic, read over a signed TLS channel of our own."""
    security = auth.ClientSecurity(
        access_key=ADMIN[0], secret_key=ADMIN[1], tls_ca=pki.ca.cert_file
    )
    channel, raw = auth.client_channel(broker.endpoint, security)
    try:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        found: admin_pb2.DescribeTopicResponse = stub.DescribeTopic(
            admin_pb2.DescribeTopicRequest(name=name), timeout=10
        )
        return found
    finally:
        raw.close()


def ready_condition(obj: dict[str, Any] | None) -> dict[str, Any]:
    assert obj is not None
    conditions = obj["status"]["conditions"]
    found: dict[str, Any] = next(c for c in conditions if c["type"] == "Ready")
    return found


def test_operator_signs_and_uses_tls_with_its_default_key(
    secured: threads.BrokerThread, pki: Pki
) -> None:
    security = brokers.Security(
        access_key=ADMIN[0], secret_key=ADMIN[1], tls=True, ca_pem=pki.ca.cert_file.read_bytes()
    )

    async def scenario() -> None:
        async with operator_env(secured.endpoint, broker_security=security) as env:
            await env.apply("Topic", "signed-orders", {"cluster": "main", "queues": 3})
            obj = await env.wait_for("Topic", "signed-orders", ready)
            assert obj is not None
            assert obj["status"]["queues"] == 3

    asyncio.run(scenario())
    found = describe(secured, pki, "signed-orders")
    assert found.topic.write_queue_nums == 3


@pytest.mark.parametrize(
    ("key", "refusal"),
    [
        ((ADMIN[0], "not-the-secret"), "UNAUTHENTICATED"),
        (("app", "app-secret"), "PERMISSION_DENIED"),  # signed, but no admin right
    ],
    ids=["wrong-secret", "no-admin-right"],
)
def test_a_refused_key_leaves_the_topic_unauthorized(
    secured: threads.BrokerThread, pki: Pki, key: tuple[str, str], refusal: str
) -> None:
    security = brokers.Security(
        access_key=key[0], secret_key=key[1], tls=True, ca_pem=pki.ca.cert_file.read_bytes()
    )

    async def scenario() -> None:
        async with operator_env(secured.endpoint, broker_security=security) as env:
            await env.apply("Topic", "refused", {"cluster": "main"})
            obj = await env.wait_for(
                "Topic", "refused", lambda o: ready(o, status="False", reason="Unauthorized")
            )
            message = ready_condition(obj)["message"]
            assert refusal in message, message
            assert "operatorCredentialsSecret" in message

    asyncio.run(scenario())


def secret(name: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


async def secured_cluster(env: Env, operator_secret: str) -> None:
    await env.apply(
        "GannetCluster",
        "main",
        {
            "replicas": 1,
            "security": {
                "auth": {
                    "enabled": True,
                    "credentialsSecret": "gannet-keys",
                    "operatorCredentialsSecret": operator_secret,
                },
                "tls": {"enabled": True, "secretName": "main-tls"},
            },
        },
    )


def test_cluster_secrets_override_the_default(secured: threads.BrokerThread, pki: Pki) -> None:
    """No default key or TLS: the GannetCluster's Secrets alone get the operator in."""

    async def scenario() -> None:
        async with operator_env(secured.endpoint) as env:
            await env.kube.apply(
                secret("ops", {"accessKey": ADMIN[0].encode(), "secretKey": ADMIN[1].encode()})
            )
            await env.kube.apply(secret("main-tls", {"ca.crt": pki.ca.cert_file.read_bytes()}))
            await secured_cluster(env, "ops")
            await env.apply("Topic", "from-secret", {"cluster": "main", "queues": 2})
            obj = await env.wait_for("Topic", "from-secret", ready)
            assert obj is not None
            assert obj["status"]["queues"] == 2
            # The broker StatefulSet mounts the Secrets and passes the flags (the Topic's pass
            # may finish before the GannetCluster's: wait for the latter's status).
            await env.wait_for(
                "GannetCluster",
                "main",
                lambda o: ((o or {}).get("status") or {}).get("observedGeneration") == 1,
            )
            sts = await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, "main")
            assert sts is not None
            args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
            assert "--auth-file" in args
            assert "--tls-cert" in args
            # The broker groups' cluster key: created by the operator, owned by the cluster,
            # projected into the auth directory and handed to the member as env.
            cluster = await env.get("GannetCluster", "main")
            key = await env.kube.get("v1", "Secret", NAMESPACE, "main-cluster-key")
            assert cluster is not None
            assert key is not None
            assert key["metadata"]["ownerReferences"][0]["uid"] == cluster["metadata"]["uid"]
            env_names = [e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]]
            assert "GANNET_CLUSTER_ACCESS_KEY" in env_names
            assert "GANNET_CLUSTER_TLS_CA" in env_names

    asyncio.run(scenario())
    assert describe(secured, pki, "from-secret").topic.write_queue_nums == 2


def test_a_missing_operator_secret_is_named(secured: threads.BrokerThread) -> None:
    async def scenario() -> None:
        async with operator_env(secured.endpoint) as env:
            await secured_cluster(env, "absent")
            await env.apply("Topic", "orphan", {"cluster": "main"})
            obj = await env.wait_for(
                "Topic", "orphan", lambda o: ready(o, status="False", reason="Unauthorized")
            )
            message = ready_condition(obj)["message"]
            assert "operatorCredentialsSecret absent" in message
            assert "does not exist" in message

    asyncio.run(scenario())


def test_cli_refuses_half_a_key() -> None:
    result = CliRunner().invoke(
        main, ["operator", "run", "--access-key", "a"], env={"GANNET_SECRET_KEY": ""}
    )
    assert result.exit_code == 2
    assert "both its access key and its secret key" in result.output


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c["type"] == type_), None)


CERT_MANAGED = {
    "replicas": 3,
    "security": {
        "tls": {"enabled": True, "certManager": {"issuerRef": {"name": "gannet-ca"}}},
        "peerTls": {"enabled": True, "certManager": {"issuerRef": {"name": "gannet-ca"}}},
    },
}


def test_cert_manager_certificates_are_created(broker: threads.BrokerThread) -> None:
    async def scenario() -> None:
        async with operator_env(broker.endpoint) as env:
            env.api.resources["cert-manager.io/v1/certificates"] = kmock.ResourceInfo(
                kind="Certificate", namespaced=True, verbs={"get", "list", "create", "patch"}
            )
            # The client TLS Secret cert-manager would fill, with the CA the operator trusts.
            await env.apply("GannetCluster", "main", CERT_MANAGED)
            cluster = await env.wait_for(
                "GannetCluster", "main", lambda o: condition(o, "Certificates") is not None
            )
            found = condition(cluster, "Certificates")
            assert found is not None
            assert found["status"] == "True", found
            for name in ("main-client-tls", "main-peer-tls"):
                certificate = await env.kube.get(
                    "cert-manager.io/v1", "Certificate", NAMESPACE, name
                )
                assert certificate is not None, name
                assert certificate["spec"]["secretName"] == name
                assert "main-2.main-peers.demo.svc" in certificate["spec"]["dnsNames"]
            sts = await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, "main")
            assert sts is not None
            volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
            assert volumes["peer-tls"]["secret"]["secretName"] == "main-peer-tls"

    asyncio.run(scenario())


def test_missing_cert_manager_crd_is_a_condition(broker: threads.BrokerThread) -> None:
    async def scenario() -> None:
        async with operator_env(broker.endpoint) as env:  # no certificates resource served
            await env.apply("GannetCluster", "main", CERT_MANAGED)
            cluster = await env.wait_for(
                "GannetCluster", "main", lambda o: condition(o, "Certificates") is not None
            )
            found = condition(cluster, "Certificates")
            assert found is not None
            assert (found["status"], found["reason"]) == ("False", "CertManagerUnavailable")
            assert "certificates" in found["message"]
            assert await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, "main") is not None

    asyncio.run(scenario())


def test_cli_refuses_a_ca_that_is_not_pem(tmp_path: Path) -> None:
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("hello")
    result = CliRunner().invoke(main, ["operator", "run", "--broker-tls-ca", str(not_pem)])
    assert result.exit_code == 2
    assert "not PEM" in result.output


def test_cli_help_names_the_security_options() -> None:
    result = CliRunner().invoke(main, ["operator", "run", "--help"])
    assert result.exit_code == 0
    for option in ("--access-key", "--secret-key", "--broker-tls", "--broker-tls-ca"):
        assert option in result.output
