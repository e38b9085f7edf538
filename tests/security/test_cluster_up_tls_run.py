"""``gannet cluster up --tls --auth-file`` as real processes, secured end to end: 2 broker groups
x 2 replicas, every client port TLS only, peers on mutual TLS, every request signed.

The ``gannet`` commands run in a shell that sources ``DATA_ROOT/client.env`` (as a user would),
with only their access key added; the official Python client (its own process: it reads
``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` from that file) sends over both groups and receives and
acks every message; plaintext and a TLS client trusting another CA are refused on client and
peer ports; each group's follower holds what its leader committed (replication over peer mTLS).
A second ``up`` reuses the certificates, renews the one that expires within 30 days (re-signed
to do so) from the same CA, and serves with it.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from e2e.groups.harness import free_base_port
from e2e.processes import wait_for
from gannet.node.cli.cluster import commands as cluster
from gannet.node.protocol import tls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.testing import small_stores

from . import certs
from .conftest import ADMIN, Signed, write_accounts

CLIENT = Path(__file__).with_name("tls_cluster_client.py")
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 40.0
TOPIC = "SecuredOrders"
GROUP = "SecuredWorkers"
MESSAGES = 8


def _clean_env() -> dict[str, str]:
    """This process's environment without any gannet or gRPC TLS setting of the caller."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("GANNET_", "GRPC_"))}


class Up:
    """One ``gannet cluster up`` process; its output in ``DATA_ROOT/../up-<n>.out``."""

    def __init__(self, argv: list[str], out: Path) -> None:
        self.out = out
        with out.open("wb") as sink:
            self.process = subprocess.Popen(
                argv, stdout=sink, stderr=subprocess.STDOUT, env=_clean_env()
            )

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_started(self) -> None:
        def started() -> bool:
            assert self.process.poll() is None, f"cluster up exited:\n{self.output()}"
            return "press Ctrl-C" in self.output()

        wait_for(started, START_TIMEOUT_S, "cluster up to start its members", interval_s=0.2)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Up]]:
    ups: list[Up] = []
    yield ups
    for up in ups:
        if up.process.poll() is None:
            up.stop()


def _pem_cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _served(endpoint: str, ca_file: Path) -> x509.Certificate:
    """The certificate a TLS handshake with ``endpoint`` (trusting ``ca_file``) is shown."""
    host, port = endpoint.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as wrapped,
    ):
        der = wrapped.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _admin(endpoint: str, ca_file: Path) -> admin_pb2_grpc.AdminStub:
    channel = grpc.secure_channel(endpoint, tls.channel_credentials(ca_file))
    return admin_pb2_grpc.AdminStub(grpc.intercept_channel(channel, Signed(*ADMIN)))  # type: ignore[no-untyped-call]


def _route_groups(endpoint: str, ca_file: Path, topic: str) -> set[str]:
    """The broker groups whose queues ``endpoint``'s route of ``topic`` lists (what a client
    that asks it sends to); empty while it does not know the topic."""
    channel = grpc.secure_channel(endpoint, tls.channel_credentials(ca_file))
    stub = service_pb2_grpc.MessagingServiceStub(grpc.intercept_channel(channel, Signed(*ADMIN)))
    request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
    try:
        reply = stub.QueryRoute(request, timeout=5)
    except grpc.RpcError:
        return set()
    finally:
        channel.close()
    return {q.broker.name for q in reply.message_queues}


def _status(endpoint: str, ca_file: Path) -> admin_pb2.RaftStatus | None:
    request = admin_pb2.GetRaftStatusRequest()
    try:
        reply: admin_pb2.RaftStatus = _admin(endpoint, ca_file).GetRaftStatus(request, timeout=2)
    except grpc.RpcError:
        return None  # still starting
    return reply


def _leaders(plans: tuple[cluster.GroupPlan, ...], ca_file: Path) -> list[str]:
    """Each group's leader (its client endpoint) once every member follows it and every group
    sees the others with no poll error."""
    found: list[str] = []

    def ready() -> bool:
        found.clear()
        for group in plans:
            states = [_status(e, ca_file) for e in group.client_endpoints()]
            leaders = {s.leader_client_endpoint for s in states if s is not None}
            if None in states or len(leaders) != 1 or "" in leaders:
                return False
            found.append(leaders.pop())
            try:
                view = _admin(found[-1], ca_file).GetClusterView(
                    admin_pb2.GetClusterViewRequest(), timeout=2
                )
            except grpc.RpcError:
                return False
            seen = {s.group.broker_name for s in view.groups if not s.last_error}
            if seen != {g.broker_name for g in plans}:
                return False
        return True

    wait_for(ready, START_TIMEOUT_S, "a leader in every group and the groups' views", 0.2)
    return found


