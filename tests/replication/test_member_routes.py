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


def test_a_client_that_cannot_dial_a_list_gets_one_address() -> None:
    """The Node.js client (``x-mq-language: HTTP``) turns a list into a DNS name it cannot
    resolve; Python and Java dial the list; a client that names no language gets one address."""
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    used = routes.endpoints_of("10.0.0.2", 8001)
    node = _node(hosts, leader_id=3)
    assert routes.member_endpoints(node, used, single=True) == used
    assert len(routes.member_endpoints(node, used).addresses) == 3
    assert routes.dials_address_lists((("x-mq-language", "PYTHON"), ("x-mq-client-id", "c")))
    assert routes.dials_address_lists([("X-MQ-LANGUAGE", "java")])
    assert not routes.dials_address_lists((("x-mq-language", "HTTP"),))
    assert not routes.dials_address_lists((("x-mq-client-id", "c"),))
    assert not routes.dials_address_lists(None)


def _queue(broker: str, *ports: int) -> definition_pb2.MessageQueue:
    queue = definition_pb2.MessageQueue(id=0)
    queue.broker.name = broker
    queue.broker.endpoints.scheme = definition_pb2.IPv4
    for port in ports:
        queue.broker.endpoints.addresses.add(host="127.0.0.1", port=port)
    return queue


def test_other_groups_queues_are_cut_to_their_first_address_for_a_single_address_client() -> None:
    remote = [_queue("broker-1", 8101, 8102, 8103), _queue("broker-0", 8081)]
    node_js = [("x-mq-language", "HTTP")]
    cut = routes.dialable(remote, node_js)
    assert [[a.port for a in q.broker.endpoints.addresses] for q in cut] == [[8101], [8081]]
    assert len(remote[0].broker.endpoints.addresses) == 3  # the cached view is untouched
    python = [("x-mq-language", "PYTHON")]
    assert routes.dialable(remote, python) is remote


def test_other_groups_queues_are_cut_to_their_first_address_behind_a_tls_port() -> None:
    """The Python client checks a TLS server's certificate against the channel's authority,
    for ``ipv4:a,b,c`` the whole list: no certificate matches it (``cluster up --tls`` found
    it), so a TLS member lists one address of every other group, whatever the language."""
    remote = [_queue("broker-1", 8101, 8102, 8103)]
    python = [("x-mq-language", "PYTHON")]
    cut = routes.dialable(remote, python, tls=True)
    assert [[a.port for a in q.broker.endpoints.addresses] for q in cut] == [[8101]]
    assert len(remote[0].broker.endpoints.addresses) == 3
