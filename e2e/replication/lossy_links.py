"""Random packet loss on every peer link: iptables ``statistic`` drops between network
namespaces (:mod:`e2e.replication.silent_link`'s namespaces and brokers), no proxy.

``make e2e-lossy-links`` (root only; needs ``ip`` and ``iptables``; about 1 min 30 s per round).
Three ``gannet broker run --flush sync`` processes, each in its own network namespace on a
bridge; the official Python client runs in the bridge's namespace with every member's endpoint
and sends paced messages (``--rate``, 50/s by default, one at a time) to a topic of the round.
After ``WARMUP_S`` every member drops each packet arriving from another member with the round's
probability (``iptables -A INPUT -s <member> -m statistic --mode random --probability p``): every
peer link loses that share in each direction, the client's traffic none. After ``--loss-s``
(60 s) the rules are flushed and the group watched ``SETTLE_S`` more.

Recorded per round, from every member's ``GetRaftStatus`` and ``/metrics`` sampled every
``SAMPLE_INTERVAL_S``: the leader and term over time (leader changes and term rises during the
loss), the longest stretch without a successful send (loss start to heal), sends acknowledged
and failed (by error name, with the first failure's words and every failure's time from the
loss start), acknowledged messages missing afterwards (each acknowledged message id looked up on
the final leader, and each member's queue counts), and the flaps of
``gannet_raft_peer_reachable`` (1 → 0 transitions, per member and peer). The kernel's drops
cannot be seeded; the round's seed draws the message body sizes (``BODY_BYTES``) and is printed.

The Python client's channel is on the first address (member 1): with ``--leader 2`` (or 3) the
leadership is moved there before each round, so every send is forwarded by a follower; with
``--leader 1`` none is; by default the round takes whoever leads.

Target (issue 34): no leader change and no term rise from the loss alone, 0 acknowledged
messages lost (sends that failed after the client's retries are counted, not part of the
target: the client knows they failed). One JSON line per round; exit status 0 when every round at
``--target-loss`` or below met it, 1 otherwise, 2 without root.

Two processes, as in :mod:`silent_link`: the outer one makes the namespaces and always deletes
them (and kills the inner session) in ``finally``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from e2e.faults import netns
from e2e.faults.netns import Namespaces
from e2e.replication.silent_link import CLIENT_PORT, METRICS_PORT, Group
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

WARMUP_S = 10.0
LOSS_S = 60.0
SETTLE_S = 10.0
SAMPLE_INTERVAL_S = 0.2
START_TIMEOUT_S = 60.0
CATCH_UP_TIMEOUT_S = 60.0
SEND_RATE_PER_S = 50.0
BODY_BYTES = (64, 4096)
"""The range of a message body's size, drawn from the round's seed."""
TARGET_LOSS = 0.3
"""Rounds at or below this loss rate must meet the target; above it they are context."""


# ---------------------------------------------------------------------------- outer
def outer(spec: dict[str, object]) -> int:
    if os.geteuid() != 0:
        print("e2e-lossy-links needs root (network namespaces, iptables)", file=sys.stderr)
        return 2
    spaces = Namespaces(3, prefix="gll")
    try:
        spaces.create()
        for ns in spaces.nodes:
            for setting in spec["sysctls"]:  # type: ignore[attr-defined]
                netns.set_sysctl(ns, str(setting))
        full = {
            **spec,
            "nodes": spaces.nodes,
            "addresses": [spaces.address(i) for i in (1, 2, 3)],
        }
        with netns.inner_process(spaces, "e2e.replication.lossy_links", full) as inner:
            return inner.wait()
    finally:
        spaces.delete()


# ---------------------------------------------------------------------------- inner
@dataclass
class Sends:
    """Acknowledged sends (answer time, message id), failures by error name and the first
    failure's words of each name."""

    acked: list[tuple[float, str]] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    failed_at_s: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, at_s: float, message_id: str) -> None:
        with self.lock:
            self.acked.append((at_s, message_id))

    def fail(self, kind: str, words: str = "") -> None:
        with self.lock:
            self.failures[kind] = self.failures.get(kind, 0) + 1
            self.examples.setdefault(kind, words[:300])
            self.failed_at_s.append(time.monotonic())

    def snapshot(self) -> tuple[list[tuple[float, str]], dict[str, int]]:
        with self.lock:
            return list(self.acked), dict(self.failures)


