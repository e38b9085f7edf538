"""The remoting protocol on a 3-member Raft group: every member's name server names the leader
as brokerId 0 (the 4.x producer's master) and the other members as slaves; a send reaching a
follower's remoting port is forwarded to the leader; a follower serves pulls of committed
messages; after the leader dies the survivors' routes name the new leader."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import re
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from e2e.replication.harness import remoting_shift
from gannet.node.api import external_routes
from gannet.node.api.external_routes import ExternalAddress
from gannet.node.broker.serving import BrokerConfig
from gannet.node.remoting import codes, messages
from gannet.node.remoting.codec import Command
from gannet.node.store import msgids
from tests.remoting.client import RawClient

from .conftest import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


class RemotingCluster(Cluster):
    def __init__(self, root: Path, size: int) -> None:
        super().__init__(root, size)
        self.shift = remoting_shift([p.client_port for p in self.peers])

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
        datas = {d["brokerName"]: d for d in route["brokerDatas"]}
        queues = {q["brokerName"]: q for q in route["queueDatas"]}
        [group] = [name for name, q in queues.items() if q["readQueueNums"]]
        data = datas[group]
        # the leader as 0 (the 4.x master), and every member under its node id: the broker
        # ids pull answers suggest (remoting/pull_steering.py)
        assert data["brokerAddrs"] == {
            "0": cluster.remoting(leader),
            **{str(n): cluster.remoting(n) for n in cluster.nodes},
        }
        assert queues[group] == {
            "brokerName": group, "perm": 6, "readQueueNums": 2, "topicSysFlag": 0,
            "writeQueueNums": 2,
        }  # fmt: skip
        # each follower is also a write-only broker of its own: the producer's retry of a
        # send that failed on one broker name goes to another (docs/remoting.md, failover)
        followers_named = {}
        for index in (1, 2):
            name = f"{group}@{index}"
            assert queues[name] == {
                "brokerName": name, "perm": 2, "readQueueNums": 0, "topicSysFlag": 0,
                "writeQueueNums": 2,
            }  # fmt: skip
            [(broker_id, address)] = datas[name]["brokerAddrs"].items()
            assert broker_id == "0"
            followers_named[address] = name
        assert sorted(followers_named) == sorted(cluster.remoting(n) for n in followers)
        assert len(datas) == 3
        # mqadmin clusterList's ids are the routes': the leader 0, the followers their node ids
        with RawClient(cluster.remoting(node_id)) as client:
            info = client.call(codes.GET_BROKER_CLUSTER_INFO, {})
        table = json.loads(re.sub(r"([{,])(-?\d+):", r'\1"\2":', info.body.decode()))
        assert table["brokerAddrTable"][group]["brokerAddrs"] == {
            "0": cluster.remoting(leader),
            **{str(n): cluster.remoting(n) for n in followers},
        }
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
    assert got.ext["suggestWhichBrokerId"] == str(followers[1])  # stay on this follower
    # the forwarded send's msgId is the offset message id of the follower the client called
    # (the leader's answer carried the commit-log offset back): viewable there
    stored = msgids.decode_offset_msg_id(sent.ext["msgId"])
    assert f"{stored.host}:{stored.port}" == cluster.remoting(followers[0])
    with RawClient(cluster.remoting(followers[0])) as client:
        viewed = client.call(codes.VIEW_MESSAGE_BY_ID, {"offset": str(stored.commit_offset)})
    assert viewed.code == codes.SUCCESS, viewed.remark
    assert b"via a follower" in viewed.body
    with RawClient(cluster.remoting(leader)) as client:
        got = client.call(codes.PULL_MESSAGE, pull_ext)
    assert got.code == codes.SUCCESS, got.remark
    assert got.ext["suggestWhichBrokerId"] == str(min(followers))  # queue 0: the first one
    _follower_catches_up_before_answering(cluster, followers[0], pull_ext)

    cluster.crash(leader)
    survivors = list(cluster.nodes)
    new_leader = cluster.leader(survivors)
    _serving_routes(cluster, new_leader, survivors)
    for node_id in survivors:
        datas = _route(cluster.remoting(node_id), "RemRaftT")["brokerDatas"]
        addrs = next(d["brokerAddrs"] for d in datas if "@" not in d["brokerName"])
        assert addrs["0"] == cluster.remoting(new_leader)
        assert {cluster.remoting(n) for n in survivors} <= set(addrs.values())
    after = _send(cluster.remoting(followers[0]), "RemRaftT", b"after the failover")
    assert after.code == codes.SUCCESS, after.remark


def _follower_catches_up_before_answering(
    cluster: RemotingCluster, follower: int, pull_ext: dict[str, str]
) -> None:
    """A consumer steered from the leader to a follower may ask it for an offset its commits
    have not reached yet: it waits for them rather than answer OFFSET_MOVED (which would make
    the 4.x push consumer drop the queue until its next rebalance), and, when they do not come
    in time, answers NOT_FOUND at the same offset and suggests the leader (0)."""
    ahead = {**pull_ext, "queueOffset": "2"}  # queue 0 holds offset 0 only
    with ThreadPoolExecutor(1) as pool, RawClient(cluster.remoting(follower)) as client:
        waiting = pool.submit(client.call, codes.PULL_MESSAGE, ahead)
        for body in (b"second", b"third"):
            assert _send(cluster.remoting(cluster.leader()), "RemRaftT", body).code == 0
        got = waiting.result(timeout=30)
    assert got.code == codes.SUCCESS, got.remark
    assert b"third" in got.body
    assert b"second" not in got.body
    assert got.ext["nextBeginOffset"] == "3"
    far = {**pull_ext, "queueOffset": "100", "suspendTimeoutMillis": "200"}
    with RawClient(cluster.remoting(follower)) as client:
        got = client.call(codes.PULL_MESSAGE, far)
    assert got.code == codes.PULL_NOT_FOUND, got.remark
    assert (got.ext["nextBeginOffset"], got.ext["suggestWhichBrokerId"]) == ("100", "0")


def _has_topic(cluster: Cluster, node_id: int, topic: str) -> bool:
    return cluster.nodes[node_id].broker.store.topic_configs.get(topic) is not None


def test_a_member_without_a_leader_closes_its_remoting_port_until_it_knows_one(
    cluster: RemotingCluster,
) -> None:
    """The port gate's rule (``broker.port_gate``) holds for the remoting and name-server
    ports as for the gRPC port: a member left alone closes them (an open connection is closed,
    a new one refused) and listens on them again once a leader is known."""
    leader = cluster.leader()
    alone = next(i for i in cluster.nodes if i != leader)
    others = [i for i in cluster.nodes if i != alone]
    broker = cluster.nodes[alone].broker
    remoting = broker.remoting
    assert remoting is not None
    endpoint = cluster.remoting(alone)
    host, _, port = endpoint.rpartition(":")
    with RawClient(endpoint) as held:
        answer = held.call(codes.GET_BROKER_CLUSTER_INFO, {})
        assert answer.code == codes.SUCCESS, answer.remark
        for node_id in others:
            cluster.crash(node_id)
        cluster.wait(alone, lambda: not remoting.listening and not remoting.connections)
        assert held.closed_by_peer()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2).close()

    cluster.start(others[0])
    cluster.leader([alone, others[0]])
    cluster.wait(alone, lambda: remoting.listening)
    with RawClient(endpoint) as client:  # the same port answers again
        answer = client.call(codes.GET_BROKER_CLUSTER_INFO, {})
    assert answer.code == codes.SUCCESS, answer.remark
    assert broker.port_closes_total == 1


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
        assert addrs["brokerAddrs"] == {
            "0": f"203.0.113.{leader}:{30910 + leader}",
            **{str(n): f"203.0.113.{n}:{30910 + n}" for n in members},
        }
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