def _refused(endpoint: str, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    channel = (
        grpc.secure_channel(endpoint, credentials)
        if credentials is not None
        else grpc.insecure_channel(endpoint)
    )
    stub = admin_pb2_grpc.AdminStub(grpc.intercept_channel(channel, Signed(*ADMIN)))  # type: ignore[no-untyped-call]
    with pytest.raises(grpc.RpcError) as refused:
        stub.GetRaftStatus(admin_pb2.GetRaftStatusRequest(), timeout=3)
    return refused.value.code()


def _sourced_env(env_file: Path) -> dict[str, str]:
    """What ``source env_file`` exports (the file is ``export K=V`` and ``unset`` lines)."""
    env = _clean_env()
    for line in env_file.read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = shlex.split(value)[0]
    return env


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_groups_of_two_run_secured_end_to_end(tmp_path: Path, started: list[Up]) -> None:
    users = write_accounts(tmp_path / "accounts.json")
    root = tmp_path / "cluster"
    base_port = free_base_port(2, seed=2211)
    argv = [
        sys.executable, "-m", "gannet.node.cli", "cluster", "up", "--tls", "--auth-file",
        str(users), "--groups", "2", "--replicas", "2", "--data-root", str(root),
        "--base-port", str(base_port), "--metrics-base-port", "0", "--flush", "async",
        *small_stores.BROKER_ARGS,
    ]  # fmt: skip
    started.append(Up(argv, tmp_path / "up-1.out"))
    started[0].wait_started()
    plans = cluster.plan_cluster(2, 2, "127.0.0.1", base_port, root)
    ca_file = root / "tls" / "ca.crt"
    leaders = _leaders(plans, ca_file)
    env_file = root / "client.env"
    assert f"source {env_file}" in started[0].output()

    described_file = tmp_path / "describe.json"
    shell = " && ".join(
        [
            f"source {shlex.quote(str(env_file))}",
            f"gannet topic create {TOPIC} --queues 2 --endpoint {leaders[0]}",
            f"gannet group create {GROUP} --endpoint {leaders[0]}",
            f"gannet topic describe {TOPIC} -o json > {shlex.quote(str(described_file))}",
        ]
    )
    env = {**_clean_env(), "GANNET_ACCESS_KEY": ADMIN[0], "GANNET_SECRET_KEY": ADMIN[1]}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    admin = subprocess.run(
        ["bash", "-c", shell], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert admin.returncode == 0, admin.stdout + admin.stderr
    described = json.loads(described_file.read_text())  # from broker-0's leader
    assert len(described["queues"]) == 2
    assert described["broker_groups"]["broker-1"]["error"] is None  # the write reached broker-1
    assert len(described["broker_groups"]["broker-1"]["queues"]) == 2

    # The client asks this member for the route: it lists broker-1's queues once this member's
    # poller has seen the topic there (within a poll interval of the create, 2 s).
    asked = plans[0].client_endpoints()[0]
    wait_for(lambda: _route_groups(asked, ca_file, TOPIC) == {"broker-0", "broker-1"}, 30,
             f"{asked}'s route of {TOPIC} to list both groups", 0.1)  # fmt: skip
    before = {e: _status(e, ca_file) for g in plans for e in g.client_endpoints()}
    client = subprocess.run(
        [
            sys.executable, str(CLIENT), "--endpoints", plans[0].client_endpoints()[0],
            "--topic", TOPIC, "--group", GROUP, "--access-key", ADMIN[0],
            "--secret-key", ADMIN[1], "--count", str(MESSAGES),
        ],
        env=_sourced_env(env_file), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert client.returncode == 0, client.stderr[-3000:]
    result = json.loads(client.stdout.splitlines()[-1])
    assert set(result["send_groups"]) == {"broker-0", "broker-1"}
    assert result["received"] == sorted(f"m{i}" for i in range(MESSAGES))

    for group in plans:  # each follower holds what its leader committed: peer mTLS replicates

        def caught_up(group: cluster.GroupPlan = group) -> bool:
            states = [_status(e, ca_file) for e in group.client_endpoints()]
            if None in states:
                return False
            ends = {(s.commit_offset, s.last_offset) for s in states if s is not None}
            return len(ends) == 1

        wait_for(caught_up, 30, f"{group.broker_name}'s members to hold the same log", 0.1)
        first = group.client_endpoints()[0]
        now, then = _status(first, ca_file), before[first]
        assert now is not None
        assert then is not None
        assert now.commit_offset > then.commit_offset  # the messages, Pop checkpoints, acks

    other = certs.authority(tmp_path, "other-ca")
    strangers = tls.channel_credentials(other.cert_file)
    member = plans[1].peers[1]
    for endpoint in (member.client_endpoint, member.peer_endpoint):
        assert _refused(endpoint, None) == grpc.StatusCode.UNAVAILABLE  # plaintext
        assert _refused(endpoint, strangers) == grpc.StatusCode.UNAVAILABLE  # another CA

    assert started[0].stop() == 0
    assert "cluster stopped" in started[0].output()
    tls_dir = root / "tls"
    assert len(list(tls_dir.iterdir())) == 2 + 2 * 4  # the CA and each member's cert and key
    ca_key = serialization.load_pem_private_key((tls_dir / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    soon = certs.resign(  # broker-1-node1 expires in 5 days: the second up renews it
        tls_dir / "broker-1-node1.crt", _pem_cert(ca_file), ca_key, days=5
    )
    made = {p.name: p.read_bytes() for p in tls_dir.iterdir()}

    started.append(Up(argv, tmp_path / "up-2.out"))
    started[1].wait_started()
    after = {p.name: p.read_bytes() for p in tls_dir.iterdir()}
    assert {n for n in made if after[n] != made[n]} == {"broker-1-node1.crt", "broker-1-node1.key"}
    renewed = _pem_cert(tls_dir / "broker-1-node1.crt")
    assert renewed.serial_number != soon.serial_number
    assert "TLS: renewed the certificate of broker-1-node1" in started[1].output()
    assert "TLS warning" not in started[1].output()
    wait_for(
        lambda: _status(plans[1].client_endpoints()[0], ca_file) is not None,
        START_TIMEOUT_S,
        "the renewed member of the second up to answer with the same CA",
        0.2,
    )
    assert _served(plans[1].client_endpoints()[0], ca_file) == renewed
    assert started[1].stop() == 0
