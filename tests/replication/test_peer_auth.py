"""Peers authenticate each other; a stranger on the peer port cannot steer the group.

Unit checks of the shared-secret hello (:mod:`gannet.node.replication.peer_auth`), then real
3-broker groups in one process (``conftest``): with a secret, a process without it that opens
the peer port and sends a ``Heartbeat`` of term 1,000,000 as "node 1" (the attack of issue 23)
is refused ``UNAUTHENTICATED`` and counted, and the group's term does not move; a forged hello
(wrong secret) likewise. Without any authentication (``--insecure-peers``) the guard of the
driver still drops a lone ``TimeoutNow`` not sent by the leader and a term-jumping heartbeat
while the leader is alive, and counts them. A node outside the configuration (issue 34, seed
912: a member added while this one was cut off) that proves the secret and names its contact is
answered there — a real peer server as node 9 receives the answer — but never made a member;
a bad hello or a contact naming another id is still refused.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry

from gannet.node.metrics import failover_collecting
from gannet.node.protocol.gen import peer_pb2, peer_pb2_grpc
from gannet.node.raft.messages import ByteOffset, NodeId, PreVoteRequest, PreVoteResponse, Term
from gannet.node.replication import peer_auth, peer_wire, transport

from .conftest import Cluster, free_ports

pytestmark = pytest.mark.timeout(120)
SECRET = b"0123456789abcdef-cluster-secret"
GROUP = "gannet"


def test_hello_proves_the_sender_once_within_the_window() -> None:
    checker = peer_auth.HelloChecker(SECRET, GROUP, 2)
    now = 1_000_000_000
    value = peer_auth.hello(SECRET, GROUP, 1, 2, unix_ms=now)
    assert checker.check(value, now_ms=now + 1000) == 1
    with pytest.raises(peer_auth.PeerAuthError, match="already used") as replayed:
        checker.check(value, now_ms=now + 1000)
    assert replayed.value.reason == "replayed"


@pytest.mark.parametrize(
    ("value", "reason", "words"),
    [
        (None, "unauthenticated", "requires the peer secret"),
        ("1.2.3", "unauthenticated", "malformed"),
        (peer_auth.hello(b"another-secret-of-16+", GROUP, 1, 2, 10**9), "unauthenticated", "MAC"),
        (peer_auth.hello(SECRET, "other-group", 1, 2, 10**9), "unauthenticated", "MAC"),
        (peer_auth.hello(SECRET, GROUP, 2, 2, 10**9), "not_a_member", "own id 2"),
        (peer_auth.hello(b"another-secret-of-16+", GROUP, 9, 2, 10**9), "unauthenticated", "MAC"),
        (peer_auth.hello(SECRET, GROUP, 9, 3, 10**9), "unauthenticated", "reached 2"),
        (peer_auth.hello(SECRET, GROUP, 1, 3, 10**9), "unauthenticated", "reached 2"),
        (peer_auth.hello(SECRET, GROUP, 1, 2, 10**9 - 60_000), "unauthenticated", "clocks"),
    ],
)
def test_hello_refusals_name_the_problem(value: str | None, reason: str, words: str) -> None:
    checker = peer_auth.HelloChecker(SECRET, GROUP, 2)
    with pytest.raises(peer_auth.PeerAuthError, match=words) as refused:
        checker.check(value, now_ms=10**9)
    assert refused.value.reason == reason


def test_hello_proves_a_sender_outside_the_configuration() -> None:
    """Membership is not the hello's business: a node this node's configuration does not name
    yet (a member added while it was cut off, issue 34) proves itself with the secret."""
    checker = peer_auth.HelloChecker(SECRET, GROUP, 2)
    now = 10**9
    value = peer_auth.hello(SECRET, GROUP, 9, 2, unix_ms=now)
    assert checker.check(value, now_ms=now) == 9
    with pytest.raises(peer_auth.PeerAuthError, match="already used"):
        checker.check(value, now_ms=now)


def test_nonce_memory_is_bounded() -> None:
    checker = peer_auth.HelloChecker(SECRET, GROUP, 2, nonces_max=3)
    for _ in range(10):
        checker.check(peer_auth.hello(SECRET, GROUP, 1, 2, 10**9), now_ms=10**9)
    assert checker.nonces_held() == 3


def test_secret_file_must_be_long_enough(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("tiny\n")
    with pytest.raises(ValueError, match="at least 16"):
        peer_auth.load_secret(short)
    good = tmp_path / "good"
    good.write_text(" " + SECRET.decode() + "\n")
    assert peer_auth.load_secret(good) == SECRET


def _heartbeat(sender: int, target: int, term: int) -> peer_pb2.RaftMessage:
    raw = peer_pb2.RaftMessage(group=GROUP, sender=sender, target=target, term=term)
    raw.heartbeat.leader_commit = 0
    return raw


def _timeout_now(sender: int, target: int, term: int) -> peer_pb2.RaftMessage:
    raw = peer_pb2.RaftMessage(group=GROUP, sender=sender, target=target, term=term)
    raw.timeout_now.SetInParent()
    return raw


def _deliver(
    endpoint: str, messages: list[peer_pb2.RaftMessage], metadata: tuple[tuple[str, str], ...]
) -> grpc.StatusCode:
    with grpc.insecure_channel(endpoint) as channel:
        stub = peer_pb2_grpc.PeerStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.Deliver(iter(messages), metadata=metadata, timeout=5)
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            return code
    return grpc.StatusCode.OK


def _terms(cluster: Cluster) -> set[int]:
    terms = set()
    for node_id in cluster.nodes:
        core = cluster.raft(node_id).core
        assert core is not None
        terms.add(int(core.term))
    return terms


def test_a_stranger_without_the_secret_cannot_move_the_term(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3, peer_secret=SECRET)
    try:
        cluster.start_all()
        leader = cluster.leader()
        follower = next(i for i in cluster.nodes if i != leader)
        before = _terms(cluster)
        assert len(before) == 1
        config = cluster.config(follower).replication
        assert config is not None
        assert "0123456789" not in repr(config)  # the secret never reaches a log line
        endpoint = f"127.0.0.1:{cluster.peers[follower - 1].peer_port}"
        attack = [_heartbeat(leader, follower, 1_000_000), _timeout_now(leader, follower, 10**6)]
        assert _deliver(endpoint, attack, ()) == grpc.StatusCode.UNAUTHENTICATED
        forged = peer_auth.hello(b"a-guessed-secret-of-some-length", GROUP, leader, follower)
        forged_md = ((peer_auth.HEADER, forged),)
        assert _deliver(endpoint, attack, forged_md) == grpc.StatusCode.UNAUTHENTICATED
        refusals = cluster.raft(follower).transport.refusals.by_reason
        assert refusals["unauthenticated"] == 2
        # A hello made with the secret passes (the members' own path), for its sender only.
        good = ((peer_auth.HEADER, peer_auth.hello(SECRET, GROUP, leader, follower)),)
        other = next(i for i in cluster.nodes if i not in (leader, follower))
        spoofed = [_heartbeat(other, follower, 1_000_000)]
        assert _deliver(endpoint, spoofed, good) == grpc.StatusCode.OK
        assert refusals["sender_mismatch"] == 1
        assert _terms(cluster) == before
        assert cluster.leader() == leader
    finally:
        cluster.stop_all()


def test_lone_term_jump_and_spoofed_timeout_now_are_dropped_without_auth(
    cluster: Cluster,
) -> None:
    cluster.start_all()
    leader = cluster.leader()
    follower = next(i for i in cluster.nodes if i != leader)
    other = next(i for i in cluster.nodes if i not in (leader, follower))
    before = _terms(cluster)
    (term,) = before
    endpoint = f"127.0.0.1:{cluster.peers[follower - 1].peer_port}"
    attack = [
        _heartbeat(other, follower, 1_000_000),  # a member id, but not the live leader
        _timeout_now(other, follower, term),  # not from the leader
        _heartbeat(99, follower, 1_000_000),  # not a member at all
    ]
    assert _deliver(endpoint, attack, ()) == grpc.StatusCode.OK
    node = cluster.raft(follower)
    cluster.wait(follower, lambda: node.transport.refusals.total() >= 3)
    assert node.transport.refusals.by_reason == {
        "term_jump": 1,
        "timeout_now_not_from_leader": 1,
        "not_a_member": 1,
    }
    assert _terms(cluster) == before
    assert cluster.leader() == leader


def test_a_certificate_speaks_only_for_the_members_it_names() -> None:
    hosts = {1: "gannet-0.peers", 2: "gannet-1.peers", 3: "10.0.0.3"}
    assert peer_auth.members_named(["GANNET-1.peers"], hosts, None) == {2}
    assert peer_auth.members_named(["10.0.0.3", "x"], hosts, None) == {3}
    assert peer_auth.members_named(["intruder.example"], hosts, None) == frozenset()
    assert peer_auth.members_named(["gannet-peers"], hosts, "gannet-peers") == {1, 2, 3}


def test_refusals_and_forwarding_are_exported_as_counters() -> None:
    figures = failover_collecting.FailoverFigures(
        forwarded_by_method={"SendMessage": 7},
        rerouted_total=2,
        held_total=3,
        unanswered_total=1,
        peer_drops_by_reason={"term_jump": 4, "unauthenticated": 5},
        hedged_total=6,
    )
    registry = CollectorRegistry()
    registry.register(failover_collecting.FailoverCollector(lambda: figures))
    sample = registry.get_sample_value
    assert sample("gannet_raft_peer_messages_dropped_total", {"reason": "term_jump"}) == 4
    assert sample("gannet_raft_peer_messages_dropped_total", {"reason": "unauthenticated"}) == 5
    assert sample("gannet_forwarded_requests_total", {"method": "SendMessage"}) == 7
    assert sample("gannet_forward_rerouted_total") == 2
    assert sample("gannet_forward_unanswered_total") == 1
    assert sample("gannet_forward_hedged_total") == 6
    silent = CollectorRegistry()
    silent.register(failover_collecting.FailoverCollector(lambda: None))
    assert sample("gannet_forward_held_total") == 3
    assert silent.get_sample_value("gannet_forward_held_total") is None


class _StrangerPeer(peer_pb2_grpc.PeerServicer):
    """A real peer server for node 9 (in no member's configuration): every message delivered to
    it with a valid hello, and every hello it refused."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.received: queue.Queue[peer_pb2.RaftMessage] = queue.Queue(maxsize=1000)
        self._hellos = peer_auth.HelloChecker(SECRET, GROUP, node_id)

    def Deliver(self, request_iterator, context):
        metadata = dict(context.invocation_metadata())
        sender = self._hellos.check(metadata.get(peer_auth.HEADER))
        assert metadata.get(transport.CONTACT_HEADER, "").startswith(f"{sender}=127.0.0.1:")
        for raw in request_iterator:
            self.received.put_nowait(raw)
        return peer_pb2.DeliverSummary(messages_received=0)


@pytest.fixture
def stranger() -> Iterator[tuple[_StrangerPeer, str, grpc.Server]]:
    peer_port, client_port = free_ports(2)
    servicer = _StrangerPeer(9)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    peer_pb2_grpc.add_PeerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{peer_port}")
    server.start()
    yield servicer, f"9=127.0.0.1:{peer_port}/{client_port}", server
    server.stop(0)


def test_a_proven_stranger_is_answered_at_its_contact_and_never_made_a_member(
    tmp_path: Path, stranger: tuple[_StrangerPeer, str, grpc.Server]
) -> None:
    """Issue 34 (seed 912): a member whose configuration is behind must answer a node added
    since. A sender outside the configuration that proves the secret and names its contact is
    admitted and answered there; it is not a member (no status row, not streamed to as one);
    a bad hello, a contact naming another id, or none at all is still refused."""
    peer, contact, server = stranger
    cluster = Cluster(tmp_path, 3, peer_secret=SECRET)
    try:
        cluster.start_all()
        leader = cluster.leader()
        follower = next(i for i in cluster.nodes if i != leader)
        node = cluster.raft(follower)
        refusals = node.transport.refusals.by_reason
        before = _terms(cluster)
        (term,) = before
        endpoint = f"127.0.0.1:{cluster.peers[follower - 1].peer_port}"
        ask = PreVoteRequest(NodeId(9), NodeId(follower), Term(term + 1), Term(0), ByteOffset(0))
        raw = peer_wire.to_proto(ask, GROUP)

        def metadata(hello: str, named: str) -> tuple[tuple[str, str], ...]:
            return ((peer_auth.HEADER, hello), (transport.CONTACT_HEADER, named))

        # Refused: a hello under another secret; a good hello whose contact names node 8; none.
        forged = peer_auth.hello(b"a-guessed-secret-of-some-length", GROUP, 9, follower)
        assert (
            _deliver(endpoint, [raw], metadata(forged, contact)) == grpc.StatusCode.UNAUTHENTICATED
        )
        good = peer_auth.hello(SECRET, GROUP, 9, follower)
        other = contact.replace("9=", "8=", 1)
        assert _deliver(endpoint, [raw], metadata(good, other)) == grpc.StatusCode.OK
        no_contact = ((peer_auth.HEADER, peer_auth.hello(SECRET, GROUP, 9, follower)),)
        assert _deliver(endpoint, [raw], no_contact) == grpc.StatusCode.OK
        assert refusals.get("unauthenticated") == 1
        assert refusals.get("not_a_member") == 2
        assert node.transport.contacts() == frozenset()
        assert peer.received.empty()
        # Admitted: a valid hello and its own contact. The follower's core answers (refused: a
        # lease on a live leader, an empty log) and the answer reaches node 9 at its contact.
        good = peer_auth.hello(SECRET, GROUP, 9, follower)
        assert _deliver(endpoint, [raw], metadata(good, contact)) == grpc.StatusCode.OK
        answer = peer_wire.from_proto(peer.received.get(timeout=20))
        assert isinstance(answer, PreVoteResponse)
        assert (answer.sender, answer.target, answer.granted) == (follower, 9, False)
        assert refusals.get("not_a_member") == 2
        assert node.transport.contacts() == {9}
        assert {p.node_id for p in node.status().peers} == set(cluster.nodes) - {follower}
        assert 9 not in {p.node_id for p in node.member_table.specs()}
        # A pre-vote moves no term, and the stranger did not disturb the leader.
        assert _terms(cluster) == before
        assert cluster.leader() == leader
        # A stranger gone for good is forgotten after a few failed dials (no endless redials).
        server.stop(0)
        cluster.wait(follower, lambda: node.transport.contacts() == frozenset(), 30)
    finally:
        cluster.stop_all()
