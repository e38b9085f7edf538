"""Failover as the official Python client sees it: leader SIGKILL / SIGSTOP -> next ack.

A 3-member group of broker processes (``--flush sync``, peers dialling each other directly on
127.0.0.1) and ONE official ``rocketmq-python-client`` Producer given every member's endpoint
(``a;b;c``, request timeout 3 s), created once and never restarted: what a user's application
does. It sends one message at a time, each with a unique key, and records every acknowledged
send with the times it began and was answered. Then, ``--kills`` times: wait until the client
is steadily acknowledged, SIGKILL (or SIGSTOP) the current leader, and measure the time from
the signal to the acknowledgement of the first send begun after it (the client's next send:
an answer already on its way at the fault does not count); restart the killed member (SIGCONT
the stopped one after ``--stop-s``), wait until it is back in the group, go on.

The client's gRPC channel sits on one member (``pick_first`` over the sorted addresses,
:func:`attached_member`). Killing that member breaks its connection and the channel moves on;
*stopping* it does not (the stopped process's kernel keeps the TCP connection open and the
client sets no keepalive), so the client waits until SIGCONT: such stops are reported apart and
not held to the target.

At the end: every acknowledged message is at its queue and offset on every member, replicas are
byte-identical up to the commit offset, at most one leader per term
(:meth:`harness.ProcessGroup.verify`), and extra copies of acknowledged keys are counted
(duplicates: a send the client timed out on and retried that had committed).

Run ``make e2e-failover`` (10 SIGKILLs and 10 SIGSTOPs) or
``python -m e2e.replication.failover [--kills N] [--mode kill|stop|both] [--stop-s S]
[--consumer]`` (``--consumer``: an official SimpleConsumer receives and acks all along; its
fault -> next ack time is reported, and every acknowledged send must reach it);
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
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from e2e.replication.harness import ProcessGroup, Receipt, VerifyReport, wait_for
from gannet.node.api.gen import admin_pb2

TOPIC = "E2eFailover"
GROUP = "GE2eFailover"
INVISIBLE_S = 10
STEADY_ACKS = 20
GAP_LIMIT_S = 60.0
console = Console()


class ClientLoad(threading.Thread):
    """One official Producer on every member's endpoint, never restarted; one send at a time."""

    def __init__(self, group: ProcessGroup, topic: str) -> None:
        super().__init__(name="failover-load", daemon=True)
        endpoints = ";".join(group.client_endpoint(i) for i in group.ids)
        self.producer = Producer(
            ClientConfiguration(endpoints, Credentials(), request_timeout=3), (topic,)
        )
        self.topic = topic
        self.receipts: list[Receipt] = []
        self.started: list[float] = []
        """When each acknowledged send began (monotonic), parallel to ``receipts``."""
        self.failures: dict[str, int] = {}
        """Sends that failed after the client's own retries, by exception type."""
        self.done = threading.Event()
        self.progress = threading.Condition()

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
                kind = type(exc).__name__
                self.failures[kind] = self.failures.get(kind, 0) + 1
                continue
            with self.progress:
                self.receipts.append(
                    Receipt(key, str(receipt.message_id), int(receipt.offset), time.monotonic())
                )
                self.started.append(started)
                self.progress.notify_all()

    def first_ack_after(self, moment: float, timeout_s: float) -> float:
        """Monotonic time of the first acknowledgement of a send begun after ``moment`` (an
        answer already on its way at the fault does not count)."""
        with self.progress:
            ok = self.progress.wait_for(
                lambda: bool(self.started) and self.started[-1] > moment, timeout_s
            )
            assert ok, f"no send acknowledged within {timeout_s} s of the fault"
            return next(
                r.acked_at_s for r, t in zip(self.receipts, self.started, strict=True) if t > moment
            )

    def wait_more(self, count: int, timeout_s: float = 60.0) -> None:
        with self.progress:
            target = len(self.receipts) + count
            ok = self.progress.wait_for(lambda: len(self.receipts) >= target, timeout_s)
        assert ok, f"fewer than {count} sends acknowledged in {timeout_s} s"

    def stop(self) -> list[Receipt]:
        self.done.set()
        self.join(30)
        self.producer.shutdown()
        return list(self.receipts)


class ConsumerLoad(threading.Thread):
    """One official SimpleConsumer on every member's endpoint: receive up to 16, ack each."""

    def __init__(self, group: ProcessGroup, topic: str) -> None:
        super().__init__(name="failover-consumer", daemon=True)
        endpoints = ";".join(group.client_endpoint(i) for i in group.ids)
        self.consumer = SimpleConsumer(
            ClientConfiguration(endpoints, Credentials(), request_timeout=3),
            GROUP,
            {topic: FilterExpression("*")},
            await_duration=5,  # the broker long-polls at least 5 s
        )
        self.acked_keys: set[str] = set()
        self.acked_at: list[float] = []
        self.failures = 0
        self.done = threading.Event()
        self.progress = threading.Condition()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                messages = self.consumer.receive(16, INVISIBLE_S)
            except Exception:  # the client's retries ran out: poll again
                self.failures += 1
                continue
            for message in messages:
                try:
                    self.consumer.ack(message)
                except Exception:  # comes back after its invisible time
                    self.failures += 1
                    continue
                with self.progress:
                    self.acked_keys.add(bytes(message.body).decode())
                    self.acked_at.append(time.monotonic())
                    self.progress.notify_all()

    def first_ack_after(self, moment: float, timeout_s: float) -> float | None:
        with self.progress:
            self.progress.wait_for(
                lambda: bool(self.acked_at) and self.acked_at[-1] > moment, timeout_s
            )
            return next((t for t in self.acked_at if t > moment), None)

    def drained(self, keys: set[str], timeout_s: float) -> set[str]:
        """The keys of ``keys`` not acknowledged by the consumer within ``timeout_s``."""
        with self.progress:
            self.progress.wait_for(lambda: keys <= self.acked_keys, timeout_s)
            return keys - self.acked_keys

    def stop(self) -> None:
        self.done.set()
        self.join(30)
        self.consumer.shutdown()


