"""Official clients against a member cut off from the majority: iptables cuts between network
namespaces (:mod:`e2e.replication.silent_link`'s namespaces and brokers), no proxy.

``make e2e-partition-clients`` (root only; needs ``ip`` and ``iptables``; 1-1.5 min per
client). Three ``gannet broker run`` processes, each in its own network namespace on a bridge;
the client runs in the bridge's namespace and reaches every member all the time: only peer
links are cut. The client is given every member's address; the official Python client dials the
route's addresses sorted as strings with gRPC's ``pick_first``, so its channel sits on node 1
(the lowest address); the Java client dials them in the route's order, the leader first. The
Node.js client dials one address (:mod:`e2e.replication.clients`): it runs as the fault
harness's Node.js workload (:mod:`e2e.faults.client_workload`: a paced sender and a
SimpleConsumer in one process), its first connection on node 1, three ways (:class:`NodeLoad`):
``node`` behind that harness's Service-like proxy (a refusing member is skipped), ``node-dns``
dialing :data:`DNS_NAME` (every member, node 1 first), ``node-service`` behind a kube-proxy-like
proxy (a member drawn at random, from a seed, among those the operator's readiness probe lists:
:class:`EndpointSlice`; a refusal passed on). ``channel_members_at_cut`` names the member of
each of its connections at the cut.
Scenarios (node 1 is the member the Python client's channel is on):

* ``leader-cut`` — node 1 leads and is cut from both followers (clients still reach it);
* ``follower-cut`` — node 2 leads; node 1, a follower, is cut from both peers;
* ``bridge`` — node 2 leads; node 1 is cut from node 2 only: both still see node 3;
* ``blackholed`` — node 1 leads and is cut from both followers *and from the client* (every
  packet dropped, nothing refused): the client still reaches nodes 2 and 3, but its channel's
  connection to node 1 neither answers nor breaks; ``blackholed-follower`` — the same with
  node 2 leading. Not among :data:`SCENARIOS` (the outage is the client library's, not a
  target: :data:`BLACKHOLED`); run them with ``--scenario``. ``python-keepalive`` is the
  official Python client with HTTP/2 keepalive added to its channels
  (:data:`KEEPALIVE_OPTIONS`), which the client itself does not offer.

Each cut lasts ``--partition-s`` (15 s by default), then heals. Measured per scenario: the
**outage** — the longest stretch from the cut to the heal without a successful send (the cut and
the heal bound it; a client that never succeeded meanwhile scores the whole partition), the
sends that failed after the client's own retries, by error, and when the cut-off member's
``/readyz`` said not ready and its client port refused connections (seconds after the cut);
for ``node-service`` also when it left the Service and how many connections were refused.
Target: outage <= :data:`OUTAGE_TARGET_S` (a majority serves all along), but for
``blackholed`` (``target_met`` is None: measured, not judged). One JSON line per
scenario; exit status 0 when every target is met, 1 otherwise, 2 without root.

Two processes, as in :mod:`silent_link`: the outer one makes the namespaces and always deletes
them (and kills the inner session) in ``finally``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc import aio
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from e2e.faults import client_workload, netns
from e2e.faults.history import History
from e2e.faults.netns import Namespaces
from e2e.replication.clients import ExternalLoad, ServiceProxy
from e2e.replication.silent_link import CLIENT_PORT, METRICS_PORT, Group
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.operator import manifests

OUTAGE_TARGET_S = 3.0
PARTITION_S = 15.0
SETTLE_TIMEOUT_S = 60.0
POLL_S = 0.1
CUT_MEMBER = 1
"""The member cut off in every scenario: the Python client's channel sits on it."""
TOPIC = "PartitionClients"
NODE_CLIENT = client_workload.KNOWN["node"]
NODE_SEND_RATE_PER_S = 50.0
"""The Node.js workload's paced sends (one at a time; 20 ms apart bounds the outage's grain)."""
PROBE_PERIOD_S = float(manifests.READINESS_PERIOD_S)
PROBE_FAILURES_MAX = manifests.READINESS_FAILURES_MAX
"""``node-service``: the operator's readinessProbe on ``/readyz`` (``--probe-period-s`` and
``--probe-failures`` replay other settings)."""
CLIENT_NAMES = ("python", "java", "node", "node-dns", "node-service", "python-keepalive")
DNS_NAME = "gannet-members"
"""``node-dns``: a name resolving to every member, node 1 first (as a headless Service's name
resolves to its pods), in the client namespace's ``/etc/hosts``."""
SCENARIOS: dict[str, tuple[int, list[tuple[int, int]]]] = {
    "leader-cut": (1, [(1, 2), (1, 3)]),
    "follower-cut": (2, [(1, 2), (1, 3)]),
    "bridge": (2, [(1, 2)]),
}
"""Scenario name → (the leader to place before the cut, the links to cut)."""
BLACKHOLED: dict[str, tuple[int, list[tuple[int, int]]]] = {
    "blackholed": (1, [(1, 2), (1, 3)]),
    "blackholed-follower": (2, [(1, 2), (1, 3)]),
}
"""Scenarios that also drop every packet between the client and :data:`CUT_MEMBER`."""
ALL_SCENARIOS = {**SCENARIOS, **BLACKHOLED}
KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 1000),
)
"""Added to the Python client's channel options by ``python-keepalive``: a PING after 1 s without
a frame, the connection closed when it is unanswered for 1 s."""