class PacedProducer(threading.Thread):
    """The official Python Producer sending one message at a time, paced at ``rate_per_s``
    (a send slower than the pace is followed at once by the next)."""

    def __init__(self, endpoints: str, topic: str, rate_per_s: float, seed: int) -> None:
        super().__init__(name="paced-producer", daemon=True)
        config = ClientConfiguration(endpoints, Credentials(), request_timeout=3)
        self.producer = Producer(config, (topic,))
        self.topic = topic
        self.interval_s = 1.0 / rate_per_s
        self.random = random.Random(seed)
        self.sends = Sends()
        self.done = threading.Event()

    def run(self) -> None:
        next_s = time.monotonic()
        for number in itertools.count(1):
            if self.done.is_set():
                return
            message = Message()
            message.topic = self.topic
            message.body = f"{number}:".encode().ljust(self.random.randint(*BODY_BYTES), b"x")
            try:
                receipt = self.producer.send(message)
                self.sends.ack(time.monotonic(), str(receipt.message_id))
            except Exception as exc:  # the client's failure after its retries: counted
                self.sends.fail(type(exc).__name__, str(exc))
            next_s = max(next_s + self.interval_s, time.monotonic() - self.interval_s)
            self.done.wait(max(0.0, next_s - time.monotonic()))

    def startup(self) -> None:
        self.producer.startup()
        self.start()

    def stop(self) -> None:
        self.done.set()
        self.join(30)
        with contextlib.suppress(Exception):
            self.producer.shutdown()


@dataclass
class Sample:
    at_s: float
    roles: dict[int, str]
    terms: dict[int, int]
    leaders: dict[int, str]
    commits: dict[int, int]
    reachable: dict[tuple[int, int], int]
    """(member, peer) → ``gannet_raft_peer_reachable`` on that member's /metrics."""


class Sampler(threading.Thread):
    """Every member's Raft status and peer reachability every ``SAMPLE_INTERVAL_S``."""

    def __init__(self, group: Group) -> None:
        super().__init__(name="sampler", daemon=True)
        self.group = group
        self.samples: list[Sample] = []
        self.done = threading.Event()
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _reachable(self, member: int) -> dict[int, int]:
        url = f"http://{self.group.addresses[member - 1]}:{METRICS_PORT}/metrics"
        try:
            with self._opener.open(url, timeout=1.0) as reply:
                text = reply.read().decode()
        except OSError:
            return {}
        pattern = r'^gannet_raft_peer_reachable\{[^}]*peer="(\d+)"[^}]*\} (\S+)$'
        return {int(p): int(float(v)) for p, v in re.findall(pattern, text, re.MULTILINE)}

    def run(self) -> None:
        while not self.done.is_set():
            at_s = time.monotonic()
            sample = Sample(at_s, {}, {}, {}, {}, {})
            for i in self.group.ids:
                status = self.group.status(i)
                if status is not None:
                    sample.roles[i] = status.role
                    sample.terms[i] = status.term
                    sample.leaders[i] = status.leader_id
                    sample.commits[i] = status.commit_offset
                for peer, value in self._reachable(i).items():
                    sample.reachable[(i, peer)] = value
            self.samples.append(sample)
            self.done.wait(max(0.0, SAMPLE_INTERVAL_S - (time.monotonic() - at_s)))

    def stop(self) -> None:
        self.done.set()
        self.join(10)


def longest_gap_s(acked_at_s: list[float], start_s: float, end_s: float) -> float:
    """The longest stretch in ``[start_s, end_s]`` without a successful send."""
    marks = [start_s, *sorted(t for t in acked_at_s if start_s < t < end_s), end_s]
    return max(b - a for a, b in itertools.pairwise(marks))


