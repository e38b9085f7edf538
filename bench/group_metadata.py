"""Broker-groups metadata benchmark: what G groups cost one group's leader besides messages
(issue 22's "what would bend the curve"), measured on one real group surrounded by fakes.

One real broker group (``gannet cluster up``'s entry point, 1 × 1, SYNC_FLUSH) is told by
``SetClusterSeeds`` about ``G − 1`` fake groups: in-process gRPC servers that answer
``GetBrokerGroup`` as a group of ``R`` members does (broker name, members, leader, a topic
table holding the benchmark topic's 8 queues) and take fanned-out ``CreateTopic`` calls after
a simulated commit delay. The real leader then carries the metadata load of a cluster of G
groups while the fakes cost it nothing but their answers:

* **polls**: its own poller asks each of the G − 1 fakes every 2 s, and a paced load driver
  sends the ``(G − 1) × R`` polls per 2 s that the other groups' members would send it
  (``GetBrokerGroup`` with the current table version, the steady state). The figure is the
  leader's CPU share (CPU seconds per second, ``/proc`` utime + stime) over a window, against
  the same window with no fakes (G = 1).
* **routes**: ``QueryRoute`` of a topic with 8 queues in every group: broker CPU µs per answer,
  answer bytes, and the client's parse µs per answer (``QueryRouteResponse.FromString``, what
  every official client does on each route refresh, every 30 s per topic).
* **fan-out**: ``CreateTopic`` at the real leader, applied there (its Raft commit) and at the
  G − 1 fakes in parallel: wall ms and broker CPU ms per create.

``python -m bench.group_metadata [--quick] [--groups 1,2,8,32] [--replicas 1,3]``; appends to
``bench/results/groups.jsonl`` (``"scenario": "metadata"``); ``bench/results/GROUPS.md`` is
the write-up.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from bench import results_log
from bench.groups import CLIENT_ID, QUEUES_PER_GROUP, TOPIC, _machine, cpu_seconds
from e2e.groups.harness import Cluster
from e2e.processes import wait_for
from gannet.node.api import broker_groups
from gannet.node.broker_groups import views as group_views
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

POLL_INTERVAL_S = 2.0
"""What every member waits between two polls of one group (``group_polling.POLL_INTERVAL_S``)."""
POLL_WINDOW_S = 10.0
ROUTE_CALLS = 200
CREATES = 10
FAKE_COMMIT_S = 0.010
"""A fake group's answer to a fanned-out write waits this long (its own Raft commit)."""
FAKE_WORKERS = 4
QUIET_US_PER_MSG = {1: 79.3, 3: 255.0}
"""One group's broker CPU per produced message in the quietest run so far (GROUPS.md, 22:57:
R1 79.3 µs; R3 255 µs over its three members): the projection's default base."""


class FakeGroup(admin_pb2_grpc.AdminServicer):
    """A broker group as the others see it: ``GetBrokerGroup`` answers and admin writes."""

    def __init__(self, name: str, replicas: int) -> None:
        self.name = name
        self.replicas = replicas
        self.topics: dict[str, group_views.RouteTopic] = {}
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=FAKE_WORKERS))
        admin_pb2_grpc.add_AdminServicer_to_server(self, self.server)  # type: ignore[no-untyped-call]
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"127.0.0.1:{port}"
        # The other members are never dialled (the leader answers); they only fill routes.
        self.members = [self.endpoint] + [f"127.0.0.{i + 1}:{port}" for i in range(1, replicas)]
        self.add_topic(TOPIC)
        self.polls = 0

    def add_topic(self, name: str) -> None:
        with self.lock:
            self.topics[name] = group_views.RouteTopic(
                name, QUEUES_PER_GROUP, QUEUES_PER_GROUP, 6, "NORMAL"
            )
            self.version = group_views.topics_version(self.topics.values())

    def GetBrokerGroup(self, request, context):  # noqa: N802
        with self.lock:
            self.polls += 1
            reply = broker_groups.group_pb(
                self.name,
                "DefaultCluster",
                self.members,
                self.endpoint,
                dict(self.topics),
                self.version,
                include_topics=request.known_topics_version != self.version,
            )
        reply.configured_endpoints.extend(self.members)
        return reply

    def CreateTopic(self, request, context):  # noqa: N802
        time.sleep(FAKE_COMMIT_S)
        self.add_topic(request.name)
        return admin_pb2.TopicResponse()