# ---------------------------------------------------------------------------- outer
def outer(
    clients: list[str], scenarios: list[str], partition_s: float, seed: int, probe: Probe
) -> int:
    if os.geteuid() != 0:
        print("e2e-partition-clients needs root (network namespaces, iptables)", file=sys.stderr)
        return 2
    for client in clients:
        if not client.startswith("python"):
            client_workload.prepare(client.split("-")[0])  # the registries need the network
    spaces = Namespaces(3)
    hosts = Path("/etc/netns") / spaces.ctl
    try:
        if "node-dns" in clients:  # ip netns exec mounts it as the namespace's /etc/hosts
            hosts.mkdir(parents=True)
            lines = ["127.0.0.1 localhost", *(f"{spaces.address(i)} {DNS_NAME}" for i in (1, 2, 3))]
            (hosts / "hosts").write_text("\n".join(lines) + "\n")
        spaces.create()
        spec = {
            "nodes": spaces.nodes,
            "addresses": [spaces.address(i) for i in (1, 2, 3)],
            "client_address": spaces.ctl_address,
            "clients": clients,
            "scenarios": scenarios,
            "partition_s": partition_s,
            "seed": seed,
            "probe_period_s": probe.period_s,
            "probe_failures": probe.failures_max,
        }
        with netns.inner_process(spaces, "e2e.replication.partition_clients", spec) as inner:
            return inner.wait()
    finally:
        spaces.delete()
        shutil.rmtree(hosts, ignore_errors=True)


# ---------------------------------------------------------------------------- inner
@dataclass
class Sends:
    """Answer times (monotonic) of the successful sends; failures by error name."""

    acked_at_s: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acked(self, at_s: float) -> None:
        with self.lock:
            self.acked_at_s.append(at_s)

    def failed(self, kind: str) -> None:
        with self.lock:
            self.failures[kind] = self.failures.get(kind, 0) + 1

    def snapshot(self) -> tuple[list[float], dict[str, int]]:
        with self.lock:
            return list(self.acked_at_s), dict(self.failures)


def outage_s(acked_at_s: list[float], cut_s: float, healed_s: float) -> float:
    """The longest stretch in ``[cut_s, healed_s]`` without a successful send."""
    marks = [cut_s, *sorted(t for t in acked_at_s if cut_s < t < healed_s), healed_s]
    return max(b - a for a, b in itertools.pairwise(marks))


