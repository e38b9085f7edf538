"""A group whose members are named by host names that resolve only through a 5 s resolver
elects a leader and replicates (the issue: every member sat as a pre-candidate at term 0 when
the lookup counted against the 2 s connect deadline).

* The real one: three ``gannet broker run`` processes, each in a private mount namespace
  (``unshare --mount``) whose ``/etc/resolv.conf`` names :class:`SlowDns` on a 127.53.x.y
  address and whose ``/etc/hosts`` does not name the members, so glibc's ``getaddrinfo`` in
  each broker asks that server and waits 5 s per lookup (AAAA answered empty, 5 s late too).
  Skipped where mount namespaces cannot be made (not root, no ``unshare``).
* The seam: the same in one process (:class:`Cluster`, broker threads) with the system lookup
  replaced by one that answers IPv4 after 5 s and IPv6 never.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from e2e import processes
from gannet.node.cli.cluster.commands import broker_argv, ensure_secret
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.replication import peer_resolving
from gannet.node.replication.config import PeerSpec
from gannet.node.testing import small_stores
from gannet.node.testing.slow_dns import SlowDns, resolv_conf

from .conftest import Cluster, free_ports

DELAY_S = 5.0
DEADLINE_S = 90.0
TOPIC = "SlowResolver"
CLIENT_ID = (("x-mq-client-id", "tests@1@0@slow-resolver"),)
DOMAIN = "gannet-peers.resolver-test.svc.cluster.local"
# In the namespace: resolv.conf and hosts bind-mounted over the machine's, then the broker.
NAMESPACED = (
    'mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
)


def _namespaces_usable() -> str | None:
    """Why private mount namespaces cannot be used here (None: they can)."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    if os.geteuid() != 0:
        return "not root: cannot bind-mount /etc/resolv.conf in a mount namespace"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"],
        capture_output=True,
        check=False,
        timeout=30,
    )
    return None if probe.returncode == 0 else f"unshare --mount failed: {probe.stderr!r}"


def _slow_dns(records: Mapping[str, tuple[str, ...]]) -> SlowDns:
    """A :class:`SlowDns` on port 53 of a random 127.53.x.y (a free one)."""
    chooser = random.Random()
    for _ in range(20):
        host = f"127.53.{chooser.randrange(256)}.{chooser.randrange(1, 255)}"
        try:
            return SlowDns(host, records, delay_s=DELAY_S).start()
        except OSError:
            continue
    raise AssertionError("no free 127.53.x.y:53 for the slow DNS server")