def raft_figures(samples: list[Sample], start_s: float, end_s: float) -> dict[str, object]:
    """Leaders and terms seen in ``[start_s, end_s]``: the distinct leaders (in order), the term
    rise, the flaps of peer reachability, and the time line of changes."""
    window = [s for s in samples if start_s <= s.at_s <= end_s]
    leaders: list[str] = []
    timeline: list[str] = []
    flaps: dict[str, int] = {}
    previous: Sample | None = None
    for s in window:
        named = {v for v in s.leaders.values() if v}
        leading = [i for i, role in s.roles.items() if role == "leader"]
        for i in leading:
            if not leaders or leaders[-1] != str(i):
                leaders.append(str(i))
        if previous is not None:
            changed = [
                f"{i}:{previous.roles.get(i)}/{previous.terms.get(i)}->{s.roles[i]}/{s.terms[i]}"
                for i in s.roles
                if i in previous.roles
                and (previous.roles[i], previous.terms[i]) != (s.roles[i], s.terms[i])
            ]
            if changed:
                at = f"+{s.at_s - start_s:.1f}s"
                timeline.append(f"{at} {' '.join(changed)} named={sorted(named)}")
            for key, value in s.reachable.items():
                if previous.reachable.get(key) == 1 and value == 0:
                    name = f"{key[0]}->{key[1]}"
                    flaps[name] = flaps.get(name, 0) + 1
        previous = s
    terms = [t for s in window for t in s.terms.values()]
    return {
        "leaders": leaders,
        "leader_changes": max(0, len(leaders) - 1),
        "term_first": min(terms) if terms else None,
        "term_last": max(terms) if terms else None,
        "term_rise": (max(terms) - min(terms)) if terms else None,
        "unreachable_flaps": flaps,
        "timeline": timeline[:20],
    }


def _admin(group: Group, node_id: int) -> tuple[grpc.Channel, admin_pb2_grpc.AdminStub]:
    channel = grpc.insecure_channel(
        f"{group.addresses[node_id - 1]}:{CLIENT_PORT}", options=[("grpc.enable_http_proxy", 0)]
    )
    return channel, admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]


def _until(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(SAMPLE_INTERVAL_S)


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


def lose_at_random(group: Group, probability: float) -> None:
    """Every member drops each packet from every other member with ``probability``."""
    for i in group.ids:
        for j in group.ids:
            if i != j:
                netns.drop_incoming_at_random(
                    group.nodes[i - 1], group.addresses[j - 1], probability
                )


def heal_loss(group: Group) -> None:
    for i in group.ids:
        netns.flush(group.nodes[i - 1])


def missing(
    group: Group, leader: int, topic: str, acked: list[tuple[float, str]]
) -> dict[str, int]:
    """Acknowledged messages not found: by id on ``leader``; per member, how many fewer messages
    its queues hold than were acknowledged (0 when it holds at least as many)."""
    found_missing = 0
    channel, stub = _admin(group, leader)
    with channel:
        for _, message_id in acked:
            request = admin_pb2.QueryMessageRequest(topic=topic, message_id=message_id)
            reply = stub.QueryMessage(request, timeout=10)
            if not reply.messages:
                found_missing += 1
    figures = {"by_id_on_leader": found_missing}
    for i in group.ids:
        channel, stub = _admin(group, i)
        with channel:
            reply = stub.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic), timeout=10)
        held = sum(q.max_offset - q.min_offset for q in reply.queues)
        figures[f"short_on_{i}"] = max(0, len(acked) - held)
    return figures


def lead_with(group: Group, wanted: int) -> None:
    """Make member ``wanted`` the leader (a leadership transfer) unless it leads already."""
    leader = agreed_leader(group)
    if leader == wanted:
        return
    channel, stub = _admin(group, wanted)
    with channel:
        stub.TransferLeadership(
            admin_pb2.TransferLeadershipRequest(target_node_id=str(wanted)), timeout=10
        )
    _until(lambda: agreed_leader(group) == wanted, START_TIMEOUT_S, f"member {wanted} leading")


