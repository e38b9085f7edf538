"""Broker processes in network namespaces, seen from the ``ctl`` namespace (the inner side).

Each member ``i`` runs ``gannet broker run --flush sync`` with small store files in namespace
``nodes[i-1]`` at ``addresses[i-1]``; this process (in ``ctl``) reaches every member over the
bridge. Faults are applied here: signals to the processes, iptables rules inside the members'
namespaces (:mod:`e2e.faults.netns`). A monitor thread samples every member's ``GetRaftStatus``
into the :class:`~e2e.faults.history.History`.

Slots: the group has ``size`` places (1..size), each held by one node id. The founders hold
them first (node ``i`` in slot ``i``); the ``replace`` nemesis gives a slot to a brand-new node
(its own namespace, address, empty store, started with ``--join``) and retires the node that
held it: removed from the group, its process stopped and its store deleted
(:meth:`NetCluster.retire`). :attr:`NetCluster.ids` are the nodes holding the slots — the
group's members once a replacement finished — and every check after the run reads those.
Node ids ``size+2 ..`` are the replacements' (``size+1`` is the ``membership`` nemesis' spare).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from e2e import processes
from e2e.faults import netns
from e2e.faults.history import History, Sample
from e2e.faults.lazyfs import LazyMount
from e2e.replication.disk_full import SmallDisk
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.log import records
from gannet.node.testing import small_stores

FOUNDERS = 3
CLIENT_PORT = 8081
PEER_PORT = 8091
FILE_SIZE_MB = 4
STATUS_TIMEOUT_S = 1.0
MONITOR_INTERVAL_S = 0.25
STOP_TIMEOUT_S = 15.0
PULL_MAX = 1024
CLOCK_SHIM = Path(__file__).resolve().parent / "clockshim"
DISK_SIZE_MB = 640
"""A member's tmpfs with ``disks``: a fresh store takes about 50 MB, its timer log 100 MB more
once the timer wheel writes; at 256 MB a member's own store passed the 90 % warning ratio within
a 60 s run (seed 201: writes refused from 26 s to the end, no ballast on that member)."""
TX_CHECK_ARGS = ("--transaction-timeout-ms", "3000", "--transaction-check-interval-ms", "2000")
"""Open transactions are checked within the run's drain (RocketMQ's defaults: 6 s, then 60 s)."""
FILL_RATIO = 0.95
"""Above the store's disk warning ratio (90 %): writes are refused."""


