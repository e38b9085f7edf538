"""Peers authenticate each other; a stranger on the peer port cannot steer the group.

Unit checks of the shared-secret hello (:mod:`gannet.node.replication.peer_auth`), then real
3-broker groups in one process (``conftest``): with a secret, a process without it that opens
the peer port and sends a ``Heartbeat`` of term 1,000,000 as "node 1" (the attack of issue 23)
is refused ``UNAUTHENTICATED`` and counted, and the group's term does not move; a forged hello
(wrong secret) likewise. Without any authentication (``--insecure-peers``) the guard of the
driver still drops a lone ``TimeoutNow`` not sent by the leader and a term-jumping heartbeat
while the leader is alive, and counts them.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry

from gannet.node.metrics import failover_collecting
from gannet.node.protocol.gen import peer_pb2, peer_pb2_grpc
from gannet.node.replication import peer_auth

from .conftest import Cluster

pytestmark = pytest.mark.timeout(120)
SECRET = b"0123456789abcdef-cluster-secret"
GROUP = "gannet"


def test_hello_proves_the_sender_once_within_the_window() -> None:
    checker = peer_auth.HelloChecker(SECRET, GROUP, 2, [1, 2, 3])
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
        (peer_auth.hello(SECRET, GROUP, 9, 2, 10**9), "not_a_member", "not another member"),
        (peer_auth.hello(SECRET, GROUP, 2, 2, 10**9), "not_a_member", "not another member"),
        (peer_auth.hello(SECRET, GROUP, 1, 3, 10**9), "unauthenticated", "reached 2"),
        (peer_auth.hello(SECRET, GROUP, 1, 2, 10**9 - 60_000), "unauthenticated", "clocks"),
    ],
)
def test_hello_refusals_name_the_problem(value: str | None, reason: str, words: str) -> None:
    checker = peer_auth.HelloChecker(SECRET, GROUP, 2, [1, 2, 3])
    with pytest.raises(peer_auth.PeerAuthError, match=words) as refused:
        checker.check(value, now_ms=10**9)
    assert refused.value.reason == reason


def test_nonce_memory_is_bounded() -> None:
    checker = peer_auth.HelloChecker(SECRET, GROUP, 2, [1, 2], nonces_max=3)
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
    )
    registry = CollectorRegistry()
    registry.register(failover_collecting.FailoverCollector(lambda: figures))
    sample = registry.get_sample_value
    assert sample("gannet_raft_peer_messages_dropped_total", {"reason": "term_jump"}) == 4
    assert sample("gannet_raft_peer_messages_dropped_total", {"reason": "unauthenticated"}) == 5
    assert sample("gannet_forwarded_requests_total", {"method": "SendMessage"}) == 7
    assert sample("gannet_forward_rerouted_total") == 2
    assert sample("gannet_forward_unanswered_total") == 1
    silent = CollectorRegistry()
    silent.register(failover_collecting.FailoverCollector(lambda: None))
    assert sample("gannet_forward_held_total") == 3
    assert silent.get_sample_value("gannet_forward_held_total") is None
