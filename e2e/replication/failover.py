"""Failover as the official clients see it: leader SIGKILL / SIGSTOP -> next ack.

A 3-member group of broker processes (``--flush sync``, peers dialling each other directly on
127.0.0.1) and ONE official Producer, created once and never restarted: what a user's
application does. ``--client python`` (default): ``rocketmq-python-client`` given every
member's endpoint (``a;b;c``, request timeout 3 s); ``node`` / ``java``: the official Node.js
(1.0.8) or Java (5.0.8) client in its own process (:mod:`e2e.replication.clients`; the Node.js
client dials one address, so it is given a Service-like proxy in front of every member). It
sends one message at a time, each with a unique key, and records every acknowledged send with
the times it began and was answered. Then, ``--kills`` times: wait until the client is steadily
acknowledged, SIGKILL (or SIGSTOP) the current leader, and measure the time from the signal to
the acknowledgement of the first send begun after it (the client's next send: an answer already
on its way at the fault does not count); restart the killed member (SIGCONT the stopped one
after ``--stop-s``), wait until it is back in the group, go on.

The Python client's gRPC channel sits on one member (``pick_first`` over the sorted addresses,
:func:`attached_member`). Killing that member breaks its connection and the channel moves on;
*stopping* it does not (the stopped process's kernel keeps the TCP connection open and the
client sets no keepalive), so the client waits until SIGCONT: such stops are reported apart and
not held to the target.

At the end: every acknowledged message is at its queue and offset on every member, replicas are
byte-identical up to the commit offset, at most one leader per term
(:meth:`harness.ProcessGroup.verify`), and extra copies of acknowledged keys are counted
(duplicates: a send the client timed out on and retried that had committed). With
``--consumer simple`` (an official SimpleConsumer receives and acks all along) or ``--consumer
push`` (an official PushConsumer), every acknowledged send must reach the consumer
(:mod:`e2e.replication.consumers`); its fault -> next ack (delivery) time is reported.

Run ``make e2e-failover`` or ``python -m e2e.replication.failover [--kills N]
[--mode kill|stop|both] [--stop-s S] [--client python|node|java|all] [--consumer [simple|push]]``;
exit code 0 when every gap is within ``--target-s`` (default 3 s) and nothing acknowledged was
lost; ``tests/replication/test_failover_e2e.py`` runs a short version (2 kills).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from e2e.processes import wait_for
from e2e.replication.clients import AckLog, ExternalLoad, ServiceProxy
from e2e.replication.consumers import PushLoad, Settlement, SimpleLoad
from e2e.replication.harness import ProcessGroup, Receipt, VerifyReport
from gannet.node.protocol.gen import admin_pb2

TOPIC = "E2eFailover"
GROUP = "GE2eFailover"
STEADY_ACKS = 20
GAP_LIMIT_S = 60.0
console = Console()


class ClientLoad(threading.Thread):
    """One official Python Producer on every member's endpoint, never restarted; one send at a
    time."""

    def __init__(self, group: ProcessGroup, topic: str) -> None:
        super().__init__(name="failover-load", daemon=True)
        endpoints = ";".join(group.client_endpoint(i) for i in group.ids)
        self.producer = Producer(
            ClientConfiguration(endpoints, Credentials(), request_timeout=3), (topic,)
        )
        self.topic = topic
        self.acks = AckLog()
        self.done = threading.Event()

    def startup(self) -> None:
        """Start the producer, then the sending thread."""
        self.producer.startup()
        self.start()

    def run(self) -> None:
        number = 0
        while not self.done.is_set():
            number += 1
            key = f"f{number}"
            message = Message()
            message.topic = self.topic
            message.body = key.encode()
            message.keys = key
            started = time.monotonic()
            try:
                receipt = self.producer.send(message)
            except Exception as exc:  # the client's retries ran out: count, send the next one
                self.acks.failed(type(exc).__name__)
                continue
            self.acks.acked(
                Receipt(key, str(receipt.message_id), int(receipt.offset), time.monotonic()),
                started,
            )

    def stop(self) -> list[Receipt]:
        self.done.set()
        self.join(30)
        self.producer.shutdown()
        return list(self.acks.receipts)


@dataclass
class Result:
    mode: str
    gaps_s: list[float] = field(default_factory=list)
    attached_gaps_s: list[float] = field(default_factory=list)
    """SIGSTOPs of the member the client's channel is on (it stalls until SIGCONT)."""
    failures: dict[str, int] = field(default_factory=dict)
    client: str = "python"
    """The producer's client: "python", "node", "java" or "remoting"."""
    consumer: str = ""
    """"simple" or "push" when a consumer ran along (``run(consumer=...)``)."""
    consumer_gaps_s: list[float] = field(default_factory=list)
    """Fault -> the consumer's first ack (SimpleConsumer) or delivery (PushConsumer) after it."""
    consumer_failures: int = 0
    push_silences_s: list[float] = field(default_factory=list)
    """Per fault: the PushConsumer's longest time without a delivery, from the fault until the
    member was back and the producer steady again."""
    settlement: Settlement | None = None
    """What became of the acknowledged sends at the consumer."""
    report: VerifyReport | None = None

    def summary(self) -> str:
        gaps = self.gaps_s
        median = statistics.median(gaps) if gaps else float("nan")
        assert self.report is not None
        attached = self.attached_gaps_s
        on_channel = (
            f"; of the member the client's channel is on ({len(attached)}): "
            f"{', '.join(f'{g:.2f}' for g in attached)} s"
            if attached
            else ""
        )
        return (
            f"{self.client} {self.mode}: {len(gaps) + len(attached)} faults, leader fault -> "
            f"next acknowledged send: median {median:.2f} s, "
            f"max {max(gaps, default=float('nan')):.2f} s "
            f"(each: {', '.join(f'{g:.2f}' for g in gaps)}){on_channel}; "
            f"{self.report.acknowledged} "
            f"acknowledged, 0 lost, {self.report.duplicates} duplicates, "
            f"{sum(self.failures.values())} sends failed after the client's retries "
            f"{self.failures}, {self.report.terms} terms{self._consumer()}"
        )

    def _consumer(self) -> str:
        settled = self.settlement
        if settled is None:
            return ""
        gaps = self.consumer_gaps_s or [float("nan")]
        kind, event = (
            ("SimpleConsumer", "ack") if self.consumer == "simple" else ("PushConsumer", "delivery")
        )
        return (
            f"; {kind} ({len(self.consumer_gaps_s)} faults with a {event} after them): fault -> "
            f"next {event} median {statistics.median(gaps):.2f} s, max {max(gaps):.2f} s, "
            f"{self.consumer_failures} receive/ack calls failed after the client's retries, "
            f"{len(settled.missing)} acknowledged messages never received "
            f"({len(settled.never_delivered)} never delivered, {len(settled.stuck)} whose ack "
            f"failed and were not delivered again), {len(settled.ack_took_effect)} acks whose "
            f"answer was lost in a fault but took effect (the group's offset passed them), "
            f"{settled.duplicates} deliveries beyond the first{self._silences()}"
        )

    def _silences(self) -> str:
        quiet = self.push_silences_s
        if not quiet:
            return ""
        return (
            f"; longest time without a delivery after a fault: median "
            f"{statistics.median(quiet):.2f} s, max {max(quiet):.2f} s"
        )


