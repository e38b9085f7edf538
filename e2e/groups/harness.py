"""A local cluster of broker groups as real processes, started the way ``gannet cluster up
--groups G --replicas R`` starts it (:func:`gannet.node.cli.cluster.commands.start_cluster`),
and the official Python producer sending asynchronously across every group's queues.

Used by :mod:`e2e.groups.scenario` (``make e2e-groups``), its short version in
``tests/replication/test_groups_processes.py`` and ``bench/groups.py``.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from click.testing import CliRunner
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from e2e import processes
from e2e.processes import bindable
from gannet.node.cli.cluster.commands import (
    GROUP_PORT_STRIDE,
    GroupPlan,
    broker_argv,
    plan_cluster,
    start_cluster,
)
from gannet.node.cli.root import main
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.replication.config import PeerSpec
from gannet.node.testing import small_stores

CLIENT_ID = (("x-mq-client-id", "e2e@1@0@groups"),)
STATUS_TIMEOUT_S = 1.0
STOP_TIMEOUT_S = 30.0
FILE_SIZE_MB = small_stores.FILE_SIZE_MB
"""Commit-log file size of every member (1 GiB files would take 6 GiB per 2 x 3 run)."""
INDEX_HASH_SLOTS = small_stores.INDEX_HASH_SLOTS
"""Index hash slots of every member (the default's 420 MB index files: 2.5 GB per 2 x 3 run)."""


def free_base_port(groups: int, seed: int) -> int:
    """A base port whose whole range (every group's client and peer ports) is free now."""
    rng = random.Random(seed)
    span = groups * GROUP_PORT_STRIDE
    for _ in range(200):
        base = rng.randrange(20_000, 60_000 - span)
        if all(bindable(base + offset) for offset in range(span)):
            return base
    raise AssertionError("no free port range found")


class Cluster:
    """``groups`` × ``replicas`` broker processes under ``root`` on 127.0.0.1."""

    def __init__(self, root: Path, groups: int, replicas: int, *, seed: int = 0) -> None:
        self.root = root
        base = free_base_port(groups, seed)
        self.plans = plan_cluster(groups, replicas, "127.0.0.1", base, root)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        start_cluster(
            self.plans,
            "sync",
            0,
            self.processes,
            file_size_mb=FILE_SIZE_MB,
            index_hash_slots=INDEX_HASH_SLOTS,
        )

    def group(self, name: str) -> GroupPlan:
        return next(g for g in self.plans if g.broker_name == name)

    def _key(self, group: GroupPlan, peer: PeerSpec) -> str:
        return str(group.root / f"node{peer.node_id}")

    def member(self, endpoint: str) -> tuple[GroupPlan, PeerSpec]:
        for group in self.plans:
            for peer in group.peers:
                if peer.client_endpoint == endpoint:
                    return group, peer
        raise KeyError(endpoint)

    def pid(self, endpoint: str) -> int:
        return self.processes[self._key(*self.member(endpoint))].pid

    def data_dirs(self) -> list[Path]:
        return [g.root / f"node{p.node_id}" for g in self.plans for p in g.peers]

    def endpoints(self) -> list[str]:
        return [e for g in self.plans for e in g.client_endpoints()]

    @contextmanager
    def admin(self, endpoint: str) -> Iterator[admin_pb2_grpc.AdminStub]:
        with grpc.insecure_channel(endpoint) as channel:
            yield admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]

    def status(self, endpoint: str) -> admin_pb2.RaftStatus | None:
        with self.admin(endpoint) as stub:
            try:
                reply: admin_pb2.RaftStatus = stub.GetRaftStatus(
                    admin_pb2.GetRaftStatusRequest(), timeout=STATUS_TIMEOUT_S
                )
            except grpc.RpcError:
                return None
            return reply

    def leader(self, name: str, timeout_s: float = 60.0, *, skip: str = "") -> str:
        """The client endpoint of group ``name``'s leader, once its live members agree."""
        group = self.group(name)
        found: list[str] = []

        def agreed() -> bool:
            alive = [e for e in group.client_endpoints() if e != skip and self.alive(e)]
            seen = [self.status(e) for e in alive]
            leaders = {s.leader_client_endpoint for s in seen if s is not None}
            if len(leaders) == 1 and all(s is not None for s in seen) and "" not in leaders:
                found[:] = [leaders.pop()]
                return found[0] != skip
            return False

        processes.wait_for(agreed, timeout_s, f"a leader of {name}", 0.1)
        return found[0]

    def alive(self, endpoint: str) -> bool:
        return self.processes[self._key(*self.member(endpoint))].poll() is None

    def route(self, endpoint: str, topic: str) -> list[tuple[str, int]]:
        with grpc.insecure_channel(endpoint) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
            try:
                reply = stub.QueryRoute(request, metadata=CLIENT_ID, timeout=2)
            except grpc.RpcError:
                return []
        return [(q.broker.name, q.id) for q in reply.message_queues]

    def kill(self, endpoint: str) -> None:
        os.kill(self.pid(endpoint), signal.SIGKILL)
        self.processes[self._key(*self.member(endpoint))].wait()

    def restart(self, endpoint: str) -> None:
        group, peer = self.member(endpoint)
        argv = broker_argv(
            peer,
            group.peers,
            group.root,
            "sync",
            None,
            broker_name=group.broker_name,
            seeds=group.seeds,
            file_size_mb=FILE_SIZE_MB,
            index_hash_slots=INDEX_HASH_SLOTS,
        )
        key = self._key(group, peer)
        with Path(key).with_suffix(".log").open("ab") as log:
            self.processes[key] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop(self) -> None:
        processes.stop_all(self.processes.values(), STOP_TIMEOUT_S)

    def verify_stores(self) -> dict[str, str]:
        """``gannet store verify`` of every member (stopped; the command run in this process,
        importing it once); the failures by folder."""
        failed = {}
        runner = CliRunner()
        for folder in self.data_dirs():
            done = runner.invoke(main, ["store", "verify", str(folder)])
            if done.exit_code != 0:
                failed[str(folder)] = done.output[-400:]
        return failed