class PythonLoad(threading.Thread):
    """The official Python Producer sending one message at a time (request timeout 3 s, its
    default 3 attempts)."""

    def __init__(self, endpoints: str, keepalive: bool = False) -> None:
        super().__init__(name="python-producer", daemon=True)
        self.keepalive = keepalive
        self.unpatch: Callable[[], None] = lambda: None
        config = ClientConfiguration(endpoints, Credentials(), request_timeout=3)
        self.producer = Producer(config, (TOPIC,))
        self.sends = Sends()
        self.done = threading.Event()

    def run(self) -> None:
        number = 0
        while not self.done.is_set():
            number += 1
            message = Message()
            message.topic = TOPIC
            message.body = f"p{number}".encode()
            message.keys = f"p{number}"
            try:
                self.producer.send(message)
                self.sends.acked(time.monotonic())
            except Exception as exc:  # the client's failure after its retries: counted
                self.sends.failed(type(exc).__name__)

    def startup(self) -> None:
        if self.keepalive:
            self.unpatch = _with_keepalive()
        self.producer.startup()
        self.start()

    def stop(self) -> None:
        self.done.set()
        self.join(30)
        with contextlib.suppress(Exception):
            self.producer.shutdown()
        self.unpatch()


def _with_keepalive() -> Callable[[], None]:
    """Make ``grpc.aio.insecure_channel`` (which the Python client calls with its own options
    and no way to add any) append :data:`KEEPALIVE_OPTIONS`; returns the undo."""
    original = aio.insecure_channel

    def insecure_channel(target: str, options: Any = None, *args: Any, **kwargs: Any) -> Any:
        return original(target, [*(options or ()), *KEEPALIVE_OPTIONS], *args, **kwargs)

    aio.insecure_channel = insecure_channel

    def undo() -> None:
        aio.insecure_channel = original

    return undo


class JavaLoad:
    """The official Java client's producer process (:mod:`e2e.replication.clients`)."""

    def __init__(self, endpoints: str, log_path: Path) -> None:
        self.load = ExternalLoad("java", endpoints, TOPIC, log_path)

    @property
    def sends(self) -> Sends:
        sends = Sends()
        with self.load.acks.progress:
            sends.acked_at_s = [r.acked_at_s for r in self.load.acks.receipts]
            sends.failures = dict(self.load.acks.failures)
        return sends

    def startup(self) -> None:
        self.load.startup()

    def stop(self) -> None:
        self.load.stop()


@dataclass(frozen=True)
class Probe:
    """A readinessProbe's timing: ``periodSeconds`` and ``failureThreshold``."""

    period_s: float = PROBE_PERIOD_S
    failures_max: int = PROBE_FAILURES_MAX


class EndpointSlice(threading.Thread):
    """What Kubernetes lists behind the client Service: a member drops out once its ``/readyz``
    failed ``probe.failures_max`` probes in a row, ``probe.period_s`` apart, and comes
    back after one success (the operator's readinessProbe). kube-proxy's own sync delay is
    left out: the view changes the moment a probe decides."""

    def __init__(self, group: Group, probe: Probe) -> None:
        super().__init__(name="endpoint-slice", daemon=True)
        self.group = group
        self.probe = probe
        self.listed = set(group.ids)
        self.failures = dict.fromkeys(group.ids, 0)
        self.delisted_at_s: dict[int, float] = {}
        """When each member last dropped out (monotonic)."""
        self.done = threading.Event()
        self.lock = threading.Lock()

    def ready(self) -> list[tuple[str, int]]:
        with self.lock:
            return [(self.group.addresses[i - 1], CLIENT_PORT) for i in sorted(self.listed)]

    def run(self) -> None:
        while not self.done.wait(self.probe.period_s):
            for i in self.group.ids:
                ok = _ready(self.group, i)
                with self.lock:
                    self.failures[i] = 0 if ok else self.failures[i] + 1
                    if ok:
                        self.listed.add(i)
                    elif self.failures[i] >= self.probe.failures_max and i in self.listed:
                        self.listed.discard(i)
                        self.delisted_at_s[i] = time.monotonic()

    def stop(self) -> None:
        self.done.set()
        self.join(self.probe.period_s + 5)