class NetCluster:
    def __init__(
        self, nodes: list[str], addresses: list[str], ctl_address: str, root: Path,
        *, clocks: bool = False, disks: bool = False, lazy: bool = False,
    ) -> None:  # fmt: skip
        """``clocks``: each member's wall clock skewable (:meth:`set_clock`, the clock shim);
        ``disks``: each member's store on a small tmpfs of its own (:meth:`fill_disk`);
        ``lazy``: each member's store on a lazy filesystem (:mod:`e2e.faults.lazyfs`) over
        ``node<i>.backing`` (the tmpfs with ``disks``), which can lose what was not fsynced
        (:meth:`lose_unfsynced`)."""
        self.nodes = nodes
        self.addresses = addresses
        self.ctl_address = ctl_address
        self.root = root
        self.size = FOUNDERS if len(nodes) > FOUNDERS else len(nodes)
        """Founding members 1..size; a namespace beyond them is a spare for ``--join``."""
        self.slots: dict[int, int] = {i: i for i in range(1, self.size + 1)}
        """Slot -> the node id holding it (founders first; a replacement takes its slot)."""
        self.joined: set[int] = set()
        """Nodes started with ``--join``: they restart with ``--join`` too."""
        self.retired: set[int] = set()
        """Nodes replaced: removed from the group, stopped, their stores deleted."""
        self._disks = disks
        self._lazy = lazy
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.paused: set[int] = set()
        self.history: History | None = None
        self._monitor_stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self.clocks = clocks
        self.disks: dict[int, SmallDisk] = {}
        self.lazy: dict[int, LazyMount] = {}
        for i in self.ids:
            self._prepare_store(i)

    def _prepare_store(self, node_id: int) -> None:
        """Member ``node_id``'s store on its own tmpfs (``disks``) and lazy filesystem
        (``lazy``), as the founders' are."""
        store = self.root / (f"node{node_id}.backing" if self._lazy else f"node{node_id}")
        if self._disks:
            self.disks[node_id] = SmallDisk(store, DISK_SIZE_MB)
        if self._lazy:
            self.lazy[node_id] = LazyMount(store, self.root / f"node{node_id}",
                                           self.root / f"lazyfs{node_id}.log")  # fmt: skip
            self.lazy[node_id].start()

    @property
    def ids(self) -> list[int]:
        """The nodes holding the group's slots (the founders until a replacement)."""
        return sorted(self.slots.values())

    @property
    def founders(self) -> list[int]:
        return list(range(1, self.size + 1))

    def node_of(self, slot: int) -> int:
        return self.slots[slot]

    def slot_of(self, node_id: int) -> int:
        return next(slot for slot, node in self.slots.items() if node == node_id)

    def endpoint(self, node_id: int) -> str:
        return f"{self.addresses[node_id - 1]}:{CLIENT_PORT}"

    @property
    def endpoints(self) -> str:
        """The clients' endpoints: every founder's and every replacement's address (a client
        is configured with the addresses the group's members may have, as with a Service;
        routes name the members in force)."""
        spares = range(self.size + 2, len(self.addresses) + 1)
        return ";".join(self.endpoint(i) for i in [*self.founders, *spares])

    # ------------------------------------------------------------------ processes
    def start(self, node_id: int | None = None) -> None:
        secret = self.root / "peer-secret"
        if not secret.exists():
            secret.write_text(secrets.token_urlsafe(32) + "\n")
            secret.chmod(0o600)
        peers = ",".join(f"{i}={self.addresses[i - 1]}:{PEER_PORT}/{CLIENT_PORT}"
                         for i in self.founders)  # fmt: skip
        for i in [node_id] if node_id is not None else self.founders:
            if i in self.retired:
                continue  # replaced: its store is gone, it never comes back
            if i in self.joined:
                self._spawn(i, "--join")
            else:
                self._spawn(i, "--peers", peers)

    def _spawn(self, node_id: int, *membership: str) -> None:
        """Run member ``node_id`` in its namespace; ``membership``: ``--peers ...`` or
        ``--join``."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.clocks:
            path = os.pathsep.join(filter(None, [str(CLOCK_SHIM), env.get("PYTHONPATH")]))
            env.update(PYTHONPATH=path, GANNET_FAULTS_CLOCK_FILE=str(self._clock_file(node_id)))
        address = self.addresses[node_id - 1]
        argv = ["ip", "netns", "exec", self.nodes[node_id - 1], sys.executable, "-m",
                "gannet.node.cli", "broker", "run",
                "--data-dir", str(self.root / f"node{node_id}"), "--flush", "sync",
                "--file-size-mb", str(FILE_SIZE_MB), *small_stores.INDEX_ARGS,
                "--listen", f"{address}:{CLIENT_PORT}", "--metrics-listen", "",
                "--node-id", str(node_id), *membership,
                "--peer-listen", f"{address}:{PEER_PORT}",
                "--peer-secret-file", str(self.root / "peer-secret"), *TX_CHECK_ARGS]  # fmt: skip
        with (self.root / f"node{node_id}.log").open("ab") as log:
            self.processes[node_id] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        self.paused.discard(node_id)

    def spec(self, node_id: int) -> str:
        return f"{node_id}={self.addresses[node_id - 1]}:{PEER_PORT}/{CLIENT_PORT}"

    def start_joining(self, node_id: int, *, own_store: bool = False) -> None:
        """Start member ``node_id`` (a spare namespace) with ``--join`` and an empty store;
        ``own_store``: on a tmpfs and lazy filesystem of its own as the founders' (a
        replacement, which later faults may fill or crash)."""
        data = self.root / f"node{node_id}"
        if own_store and node_id not in self.disks and node_id not in self.lazy:
            self._prepare_store(node_id)
        elif data.exists() and node_id not in self.disks and node_id not in self.lazy:
            shutil.rmtree(data)
        self.joined.add(node_id)
        self._spawn(node_id, "--join")

    def retire(self, node_id: int) -> None:
        """Member ``node_id`` is gone for good (removed from the group, or its disk lost):
        stop its process and delete its store (its tmpfs and lazy filesystem too)."""
        self.retired.add(node_id)
        self.stop_member(node_id)
        self.paused.discard(node_id)
        mount = self.lazy.pop(node_id, None)
        if mount is not None:
            mount.stop()
        disk = self.disks.pop(node_id, None)
        if disk is not None:
            disk.free_ballast()
            disk.close()
        for name in (f"node{node_id}", f"node{node_id}.backing"):
            shutil.rmtree(self.root / name, ignore_errors=True)

    def store_gone(self, node_id: int) -> bool:
        return not any((self.root / name).exists()
                       for name in (f"node{node_id}", f"node{node_id}.backing"))  # fmt: skip

    def listed(self) -> tuple[list[int], bool]:
        """The group's members as the leader lists them (``ListMembers``, voters and learners)
        and whether a change is still in flight."""
        with self.stub(self.leader()) as stub:
            reply = stub.ListMembers(admin_pb2.ListMembersRequest(), timeout=10)
        return sorted(int(m.node_id) for m in reply.members), bool(reply.change_in_flight)

    def member_cli(self, *args: str) -> tuple[bool, str]:
        """``gannet cluster member ...`` through the first founder that answers (the CLI finds
        the leader); whether it exited 0, and its output."""
        text = ""
        for i in self.ids:
            argv = [sys.executable, "-m", "gannet.node.cli", "cluster", "member", *args,
                    "--endpoint", self.endpoint(i)]  # fmt: skip
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                                      check=False)  # fmt: skip
            except subprocess.TimeoutExpired:
                text = "timed out"
                continue
            text = (done.stdout + done.stderr).strip()[-300:]
            if done.returncode == 0:
                return True, text
        return False, text

    def stop_member(self, node_id: int) -> None:
        process = self.processes.pop(node_id, None)
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def members(self) -> list[int]:
        """Every member with a process, founders and a joined spare alike (a cut from every
        peer must cut the spare too: seed 602, where the leader cut from the founders still
        heard the spare's higher term)."""
        return sorted(set(self.ids) | set(self.processes))

    def alive(self) -> list[int]:
        return [i for i, p in self.processes.items() if p.poll() is None]

    def kill(self, node_id: int) -> None:
        process = self.processes[node_id]
        process.send_signal(signal.SIGKILL)
        process.wait(STOP_TIMEOUT_S)
        self.paused.discard(node_id)

    def lose_unfsynced(self, node_id: int) -> dict[str, Any]:
        """Drop every change member ``node_id`` (killed) did not fsync, as a power loss
        would; what was lost (files, restored_bytes, sizes)."""
        if node_id in self.alive():
            raise RuntimeError(f"member {node_id} still runs: kill it before losing its writes")
        return self.lazy[node_id].lose()

    def pause(self, node_id: int) -> None:
        self.processes[node_id].send_signal(signal.SIGSTOP)
        self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        process = self.processes.get(node_id)  # None: retired meanwhile (replaced)
        if process is not None:
            process.send_signal(signal.SIGCONT)
        self.paused.discard(node_id)

    def _clock_file(self, node_id: int) -> Path:
        return self.root / f"clock{node_id}"

    def set_clock(self, node_id: int, offset_s: float) -> None:
        """Member ``node_id``'s wall clock runs ``offset_s`` ahead (behind when negative)."""
        staged = self.root / f"clock{node_id}.new"
        staged.write_text(f"{offset_s:.3f}\n")
        staged.replace(self._clock_file(node_id))

    def fill_disk(self, node_id: int) -> None:
        """Fill member ``node_id``'s filesystem to ``FILL_RATIO`` and make it measure now."""
        self.disks[node_id].fill_to(FILL_RATIO)
        self._cleanup(node_id)

    def free_disk(self, node_id: int) -> None:
        self.disks[node_id].free_ballast()
        self._cleanup(node_id)

    def _cleanup(self, node_id: int) -> None:
        with self.stub(node_id) as stub, contextlib.suppress(grpc.RpcError):
            stub.Cleanup(admin_pb2.CleanupRequest(trigger=True), timeout=10)

    def unmount(self) -> None:
        for mount in self.lazy.values():
            mount.stop()
        self.lazy = {}
        for disk in self.disks.values():
            disk.free_ballast()
            disk.close()
        self.disks = {}

    def stop(self) -> None:
        self._monitor_stop.set()
        processes.stop_all(self.processes.values(), STOP_TIMEOUT_S)
        if self._monitor is not None:
            self._monitor.join(5)

    # ------------------------------------------------------------------ network
    def cut(self, a: int, b: int) -> None:
        """Drop every packet between members ``a`` and ``b`` (0 stands for the client, ctl)."""
        if a == 0 or b == 0:
            member = b if a == 0 else a
            netns.drop_between(self.nodes[member - 1], self.ctl_address)
            return
        netns.drop_between(self.nodes[a - 1], self.addresses[b - 1])
        netns.drop_between(self.nodes[b - 1], self.addresses[a - 1])

    def lose(self, probability: float) -> None:
        """Drop each packet between members at random (the client's links are spared; a
        spare added during the run is a member too)."""
        members = self.members()
        for i in members:
            for j in members:
                if i != j:
                    netns.drop_incoming_at_random(self.nodes[i - 1], self.addresses[j - 1],
                                                  probability)  # fmt: skip

    def heal(self) -> None:
        for ns in self.nodes:
            netns.flush(ns)

    # ------------------------------------------------------------------ admin
    @contextlib.contextmanager
    def stub(self, node_id: int) -> Iterator[admin_pb2_grpc.AdminStub]:
        options = [("grpc.enable_http_proxy", 0)]
        with grpc.insecure_channel(self.endpoint(node_id), options=options) as channel:
            yield admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]

    def status(self, node_id: int) -> admin_pb2.RaftStatus | None:
        with self.stub(node_id) as stub:
            try:
                reply: admin_pb2.RaftStatus = stub.GetRaftStatus(
                    admin_pb2.GetRaftStatusRequest(), timeout=STATUS_TIMEOUT_S
                )
            except grpc.RpcError:
                return None
            return reply

    def monitor(self, history: History) -> None:
        self.history = history
        self._monitor = threading.Thread(target=self._watch, name="monitor", daemon=True)
        self._monitor.start()

    def _watch(self) -> None:
        assert self.history is not None
        while not self._monitor_stop.wait(MONITOR_INTERVAL_S):
            for i in self.alive():
                if i in self.paused:
                    continue
                s = self.status(i)
                if s is not None:
                    self.history.sample(
                        Sample(
                            round(self.history.now(), 3),
                            i,
                            s.role,
                            int(s.term),
                            int(s.leader_id or 0),
                            int(s.commit_offset),
                        )
                    )

    def leader(self, timeout_s: float = 60.0) -> int:
        """The member every live member names as leader, once it says it leads."""
        found: list[int] = []

        def agreed() -> bool:
            seen = [self.status(i) for i in self.alive()]
            if not seen or any(s is None for s in seen):
                return False
            leaders = {s.leader_id for s in seen if s is not None}
            if len(leaders) != 1 or leaders == {""}:
                return False
            leader = int(leaders.pop())
            s = self.status(leader)
            if s is None or s.role != "leader":
                return False
            found[:] = [leader]
            return True

        processes.wait_for(agreed, timeout_s, "an agreed leader")
        return found[0]

    def newest_leader(self) -> int | None:
        """The member that says it leads in the highest term seen (None: none says so)."""
        seen = [s for s in (self.status(i) for i in self.alive()) if s is not None]
        leaders = [s for s in seen if s.role == "leader"]
        if not leaders:
            return None
        return int(max(leaders, key=lambda s: s.term).node_id)

    def create_topic(self, name: str, queues: int, message_type: str) -> None:
        request = admin_pb2.CreateTopicRequest(name=name, queue_nums=queues,
                                               message_type=message_type)  # fmt: skip
        with self.stub(self.leader()) as stub:
            stub.CreateTopic(request, timeout=30)

    def create_group(self, name: str, fifo: bool) -> None:
        with self.stub(self.leader()) as stub:
            stub.CreateGroup(admin_pb2.CreateGroupRequest(name=name, fifo=fifo), timeout=30)

    def converged(self, timeout_s: float) -> int:
        """Wait until every member reports one commit offset equal to its last offset."""
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
            return bool(commit == last)

        processes.wait_for(same, timeout_s, "every replica at the same commit offset")
        return found[0]

    def stored(self, node_id: int, topic: str) -> dict[int, list[records.Message]]:
        """Every message of ``topic`` on ``node_id``, queue by queue, in queue-offset order."""
        out: dict[int, list[records.Message]] = {}
        with self.stub(node_id) as stub:
            described = stub.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic), timeout=10)
            for q in described.queues:
                messages: list[records.Message] = []
                offset = int(q.min_offset)
                while offset < q.max_offset:
                    reply = stub.PullRecords(
                        admin_pb2.PullRecordsRequest(topic=topic, queue_id=q.queue_id,
                                                     offset=offset, messages_max=PULL_MAX),
                        timeout=30,
                    )  # fmt: skip
                    buf, pos = bytes(reply.records), 0
                    for _ in range(reply.count):
                        message = records.decode(buf, pos)
                        messages.append(message)
                        pos += message.store_size
                    if reply.next_offset <= offset:
                        break
                    offset = int(reply.next_offset)
                out[int(q.queue_id)] = messages
        return out

    def _commitlog_files(self, node_id: int) -> list[Path]:
        directory = self.root / f"node{node_id}" / "commitlog"
        return sorted(p for p in directory.iterdir() if p.name.isdigit())

    def log_start(self, node_id: int) -> int:
        """The commit-log offset member ``node_id``'s first file starts at (0 unless a new
        member was reset to the leader's log start)."""
        files = self._commitlog_files(node_id)
        return int(files[0].name) if files else 0

    def commitlog_bytes(self, node_id: int, upto: int, start: int = 0) -> bytes:
        """Member ``node_id``'s commit-log bytes at offsets ``start`` to ``upto`` (files are
        named by the offset they start at)."""
        out = bytearray()
        for path in self._commitlog_files(node_id):
            begin, size, at = int(path.name), path.stat().st_size, start + len(out)
            if at >= upto or begin > at:
                break  # done, or a gap (reported below)
            if begin + size <= at:
                continue
            with path.open("rb") as f:
                f.seek(at - begin)
                out += f.read(min(upto, begin + size) - at)
        if len(out) != upto - start:
            raise RuntimeError(f"member {node_id}'s commit log holds {len(out)} of the "
                               f"{upto - start} bytes from {start} to {upto}")  # fmt: skip
        return bytes(out)

    def archive(self, target: Path) -> None:
        """The members' stores and logs as ``target`` (a gzipped tar; preallocated files
        compress to little), for a failed run's analysis."""
        names = [p.name for p in self.root.iterdir()
                 if p.name.startswith("node") and not p.name.endswith(".backing")]  # fmt: skip
        subprocess.run(["tar", "czf", str(target), "-C", str(self.root), *names],
                       capture_output=True, timeout=300, check=False)  # fmt: skip

    def keep_logs(self, target: Path) -> None:
        """Copy every member's log (``node<i>.log``, small) into ``target``."""
        target.mkdir(parents=True, exist_ok=True)
        for path in self.root.glob("node*.log"):
            shutil.copyfile(path, target / path.name)

    def store_verify(self, node_id: int) -> tuple[bool, str]:
        """``gannet store verify`` of a stopped member's directory: clean, and its output."""
        argv = [sys.executable, "-m", "gannet.node.cli", "store", "verify",
                str(self.root / f"node{node_id}"), "-o", "json"]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        text = done.stdout.strip() or done.stderr.strip()
        with contextlib.suppress(ValueError):
            text = json.dumps(json.loads(text))
        return done.returncode == 0, text[-20000:]