def run(
    root: Path,
    kills: int,
    mode: str,
    stop_s: float,
    *,
    consumer: str = "",
    client: str = "python",
) -> Result:
    """``kills`` leader faults of ``mode`` ("kill" or "stop") on a fresh group in ``root``;
    ``consumer`` "simple" (a SimpleConsumer receives and acks all along) or "push" (a
    PushConsumer consumes all along); ``client`` "python", "node", "java" or "remoting" (the
    producer)."""
    group = ProcessGroup(root, 3, flush="sync", proxied=False, remoting=client == "remoting")
    result = Result(mode, consumer=consumer, client=client)
    reader: SimpleLoad | PushLoad | None = None
    service: ServiceProxy | None = None
    try:
        group.start()
        leader = group.leader()
        group.create_topic(TOPIC)
        if consumer:
            group.admin_call(leader, "CreateGroup", admin_pb2.CreateGroupRequest(name=GROUP))
            reader = (SimpleLoad if consumer == "simple" else PushLoad)(group, TOPIC, GROUP)
            reader.start()
        load: ClientLoad | ExternalLoad
        if client == "python":
            load = ClientLoad(group, TOPIC)
        else:
            endpoints = ";".join(group.client_endpoint(i) for i in group.ids)
            if client == "remoting":  # every member is a name server
                endpoints = ";".join(group.remoting_endpoint(i) for i in group.ids)
            if client == "node":  # one address only: a Service in front of every member
                service = ServiceProxy(
                    [("127.0.0.1", group.client_ports[i - 1]) for i in group.ids]
                )
                endpoints = service.endpoint
            load = ExternalLoad(client, endpoints, TOPIC, root / f"{client}.log")
        load.startup()
        acks = load.acks
        try:
            acks.wait_more(STEADY_ACKS)
            for number in range(kills):
                leader = group.current_leader()
                # where the Python client's channel sits is known; the others' is not
                attached = client == "python" and leader == attached_member(group)
                at = time.monotonic()
                if mode == "kill":
                    group.kill(leader)
                    acked: float | None = acks.first_ack_after(at, GAP_LIMIT_S)
                    group.start(leader)
                else:
                    group.pause(leader)
                    try:
                        acked = acks.first_ack_after(at, stop_s)
                    except AssertionError:  # the client's channel sits on the stopped member
                        acked = None
                    remaining = stop_s - (time.monotonic() - at)
                    if remaining > 0:
                        time.sleep(remaining)  # the fault's length itself: nothing to await
                    group.resume(leader)
                    if acked is None:
                        acked = acks.first_ack_after(at, GAP_LIMIT_S)
                assert acked is not None
                gap = acked - at
                if reader is not None:
                    consumed = (
                        reader.first_ack_after(at, GAP_LIMIT_S)
                        if isinstance(reader, SimpleLoad)
                        else reader.first_delivery_after(at, GAP_LIMIT_S)
                    )
                    if consumed is not None:
                        result.consumer_gaps_s.append(consumed - at)
                stalled = attached and mode == "stop"  # a killed member resets the connection
                (result.attached_gaps_s if stalled else result.gaps_s).append(gap)
                where = " (the member the client's channel is on)" if attached else ""
                console.print(
                    f"  {mode} {number + 1}: node {leader}{where}, next ack after {gap:.2f} s"
                )
                wait_for(
                    functools.partial(_member_back, group, leader),
                    60.0,
                    f"node {leader} back in the group",
                )
                acks.wait_more(STEADY_ACKS)
                if isinstance(reader, PushLoad):
                    result.push_silences_s.append(reader.deliveries.longest_silence(at))
        finally:
            receipts = load.stop()
            result.failures = acks.failures
        if reader is not None:
            settled = reader.settle({r.key for r in receipts}, GAP_LIMIT_S)
            reader.stop()
            result.settlement = settled
            if isinstance(reader, SimpleLoad):
                result.consumer_failures = reader.failures
                for key in sorted(settled.missing | settled.ack_took_effect):
                    failure = reader.ack_failures.get(key)
                    console.print(f"  {key}: ack failed ({failure}), not delivered again")
        result.report = group.verify(TOPIC, receipts)
        return result
    finally:
        if service is not None:
            service.close()
        group.close()