class NodeLoad:
    """The official Node.js client: the fault harness's workload program
    (:class:`~e2e.faults.client_workload.ClientWorkload`) dialing one address (``via``):
    ``proxy``, the harness's Service-like proxy (the next member that accepts); ``dns``,
    :data:`DNS_NAME` itself; ``service``, a proxy that does what kube-proxy does for a
    ClusterIP Service (a member at random from an :class:`EndpointSlice`, a refusal not
    retried). Its sends are read from its history."""

    def __init__(
        self, group: Group, endpoints: str, log_path: Path, via: str, seed: int, probe: Probe
    ) -> None:
        self.history = History()
        self.slice: EndpointSlice | None = None
        self.proxy: ServiceProxy | None = None
        dial = None
        if via == "dns":
            dial = f"{DNS_NAME}:{CLIENT_PORT}"
        elif via == "service":
            self.slice = EndpointSlice(group, probe)
            targets = [(a, CLIENT_PORT) for a in group.addresses]
            self.proxy = ServiceProxy(targets, ready=self.slice.ready, seed=seed)
            dial = self.proxy.endpoint
        self.workload = client_workload.ClientWorkload(
            NODE_CLIENT, endpoints, TOPIC, self.history, NODE_SEND_RATE_PER_S, 0, log_path,
            dial=dial,
        )  # fmt: skip
        self.proxy = self.proxy or self.workload.proxy

    @property
    def sends(self) -> Sends:
        """Its sends so far: ``ok`` ones at their answer time (monotonic); ``info`` ones (a send
        that raised after the client's own attempts) by error name."""
        events, _ = self.history.snapshot()
        sends = Sends()
        for event in events:
            if event.process != NODE_CLIENT.sender or event.f != "send":
                continue
            if event.type == "ok":
                sends.acked_at_s.append(self.history.origin + event.t)
            elif event.type == "info":
                sends.failed(":".join(str(event.value.get("error", "?")).split(":")[:2]))
        return sends

    def channel_members(self, group: Group) -> list[int]:
        """The member of each connection it holds now: its proxy's relays, or its own sockets."""
        if self.proxy is not None:
            live = self.proxy.live_targets().items()
            return sorted(group.addresses.index(h) + 1 for (h, _), n in live for _ in range(n))
        return _connected_members(group, self.workload.process.pid)

    def startup(self) -> None:
        if self.slice is not None:
            self.slice.start()
        self.workload.startup()

    def stop(self) -> None:
        self.workload.stop()
        if self.slice is not None:
            self.slice.stop()
            assert self.proxy is not None
            self.proxy.close()


def _connected_members(group: Group, pid: int) -> list[int]:
    """The member of each established TCP connection of process ``pid`` (``ss``)."""
    argv = ["ss", "-tnpH", "state", "established", "dport", "=", f":{CLIENT_PORT}"]
    lines = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=10).stdout
    found = []
    for line in lines.splitlines():
        fields = line.split()
        if f"pid={pid}," in line and len(fields) >= 4:
            host = fields[3].rsplit(":", 1)[0]
            if host in group.addresses:
                found.append(group.addresses.index(host) + 1)
    return sorted(found)


Load = PythonLoad | JavaLoad | NodeLoad


def _load(client: str, group: Group, endpoints: str, root: Path, seed: int, probe: Probe) -> Load:
    if client in ("python", "python-keepalive"):
        return PythonLoad(endpoints, keepalive=client == "python-keepalive")
    if client == "java":
        return JavaLoad(endpoints, root / "java.log")
    via = client.removeprefix("node-") if client != "node" else "proxy"
    return NodeLoad(group, endpoints, root / "node.log", via, seed, probe)


def _admin(group: Group, node_id: int) -> tuple[grpc.Channel, admin_pb2_grpc.AdminStub]:
    channel = grpc.insecure_channel(
        f"{group.addresses[node_id - 1]}:{CLIENT_PORT}", options=[("grpc.enable_http_proxy", 0)]
    )
    return channel, admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]


def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(POLL_S)


def agreed_leader(group: Group) -> int | None:
    """The leader every member names, when all answer and agree and it says it leads."""
    seen = [group.status(i) for i in group.ids]
    if any(s is None for s in seen):
        return None
    names = {s.leader_id for s in seen if s is not None}
    if len(names) != 1 or names == {""}:
        return None
    leader = int(names.pop())
    s = seen[leader - 1]
    return leader if s is not None and s.role == "leader" else None


