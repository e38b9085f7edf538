"""Three ``gannet broker run`` processes as one Raft group: SIGKILL the leader while a producer
sends, and check that every acknowledged message is on both survivors."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from e2e import processes
from gannet.node.cli.cluster.commands import broker_argv, ensure_secret
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.replication.config import PeerSpec
from gannet.node.testing import small_stores

from .conftest import free_ports

pytestmark = pytest.mark.timeout(150)
CLIENT_ID = (("x-mq-client-id", "tests@1@0@processes"),)
TOPIC = "RepKill"
DEADLINE_S = 60.0


class Group:
    def __init__(self, root: Path) -> None:
        ports = free_ports(6)
        self.root = root
        self.peers = tuple(
            PeerSpec(i + 1, "127.0.0.1", ports[2 * i], ports[2 * i + 1]) for i in range(3)
        )
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        ensure_secret(self.root)
        for peer in self.peers:
            argv = broker_argv(
                peer,
                self.peers,
                self.root,
                "sync",
                None,
                file_size_mb=small_stores.FILE_SIZE_MB,
                index_hash_slots=small_stores.INDEX_HASH_SLOTS,
            )
            with (self.root / f"node{peer.node_id}.log").open("ab") as log:
                self.processes[peer.node_id] = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=env
                )

    def status(self, node_id: int) -> admin_pb2.RaftStatus | None:
        with grpc.insecure_channel(self.peers[node_id - 1].client_endpoint) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            try:
                reply: admin_pb2.RaftStatus = stub.GetRaftStatus(
                    admin_pb2.GetRaftStatusRequest(), timeout=2
                )
            except grpc.RpcError:
                return None
            return reply

    def leader(self, among: list[int]) -> int:
        """Poll the members' status (other processes: nothing to await) until they agree."""
        deadline = time.monotonic() + DEADLINE_S
        pause = threading.Event()
        while time.monotonic() < deadline:
            seen = [self.status(i) for i in among]
            leaders = {s.leader_id for s in seen if s is not None}
            if len(leaders) == 1 and all(s is not None for s in seen):
                leader = int(leaders.pop() or 0)
                if leader in among:
                    return leader
            for node_id, process in self.processes.items():
                assert process.poll() is None or node_id not in among, f"node {node_id} died"
            pause.wait(0.1)
        raise AssertionError(f"no leader among {among} within {DEADLINE_S} s")

    def create_topic(self, node_ids: list[int]) -> None:
        for node_id in node_ids:
            with grpc.insecure_channel(self.peers[node_id - 1].client_endpoint) as channel:
                stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
                stub.CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=4), timeout=10)

    def stop(self) -> None:
        processes.stop_all(self.processes.values(), timeout_s=30)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    made = Group(tmp_path)
    made.start()
    yield made
    made.stop()


def _request(key: str, number: int) -> service_pb2.SendMessageRequest:
    msg = definition_pb2.Message(body=key.encode())
    msg.topic.name = TOPIC
    msg.system_properties.message_id = f"0102FC000000013E000B13F97D{number:08X}"
    msg.system_properties.body_encoding = definition_pb2.IDENTITY
    msg.system_properties.keys.append(key)
    return service_pb2.SendMessageRequest(messages=[msg])


class Producer(threading.Thread):
    """Sends one message at a time to whoever leads; records what was acknowledged."""

    def __init__(self, group: Group) -> None:
        super().__init__(daemon=True)
        self.group = group
        self.leader = 0
        self.acknowledged: list[str] = []
        self.done = threading.Event()
        self.progress = threading.Condition()

    def run(self) -> None:
        number = 0
        while not self.done.is_set():
            endpoint = self.group.peers[self.leader - 1].client_endpoint
            with grpc.insecure_channel(endpoint) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                while not self.done.is_set():
                    number += 1
                    key = f"k{number}"
                    try:
                        reply = stub.SendMessage(
                            _request(key, number), metadata=CLIENT_ID, timeout=5
                        )
                    except grpc.RpcError:
                        break
                    if reply.status.code != definition_pb2.OK:
                        break
                    with self.progress:
                        self.acknowledged.append(key)
                        self.progress.notify_all()
            alive = [i for i, p in self.group.processes.items() if p.poll() is None]
            with contextlib.suppress(AssertionError):
                self.leader = self.group.leader(alive)

    def wait_acks(self, count: int) -> None:
        with self.progress:
            assert self.progress.wait_for(lambda: len(self.acknowledged) >= count, DEADLINE_S), (
                f"only {len(self.acknowledged)} of {count} acknowledged"
            )


def test_sigkill_of_the_leader_under_load_loses_no_acknowledged_message(group: Group) -> None:
    leader = group.leader([1, 2, 3])
    group.create_topic([leader])  # replicated to the others through the log
    producer = Producer(group)
    producer.leader = leader
    producer.start()
    producer.wait_acks(40)
    group.processes[leader].send_signal(signal.SIGKILL)
    group.processes[leader].wait(10)
    killed_at = len(producer.acknowledged)
    survivors = [i for i in (1, 2, 3) if i != leader]
    new_leader = group.leader(survivors)
    assert new_leader != leader
    producer.wait_acks(killed_at + 40)
    producer.done.set()
    producer.join(30)
    acknowledged = list(producer.acknowledged)
    for node_id in survivors:
        status = group.status(node_id)
        assert status is not None
        with grpc.insecure_channel(group.peers[node_id - 1].client_endpoint) as channel:
            admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            deadline = time.monotonic() + DEADLINE_S
            missing = list(acknowledged)
            pause = threading.Event()
            while missing and time.monotonic() < deadline:  # dispatch follows the commit
                missing = [
                    key
                    for key in missing
                    if not admin.QueryMessage(
                        admin_pb2.QueryMessageRequest(topic=TOPIC, key=key), timeout=5
                    ).messages
                ]
                if missing:
                    pause.wait(0.2)
            assert missing == [], f"node {node_id} lacks acknowledged {missing[:5]}"
