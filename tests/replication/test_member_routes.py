"""Routes of a Raft group list every member (``routes.member_endpoints``), the leader first.

Pure: a stand-in for the replication node answers ``leader()``, ``route_members()`` (the
voters of the configuration in force) and ``config``; the in-process
cluster test (``test_cluster``) checks the same through a real QueryRoute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from rocketmq.grpc_protocol import definition_pb2

from gannet.node.api import routes
from gannet.node.replication.config import PeerSpec, ReplicationConfig
from gannet.node.replication.driver import ReplicationNode


@dataclass
class _Core:
    heard: frozenset[int]

    def responsive_followers(self) -> frozenset[int]:
        return self.heard


@dataclass
class _Node:
    config: ReplicationConfig
    leader_id: int | None
    core: _Core | None = None

    learners: frozenset[int] = frozenset()

    def leader(self) -> PeerSpec | None:
        return None if self.leader_id is None else self.config.peer(self.leader_id)

    def route_members(self) -> list[PeerSpec]:
        """The voters of the configuration in force (here: --peers less the learners)."""
        return [p for p in self.config.peers if p.node_id not in self.learners]


def _node(
    hosts: list[str], leader_id: int | None, me: int = 1, heard: frozenset[int] | None = None
) -> ReplicationNode:
    peers = tuple(PeerSpec(i + 1, host, 9000 + i, 8000 + i) for i, host in enumerate(hosts))
    every = frozenset(p.node_id for p in peers)
    core = _Core(every if heard is None else heard)
    return cast(ReplicationNode, _Node(ReplicationConfig(node_id=me, peers=peers), leader_id, core))


def test_routes_follow_the_live_configuration_and_leave_out_learners() -> None:
    node = _node(["10.0.0.1", "10.0.0.2", "10.0.0.3"], leader_id=1)
    node.learners = frozenset({3})  # type: ignore[attr-defined]
    found = routes.member_endpoints(node, definition_pb2.Endpoints())
    assert _pairs(found) == [("10.0.0.1", 8000), ("10.0.0.2", 8001)]


def _pairs(endpoints: definition_pb2.Endpoints) -> list[tuple[str, int]]:
    return [(a.host, a.port) for a in endpoints.addresses]


def test_every_member_is_listed_leader_first_then_in_peers_order() -> None:
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    found = routes.member_endpoints(_node(hosts, leader_id=3), definition_pb2.Endpoints())
    assert found.scheme == definition_pb2.IPv4
    assert _pairs(found) == [("10.0.0.3", 8002), ("10.0.0.1", 8000), ("10.0.0.2", 8001)]


def test_no_known_leader_lists_every_other_member() -> None:
    hosts = ["::1", "::2", "::3"]
    found = routes.member_endpoints(_node(hosts, None, me=2), definition_pb2.Endpoints())
    assert found.scheme == definition_pb2.IPv6
    assert _pairs(found) == [("::1", 8000), ("::3", 8002)]


def test_the_leader_leaves_out_followers_it_does_not_hear() -> None:
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    node = _node(hosts, leader_id=1, heard=frozenset({3}))
    found = routes.member_endpoints(node, definition_pb2.Endpoints())
    assert _pairs(found) == [("10.0.0.1", 8000), ("10.0.0.3", 8002)]


def test_dns_members_publish_one_address_the_clients_own_or_the_leaders() -> None:
    hosts = ["gannet-0.gannet", "gannet-1.gannet", "gannet-2.gannet"]
    service = routes.endpoints_of("gannet.ns.svc", 8081)
    assert routes.member_endpoints(_node(hosts, leader_id=2), service) == service
    fallback = routes.member_endpoints(_node(hosts, leader_id=2), definition_pb2.Endpoints())
    assert _pairs(fallback) == [("gannet-1.gannet", 8001)]
    assert fallback.scheme == definition_pb2.DOMAIN_NAME
    alone = routes.member_endpoints(_node(hosts, leader_id=None, me=3), definition_pb2.Endpoints())
    assert _pairs(alone) == [("gannet-2.gannet", 8002)]


def test_a_tls_client_port_publishes_one_address() -> None:
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    used = routes.endpoints_of("10.0.0.2", 8001)
    assert routes.member_endpoints(_node(hosts, leader_id=3), used, tls=True) == used
    alone = routes.member_endpoints(_node(hosts, leader_id=3), definition_pb2.Endpoints(), tls=True)
    assert _pairs(alone) == [("10.0.0.3", 8002)]