def projection(
    us_per_msg: float, metadata_share: dict[int, float], base_groups: int = 1
) -> list[dict[str, Any]]:
    """Throughput of G groups with a core per group leader, from one group's measured CPU per
    message and the share of a leader's core the metadata of G groups takes
    (``metadata_share[G]``, measured; the share at ``base_groups`` is already inside
    ``us_per_msg``): each group adds ``(1 - extra share) × 1e6 / us_per_msg`` msgs/s."""
    base = metadata_share[base_groups]
    rows = []
    for groups in sorted(metadata_share):
        extra = max(0.0, metadata_share[groups] - base)
        per_group = (1.0 - extra) * 1e6 / us_per_msg
        rows.append(
            {
                "groups": groups,
                "msgs_per_s": round(groups * per_group),
                "extra_leader_share": round(extra, 4),
                "vs_linear": round(per_group * us_per_msg / 1e6, 4),
            }
        )
    return rows


def _paced_polls(endpoint: str, per_s: float, seconds: float) -> int:
    """``per_s`` ``GetBrokerGroup`` calls per second at ``endpoint`` for ``seconds`` (the
    unchanged-table poll of the other groups' members); returns how many were answered."""
    if per_s <= 0:
        time.sleep(seconds)
        return 0
    with grpc.insecure_channel(endpoint) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        version = stub.GetBrokerGroup(admin_pb2.GetBrokerGroupRequest(), timeout=10).topics_version
        request = admin_pb2.GetBrokerGroupRequest(known_topics_version=version)
        start = time.monotonic()
        answered = 0
        while (due := start + answered / per_s) < start + seconds:
            time.sleep(max(0.0, due - time.monotonic()))
            stub.GetBrokerGroup(request, timeout=10)
            answered += 1
        time.sleep(max(0.0, start + seconds - time.monotonic()))
    return answered


def _cpu_share(pid: int, work: Any) -> tuple[float, Any]:
    """CPU seconds per second of ``pid`` while ``work()`` runs, and its result."""
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    result = work()
    return (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0), result


def _route_cost(endpoint: str, pid: int, calls: int) -> dict[str, Any]:
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            request_serializer=service_pb2.QueryRouteRequest.SerializeToString,
            response_deserializer=None,
        )
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=TOPIC))
        raw = call(request, timeout=10, metadata=CLIENT_ID)
        before = cpu_seconds(pid)
        for _ in range(calls):
            raw = call(request, timeout=10, metadata=CLIENT_ID)
        broker_us = (cpu_seconds(pid) - before) * 1e6 / calls
    reply = service_pb2.QueryRouteResponse.FromString(raw)  # warm-up
    started = time.perf_counter()
    for _ in range(calls):
        reply = service_pb2.QueryRouteResponse.FromString(raw)
    parse_us = (time.perf_counter() - started) * 1e6 / calls
    return {
        "route_queues": len(reply.message_queues),
        "route_answer_bytes": len(raw),
        "route_answer_broker_cpu_us": round(broker_us, 1),
        "route_parse_client_us": round(parse_us, 1),
    }