def place_leader(group: Group, node_id: int) -> None:
    """Move leadership to ``node_id`` (admin ``TransferLeadership``), then wait for agreement."""
    _until(lambda: agreed_leader(group) is not None, SETTLE_TIMEOUT_S, "an agreed leader")
    for _ in range(5):
        leader = agreed_leader(group)
        if leader == node_id:
            return
        if leader is not None:
            channel, stub = _admin(group, leader)
            with channel, contextlib.suppress(grpc.RpcError):
                stub.TransferLeadership(
                    admin_pb2.TransferLeadershipRequest(
                        target_node_id=str(node_id), timeout_ms=5000
                    ),
                    timeout=10,
                )
        with contextlib.suppress(TimeoutError):
            _until(lambda: agreed_leader(group) == node_id, 10, f"node {node_id} to lead")
    raise TimeoutError(f"node {node_id} did not take leadership")


def _ready(group: Group, node_id: int) -> bool:
    """Whether ``node_id``'s ``/readyz`` answers 200."""
    url = f"http://{group.addresses[node_id - 1]}:{METRICS_PORT}/readyz"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=1.0) as reply:
            return int(reply.status) == 200
    except OSError:  # HTTPError (503) included
        return False


def _refuses(group: Group, node_id: int) -> bool:
    """Whether ``node_id``'s client port refuses a TCP connection."""
    try:
        with socket.create_connection((group.addresses[node_id - 1], CLIENT_PORT), timeout=1.0):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def _first(condition: Callable[[], bool], since_s: float, limit_s: float) -> float | None:
    """Seconds from ``since_s`` until ``condition()`` held (polled), None within ``limit_s``."""
    while time.monotonic() - since_s < limit_s:
        if condition():
            return round(time.monotonic() - since_s, 2)
        time.sleep(POLL_S)
    return None


def one_scenario(
    group: Group, name: str, client: str, partition_s: float, root: Path, seed: int,
    probe: Probe, client_address: str,
) -> dict[str, object]:  # fmt: skip
    """One cut and heal; ``seed`` draws ``node-service``'s members (printed with the figures)."""
    leader, links = ALL_SCENARIOS[name]
    blackholed = name in BLACKHOLED
    place_leader(group, leader)
    endpoints = ";".join(f"{a}:{CLIENT_PORT}" for a in group.addresses)
    load = _load(client, group, endpoints, root, seed, probe)
    load.startup()
    channel: list[int] | None = None
    try:
        _until(lambda: len(load.sends.snapshot()[0]) >= 5, SETTLE_TIMEOUT_S, "5 acks")
        if isinstance(load, NodeLoad):
            channel = load.channel_members(group)
        cut_s = time.monotonic()
        for a, b in links:
            group.cut(a, b)
        unready_s = refused_s = None
        if blackholed:  # its /readyz and port are out of the client's reach too
            group.cut_from(CUT_MEMBER, client_address)
        else:
            unready_s = _first(lambda: not _ready(group, CUT_MEMBER), cut_s, partition_s)
            refused_s = _first(lambda: _refuses(group, CUT_MEMBER), cut_s, partition_s)
        time.sleep(max(0.0, cut_s + partition_s - time.monotonic()))  # the partition's length
        group.heal()
        healed_s = time.monotonic()
        before = len(load.sends.snapshot()[0])
        _until(lambda: len(load.sends.snapshot()[0]) > before, SETTLE_TIMEOUT_S, "acks again")
        acked, failures = load.sends.snapshot()
    finally:
        group.heal()
        load.stop()
    _until(lambda: agreed_leader(group) is not None, SETTLE_TIMEOUT_S, "an agreed leader")
    worst = outage_s(acked, cut_s, healed_s)
    return {
        "scenario": name,
        "client": client,
        "partition_s": partition_s,
        "outage_s": round(worst, 2),
        "acked_during_cut": sum(1 for t in acked if cut_s < t < healed_s),
        "cut_member_unready_after_s": unready_s,
        "cut_member_port_refused_after_s": refused_s,
        "failed_sends": failures,
        "target_met": None if blackholed else worst <= OUTAGE_TARGET_S,
        **({} if channel is None else {"channel_members_at_cut": channel}),
        **_service_figures(load, cut_s, healed_s),
        "load_average_1m": round(os.getloadavg()[0], 1),
    }


