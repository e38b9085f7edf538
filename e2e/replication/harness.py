"""A 3-node Raft group of ``gannet broker run`` processes on 127.0.0.1 with a TCP fault proxy
on every peer link, official-client load, and the checks every scenario ends with.

Used by :mod:`e2e.replication.scenario` (``make e2e``) and ``bench/replication.py``.

Links: node ``i`` dials node ``j``'s peer port through its own proxy ``(i, j)``
(:mod:`gannet.node.testing.fault_proxy`): each node gets its own ``--peers`` list in which the
other members' peer endpoints are the proxies' ports, and listens on its real peer port with
``--peer-listen``. Cutting both proxies of every pair that involves node ``n`` isolates it.

Checks (:meth:`ProcessGroup.verify`):

* no acknowledged message lost: every receipt's key is found by ``QueryMessage`` on every node,
  at the receipt's queue and offset (duplicates from the client's own retries are counted);
* at most one leader per term: a monitor thread samples every node's ``GetRaftStatus`` every
  ``MONITOR_INTERVAL_S`` during the whole scenario;
* replicas converge: once the load stops and faults heal, every node reports the same commit
  offset equal to its last offset, and the commit-log files are byte-identical up to it.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from e2e import processes
from e2e.processes import bindable
from gannet.node.cli.cluster.commands import ensure_secret
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.replication.config import PeerSpec
from gannet.node.testing import small_stores
from gannet.node.testing.fault_proxy import FaultProxy, Mode, ProxyThread

if TYPE_CHECKING:
    from e2e.replication.secure import Security

MONITOR_INTERVAL_S = 0.1
STATUS_TIMEOUT_S = 1.0
FILE_SIZE_MB = 4
STOP_TIMEOUT_S = 30.0


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


def remoting_shift(ports: list[int]) -> int:
    """A distance that puts ``port + distance`` on a free port for each of ``ports`` (every
    member of a cluster keeps its remoting port at the same distance from its client port)."""
    for _ in range(200):
        shift = random.randrange(1000, 20000)
        if all(bindable(p + shift) for p in ports):
            return shift
    raise RuntimeError("no common free port distance for the remoting ports")


@dataclass
class Receipt:
    """An acknowledged send: its key, the message id and queue offset the broker answered
    (the broker picks the queue itself, so the client's queue is not part of it)."""

    key: str
    message_id: str
    offset: int
    acked_at_s: float


class ProcessGroup:
    """``size`` broker processes, proxies on the peer links, a status monitor."""

    def __init__(
        self,
        root: Path,
        size: int = 3,
        *,
        flush: str = "sync",
        proxied: bool = True,
        replicated: bool = True,
        security: Security | None = None,
        extra_args: tuple[str, ...] = (),
        remoting: bool = False,
    ) -> None:
        """``proxied=False``: peers dial each other directly (benchmarks);
        ``remoting``: every node also serves the remoting protocol, on a port at the same
        distance from its client port (:meth:`remoting_endpoint`; ``docs/remoting.md``);
        ``replicated=False`` (size 1): a broker without ``--node-id``, today's single node;
        ``security``: auth, TLS on the client port and mutual TLS between peers
        (:mod:`e2e.replication.secure`)."""
        if not replicated and size != 1:
            raise ValueError("an unreplicated group has exactly one broker")
        self.root = root
        self.size = size
        self.flush = flush
        self.replicated = replicated
        self.security = security
        self.extra_args = extra_args
        """More ``gannet broker run`` options for every node."""
        ports = free_ports(2 * size)
        self.client_ports = ports[:size]
        self.peer_ports = ports[size:]
        self.remoting_shift = remoting_shift(self.client_ports) if remoting else None
        self.proxies = ProxyThread()
        self.links: dict[tuple[int, int], FaultProxy] = {}
        for i in self.ids:
            for j in self.ids:
                if i != j and proxied:
                    self.links[(i, j)] = self.proxies.add("127.0.0.1", self.peer_ports[j - 1])
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.leaders_by_term: dict[int, set[int]] = {}
        self._monitor_stop = threading.Event()
        self._monitor: threading.Thread | None = None

    @property
    def ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    def client_endpoint(self, node_id: int) -> str:
        return f"127.0.0.1:{self.client_ports[node_id - 1]}"

    def remoting_endpoint(self, node_id: int) -> str:
        """``node_id``'s remoting port (and name server), with ``remoting=True``."""
        if self.remoting_shift is None:
            raise ValueError("this group was started without remoting=True")
        return f"127.0.0.1:{self.client_ports[node_id - 1] + self.remoting_shift}"

    def _peers_arg(self, node_id: int) -> str:
        specs = []
        for j in self.ids:
            link = self.links.get((node_id, j))
            port = link.port if link is not None else self.peer_ports[j - 1]
            specs.append(str(PeerSpec(j, "127.0.0.1", port, self.client_ports[j - 1])))
        return ",".join(specs)

    # ------------------------------------------------------------------ processes
    def start(self, node_id: int | None = None) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.root.mkdir(parents=True, exist_ok=True)
        for i in [node_id] if node_id is not None else self.ids:
            argv = [
                sys.executable, "-m", "gannet.node.cli", "broker", "run",
                "--data-dir", str(self.root / f"node{i}"),
                "--flush", self.flush,
                "--file-size-mb", str(FILE_SIZE_MB),
                *small_stores.INDEX_ARGS,
                "--listen", self.client_endpoint(i),
                "--metrics-listen", "",
            ]  # fmt: skip
            if self.replicated:
                argv += [
                    "--node-id", str(i),
                    "--peers", self._peers_arg(i),
                    "--peer-listen", f"127.0.0.1:{self.peer_ports[i - 1]}",
                    "--peer-secret-file", str(ensure_secret(self.root)),
                ]  # fmt: skip
            if self.remoting_shift is not None:
                argv += ["--remoting-port", str(self.client_ports[i - 1] + self.remoting_shift)]
            if self.security is not None:
                argv += self.security.broker_args(i)
            argv += self.extra_args
            with (self.root / f"node{i}.log").open("ab") as log:
                self.processes[i] = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=env
                )
        if self._monitor is None:
            self._monitor = threading.Thread(target=self._watch, name="raft-monitor", daemon=True)
            self._monitor.start()

    def alive(self) -> list[int]:
        return [i for i, p in self.processes.items() if p.poll() is None]

    def kill(self, node_id: int) -> None:
        process = self.processes[node_id]
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def pause(self, node_id: int) -> None:
        self.processes[node_id].send_signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.processes[node_id].send_signal(signal.SIGCONT)

    def isolate(self, node_id: int) -> None:
        """Cut every peer link to and from ``node_id`` (clients still reach it)."""
        for (i, j), proxy in self.links.items():
            if node_id in (i, j):
                self.proxies.set_mode(proxy, Mode.PARTITION)

    def heal(self) -> None:
        self.proxies.heal()

    def close(self) -> None:
        self._monitor_stop.set()
        processes.stop_all(self.processes.values(), STOP_TIMEOUT_S)
        if self._monitor is not None:
            self._monitor.join(5)
        self.proxies.close()

    # ------------------------------------------------------------------ status
    @contextlib.contextmanager
    def channel(self, node_id: int) -> Iterator[grpc.Channel]:
        """A channel to ``node_id``'s client port (signed and TLS with ``security``)."""
        if self.security is not None:
            with self.security.channel(self.client_endpoint(node_id)) as secured:
                yield secured
            return
        with grpc.insecure_channel(self.client_endpoint(node_id)) as plain:
            yield plain

    def status(self, node_id: int) -> admin_pb2.RaftStatus | None:
        with self.channel(node_id) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            try:
                reply: admin_pb2.RaftStatus = stub.GetRaftStatus(
                    admin_pb2.GetRaftStatusRequest(), timeout=STATUS_TIMEOUT_S
                )
            except grpc.RpcError:
                return None
            return reply

    def _watch(self) -> None:
        while not self._monitor_stop.wait(MONITOR_INTERVAL_S):
            for node_id in self.alive():
                s = self.status(node_id)
                if s is not None and s.role == "leader":
                    self.leaders_by_term.setdefault(s.term, set()).add(int(s.node_id))

    def leader(self, among: list[int] | None = None, timeout_s: float = 30.0) -> int:
        """The member every node of ``among`` names as leader, once it leads."""
        ids = among if among is not None else self.alive()
        found: list[int] = []

        def agreed() -> bool:
            seen = [self.status(i) for i in ids]
            if any(s is None for s in seen):
                return False
            leaders = {s.leader_id for s in seen if s is not None}
            if len(leaders) != 1:
                return False
            leader = int(leaders.pop() or 0)
            if leader not in ids:
                return False
            found[:] = [leader]
            return True

        processes.wait_for(agreed, timeout_s, f"one leader among {ids}")
        return found[0]

    def current_leader(self, timeout_s: float = 20.0) -> int:
        """The node that reports itself leader in the highest term any node reports (a
        paused or cut-off node may still believe it leads an older term)."""
        found: list[int] = []

        def newest() -> bool:
            seen = [s for s in (self.status(i) for i in self.alive()) if s is not None]
            leaders = [s for s in seen if s.role == "leader"]
            if not leaders:
                return False
            best = max(leaders, key=lambda s: s.term)
            if any(s.term > best.term for s in seen):
                return False  # an election is under way
            found[:] = [int(best.node_id)]
            return True

        processes.wait_for(newest, timeout_s, "a leader in the newest term")
        return found[0]

    def admin_call(self, node_id: int, method: str, request: object) -> object:
        with self.channel(node_id) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            return getattr(stub, method)(request, timeout=10)

    def create_topic(self, topic: str, queues: int = 4) -> None:
        """On the leader (retried across an election), answered once committed."""
        deadline = time.monotonic() + 30
        while True:
            leader = self.leader()
            try:
                self.admin_call(
                    leader,
                    "CreateTopic",
                    admin_pb2.CreateTopicRequest(name=topic, queue_nums=queues),
                )
                return
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                    return
                if time.monotonic() > deadline:
                    raise

    # ------------------------------------------------------------------ checks
    def converged(self, timeout_s: float = 30.0) -> int:
        """Wait until every node reports the same commit offset = last offset; return it."""
        found: list[int] = []

        def same() -> bool:
            seen = [self.status(i) for i in self.ids]
            if any(s is None for s in seen):
                return False
            offsets = {(s.commit_offset, s.last_offset) for s in seen if s is not None}
            if len(offsets) != 1:
                return False
            commit, last = offsets.pop()
            found[:] = [commit]
            return commit == last

        processes.wait_for(same, timeout_s, "every replica to reach the same commit offset", 0.2)
        return found[0]

    def commitlog_bytes(self, node_id: int, upto: int) -> bytes:
        directory = self.root / f"node{node_id}" / "commitlog"
        out = bytearray()
        for path in sorted(directory.iterdir()):
            if len(out) >= upto:
                break
            with path.open("rb") as f:
                out += f.read(upto - len(out))
        return bytes(out[:upto])

    @staticmethod
    def query_key(
        stub: admin_pb2_grpc.AdminStub, topic: str, key: str, timeout_s: float = 10.0
    ) -> list[admin_pb2.StoredMessage]:
        """Messages with ``key``; retried for a while (a replica may still be dispatching)."""
        deadline = time.monotonic() + timeout_s
        pause = threading.Event()
        while True:
            found = list(
                stub.QueryMessage(
                    admin_pb2.QueryMessageRequest(topic=topic, key=key), timeout=10
                ).messages
            )
            if found or time.monotonic() > deadline:
                return found
            pause.wait(0.1)

    def verify(self, topic: str, receipts: list[Receipt]) -> VerifyReport:
        """The three checks of the module docstring (raises AssertionError naming a failure)."""
        split = {t: ids for t, ids in self.leaders_by_term.items() if len(ids) > 1}
        assert not split, f"more than one leader in a term: {split}"
        commit = self.converged()
        reference = self.commitlog_bytes(1, commit)
        for node_id in self.ids[1:]:
            assert self.commitlog_bytes(node_id, commit) == reference, (
                f"node {node_id}'s commit log differs from node 1's below {commit}"
            )
        duplicates = 0
        for node_id in self.ids:
            with self.channel(node_id) as channel:
                stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
                for r in receipts:
                    found = self.query_key(stub, topic, r.key)
                    positions = {(m.message_id, m.queue_offset) for m in found}
                    assert (r.message_id, r.offset) in positions, (
                        f"node {node_id}: acknowledged {r.key} ({r.message_id}) not at queue "
                        f"offset {r.offset} (found {sorted(positions)})"
                    )
                    duplicates += len(found) - 1
        return VerifyReport(
            commit_offset=commit,
            acknowledged=len(receipts),
            duplicates=duplicates // self.size,
            terms=len(self.leaders_by_term),
        )