def attached_member(group: ProcessGroup) -> int:
    """The member the Python client's channel uses: gRPC ``pick_first`` over the route's
    addresses, which the client sorts as ``host:port`` strings (``api/routes.py``)."""
    return min(group.ids, key=group.client_endpoint)


def _member_back(group: ProcessGroup, node_id: int) -> bool:
    status = group.status(node_id)
    return status is not None and status.leader_id != "" and status.role != "candidate"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="faults per mode (default 10)")
    parser.add_argument("--mode", choices=("kill", "stop", "both"), default="both")
    parser.add_argument("--stop-s", type=float, default=5.0, help="SIGSTOP length (default 5)")
    parser.add_argument("--target-s", type=float, default=3.0, help="pass when every gap <= it")
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it")
    parser.add_argument(
        "--consumer",
        nargs="?",
        const="simple",
        default="",
        choices=("simple", "push"),
        help="a SimpleConsumer (default) or PushConsumer consumes all along",
    )
    parser.add_argument(
        "--client",
        choices=("python", "node", "java", "remoting", "all"),
        default="python",
        help="the official client that produces (all: python, node and java in turn; "
        "remoting: the 4.9.8 remoting DefaultMQProducer, its defaults)",
    )
    args = parser.parse_args(argv)
    clients = ["python", "node", "java"] if args.client == "all" else [args.client]
    modes = ["kill", "stop"] if args.mode == "both" else [args.mode]
    ok = True
    for client, mode in [(c, m) for c in clients for m in modes]:
        with tempfile.TemporaryDirectory(prefix=f"gannet-failover-{mode}-") as temporary:
            root = args.keep / f"{client}-{mode}" if args.keep is not None else Path(temporary)
            console.print(f"[bold]{client} {mode}[/bold] x {args.kills} ({root})")
            result = run(root, args.kills, mode, args.stop_s, consumer=args.consumer, client=client)
            console.print(result.summary())
            if max(result.gaps_s, default=0.0) > args.target_s:
                console.print(f"[red]a gap exceeds the {args.target_s} s target[/red]")
                ok = False
            if result.settlement is not None and result.settlement.missing:
                console.print("[red]the consumer never received some acknowledged messages[/red]")
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
