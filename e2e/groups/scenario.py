"""Two broker groups × three replicas as real processes (``gannet cluster up --groups 2
--replicas 3``'s entry point): the official Python producer sends across every queue of both
groups; the leader of group ``broker-0`` is SIGKILLed while it sends.

Checks:

* sends to ``broker-1``'s queues keep succeeding: no gap above :data:`GAP_LIMIT_S` between
  their acknowledgements from one second before the kill until ``broker-0`` answers again;
* ``broker-0`` recovers: a new leader, and acknowledged sends to its queues again (the time
  from the kill to the first acknowledgement of a send begun after it is reported);
* 0 acknowledged messages lost in either group: the killed member is restarted, then an
  official SimpleConsumer drains the topic over both groups (acks go to each message's group)
  and every acknowledged key must be among what it received;
* ``gannet store verify`` is clean on every member once the cluster is stopped.

``python -m e2e.groups.scenario [--after-s 10]`` (``make e2e-groups``); the short version runs
in ``make test`` (``tests/replication/test_groups_processes.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

from e2e.groups.harness import Ack, AsyncLoad, Cluster, largest_gap_s
from e2e.processes import wait_for
from gannet.node.protocol.gen import admin_pb2

TOPIC = "GroupsE2E"
CONSUMER_GROUP = "GroupsE2EDrain"
QUEUES = 4
GAP_LIMIT_S = 1.0
STEADY_ACKS = 50
DRAIN_TIMEOUT_S = 90.0


@dataclass
class Result:
    acknowledged: dict[str, int] = field(default_factory=dict)
    group1_gap_s: float = 0.0
    group0_back_after_s: float = 0.0
    lost: int = -1
    failures: dict[str, int] = field(default_factory=dict)
    store_failures: dict[str, str] = field(default_factory=dict)
    duplicates: int = 0
    phases_s: dict[str, float] = field(default_factory=dict)
    """Seconds from the start to the end of each phase (where a run's time goes)."""
    timeline: str = ""
    """Acknowledgements per group per half second around the kill (a gap's place)."""

    def summary(self) -> str:
        return (
            f"acknowledged by group {self.acknowledged}; group 1's largest gap around the kill "
            f"{self.group1_gap_s:.2f} s (limit {GAP_LIMIT_S} s); group 0 acknowledged sends "
            f"again {self.group0_back_after_s:.2f} s after the kill; lost {self.lost}; "
            f"redelivered/duplicate receives {self.duplicates}; sends failed after the "
            f"client's retries {self.failures}; store verify failures {len(self.store_failures)}; "
            f"phases (s from start) {self.phases_s}"
        )


def run(root: Path, *, after_s: float = 3.0, rate_per_s: float = 150.0, seed: int = 0) -> Result:
    """One kill of ``broker-0``'s leader under load; the :class:`Result` (module docstring)."""
    print(f"e2e.groups: seed {seed}, root {root}", flush=True)
    cluster = Cluster(root, 2, 3, seed=seed)
    result = Result()
    began = time.monotonic()

    def phase(name: str) -> None:
        result.phases_s[name] = round(time.monotonic() - began, 1)

    cluster.start()
    try:
        _run(cluster, result, after_s, rate_per_s, phase)
    finally:
        cluster.stop()
        phase("stopped")
    result.store_failures = cluster.verify_stores()
    phase("verified")
    return result


def _run(
    cluster: Cluster,
    result: Result,
    after_s: float,
    rate_per_s: float,
    phase: Callable[[str], None],
) -> None:
    leader0 = cluster.leader("broker-0")
    cluster.leader("broker-1")
    phase("leaders")
    with cluster.admin(leader0) as admin:  # one write, applied to both groups
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=QUEUES), timeout=30)
        admin.CreateGroup(admin_pb2.CreateGroupRequest(name=CONSUMER_GROUP), timeout=30)
    expected = [(g, i) for g in ("broker-0", "broker-1") for i in range(QUEUES)]
    for endpoint in cluster.endpoints():
        wait_for(lambda e=endpoint: cluster.route(e, TOPIC) == expected, 30, f"{endpoint} route")
    phase("routes")
    load = AsyncLoad(";".join(cluster.endpoints()), TOPIC, rate_per_s=rate_per_s)
    load.start()
    try:
        for name in ("broker-0", "broker-1"):

            def steady(group: str = name) -> bool:
                return load.count(group) >= STEADY_ACKS

            wait_for(steady, 60, f"steady sends to {name}")
        phase("steady")
        killed_at = time.monotonic()
        cluster.kill(leader0)
        cluster.leader("broker-0", skip=leader0)
        wait_for(lambda: load.count("broker-0", killed_at) > 0, 60, "broker-0 acknowledging again")
        back_at = min(
            a.acked_at_s
            for a in list(load.acks)
            if a.broker == "broker-0" and a.started_at_s > killed_at
        )
        result.group0_back_after_s = back_at - killed_at
        phase("recovered")
        cluster.restart(leader0)  # it rejoins (and catches up) while the load goes on
        threading.Event().wait(after_s)  # load keeps running after the recovery
        times = [a.acked_at_s for a in load.acks if a.broker == "broker-1"]
        result.group1_gap_s = largest_gap_s(times, killed_at - 1.0, back_at + 1.0)
        result.timeline = _timeline(load.acks, killed_at)
    finally:
        acks = load.stop()
    result.failures = dict(load.failures)
    result.acknowledged = {
        g: sum(1 for a in acks if a.broker == g) for g in ("broker-0", "broker-1")
    }
    wait_for(lambda: cluster.status(leader0) is not None, 60, "the killed member back")
    phase("restarted")
    missing, duplicates = _drain(cluster, {a.key for a in acks})
    phase("drained")
    result.lost = len(missing)
    result.duplicates = duplicates
    assert not missing, (
        f"{len(missing)} acknowledged messages never received: {sorted(missing)[:10]}"
    )