@dataclass(frozen=True)
class Ack:
    key: str
    broker: str
    queue_id: int
    offset: int
    message_id: str
    started_at_s: float
    acked_at_s: float


@dataclass
class AsyncLoad:
    """The official Producer, ``send_async`` at a steady rate with a bounded number in flight:
    a send stuck on one group's queue does not hold the others back (as an application using
    the async API sees it)."""

    endpoints: str
    topic: str
    rate_per_s: float = 200.0
    in_flight_max: int = 1000
    acks: list[Ack] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    sent: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.in_flight_max)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="groups-load", daemon=True)
        config = ClientConfiguration(self.endpoints, Credentials(), request_timeout=3)
        self.producer = Producer(config, (self.topic,))

    def start(self) -> None:
        self.producer.startup()
        self._thread.start()

    def _run(self) -> None:
        pause = threading.Event()
        period = 1.0 / self.rate_per_s
        next_at = time.monotonic()
        while not self._done.is_set():
            self._slots.acquire()
            self.sent += 1
            key = f"g{self.sent}"
            message = Message()
            message.topic, message.body, message.keys = self.topic, key.encode(), key
            started = time.monotonic()
            try:
                future = self.producer.send_async(message)
            except Exception as exc:  # refused before it left: count it
                self._failed(exc)
                continue
            future.add_done_callback(lambda f, k=key, t=started: self._done_one(k, t, f))
            next_at += period
            pause.wait(max(0.0, next_at - time.monotonic()))

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            kind = type(exc).__name__
            self.failures[kind] = self.failures.get(kind, 0) + 1
        self._slots.release()

    def _done_one(self, key: str, started_at_s: float, future: Future[object]) -> None:
        exc = future.exception()
        if exc is not None:
            self._failed(exc)
            return
        receipt = future.result()
        queue = receipt.message_queue.message_queue0()  # type: ignore[attr-defined]
        ack = Ack(
            key,
            queue.broker.name,
            queue.id,
            int(receipt.offset),  # type: ignore[attr-defined]
            str(receipt.message_id),  # type: ignore[attr-defined]
            started_at_s,
            time.monotonic(),
        )
        with self._lock:
            self.acks.append(ack)
        self._slots.release()

    def count(self, broker: str, started_after_s: float = 0.0) -> int:
        """Acknowledged sends to ``broker``'s queues begun after ``started_after_s``."""
        with self._lock:
            return sum(
                1 for a in self.acks if a.broker == broker and a.started_at_s > started_after_s
            )

    def stop(self, drain_timeout_s: float = 30.0) -> list[Ack]:
        """Stop sending, wait for every send in flight to end, shut the producer down."""
        self._done.set()
        self._thread.join(10)
        for _ in range(self.in_flight_max):  # every slot back: nothing in flight
            if not self._slots.acquire(timeout=drain_timeout_s):
                break
        self.producer.shutdown()
        with self._lock:
            return list(self.acks)


def largest_gap_s(times: list[float], start_s: float, end_s: float) -> float:
    """The longest time without an acknowledgement within ``[start_s, end_s]``."""
    inside = sorted(t for t in times if start_s <= t <= end_s)
    points = [start_s, *inside, end_s]
    return max(b - a for a, b in itertools.pairwise(points))