def _service_figures(load: Load, cut_s: float, healed_s: float) -> dict[str, object]:
    """``node-service``: when the cut member left the Service's endpoints (None: it stayed)."""
    if not isinstance(load, NodeLoad) or load.slice is None:
        return {}
    at_s = load.slice.delisted_at_s.get(CUT_MEMBER)
    left = round(at_s - cut_s, 2) if at_s is not None and cut_s < at_s < healed_s else None
    assert load.proxy is not None
    return {
        "service_probe": [load.slice.probe.period_s, load.slice.probe.failures_max],
        "service_delisted_after_s": left,
        "service_connections": load.proxy.accepted_total,
        "service_refused": load.proxy.refused_total,
    }


def inner(spec: dict[str, object]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below
    nodes = [str(n) for n in spec["nodes"]]  # type: ignore[attr-defined]
    addresses = [str(a) for a in spec["addresses"]]  # type: ignore[attr-defined]
    clients = [str(c) for c in spec["clients"]]  # type: ignore[attr-defined]
    scenarios = [str(s) for s in spec["scenarios"]]  # type: ignore[attr-defined]
    partition_s = float(spec["partition_s"])  # type: ignore[arg-type]
    client_address = str(spec["client_address"])
    ok = True
    with tempfile.TemporaryDirectory(prefix="gannet-partition-clients-") as root_name:
        root = Path(root_name)
        group = Group(nodes, addresses, root)
        try:
            group.start()
            _until(lambda: agreed_leader(group) is not None, SETTLE_TIMEOUT_S, "a first leader")
            leader = agreed_leader(group)
            assert leader is not None
            channel, stub = _admin(group, leader)
            with channel:
                stub.CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=4), timeout=10)
                if any(c.startswith("node") for c in clients):  # its SimpleConsumer's group
                    request = admin_pb2.CreateGroupRequest(name=NODE_CLIENT.group, fifo=False)
                    stub.CreateGroup(request, timeout=10)
            runs = itertools.count(int(str(spec["seed"])))
            probe = Probe(float(str(spec["probe_period_s"])), int(str(spec["probe_failures"])))
            for client in clients:
                for name in scenarios:
                    seed = next(runs)
                    figures = one_scenario(
                        group, name, client, partition_s, root, seed, probe, client_address
                    )
                    figures["seed"] = seed
                    ok = ok and figures["target_met"] is not False
                    print(json.dumps(figures), flush=True)
        except BaseException:
            ok = False
            raise
        finally:
            group.heal()
            group.stop()
            if not ok:
                group.print_log_tails()
                _print_client_logs(root)
    return 0 if ok else 1


def _print_client_logs(root: Path, lines: int = 20) -> None:
    """The last ``lines`` of each client program's stderr (the directory goes with the run)."""
    for path in sorted(root.glob("*.log")):
        if not path.name.startswith("node") or path.name == "node.log":
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            print(f"--- {path.name} (tail)", *tail, sep="\n", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", action="append", choices=CLIENT_NAMES, default=None)
    parser.add_argument("--scenario", action="append", choices=tuple(ALL_SCENARIOS), default=None)
    parser.add_argument("--partition-s", type=float, default=PARTITION_S)
    parser.add_argument("--probe-period-s", type=float, default=PROBE_PERIOD_S)
    parser.add_argument("--probe-failures", type=int, default=PROBE_FAILURES_MAX)
    parser.add_argument(
        "--seed", type=int, default=None, help="the first scenario's seed (each next one: +1)"
    )
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner is not None:
        sys.exit(inner(json.loads(args.inner)))
    if args.probe_period_s <= 0:
        parser.error(f"--probe-period-s must be positive, not {args.probe_period_s}")
    if args.probe_failures < 1:
        parser.error(f"--probe-failures must be at least 1, not {args.probe_failures}")
    seed = args.seed if args.seed is not None else secrets.randbelow(1_000_000)
    clients, scenarios = args.client or ["python"], args.scenario or list(SCENARIOS)
    probe = Probe(args.probe_period_s, args.probe_failures)
    sys.exit(outer(clients, scenarios, args.partition_s, seed, probe))


if __name__ == "__main__":
    main()
