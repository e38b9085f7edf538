"""Mutual TLS between Raft peers (``ReplicationConfig.peer_tls``): a 3-node in-process group
whose members hold certificates of one cluster CA elects and replicates byte for byte; a member
whose certificate comes from another CA is refused at the TLS handshake in both directions,
receives nothing and never counts toward a commit."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol import tls
from gannet.node.protocol.gen import admin_pb2, peer_pb2, peer_pb2_grpc
from gannet.node.raft.messages import ByteOffset, NodeId, PreVoteRequest, Term
from gannet.node.replication import peer_resolving, peer_wire, transport
from gannet.node.replication.config import PeerTls
from tests.replication.conftest import Cluster, free_ports

from . import certs

pytestmark = pytest.mark.timeout(90)
HANDSHAKE_TIMEOUT_S = 2.0


class TlsCluster(Cluster):
    """A :class:`Cluster` whose members use peer mTLS; ``rogue`` members hold certificates
    of a CA the others do not trust (and trust only that CA themselves)."""

    def __init__(self, root: Path, size: int, rogue: frozenset[int] = frozenset()) -> None:
        super().__init__(root, size)
        self.cluster_ca = certs.authority(root, "cluster-ca")
        self.rogue_ca = certs.authority(root, "rogue-ca")
        self.peer_tls: dict[int, PeerTls] = {}
        for peer in self.peers:
            ca = self.rogue_ca if peer.node_id in rogue else self.cluster_ca
            issued = ca.issue(root, f"node{peer.node_id}", server=True, client=True)
            self.peer_tls[peer.node_id] = PeerTls(issued.cert_file, issued.key_file, ca.cert_file)

    def config(self, node_id: int) -> BrokerConfig:
        base = super().config(node_id)
        assert base.replication is not None
        replication = dataclasses.replace(base.replication, peer_tls=self.peer_tls[node_id])
        return dataclasses.replace(base, replication=replication)


@pytest.fixture
def tls_cluster(tmp_path: Path) -> Iterator[TlsCluster]:
    made = TlsCluster(tmp_path, 3)
    yield made
    made.stop_all()


@pytest.fixture
def rogue_cluster(tmp_path: Path) -> Iterator[TlsCluster]:
    made = TlsCluster(tmp_path, 3, rogue=frozenset({3}))
    yield made
    made.stop_all()


def _create_topic(cluster: Cluster, node_id: int, name: str, timeout_s: float = 10) -> None:
    request = admin_pb2.CreateTopicRequest(name=name, queue_nums=2)
    cluster.admin(node_id, lambda stub: stub.CreateTopic(request, timeout=timeout_s))


def _deliver_with(
    endpoint: str,
    credentials: grpc.ChannelCredentials | None,
    message: peer_pb2.RaftMessage | None = None,
    metadata: tuple[tuple[str, str], ...] = (),
) -> grpc.StatusCode:
    """Open a Deliver stream to a member's peer port; the status it ends with."""
    if credentials is None:
        channel = grpc.insecure_channel(endpoint)
    else:
        channel = grpc.secure_channel(endpoint, credentials)
    with channel:
        stub = peer_pb2_grpc.PeerStub(channel)  # type: ignore[no-untyped-call]
        if message is None:
            message = peer_pb2.RaftMessage(group="gannet", sender=9, target=1)
        try:
            stub.Deliver(iter([message]), metadata=metadata, timeout=HANDSHAKE_TIMEOUT_S)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_peer_mtls_group_elects_and_replicates(tls_cluster: TlsCluster) -> None:
    tls_cluster.start_all()
    leader = tls_cluster.leader()
    tls_cluster.create_topic("PeerTls")  # committed on a majority, applied everywhere
    end = tls_cluster.last_offset(leader)
    tls_cluster.wait_replicated(end)
    logs = {i: tls_cluster.commitlog_bytes(i, end) for i in tls_cluster.nodes}
    assert all(data == logs[leader] for data in logs.values())
    for node_id in tls_cluster.nodes:
        assert tls_cluster.raft(node_id).transport.received_total > 0
    # The peer port itself: a caller with the cluster CA but no client certificate, a caller
    # with a certificate of another CA, and a plaintext caller all fail the handshake.
    endpoint = tls_cluster.peers[leader - 1].peer_endpoint
    ca = tls_cluster.cluster_ca.cert_file
    stranger = tls_cluster.rogue_ca.issue(tls_cluster.root, "stranger", server=True, client=True)
    no_cert = tls.channel_credentials(ca)
    foreign_cert = tls.channel_credentials(ca, stranger.cert_file, stranger.key_file)
    for credentials in (no_cert, foreign_cert, None):
        assert _deliver_with(endpoint, credentials) == grpc.StatusCode.UNAVAILABLE
    member = tls_cluster.peer_tls[(leader % 3) + 1]
    own = tls.channel_credentials(ca, member.cert_file, member.key_file)
    # A member's certificate passes the handshake; the bogus message is refused by the servicer.
    assert _deliver_with(endpoint, own) == grpc.StatusCode.FAILED_PRECONDITION
    # A certificate of the cluster's own CA that names no member (its CN and SANs name none of
    # the members' hosts) passes the handshake but speaks for nobody: refused and counted.
    intruder = tls_cluster.cluster_ca.issue(
        tls_cluster.root, "intruder", server=True, client=True, dns_names=("intruder.example",)
    )
    stranger_of_ours = tls.channel_credentials(ca, intruder.cert_file, intruder.key_file)
    terms = {tls_cluster.raft(i).status().term for i in tls_cluster.nodes}
    assert _deliver_with(endpoint, stranger_of_ours) == grpc.StatusCode.UNAUTHENTICATED
    refusals = tls_cluster.raft(leader).transport.refusals.by_reason
    assert refusals.get("certificate_names_no_member", 0) >= 1, refusals
    assert {tls_cluster.raft(i).status().term for i in tls_cluster.nodes} == terms
    # A node outside the configuration (issue 34: a member added while this one was cut off)
    # is proven by a cluster certificate naming the host of the contact its call names: it is
    # answered there, never made a member. A contact whose host the certificate does not name
    # proves nothing.
    (term,) = terms
    ask = PreVoteRequest(NodeId(9), NodeId(leader), Term(term + 1), Term(0), ByteOffset(0))
    raw = peer_wire.to_proto(ask, "gannet")
    (port,) = free_ports(1)
    unnamed = ((transport.CONTACT_HEADER, f"9=127.0.0.1:{port}/{port}"),)
    refused = refusals["certificate_names_no_member"]
    assert (
        _deliver_with(endpoint, stranger_of_ours, raw, unnamed) == grpc.StatusCode.UNAUTHENTICATED
    )
    assert refusals["certificate_names_no_member"] == refused + 1
    named = ((transport.CONTACT_HEADER, f"9=intruder.example:{port}/{port}"),)
    assert _deliver_with(endpoint, stranger_of_ours, raw, named) == grpc.StatusCode.OK
    assert tls_cluster.raft(leader).transport.contacts() == {9}
    assert 9 not in {p.node_id for p in tls_cluster.raft(leader).status().peers}
    assert {tls_cluster.raft(i).status().term for i in tls_cluster.nodes} == terms