@dataclass
class Result:
    mode: str
    gaps_s: list[float] = field(default_factory=list)
    attached_gaps_s: list[float] = field(default_factory=list)
    """SIGSTOPs of the member the client's channel is on (it stalls until SIGCONT)."""
    failures: dict[str, int] = field(default_factory=dict)
    consumer_gaps_s: list[float] = field(default_factory=list)
    """Fault -> the SimpleConsumer's first ack after it (with ``consumer=True``)."""
    consumer_failures: int = 0
    consumer_missing: int = -1
    """Acknowledged sends the consumer had not acknowledged 60 s after the last fault."""
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
            f"{self.mode}: {len(gaps) + len(attached)} faults, leader fault -> next acknowledged "
            f"send: median {median:.2f} s, max {max(gaps, default=float('nan')):.2f} s "
            f"(each: {', '.join(f'{g:.2f}' for g in gaps)}){on_channel}; "
            f"{self.report.acknowledged} "
            f"acknowledged, 0 lost, {self.report.duplicates} duplicates, "
            f"{sum(self.failures.values())} sends failed after the client's retries "
            f"{self.failures}, {self.report.terms} terms{self._consumer()}"
        )

    def _consumer(self) -> str:
        if self.consumer_missing < 0:
            return ""
        gaps = self.consumer_gaps_s or [float("nan")]
        return (
            f"; SimpleConsumer ({len(self.consumer_gaps_s)} faults with an ack after them): "
            f"fault -> next ack median {statistics.median(gaps):.2f} s, max "
            f"{max(gaps):.2f} s, {self.consumer_failures} receive/ack calls failed after the "
            f"client's retries, {self.consumer_missing} acknowledged messages never received"
        )


def run(root: Path, kills: int, mode: str, stop_s: float, *, consumer: bool = False) -> Result:
    """``kills`` leader faults of ``mode`` ("kill" or "stop") on a fresh group in ``root``;
    with ``consumer``, a SimpleConsumer receives and acks all along."""
    group = ProcessGroup(root, 3, flush="sync", proxied=False)
    result = Result(mode)
    reader: ConsumerLoad | None = None
    try:
        group.start()
        leader = group.leader()
        group.create_topic(TOPIC)
        if consumer:
            group.admin_call(leader, "CreateGroup", admin_pb2.CreateGroupRequest(name=GROUP))
            reader = ConsumerLoad(group, TOPIC)
            reader.consumer.startup()
            reader.start()
        load = ClientLoad(group, TOPIC)
        load.producer.startup()
        load.start()
        try:
            load.wait_more(STEADY_ACKS)
            for number in range(kills):
                leader = group.current_leader()
                attached = leader == attached_member(group)
                at = time.monotonic()
                if mode == "kill":
                    group.kill(leader)
                    acked: float | None = load.first_ack_after(at, GAP_LIMIT_S)
                    group.start(leader)
                else:
                    group.pause(leader)
                    try:
                        acked = load.first_ack_after(at, stop_s)
                    except AssertionError:  # the client's channel sits on the stopped member
                        acked = None
                    remaining = stop_s - (time.monotonic() - at)
                    if remaining > 0:
                        time.sleep(remaining)  # the fault's length itself: nothing to await
                    group.resume(leader)
                    if acked is None:
                        acked = load.first_ack_after(at, GAP_LIMIT_S)
                assert acked is not None
                gap = acked - at
                if reader is not None:
                    consumed = reader.first_ack_after(at, GAP_LIMIT_S)
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
                load.wait_more(STEADY_ACKS)
        finally:
            receipts = load.stop()
            result.failures = load.failures
        if reader is not None:
            missing = reader.drained({r.key for r in receipts}, 60.0)
            reader.stop()
            result.consumer_failures = reader.failures
            result.consumer_missing = len(missing)
        result.report = group.verify(TOPIC, receipts)
        return result
    finally:
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
        "--consumer", action="store_true", help="a SimpleConsumer receives and acks all along"
    )
    args = parser.parse_args(argv)
    modes = ["kill", "stop"] if args.mode == "both" else [args.mode]
    ok = True
    for mode in modes:
        with tempfile.TemporaryDirectory(prefix=f"gannet-failover-{mode}-") as temporary:
            root = args.keep / mode if args.keep is not None else Path(temporary)
            console.print(f"[bold]{mode}[/bold] x {args.kills} ({root})")
            result = run(root, args.kills, mode, args.stop_s, consumer=args.consumer)
            console.print(result.summary())
            if max(result.gaps_s, default=0.0) > args.target_s:
                console.print(f"[red]a gap exceeds the {args.target_s} s target[/red]")
                ok = False
            if result.consumer_missing > 0:
                console.print("[red]the consumer never received some acknowledged messages[/red]")
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
