"""The remoting protocol on a 3-member Raft group: every member's name server names the leader
as brokerId 0 (the 4.x producer's master) and the other members as slaves; a send reaching a
follower's remoting port is forwarded to the leader; a follower serves pulls of committed
messages; after the leader dies the survivors' routes name the new leader."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import random
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import external_routes
from gannet.node.api.external_routes import ExternalAddress
from gannet.node.broker.serving import BrokerConfig
from gannet.node.remoting import codes, messages
from gannet.node.remoting.codec import Command
from tests.remoting.client import RawClient

from .conftest import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _port_shift(ports: list[int]) -> int:
    """A distance that puts every member's remoting port on a free port (docs/remoting.md:
    every member keeps the same distance between its client and remoting ports)."""
    for _ in range(200):
        shift = random.randrange(1000, 20000)
        if all(_free(p + shift) for p in ports):
            return shift
    raise RuntimeError("no common free port shift")


def _free(port: int) -> bool:
    if port > 65535:
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class RemotingCluster(Cluster):
    def __init__(self, root: Path, size: int) -> None:
        super().__init__(root, size)
        self.shift = _port_shift([p.client_port for p in self.peers])

    def config(self, node_id: int) -> BrokerConfig:
        base = super().config(node_id)
        return dataclasses.replace(
            base,
            remoting_port=base.listen_port + self.shift,
            auto_create_groups=True,
            external_addresses=self.book,
            external_remoting_port=0,
        )

    @property
    def book(self) -> Path:
        """Every member's external addresses (docs/kubernetes.md, "Access from outside"):
        member n is 203.0.113.n at client port 30080+n and remoting port 30910+n."""
        path = self.root / "external.json"
        if not path.exists():
            path.write_text(
                external_routes.render(
                    {
                        f"127.0.0.1:{p.client_port}": ExternalAddress(
                            client=(f"203.0.113.{p.node_id}", 30080 + p.node_id),
                            remoting=(f"203.0.113.{p.node_id}", 30910 + p.node_id),
                        )
                        for p in self.peers
                    }
                )
            )
        return path

    def external_remoting(self, node_id: int) -> str:
        return f"127.0.0.1:{self.nodes[node_id].broker.external_remoting_port}"

    def remoting(self, node_id: int) -> str:
        return f"127.0.0.1:{self.peers[node_id - 1].client_port + self.shift}"

    def crash(self, node_id: int) -> None:
        running = self.nodes[node_id]
        server = running.broker.remoting
        if server is not None:  # as a killed process: its connections reset, its port closed
            asyncio.run_coroutine_threadsafe(server.stop(), running._loop).result(30)
        super().crash(node_id)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RemotingCluster]:
    made = RemotingCluster(tmp_path, 3)
    made.start_all()
    yield made
    made.stop_all()


def _route(endpoint: str, topic: str) -> dict[str, Any]:
    with RawClient(endpoint) as client:
        answer = client.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert answer.code == codes.SUCCESS, answer.remark
    text = re.sub(r"([{,])(-?\d+):", r'\1"\2":', answer.body.decode())
    route: dict[str, Any] = json.loads(text)
    return route


def _send(endpoint: str, topic: str, body: bytes) -> Command:
    ext = {
        "b": topic, "e": "0", "f": "0", "g": "0",
        "i": messages.format_properties({"UNIQ_KEY": messages.new_message_id()}),
    }  # fmt: skip
    with RawClient(endpoint) as client:
        return client.call(codes.SEND_MESSAGE_V2, ext, body)


def _serving_routes(cluster: RemotingCluster, leader: int, members: list[int]) -> None:
    """Wait (on Raft events) until every member's routes are settled: the leader has heard from
    each of ``members`` lately, and each follower knows the leader and every voter (a follower
    lists the voters of the configuration, a dead one too; the leader those it heard from)."""
    core = cluster.raft(leader).core
    assert core is not None
    others = {n for n in members if n != leader}
    cluster.wait(leader, lambda: others <= set(core.responsive_followers()))
    for node_id in others:
        knows = functools.partial(_knows, cluster.raft(node_id), leader, len(cluster.peers))
        cluster.wait(node_id, knows)


def _knows(node: Any, leader: int, size: int) -> bool:
    known = node.leader()
    return known is not None and known.node_id == leader and len(node.route_members()) == size


def test_routes_name_the_leader_and_followers_forward_sends(cluster: RemotingCluster) -> None:
    leader = cluster.leader()
    cluster.create_topic("RemRaftT", queues=2)
    followers = [n for n in cluster.nodes if n != leader]
    for node_id in cluster.nodes:
        cluster.wait(node_id, functools.partial(_has_topic, cluster, node_id, "RemRaftT"))
    _serving_routes(cluster, leader, list(cluster.nodes))
    for node_id in cluster.nodes:
        route = _route(cluster.remoting(node_id), "RemRaftT")
        [data] = route["brokerDatas"]
        assert data["brokerAddrs"]["0"] == cluster.remoting(leader)
        assert sorted(data["brokerAddrs"].values()) == sorted(
            cluster.remoting(n) for n in cluster.nodes
        )
        assert route["queueDatas"][0]["writeQueueNums"] == 2
    sent = _send(cluster.remoting(followers[0]), "RemRaftT", b"via a follower")
    assert sent.code == codes.SUCCESS, sent.remark
    pull_ext = {
        "consumerGroup": "RemRaftG", "topic": "RemRaftT", "queueId": "0", "queueOffset": "0",
        "maxMsgNums": "8", "sysFlag": "2", "suspendTimeoutMillis": "15000",
    }  # fmt: skip
    with RawClient(cluster.remoting(followers[1])) as client:
        got = client.call(codes.PULL_MESSAGE, pull_ext)  # waits for the commit to reach it
    assert got.code == codes.SUCCESS, got.remark
    assert b"via a follower" in got.body

    cluster.crash(leader)
    survivors = list(cluster.nodes)
    new_leader = cluster.leader(survivors)
    _serving_routes(cluster, new_leader, survivors)
    for node_id in survivors:
        addrs = _route(cluster.remoting(node_id), "RemRaftT")["brokerDatas"][0]["brokerAddrs"]
        assert addrs["0"] == cluster.remoting(new_leader)
        assert {cluster.remoting(n) for n in survivors} <= set(addrs.values())
    after = _send(cluster.remoting(followers[0]), "RemRaftT", b"after the failover")
    assert after.code == codes.SUCCESS, after.remark


def _has_topic(cluster: Cluster, node_id: int, topic: str) -> bool:
    return cluster.nodes[node_id].broker.store.topic_configs.get(topic) is not None


def _grpc_route(cluster: RemotingCluster, node_id: int, dialed: tuple[str, int]) -> list[str]:
    """The addresses a Python client that dialed ``dialed`` gets from member ``node_id``."""
    endpoints = definition_pb2.Endpoints(
        scheme=definition_pb2.IPv4,
        addresses=[definition_pb2.Address(host=dialed[0], port=dialed[1])],
    )
    with grpc.insecure_channel(f"127.0.0.1:{cluster.peers[node_id - 1].client_port}") as channel:
        reply = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
            service_pb2.QueryRouteRequest(
                topic=definition_pb2.Resource(name="RemExtT"), endpoints=endpoints
            ),
            timeout=10,
            metadata=[("x-mq-client-id", "outside"), ("x-mq-language", "PYTHON")],
        )
    assert reply.status.code == 20000, reply.status.message
    return [f"{a.host}:{a.port}" for a in reply.message_queues[0].broker.endpoints.addresses]


def test_clients_outside_are_handed_the_leaders_external_address_by_every_member(
    cluster: RemotingCluster,
) -> None:
    leader = cluster.leader()
    cluster.create_topic("RemExtT", queues=2)
    for node_id in cluster.nodes:
        cluster.wait(node_id, functools.partial(_has_topic, cluster, node_id, "RemExtT"))
    _serving_routes(cluster, leader, list(cluster.nodes))
    members = list(cluster.nodes)
    for node_id in members:
        addrs = _route(cluster.external_remoting(node_id), "RemExtT")["brokerDatas"][0]
        assert addrs["brokerAddrs"]["0"] == f"203.0.113.{leader}:{30910 + leader}"
        assert sorted(addrs["brokerAddrs"].values()) == [
            f"203.0.113.{n}:{30910 + n}" for n in members
        ]
        internal = _route(cluster.remoting(node_id), "RemExtT")["brokerDatas"][0]["brokerAddrs"]
        assert internal["0"] == cluster.remoting(leader)  # inside: unchanged
        outside = _grpc_route(cluster, node_id, (f"203.0.113.{node_id}", 30080 + node_id))
        assert outside[0] == f"203.0.113.{leader}:{30080 + leader}"
        assert sorted(outside) == [f"203.0.113.{n}:{30080 + n}" for n in members]

    cluster.crash(leader)
    survivors = list(cluster.nodes)
    new_leader = cluster.leader(survivors)
    _serving_routes(cluster, new_leader, survivors)
    for node_id in survivors:
        addrs = _route(cluster.external_remoting(node_id), "RemExtT")["brokerDatas"][0]
        assert addrs["brokerAddrs"]["0"] == f"203.0.113.{new_leader}:{30910 + new_leader}"
        outside = _grpc_route(cluster, node_id, (f"203.0.113.{node_id}", 30080 + node_id))
        assert outside[0] == f"203.0.113.{new_leader}:{30080 + new_leader}"