@dataclass(frozen=True)
class VerifyReport:
    commit_offset: int
    acknowledged: int
    duplicates: int
    """Extra copies of acknowledged keys (the client's own retries after a lost answer)."""
    terms: int


class Load(threading.Thread):
    """The official ``Producer`` sending one message at a time to the leader; a failed send
    (node gone, leader changed) makes it find the leader and start a new producer."""

    def __init__(self, group: ProcessGroup, topic: str, key_prefix: str = "k") -> None:
        """Keys are ``key_prefix`` + a count: give each Load of one group its own prefix."""
        super().__init__(name="load", daemon=True)
        self.group = group
        self.topic = topic
        self.key_prefix = key_prefix
        self.receipts: list[Receipt] = []
        self.failures = 0
        self.done = threading.Event()
        self.progress = threading.Condition()

    def run(self) -> None:
        number = 0
        pause = threading.Event()
        while not self.done.is_set():
            try:
                leader = self.group.current_leader()
            except AssertionError:
                continue
            security = self.group.security
            credentials = security.credentials() if security is not None else Credentials()
            config = ClientConfiguration(
                self.group.client_endpoint(leader), credentials, request_timeout=3
            )
            producer = Producer(config, (self.topic,), tls_enable=security is not None)
            try:
                producer.startup()
            except Exception:  # any start failure: find the leader again
                self.failures += 1
                pause.wait(0.2)
                continue
            try:
                while not self.done.is_set():
                    number += 1
                    key = f"{self.key_prefix}{number}"
                    message = Message()
                    message.topic = self.topic
                    message.body = key.encode()
                    message.keys = key
                    try:
                        receipt = producer.send(message)
                    except Exception:  # timeouts, refusals, dead node
                        self.failures += 1
                        break
                    with self.progress:
                        self.receipts.append(
                            Receipt(
                                key, str(receipt.message_id), int(receipt.offset), time.monotonic()
                            )
                        )
                        self.progress.notify_all()
            finally:
                # in the background: shutting down a client of a frozen node blocks for seconds
                threading.Thread(target=_shutdown_quietly, args=(producer,), daemon=True).start()

    def wait_acks(self, count: int, timeout_s: float = 40.0) -> None:
        with self.progress:
            ok = self.progress.wait_for(lambda: len(self.receipts) >= count, timeout_s)
        assert ok, f"only {len(self.receipts)} of {count} sends acknowledged in {timeout_s} s"

    def stop(self) -> list[Receipt]:
        self.done.set()
        self.join(60)
        return list(self.receipts)


def _shutdown_quietly(producer: Producer) -> None:
    with contextlib.suppress(Exception):
        producer.shutdown()