class NamedGroup:
    """Three broker processes whose --peers name each other by DNS names only."""

    def __init__(self, root: Path, dns: SlowDns) -> None:
        ports = free_ports(9)
        self.root = root
        self.local = tuple(
            PeerSpec(i + 1, "127.0.0.1", ports[3 * i], ports[3 * i + 1]) for i in range(3)
        )
        self.metrics_ports = [ports[3 * i + 2] for i in range(3)]
        self.named = tuple(
            PeerSpec(p.node_id, f"gannet-{p.node_id - 1}.{DOMAIN}", p.peer_port, p.client_port)
            for p in self.local
        )
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        (root / "resolv.conf").write_text(resolv_conf(str(dns.address[0])))
        (root / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")

    def start(self) -> None:
        ensure_secret(self.root)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        mounts = [str(self.root / "resolv.conf"), str(self.root / "hosts")]
        for peer, port in zip(self.local, self.metrics_ports, strict=True):
            argv = broker_argv(
                peer,
                self.local,
                self.root,
                "sync",
                port,
                file_size_mb=small_stores.FILE_SIZE_MB,
                index_hash_slots=small_stores.INDEX_HASH_SLOTS,
            )
            argv[argv.index("--peers") + 1] = ",".join(str(p) for p in self.named)
            wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c", NAMESPACED]
            with self.log_path(peer.node_id).open("ab") as log:
                self.processes[peer.node_id] = subprocess.Popen(
                    [*wrapped, "sh", *mounts, *argv],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )

    def log_path(self, node_id: int) -> Path:
        return self.root / f"node{node_id}.log"

    def status(self, node_id: int) -> admin_pb2.RaftStatus | None:
        with grpc.insecure_channel(self.local[node_id - 1].client_endpoint) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            try:
                reply: admin_pb2.RaftStatus = stub.GetRaftStatus(
                    admin_pb2.GetRaftStatusRequest(), timeout=2
                )
            except grpc.RpcError:
                return None
            return reply

    def leader(self) -> int:
        """Poll the members (other processes: nothing to await) until they name one leader."""
        deadline = time.monotonic() + DEADLINE_S
        pause = threading.Event()
        seen: list[admin_pb2.RaftStatus | None] = []
        while time.monotonic() < deadline:
            seen = [self.status(i) for i in (1, 2, 3)]
            leaders = {s.leader_id for s in seen if s is not None}
            if len(leaders) == 1 and all(s is not None for s in seen):
                leader = int(leaders.pop() or 0)
                if leader in (1, 2, 3):
                    return leader
            for node_id, process in self.processes.items():
                assert process.poll() is None, f"node {node_id} died: {self.tail(node_id)}"
            pause.wait(0.2)
        terms = [(s.role, s.term) if s is not None else None for s in seen]
        raise AssertionError(f"no leader within {DEADLINE_S} s: {terms}; {self.tail(1)}")

    def tail(self, node_id: int) -> str:
        return self.log_path(node_id).read_text(errors="replace")[-3000:]

    def metrics(self, node_id: int) -> str:
        url = f"http://127.0.0.1:{self.metrics_ports[node_id - 1]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            return str(reply.read().decode())

    def stop(self) -> None:
        processes.stop_all(self.processes.values(), timeout_s=30)


@pytest.fixture
def named_group(tmp_path: Path) -> Iterator[tuple[NamedGroup, SlowDns]]:
    why = _namespaces_usable()
    if why is not None:
        pytest.skip(f"{why}; test_group_elects_behind_a_slow_resolver_seam covers the seam")
    records = {f"gannet-{i}.{DOMAIN}": ("127.0.0.1",) for i in range(3)}
    dns = _slow_dns(records)
    group = NamedGroup(tmp_path, dns)
    try:
        group.start()
        yield group, dns
    finally:
        group.stop()
        dns.stop()


def _send(endpoint: str, key: str) -> None:
    msg = definition_pb2.Message(body=key.encode())
    msg.topic.name = TOPIC
    msg.system_properties.message_id = "0102FC000000013E000B13F97D00000001"
    msg.system_properties.body_encoding = definition_pb2.IDENTITY
    msg.system_properties.keys.append(key)
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        reply = stub.SendMessage(
            service_pb2.SendMessageRequest(messages=[msg]), metadata=CLIENT_ID, timeout=30
        )
    assert reply.status.code == definition_pb2.OK, reply.status


def _stored(endpoint: str, key: str) -> bool:
    with grpc.insecure_channel(endpoint) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        request = admin_pb2.QueryMessageRequest(topic=TOPIC, key=key)
        return bool(admin.QueryMessage(request, timeout=10).messages)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_group_named_by_dns_elects_and_replicates_behind_a_5s_resolver(
    named_group: tuple[NamedGroup, SlowDns],
) -> None:
    group, dns = named_group
    started = time.monotonic()
    leader = group.leader()
    elected_s = time.monotonic() - started
    leader_endpoint = group.local[leader - 1].client_endpoint
    with grpc.insecure_channel(leader_endpoint) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=2), timeout=30)
    _send(leader_endpoint, "behind-a-slow-resolver")
    pause = threading.Event()
    for peer in group.local:
        deadline = time.monotonic() + DEADLINE_S
        while not _stored(peer.client_endpoint, "behind-a-slow-resolver"):
            assert time.monotonic() < deadline, f"node {peer.node_id} lacks the message"
            pause.wait(0.2)
    print(f"leader {leader} after {elected_s:.1f} s; DNS queries {dict(dns.queries)}")
    # The brokers' lookups went through the slow server, and took its time.
    assert dns.queries["A"] >= 6, dns.queries
    text = group.metrics(leader)
    other = str(next(p.node_id for p in group.local if p.node_id != leader))
    count = _sample(text, "gannet_peer_resolve_seconds_count", peer=other)
    total = _sample(text, "gannet_peer_resolve_seconds_sum", peer=other)
    assert count is not None, text
    assert total is not None, text
    assert total / count >= DELAY_S * 0.9
    assert _sample(text, "gannet_peer_address_family", peer=other, family="ipv4") == 1.0
    assert _sample(text, "gannet_peer_resolve_failures_total", peer=other) == 0.0
    promtool = shutil.which("promtool")
    if promtool is not None:  # the families are clean exposition (make unit installs promtool)
        linted = subprocess.run(
            [promtool, "check", "metrics"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert linted.returncode == 0, linted.stdout + linted.stderr
    slow = r"resolving peer \S+ \(\S+\) took \d+\.\d s: ipv4 answered first"
    assert re.search(slow, group.tail(leader)), group.tail(leader)


def _sample(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return None


def test_group_elects_behind_a_slow_resolver_seam(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process: names resolve only through a lookup that answers IPv4 after 5 s and IPv6
    never; the group elects and replicates a topic."""
    names: dict[str, str] = {}
    asked = threading.Event()

    async def slow_lookup(
        self: peer_resolving.PeerResolver, host: str, port: int, family: socket.AddressFamily
    ) -> list[str]:
        asked.set()
        if family != socket.AF_INET:
            await asyncio.Event().wait()  # never answers
        await asyncio.sleep(DELAY_S)
        return [names[host]]

    monkeypatch.setattr(peer_resolving.PeerResolver, "_getaddrinfo", slow_lookup)
    cluster = Cluster(tmp_path, 3)
    cluster.peers = tuple(
        PeerSpec(p.node_id, f"gannet-{p.node_id - 1}.{DOMAIN}", p.peer_port, p.client_port)
        for p in cluster.peers
    )
    names.update({p.host: "127.0.0.1" for p in cluster.peers})
    try:
        cluster.start_all()
        leader = cluster.leader(timeout_s=DEADLINE_S)
        assert asked.is_set()
        cluster.create_topic(TOPIC)
        figures = cluster.raft(leader).transport.resolver.figures
        assert set(figures.family.values()) == {"ipv4"}
        assert all(s >= DELAY_S for s in figures.seconds_sum.values()), figures.seconds_sum
    finally:
        cluster.stop_all()
