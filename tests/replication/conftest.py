"""An in-process Raft group of brokers on 127.0.0.1: real store files, real gRPC sockets.

:class:`Cluster` starts ``n`` :class:`~gannet.node.broker.threads.BrokerThread` s whose
``replication`` configs name each other, finds the leader, waits on Raft conditions through
:meth:`ReplicationNode.wait_until` (woken by every executed Ready, no sleeping), crashes a node
the way a killed process would (server gone at once, store abandoned without a final flush),
and compares commit-log files byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gannet.node.api.plugs import PopFactory
from gannet.node.broker import port_gate, threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.replication.config import PeerSpec, ReplicationConfig
from gannet.node.replication.driver import ReplicationNode
from gannet.node.store.config import FlushMode, StoreConfig

WAIT_S = 20.0
TICK_S = 0.05  # 10-tick election timeout: 0.5-1 s


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Cluster:
    def __init__(
        self,
        root: Path,
        size: int,
        *,
        seed: int = 1,
        pop: PopFactory | None = None,
        flush_mode: FlushMode = FlushMode.SYNC_FLUSH,
        peer_secret: bytes | None = None,
    ) -> None:
        self.peer_secret = peer_secret
        self.leaderless_close_after_s: float | None = port_gate.CLOSE_AFTER_S
        """Each broker's :attr:`BrokerConfig.leaderless_close_after_s` (None: ports never
        close for want of a leader)."""
        self.pop = pop
        self.flush_mode = flush_mode
        ports = free_ports(2 * size)
        self.root = root
        self.seed = seed
        self.peers = tuple(
            PeerSpec(i + 1, "127.0.0.1", ports[2 * i], ports[2 * i + 1]) for i in range(size)
        )
        self.nodes: dict[int, threads.BrokerThread] = {}

    def config(self, node_id: int) -> BrokerConfig:
        peer = self.peers[node_id - 1]
        store = StoreConfig.for_tests(self.root / f"node{node_id}", flush_mode=self.flush_mode)
        replication = ReplicationConfig(
            node_id=node_id,
            peers=self.peers,
            peer_listen=f"127.0.0.1:{peer.peer_port}",
            tick_interval_s=TICK_S,
            seed=self.seed * 100 + node_id,
            commit_timeout_s=5.0,
            peer_secret=self.peer_secret,
        )
        return BrokerConfig(
            store=store,
            listen_port=peer.client_port,
            replication=replication,
            leaderless_close_after_s=self.leaderless_close_after_s,
        )

    def start(self, node_id: int) -> threads.BrokerThread:
        running = threads.start(self.config(node_id), pop=self.pop)
        self.nodes[node_id] = running
        return running

    def start_all(self) -> None:
        for peer in self.peers:
            self.start(peer.node_id)

    def raft(self, node_id: int) -> ReplicationNode:
        node = self.nodes[node_id].broker.replication
        assert node is not None
        return node

    def run(
        self, node_id: int, coro_factory: Callable[[], Coroutine[Any, Any, Any]], timeout_s: float
    ) -> Any:
        node = self.raft(node_id)
        future = asyncio.run_coroutine_threadsafe(coro_factory(), node.loop)
        return future.result(timeout_s + 5)

    def wait(self, node_id: int, predicate: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        node = self.raft(node_id)
        self.run(node_id, lambda: node.wait_until(predicate, timeout_s), timeout_s)

    def leader(self, among: list[int] | None = None, timeout_s: float = WAIT_S) -> int:
        """The node id that leads, once one does and the others agree."""
        ids = among if among is not None else list(self.nodes)
        first = ids[0]

        def agreed() -> bool:
            leaders = {self.raft(i).leader() for i in ids}
            if len(leaders) != 1:
                return False
            leader = leaders.pop()
            return leader is not None and leader.node_id in ids

        # Wake on the first node's progress; the others are checked at the same time.
        self.wait(first, agreed, timeout_s)
        leader = self.raft(first).leader()
        assert leader is not None
        self.wait(leader.node_id, lambda: self.raft(leader.node_id).is_serving_leader(), timeout_s)
        return leader.node_id

    def endpoint(self, node_id: int) -> str:
        return self.nodes[node_id].endpoint

    def admin(self, node_id: int, call: Callable[[admin_pb2_grpc.AdminStub], Any]) -> Any:
        with grpc.insecure_channel(self.endpoint(node_id)) as channel:
            return call(admin_pb2_grpc.AdminStub(channel))  # type: ignore[no-untyped-call]

    def create_topic(self, name: str, queues: int = 4) -> None:
        """Create the topic on the leader (answered once committed and applied there) and wait
        until every running member applied it too (configs are replicated through the log)."""
        leader = self.leader()
        request = admin_pb2.CreateTopicRequest(name=name, queue_nums=queues)
        self.admin(leader, lambda stub: stub.CreateTopic(request, timeout=10))
        self.wait_replicated(self.last_offset(leader))
        for node_id in self.nodes:
            assert name in self.nodes[node_id].broker.store.topic_configs

    def create_topic_on(self, node_id: int, name: str, queues: int = 4) -> None:
        """Create the topic through ``node_id`` (a leader) without waiting for the others."""
        request = admin_pb2.CreateTopicRequest(name=name, queue_nums=queues)
        self.admin(node_id, lambda stub: stub.CreateTopic(request, timeout=10))

    def last_offset(self, node_id: int) -> int:
        core = self.raft(node_id).core
        assert core is not None
        return int(core.log.last_offset)

    def crash(self, node_id: int) -> None:
        """Stop a node as SIGKILL would: no drain, no final flush, abort file left."""
        running = self.nodes.pop(node_id)
        broker = running.broker

        async def crash() -> None:
            await broker.stop_port_gate()
            if broker.replication is not None:
                await broker.replication.stop()
            if broker.server is not None:
                await broker.server.stop(0)
                broker.server = None
            pop = broker.messaging.pop if broker.messaging is not None else None
            if pop is not None:
                await asyncio.to_thread(pop.close)
            await asyncio.to_thread(broker.store.abandon)

        asyncio.run_coroutine_threadsafe(crash(), running._loop).result(30)
        broker.phase = "stopped"
        running.stop()

    def stop_all(self) -> None:
        for node_id in list(self.nodes):
            running = self.nodes.pop(node_id)
            with contextlib.suppress(Exception):
                running.stop()

    def commit_offset(self, node_id: int) -> int:
        core = self.raft(node_id).core
        assert core is not None
        return int(core.committed_offset)

    def wait_replicated(self, upto: int, timeout_s: float = WAIT_S) -> None:
        """Every running node has ``upto`` committed and dispatched."""
        for node_id in self.nodes:

            def reached(n: int = node_id) -> bool:
                return self.commit_offset(n) >= upto

            self.wait(node_id, reached, timeout_s)
            assert self.nodes[node_id].broker.store.wait_dispatched(upto, timeout_s)

    def commitlog_bytes(self, node_id: int, upto: int) -> bytes:
        directory = self.root / f"node{node_id}" / "commitlog"
        data = b"".join(p.read_bytes() for p in sorted(directory.iterdir()))
        return data[:upto]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path, 3)
    yield made
    made.stop_all()