def one_round(
    group: Group,
    round_no: int,
    probability: float,
    loss_s: float,
    rate: float,
    seed: int,
    wanted_leader: int | None = None,
) -> dict[str, object]:
    _until(lambda: agreed_leader(group) is not None, START_TIMEOUT_S, "an agreed leader")
    if wanted_leader is not None:
        lead_with(group, wanted_leader)
    leader = agreed_leader(group)
    assert leader is not None
    topic = f"Lossy{round_no}"
    channel, stub = _admin(group, leader)
    with channel:
        stub.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=4), timeout=10)
    endpoints = ";".join(f"{a}:{CLIENT_PORT}" for a in group.addresses)
    sampler = Sampler(group)
    producer = PacedProducer(endpoints, topic, rate, seed)
    sampler.start()
    producer.startup()
    try:
        time.sleep(WARMUP_S)
        lose_at_random(group, probability)
        loss_at = time.monotonic()
        time.sleep(loss_s)
        heal_loss(group)
        healed_at = time.monotonic()
        time.sleep(SETTLE_S)
    finally:
        heal_loss(group)
        producer.stop()
        sampler.stop()
    acked, failures = producer.sends.snapshot()
    during = [t for t, _ in acked if loss_at <= t <= healed_at]
    _until(lambda: agreed_leader(group) is not None, START_TIMEOUT_S, "a leader after the heal")
    final = agreed_leader(group)
    assert final is not None

    def caught_up() -> bool:
        commits = [s.commit_offset for s in (group.status(i) for i in group.ids) if s]
        return len(commits) == len(group.ids) and len(set(commits)) == 1

    _until(caught_up, CATCH_UP_TIMEOUT_S, "every member at the same commit offset")
    raft = raft_figures(sampler.samples, loss_at, healed_at)
    lost = missing(group, final, topic, acked)
    figures: dict[str, object] = {
        "round": round_no,
        "seed": seed,
        "loss": probability,
        "loss_s": loss_s,
        "leader_before": leader,
        "leader_after": final,
        **raft,
        "longest_without_ack_s": round(longest_gap_s(during, loss_at, healed_at), 2),
        "acked": len(acked),
        "acked_during_loss": len(during),
        "acked_per_s_during_loss": round(len(during) / loss_s, 1),
        "failed": failures,
        "failed_examples": dict(producer.sends.examples),
        "failed_at_s": [round(t - loss_at, 1) for t in producer.sends.failed_at_s],
        "lost": lost,
    }
    figures["target_met"] = (
        raft["leader_changes"] == 0 and raft["term_rise"] == 0 and not any(lost.values())
    )
    return figures


def inner(spec: dict[str, object]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below
    nodes = [str(n) for n in spec["nodes"]]  # type: ignore[attr-defined]
    addresses = [str(a) for a in spec["addresses"]]  # type: ignore[attr-defined]
    losses = [float(p) for p in spec["losses"]]  # type: ignore[attr-defined]
    loss_s = float(str(spec["loss_s"]))
    rate = float(str(spec["rate"]))
    target = float(str(spec["target_loss"]))
    sysctls = [str(s) for s in spec["sysctls"]]  # type: ignore[attr-defined]
    seeds = itertools.count(int(str(spec["seed"])))
    wanted = spec.get("leader")
    wanted_leader = None if wanted is None else int(str(wanted))
    ok = True
    with tempfile.TemporaryDirectory(prefix="gannet-lossy-links-") as root_name:
        root = Path(root_name)
        group = Group(nodes, addresses, root)
        try:
            group.start()
            for round_no, probability in enumerate(losses):
                figures = one_round(
                    group, round_no, probability, loss_s, rate, next(seeds), wanted_leader
                )
                figures["sysctls"] = sysctls
                figures["leader_wanted"] = wanted_leader
                if probability <= target:
                    ok = ok and bool(figures["target_met"])
                print(json.dumps(figures), flush=True)
        except BaseException:
            ok = False
            raise
        finally:
            with contextlib.suppress(Exception):
                heal_loss(group)
            group.stop()
            if not ok:
                group.print_log_tails(40)
    return 0 if ok else 1


def _sysctl_argument(text: str) -> str:
    try:
        return netns.sysctl_setting(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loss", type=float, action="append", default=None,
                        help="a round's drop probability per packet (repeatable; "
                        "default 0.3 three times, then 0.2 and 0.4)")  # fmt: skip
    parser.add_argument("--loss-s", type=float, default=LOSS_S)
    parser.add_argument("--rate", type=float, default=SEND_RATE_PER_S)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--target-loss", type=float, default=TARGET_LOSS)
    parser.add_argument("--sysctl", action="append", default=[], metavar="NAME=VALUE",
                        type=_sysctl_argument,
                        help="a network sysctl set in every member's namespace (repeatable), "
                        "e.g. net.ipv4.tcp_thin_linear_timeouts=1")  # fmt: skip
    parser.add_argument("--leader", type=int, choices=(1, 2, 3), default=None,
                        help="before each round, move the leadership to this member (the "
                        "Python client's channel is on member 1: 2 or 3 sends through a "
                        "follower); default: whoever leads")  # fmt: skip
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner is not None:
        sys.exit(inner(json.loads(args.inner)))
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    print(json.dumps({"seed": seed}), flush=True)
    spec: dict[str, object] = {
        "losses": args.loss or [0.3, 0.3, 0.3, 0.2, 0.4],
        "loss_s": args.loss_s,
        "rate": args.rate,
        "seed": seed,
        "target_loss": args.target_loss,
        "sysctls": args.sysctl,
        "leader": args.leader,
    }
    sys.exit(outer(spec))


if __name__ == "__main__":
    main()