def _fan_out_cost(admin: Any, pid: int, groups: int, count: int) -> dict[str, Any]:
    walls = []
    cpu0 = cpu_seconds(pid)
    for i in range(count):
        started = time.perf_counter()
        name = f"FanOut{groups:03d}x{i:03d}"
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=name, queue_nums=4), timeout=60)
        walls.append((time.perf_counter() - started) * 1e3)
    walls.sort()
    return {
        "fan_out_create_ms_median": round(walls[len(walls) // 2], 1),
        "fan_out_create_ms_max": round(walls[-1], 1),
        "fan_out_broker_cpu_ms_per_create": round((cpu_seconds(pid) - cpu0) * 1e3 / count, 2),
    }


def run(root: Path, groups: int, replicas: int, window_s: float) -> dict[str, Any]:
    """One real 1 × 1 group among ``groups - 1`` fakes of ``replicas`` members."""
    cluster = Cluster(root, 1, 1, seed=200 + groups)
    fakes = [FakeGroup(f"broker-{i}", replicas) for i in range(1, groups)]
    for fake in fakes:
        fake.server.start()
    cluster.start()
    try:
        leader = cluster.leader(cluster.plans[0].broker_name)
        pid = cluster.pid(leader)
        with cluster.admin(leader) as admin:
            admin.CreateTopic(
                admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=QUEUES_PER_GROUP), timeout=60
            )
            if fakes:
                seeds = [leader] + [f.endpoint for f in fakes]
                view = admin.SetClusterSeeds(
                    admin_pb2.SetClusterSeedsRequest(seeds=seeds), timeout=30
                )
                if len(view.groups) != groups:
                    raise RuntimeError(f"{len(view.groups)} groups in the view, {groups} wanted")
            want = groups * QUEUES_PER_GROUP
            wait_for(lambda: len(cluster.route(leader, TOPIC)) == want, 30, "the whole route")
            time.sleep(POLL_INTERVAL_S)  # the first rounds (table fetches) are over
            machine_before = _machine()
            own_share, _ = _cpu_share(pid, lambda: time.sleep(window_s))
            per_s = (groups - 1) * replicas / POLL_INTERVAL_S
            loaded_share, answered = _cpu_share(pid, lambda: _paced_polls(leader, per_s, window_s))
            route = _route_cost(leader, pid, ROUTE_CALLS)
            fan_out = _fan_out_cost(admin, pid, groups, CREATES)
            machine_after = _machine()
    finally:
        cluster.stop()
        for fake in fakes:
            fake.server.stop(grace=None)
    return {
        "groups": groups,
        "replicas": replicas,
        "window_s": window_s,
        "leader_cpu_share_own_polls": round(own_share, 4),
        "incoming_polls_per_s": per_s,
        "incoming_polls_answered": answered,
        "leader_cpu_share_all_polls": round(loaded_share, 4),
        **route,
        **fan_out,
        "fake_commit_ms": FAKE_COMMIT_S * 1e3,
        "machine_before": machine_before,
        "machine_after": machine_after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--groups", default="1,2,8,32", help="cluster sizes to simulate")
    parser.add_argument("--replicas", default="1,3", help="members per group, e.g. 1,3")
    parser.add_argument("--quick", action="store_true", help="5 s windows")
    parser.add_argument("--window", type=float, help=f"seconds per share (default {POLL_WINDOW_S})")
    parser.add_argument("--no-record", action="store_true", help="do not append to groups.jsonl")
    parser.add_argument("--label", default="", help="recorded with the run")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gannet-bench-group-metadata-"))
    rows = []
    try:
        for replicas in [int(r) for r in args.replicas.split(",") if r.strip()]:
            for groups in [int(g) for g in args.groups.split(",") if g.strip()]:
                window_s = args.window or (5.0 if args.quick else POLL_WINDOW_S)
                row = run(base / f"g{groups}r{replicas}", groups, replicas, window_s)
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    line: dict[str, Any] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "scenario": "metadata",
        "label": args.label,
        "runs": rows,
    }
    for replicas in sorted({r["replicas"] for r in rows}):
        shares = {
            r["groups"]: r["leader_cpu_share_all_polls"] for r in rows if r["replicas"] == replicas
        }
        if 1 in shares and replicas in QUIET_US_PER_MSG:
            table = projection(QUIET_US_PER_MSG[replicas], shares)
            line[f"r{replicas}_projection"] = table
            for row in table:
                print(
                    f"R{replicas} {row['groups']:>3} groups: {row['msgs_per_s']:>9,} msgs/s "
                    f"({row['vs_linear']:.3f} of linear)"
                )
    if not args.no_record:
        results_log.append("groups", line)


if __name__ == "__main__":
    main()