def test_member_with_another_cas_certificate_cannot_join(rogue_cluster: TlsCluster) -> None:
    rogue_cluster.start_all()
    leader = rogue_cluster.leader(among=[1, 2])
    assert leader in (1, 2)
    _create_topic(rogue_cluster, leader, "WithoutRogue")  # 1 and 2 are a majority of 3
    rogue = rogue_cluster.raft(3)
    assert rogue.transport.received_total == 0
    assert rogue_cluster.last_offset(3) == 0
    assert rogue.leader() is None or rogue.leader() != rogue_cluster.peers[2]
    assert "WithoutRogue" not in rogue_cluster.nodes[3].broker.store.topic_configs
    status = rogue_cluster.raft(leader).status()
    follower3 = next(p for p in status.peers if p.node_id == 3)
    assert not follower3.reachable
    # Without the other cluster member, the rogue node does not make a majority: nothing
    # commits any more.
    other = 2 if leader == 1 else 1
    committed = rogue_cluster.commit_offset(leader)
    rogue_cluster.crash(other)
    with pytest.raises(grpc.RpcError) as refused:
        _create_topic(rogue_cluster, leader, "NeedsAMajority", timeout_s=3)
    # The leader steps down (it hears from no majority) or the commit times out.
    assert refused.value.code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert rogue_cluster.commit_offset(leader) == committed
    assert rogue_cluster.last_offset(3) == 0


def test_members_named_by_dns_dial_the_address_and_check_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Members written by host name: each dials the address the resolver found, and the
    handshake checks the *name* (every certificate names only its member's host, no address)."""
    named = TlsCluster(tmp_path, 3)
    named.peers = tuple(
        dataclasses.replace(p, host=f"gannet-{p.node_id}.peers.tls-test.svc") for p in named.peers
    )
    for peer in named.peers:
        issued = named.cluster_ca.issue(
            tmp_path, f"named{peer.node_id}", server=True, client=True, dns_names=(peer.host,)
        )
        named.peer_tls[peer.node_id] = PeerTls(
            issued.cert_file, issued.key_file, named.cluster_ca.cert_file
        )
    hosts = {p.host for p in named.peers}

    async def lookup(
        self: peer_resolving.PeerResolver, host: str, port: int, family: socket.AddressFamily
    ) -> list[str]:
        return ["127.0.0.1"] if host in hosts and family == socket.AF_INET else []

    monkeypatch.setattr(peer_resolving.PeerResolver, "_getaddrinfo", lookup)
    try:
        named.start_all()
        leader = named.leader()
        named.create_topic("PeerTlsNamed")
        assert named.raft(leader).transport.resolver.figures.family == {
            p.node_id: "ipv4" for p in named.peers if p.node_id != leader
        }
        assert not named.raft(leader).transport.refusals.by_reason
    finally:
        named.stop_all()
