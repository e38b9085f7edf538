"""A silent link between two members: iptables DROP between network namespaces, no proxy.

``make e2e-silent-link`` (root only; needs ``ip`` and ``iptables``; about 1 min 30 s for the
20 s and 60 s partitions). Three ``gannet broker run`` processes, each in a network namespace
of its own, joined by veth pairs to a bridge in a fourth namespace (``ctl``) that also holds
this script's measuring half; every address is in 10.213.0.0/16 inside those namespaces, so
nothing reaches the host's network. One follower is cut from the leader with ``iptables -j DROP``
in both directions (packets vanish; no connection is closed, unlike the proxy of ``make e2e``),
then the rules are removed. Measured and checked:

* **detect**: seconds from the cut until the leader's ``/metrics`` reports
  ``gannet_raft_peer_reachable{peer=<follower>} 0`` (target <= ``DETECT_TARGET_S``), and the
  share of samples during the cut that still said 1;
* **rejoin**: seconds from the heal until the follower's commit offset equals the leader's after a
  write (``CreateTopic``) made after the heal (target <= ``REJOIN_TARGET_S``);
* no ``too_many_pings`` GOAWAY in any broker log (keepalive pings the server refused).

Two processes: the outer one (root namespace) creates the namespaces, bridge and veths under
unique names, runs the inner one inside ``ctl`` in a session of its own, and in ``finally``
kills that session (the brokers are in it) and deletes every namespace it made (their veths
and bridge go with them). Exit status 0 when every target is met; the figures are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc

from e2e import processes
from e2e.faults import netns
from e2e.faults.netns import Namespaces
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

CLIENT_PORT = 8081
PEER_PORT = 8091
METRICS_PORT = 9090
DETECT_TARGET_S = 5.0
REJOIN_TARGET_S = 3.0
SAMPLE_INTERVAL_S = 0.1
STATUS_TIMEOUT_S = 1.0
START_TIMEOUT_S = 60.0
REJOIN_WAIT_S = 90.0
STOP_TIMEOUT_S = 15.0


# ---------------------------------------------------------------------------- outer: namespaces
def outer(partitions_s: list[float]) -> int:
    if os.geteuid() != 0:
        print("e2e-silent-link needs root (network namespaces, iptables)", file=sys.stderr)
        return 2
    spaces = Namespaces(3)
    try:
        spaces.create()
        spec = {
            "nodes": spaces.nodes,
            "addresses": [spaces.address(i) for i in (1, 2, 3)],
            "partitions_s": partitions_s,
        }
        with netns.inner_process(spaces, "e2e.replication.silent_link", spec) as inner:
            return inner.wait()
    finally:
        spaces.delete()


# ---------------------------------------------------------------------------- inner: measuring
class Group:
    def __init__(self, nodes: list[str], addresses: list[str], root: Path) -> None:
        self.nodes = nodes
        self.addresses = addresses
        self.root = root
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.cuts: list[tuple[int, int]] = []
        self.cut_away: list[tuple[int, str]] = []
        """Members cut from an address outside the group (the client's), undone by :meth:`heal`."""
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @property
    def ids(self) -> list[int]:
        return list(range(1, len(self.nodes) + 1))

    def print_log_tails(self, lines: int = 15) -> None:
        """The last ``lines`` of every member's log, on stderr (for a failed run)."""
        for i in self.ids:
            tail = (self.root / f"node{i}.log").read_text(errors="replace").splitlines()[-lines:]
            print(f"--- node{i}.log (tail)", *tail, sep="\n", file=sys.stderr)

    def start(self) -> None:
        secret = self.root / "peer-secret"
        secret.write_text(secrets.token_urlsafe(32) + "\n")
        secret.chmod(0o600)
        peers = ",".join(f"{i}={self.addresses[i - 1]}:{PEER_PORT}/{CLIENT_PORT}" for i in self.ids)
        for i in self.ids:
            address = self.addresses[i - 1]
            argv = ["ip", "netns", "exec", self.nodes[i - 1], sys.executable, "-m",
                    "gannet.node.cli", "broker", "run",
                    "--data-dir", str(self.root / f"node{i}"), "--flush", "sync",
                    "--file-size-mb", "4", "--listen", f"{address}:{CLIENT_PORT}",
                    "--metrics-listen", f"{address}:{METRICS_PORT}",
                    "--node-id", str(i), "--peers", peers,
                    "--peer-listen", f"{address}:{PEER_PORT}",
                    "--peer-secret-file", str(secret)]  # fmt: skip
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            with (self.root / f"node{i}.log").open("ab") as log:
                self.processes[i] = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=env
                )

    def stop(self) -> None:
        processes.stop_all(self.processes.values(), STOP_TIMEOUT_S)

    def _stub(self, node_id: int) -> tuple[grpc.Channel, admin_pb2_grpc.AdminStub]:
        channel = grpc.insecure_channel(
            f"{self.addresses[node_id - 1]}:{CLIENT_PORT}", options=[("grpc.enable_http_proxy", 0)]
        )
        return channel, admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]

    def status(self, node_id: int) -> admin_pb2.RaftStatus | None:
        channel, stub = self._stub(node_id)
        with channel:
            try:
                reply: admin_pb2.RaftStatus = stub.GetRaftStatus(
                    admin_pb2.GetRaftStatusRequest(), timeout=STATUS_TIMEOUT_S
                )
            except grpc.RpcError:
                return None
            return reply

    def create_topic(self, node_id: int, name: str) -> None:
        channel, stub = self._stub(node_id)
        with channel:
            stub.CreateTopic(admin_pb2.CreateTopicRequest(name=name, queue_nums=1), timeout=10)

    def peer_reachable(self, leader: int, peer: int) -> int | None:
        """``gannet_raft_peer_reachable{peer}`` on ``leader``'s /metrics (None: absent)."""
        url = f"http://{self.addresses[leader - 1]}:{METRICS_PORT}/metrics"
        try:
            with self._opener.open(url, timeout=STATUS_TIMEOUT_S) as reply:
                text = reply.read().decode()
        except OSError:
            return None
        pattern = rf'^gannet_raft_peer_reachable\{{[^}}]*peer="{peer}"[^}}]*\}} (\S+)$'
        match = re.search(pattern, text, re.MULTILINE)
        return int(float(match.group(1))) if match else None

    def leader(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            seen = [self.status(i) for i in self.ids]
            leaders = {s.leader_id for s in seen if s is not None}
            if all(s is not None for s in seen) and len(leaders) == 1 and leaders != {""}:
                leader = int(leaders.pop())
                s = seen[leader - 1]
                if s is not None and s.role == "leader":
                    return leader
            time.sleep(SAMPLE_INTERVAL_S)
        raise TimeoutError(f"no agreed leader within {timeout_s} s")

    def cut(self, a: int, b: int) -> None:
        netns.drop_between(self.nodes[a - 1], self.addresses[b - 1])
        netns.drop_between(self.nodes[b - 1], self.addresses[a - 1])
        self.cuts.append((a, b))

    def cut_from(self, a: int, address: str) -> None:
        """Drop every packet between member ``a`` and ``address`` (not a member's), both ways."""
        netns.drop_between(self.nodes[a - 1], address)
        self.cut_away.append((a, address))

    def heal(self) -> None:
        for a, b in self.cuts:
            netns.undrop_between(self.nodes[a - 1], self.addresses[b - 1])
            netns.undrop_between(self.nodes[b - 1], self.addresses[a - 1])
        for a, address in self.cut_away:
            netns.undrop_between(self.nodes[a - 1], address)
        self.cuts = []
        self.cut_away = []

    def goaways(self) -> list[str]:
        found = []
        for i in self.ids:
            for line in (self.root / f"node{i}.log").read_text(errors="replace").splitlines():
                if "too_many_pings" in line or "GOAWAY" in line:
                    found.append(f"node{i}: {line.strip()}")
        return found


def _until(condition: Callable[[], bool], timeout_s: float) -> float | None:
    """Seconds until ``condition()`` held (polled every ``SAMPLE_INTERVAL_S``), None at the
    deadline."""
    start = time.monotonic()
    while True:
        if condition():
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            return None
        time.sleep(SAMPLE_INTERVAL_S)


def one_partition(group: Group, partition_s: float, round_no: int) -> dict[str, object]:
    leader = group.leader(START_TIMEOUT_S)
    follower = next(i for i in group.ids if i != leader)
    group.create_topic(leader, f"before-{round_no}")
    if _until(lambda: group.peer_reachable(leader, follower) == 1, START_TIMEOUT_S) is None:
        raise TimeoutError(f"leader {leader} never reported follower {follower} reachable")
    cut_at = time.monotonic()
    group.cut(leader, follower)
    detect_s: float | None = None
    samples = reachable_samples = writes = 0
    while time.monotonic() - cut_at < partition_s:
        value = group.peer_reachable(leader, follower)
        if value is not None:
            samples += 1
            reachable_samples += value
            if value == 0 and detect_s is None:
                detect_s = time.monotonic() - cut_at
        if writes < 5 and time.monotonic() - cut_at > writes + 1:
            with contextlib.suppress(grpc.RpcError):  # the follower falls behind meanwhile
                group.create_topic(leader, f"during-{round_no}-{writes}")
            writes += 1
        time.sleep(SAMPLE_INTERVAL_S)
    group.heal()
    healed_at = time.monotonic()
    now_leader = leader
    with contextlib.suppress(grpc.RpcError):
        group.create_topic(leader, f"after-{round_no}")
    if group.status(leader) is None or group.status(leader).role != "leader":  # type: ignore[union-attr]
        now_leader = group.leader(REJOIN_WAIT_S)
        group.create_topic(now_leader, f"after-{round_no}-retry")
    target = group.status(now_leader)
    commit = target.commit_offset if target is not None else -1

    def in_step() -> bool:
        s = group.status(follower)
        return s is not None and s.commit_offset >= commit >= 0

    rejoin = _until(in_step, REJOIN_WAIT_S)
    rejoin_s = None if rejoin is None else time.monotonic() - healed_at
    return {
        "partition_s": partition_s,
        "leader": leader,
        "follower": follower,
        "detect_s": None if detect_s is None else round(detect_s, 2),
        "reachable_during_cut_percent": round(100 * reachable_samples / max(1, samples), 1),
        "samples": samples,
        "rejoin_s": None if rejoin_s is None else round(rejoin_s, 2),
        "leader_after_heal": now_leader,
    }


def inner(spec: dict[str, object]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below
    nodes = [str(n) for n in spec["nodes"]]  # type: ignore[attr-defined]
    addresses = [str(a) for a in spec["addresses"]]  # type: ignore[attr-defined]
    partitions = [float(p) for p in spec["partitions_s"]]  # type: ignore[attr-defined]
    ok = True
    with tempfile.TemporaryDirectory(prefix="gannet-silent-link-") as root_name:
        root = Path(root_name)
        group = Group(nodes, addresses, root)
        try:
            group.start()
            for round_no, partition_s in enumerate(partitions):
                figures = one_partition(group, partition_s, round_no)
                detect, rejoin = figures["detect_s"], figures["rejoin_s"]
                met = (
                    isinstance(detect, float)
                    and detect <= DETECT_TARGET_S
                    and isinstance(rejoin, float)
                    and rejoin <= REJOIN_TARGET_S
                )
                ok = ok and met
                print(json.dumps({**figures, "targets_met": met}), flush=True)
            goaways = group.goaways()
            print(json.dumps({"goaway_lines": len(goaways), "first": goaways[:3]}), flush=True)
            ok = ok and not goaways
        finally:
            group.heal()
            group.stop()
            if not ok:
                group.print_log_tails()
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partition-s", type=float, action="append", default=None)
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner is not None:
        sys.exit(inner(json.loads(args.inner)))
    sys.exit(outer(args.partition_s or [20.0, 60.0]))


if __name__ == "__main__":
    main()