def _timeline(acks: list[Ack], killed_at: float) -> str:
    rows = []
    for step in range(-2, 2 * 12):
        lo = killed_at + step / 2
        counts = [
            sum(1 for a in acks if a.broker == g and lo <= a.acked_at_s < lo + 0.5)
            for g in ("broker-0", "broker-1")
        ]
        rows.append(f"{step / 2:+.1f}s {counts[0]}/{counts[1]}")
    return "acks broker-0/broker-1 per 0.5 s from the kill: " + ", ".join(rows)


def _drain(cluster: Cluster, keys: set[str]) -> tuple[set[str], int]:
    """The keys of ``keys`` an official SimpleConsumer over both groups did not receive."""
    config = ClientConfiguration(";".join(cluster.endpoints()), Credentials(), request_timeout=5)
    # the broker long-polls at least 5 s (shorter waits are refused: ILLEGAL_POLLING_TIME)
    consumer = SimpleConsumer(
        config, CONSUMER_GROUP, {TOPIC: FilterExpression("*")}, await_duration=5
    )
    consumer.startup()
    got: set[str] = set()
    received = 0
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    # The client's ack_async makes an asyncio.Future on the caller's thread, which needs a
    # current event loop; an earlier asyncio.run in this process (pytest) leaves none set.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        while not keys <= got and time.monotonic() < deadline:
            try:
                messages = consumer.receive(32, 20)
            except Exception:  # a member still electing: the client's retries ran out
                continue
            for message in messages:
                received += 1
                got.add(bytes(message.body).decode())
                # to the group it came from; the client's ack_async returns no future (5.1.2),
                # and a lost ack only brings the message back (counted as a duplicate)
                consumer.ack_async(message)
    finally:
        consumer.shutdown()
        asyncio.set_event_loop(None)
        loop.close()
    return keys - got, received - len(got)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--after-s", type=float, default=10.0, help="load after the recovery")
    parser.add_argument("--rate", type=float, default=200.0, help="sends per second")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="gannet-e2e-groups-"))
    try:
        result = run(root, after_s=args.after_s, rate_per_s=args.rate, seed=args.seed)
    except AssertionError as exc:
        print(f"FAILED: {exc} (logs under {root})", flush=True)
        return 1
    print(result.summary(), flush=True)
    print(result.timeline, flush=True)
    ok = result.group1_gap_s <= GAP_LIMIT_S and result.lost == 0 and not result.store_failures
    if ok:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"FAILED (logs under {root}): {result.store_failures}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
