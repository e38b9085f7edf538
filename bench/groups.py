"""Broker-groups benchmark: produce throughput and broker CPU per message of a cluster of 1 and
of 2 broker groups (``gannet cluster up --groups G --replicas R`` processes, SYNC_FLUSH), with
the same load generator (issue 22).

The load generator follows the route as the official clients do: it asks any member for
``QueryRoute``, then sends batched ``SendMessage`` calls (32 messages of 100 B, raw
``rocketmq.grpc_protocol`` stubs) round-robin over every queue of the route, each call to its
queue's group (the first address of the queue's ``Broker.endpoints``, the leader), with
``IN_FLIGHT`` calls in flight from each of ``SENDER_THREADS`` threads. Nothing else changes
between 1 and 2 groups. With ``--per-group`` the calls in flight and the receive+ack threads
grow with the number of groups, so each group sees the concurrency one group sees alone (as when
clients grow with a cluster, and as each group would on a machine with a core per group); without
it the same calls are spread over all groups and each of 2 groups sees half of them, which costs
grpc more per call (``GROUPS.md``).

Figures per run: aggregate acknowledged messages/s; the CPU seconds every broker process used
in the window (``/proc/<pid>/stat`` utime + stime), as µs per message and as messages per
broker-CPU-second (the figure that carries over to a machine with a core per group); the same
per group. The machine's load average is recorded before and after: this machine has 2 cores
shared with the load generator (and other work), so the aggregate throughput of 2 groups
cannot double here; the per-CPU figure is the honest one.

``python -m bench.groups [--quick] [--replicas 1,3] [--per-group]``; appends to
``bench/results/groups.jsonl``; ``bench/results/GROUPS.md`` is the write-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from bench import results_log
from e2e.groups.harness import Cluster
from e2e.processes import wait_for
from gannet.node.protocol.gen import admin_pb2

TOPIC = "GroupsBench"
QUEUES_PER_GROUP = 8
CLIENT_ID = (("x-mq-client-id", "bench@1@0@groups"),)
BATCH_MESSAGES = 32
BODY_BYTES = 100
SENDER_THREADS = 2
IN_FLIGHT = 8
CONSUMER_GROUP = "GroupsBenchConsumers"
RECEIVER_THREADS = 8
"""Receive+ack: one call at a time per thread, so 8 calls in flight (the sends have 16)."""
POLL_TOPICS = 500
IDLE_WINDOW_S = 3.0
"""Broker CPU of the idle cluster (timers, heartbeats, polls) is sampled this long first."""
OK = definition_pb2.Code.Value("OK")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """utime + stime of every thread of a process so far, by thread id (the main thread's id
    is the process id)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended
            continue
        found[int(task.name)] = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    return found


class FsyncCounter:
    """``fdatasync`` calls per thread of some processes over a window, counted by ``perf stat``
    on the syscall tracepoint (nothing in the broker changes); :attr:`counts` stays empty when
    ``perf`` is missing or not allowed to trace."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.counts: dict[int, int] = {}
        self._runs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def __enter__(self) -> FsyncCounter:
        if shutil.which("perf") is None:
            return self
        for pid in self.pids:
            out = Path(tempfile.mkstemp(prefix="gannet-bench-perf-")[1])
            argv = ["perf", "stat", "--per-thread", "-e", "syscalls:sys_enter_fdatasync"]
            argv += ["-p", str(pid), "-o", str(out)]
            process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self._runs.append((process, out))
        time.sleep(0.5)  # perf attaches
        return self

    def __exit__(self, *_: object) -> None:
        for process, out in self._runs:
            process.send_signal(signal.SIGINT)
            process.wait()
            for line in out.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 3 and "fdatasync" in parts[2] and parts[1].isdigit():
                    self.counts[int(parts[0].rsplit("-", 1)[1])] = int(parts[1])
            out.unlink()


def _payload(queue_id: int, seed: int) -> bytes:
    request = service_pb2.SendMessageRequest()
    for i in range(BATCH_MESSAGES):
        msg = request.messages.add(body=b"g" * BODY_BYTES)
        msg.topic.name = TOPIC
        sp = msg.system_properties
        sp.message_id = f"01{seed:010X}{i:04X}{os.getpid():08X}0000000000"[:34]
        sp.body_encoding = definition_pb2.IDENTITY
        sp.message_type = definition_pb2.NORMAL
        sp.queue_id = queue_id
        sp.born_timestamp.FromMilliseconds(time.time_ns() // 1_000_000)
        sp.born_host = "127.0.0.1"
    return bytes(request.SerializeToString())


def _route(endpoint: str) -> list[tuple[str, int, str]]:
    """``(group, queue id, endpoint of its group's leader)`` of every writable queue."""
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            request_serializer=service_pb2.QueryRouteRequest.SerializeToString,
            response_deserializer=service_pb2.QueryRouteResponse.FromString,
        )
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=TOPIC))
        reply = call(request, timeout=10, metadata=CLIENT_ID)
    return [
        (q.broker.name, q.id, f"{q.broker.endpoints.addresses[0].host}:"
         f"{q.broker.endpoints.addresses[0].port}")
        for q in reply.message_queues
        if q.permission in (definition_pb2.WRITE, definition_pb2.READ_WRITE)
    ]  # fmt: skip


class _Timing:
    """Starts ``count`` worker threads together and tells them when the window ends (the
    workers wait on :attr:`start`, then run while ``time.monotonic() < timing.stop_at``)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.start = threading.Barrier(count + 1)
        self.stop_at = 0.0

    def run(self, worker: Callable[[int], None], seconds: float) -> float:
        """Run ``worker(i)`` for every ``i < count`` over a ``seconds`` window; returns the
        monotonic time the window began."""
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(self.count)]
        for t in threads:
            t.start()
        began = time.monotonic()
        self.stop_at = began + seconds
        self.start.wait()
        for t in threads:
            t.join()
        return began


def produce(
    route: list[tuple[str, int, str]], seconds: float, in_flight: int = IN_FLIGHT
) -> dict[str, Any]:
    """Batched sends round-robin over ``route`` from ``SENDER_THREADS`` threads."""
    sent: dict[str, int] = {g: 0 for g, _, _ in route}
    errors = [0]
    lock = threading.Lock()
    timing = _Timing(SENDER_THREADS)
    endpoints = sorted({e for _, _, e in route})

    def sender(index: int) -> None:
        channels = {e: grpc.insecure_channel(e) for e in endpoints}
        calls = {
            e: c.unary_unary(
                "/apache.rocketmq.v2.MessagingService/SendMessage",
                request_serializer=None,
                response_deserializer=service_pb2.SendMessageResponse.FromString,
            )
            for e, c in channels.items()
        }
        payloads = [(g, e, _payload(q, index * 1000 + q)) for g, q, e in route]
        turn = index
        timing.start.wait()
        window: list[tuple[str, Any]] = []
        while time.monotonic() < timing.stop_at or window:
            while time.monotonic() < timing.stop_at and len(window) < in_flight:
                group, endpoint, payload = payloads[turn % len(payloads)]
                turn += 1
                future = calls[endpoint].future(payload, timeout=30, metadata=CLIENT_ID)
                window.append((group, future))
            group, future = window.pop(0)
            reply = future.result()
            with lock:
                if reply.status.code == OK:
                    sent[group] += BATCH_MESSAGES
                else:
                    errors[0] += 1
        for channel in channels.values():
            channel.close()

    began = timing.run(sender, seconds)
    elapsed = time.monotonic() - began
    return {"by_group": sent, "errors": errors[0], "seconds": round(elapsed, 3)}


def _receive_request(group: str, queue_id: int) -> service_pb2.ReceiveMessageRequest:
    request = service_pb2.ReceiveMessageRequest(batch_size=BATCH_MESSAGES)
    request.group.name = CONSUMER_GROUP
    request.message_queue.topic.name = TOPIC
    request.message_queue.id = queue_id
    request.message_queue.broker.name = group
    request.filter_expression.expression = "*"
    request.invisible_duration.FromSeconds(60)
    request.long_polling_timeout.FromSeconds(1)
    return request


def receive_ack(
    route: list[tuple[str, int, str]], seconds: float, receivers: int = RECEIVER_THREADS
) -> dict[str, Any]:
    """What the official SimpleConsumer does, batched: ``RECEIVER_THREADS`` threads take the
    route's queues round-robin, each ``ReceiveMessage`` (32, long poll) at its queue's group,
    then one ``AckMessage`` of the received handles to the same group. A thread stops early
    when a whole round of queues gave nothing (the preload is drained)."""
    acked: dict[str, int] = {g: 0 for g, _, _ in route}
    errors = [0]
    drained = [0]
    receives = [0]
    ended: list[float] = []
    lock = threading.Lock()
    timing = _Timing(receivers)
    endpoints = sorted({e for _, _, e in route})

    def receiver(index: int) -> None:
        channels = {e: grpc.insecure_channel(e) for e in endpoints}
        stubs = {e: service_pb2_grpc.MessagingServiceStub(c) for e, c in channels.items()}
        requests = [(g, e, _receive_request(g, q)) for g, q, e in route]
        turn = index
        empty_in_a_row = 0
        timing.start.wait()
        while time.monotonic() < timing.stop_at and empty_in_a_row < len(requests):
            group, endpoint, request = requests[turn % len(requests)]
            turn += 1
            frames = stubs[endpoint].ReceiveMessage(request, timeout=15, metadata=CLIENT_ID)
            handles = [
                f.message.system_properties.receipt_handle
                for f in frames
                if f.WhichOneof("content") == "message"
            ]
            with lock:
                receives[0] += 1
            if not handles:
                empty_in_a_row += 1
                continue
            empty_in_a_row = 0
            ack = service_pb2.AckMessageRequest(
                entries=[service_pb2.AckMessageEntry(receipt_handle=h) for h in handles]
            )
            ack.group.name = CONSUMER_GROUP
            ack.topic.name = TOPIC
            reply = stubs[endpoint].AckMessage(ack, timeout=15, metadata=CLIENT_ID)
            with lock:
                if reply.status.code == OK:
                    acked[group] += len(handles)
                else:
                    errors[0] += 1
        with lock:
            ended.append(time.monotonic())
            drained[0] += empty_in_a_row >= len(requests)
        for channel in channels.values():
            channel.close()

    began = timing.run(receiver, seconds)
    elapsed = max(ended) - began
    return {
        "by_group": acked,
        "errors": errors[0],
        "seconds": round(elapsed, 3),
        "threads_drained": drained[0],
        "msgs_per_receive": round(sum(acked.values()) / max(receives[0], 1), 1),
        "receivers": receivers,
    }


def poll_answer_cpu_us(endpoint: str, pid: int, calls: int = 300) -> float:
    """Broker CPU µs per ``GetBrokerGroup`` answer with an unchanged topic table (what every
    member of every other group asks each group every 2 s): the metadata cost per group."""
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            "/gannet.admin.v1.Admin/GetBrokerGroup",
            request_serializer=admin_pb2.GetBrokerGroupRequest.SerializeToString,
            response_deserializer=admin_pb2.BrokerGroup.FromString,
        )
        version = call(admin_pb2.GetBrokerGroupRequest(), timeout=10).topics_version
        request = admin_pb2.GetBrokerGroupRequest(known_topics_version=version)
        before = cpu_seconds(pid)
        for _ in range(calls):
            call(request, timeout=10)
        return round((cpu_seconds(pid) - before) * 1e6 / calls, 1)


def projection(
    cpu_us_per_msg: float, poll_us: float, replicas: int, interval_s: float = 2.0
) -> list[dict[str, Any]]:
    """Throughput of G groups with a core per group, from the measured per-group cost: each
    group adds one leader's worth (1e6 / µs per message), minus the share of its leader's core
    that answering the other groups' polls takes ((G-1) × R polls per interval)."""
    rows = []
    for groups in (1, 2, 8, 32):
        polls_per_s = (groups - 1) * replicas / interval_s
        poll_share = polls_per_s * poll_us / 1e6
        per_group = 1e6 / cpu_us_per_msg * (1 - poll_share)
        rows.append(
            {
                "groups": groups,
                "msgs_per_s": round(groups * per_group),
                "leader_core_share_answering_polls": round(poll_share, 5),
            }
        )
    return rows


def _machine() -> dict[str, Any]:
    load1, load5, _ = os.getloadavg()
    return {"cpus": os.cpu_count(), "load1": round(load1, 2), "load5": round(load5, 2)}


def _until_everywhere(write: Callable[[], object], timeout_s: float = 60.0) -> None:
    """Repeat a fanned-out admin write until every group took it: right after start-up a group
    may not be known yet (UNAVAILABLE, "run it again"); one that has it answers ALREADY_EXISTS."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            write()
            return
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                return
            if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _measured(
    cluster: Cluster, phase: Callable[[], dict[str, Any]], pids: dict[str, int]
) -> dict[str, Any]:
    """Run ``phase`` and turn its per-group message counts and the brokers' CPU into figures;
    per group also the leader's CPU by thread (main = the event loop, flush = the thread that
    ran most ``fdatasync`` calls) and its fsyncs, when ``perf`` can count them."""
    cpu_before = {e: cpu_seconds(p) for e, p in pids.items()}
    threads_before = {e: thread_cpu_seconds(p) for e, p in pids.items()}
    with FsyncCounter(list(pids.values())) as fsyncs:
        figures = phase()
    cpu = {e: cpu_seconds(p) - cpu_before[e] for e, p in pids.items()}
    threads = {
        e: {t: c - threads_before[e].get(t, 0.0) for t, c in thread_cpu_seconds(p).items()}
        for e, p in pids.items()
    }
    messages = sum(figures["by_group"].values())
    cpu_total = sum(cpu.values())
    per_group = {}
    for plan in cluster.plans:
        group_cpu = sum(cpu[e] for e in plan.client_endpoints())
        group_msgs = figures["by_group"].get(plan.broker_name, 0)
        per_group[plan.broker_name] = {
            "msgs": group_msgs,
            "broker_cpu_s": round(group_cpu, 3),
            "cpu_us_per_msg": round(group_cpu * 1e6 / max(group_msgs, 1), 1),
            **_leader_threads(plan, pids, threads, fsyncs.counts, group_msgs),
        }
    extra = {k: v for k, v in figures.items() if k not in ("by_group", "errors", "seconds")}
    return {
        "msgs": messages,
        "errors": figures["errors"],
        "seconds": figures["seconds"],
        "msgs_per_s": round(messages / figures["seconds"], 1),
        "broker_cpu_s": round(cpu_total, 3),
        "cpu_us_per_msg": round(cpu_total * 1e6 / max(messages, 1), 1),
        "msgs_per_broker_cpu_s": round(messages / max(cpu_total, 1e-9), 1),
        "per_group": per_group,
        **extra,
    }


def _leader_threads(
    plan: Any,
    pids: dict[str, int],
    threads: dict[str, dict[int, float]],
    fsyncs: dict[int, int],
    msgs: int,
) -> dict[str, Any]:
    """The busiest member's (the leader's) CPU µs per message by thread, and its fsyncs."""
    busiest = max(plan.client_endpoints(), key=lambda e: sum(threads[e].values()))
    pid, by_thread = pids[busiest], threads[busiest]
    mine = {t: n for t, n in fsyncs.items() if t in by_thread}
    flusher = max(mine, key=lambda t: mine[t]) if mine else None
    per_msg = 1e6 / max(msgs, 1)
    others = sorted((c for t, c in by_thread.items() if t not in (pid, flusher)), reverse=True)
    row: dict[str, Any] = {
        "leader_cpu_us_per_msg": round(sum(by_thread.values()) * per_msg, 1),
        "leader_main_thread_us_per_msg": round(by_thread.get(pid, 0.0) * per_msg, 1),
        "leader_other_threads_us_per_msg": [round(c * per_msg, 1) for c in others[:3]],
    }
    if flusher is not None:
        row["leader_flush_thread_us_per_msg"] = round(by_thread.get(flusher, 0.0) * per_msg, 1)
        row["leader_fsyncs"] = mine[flusher]
        row["msgs_per_fsync"] = round(msgs / max(mine[flusher], 1), 1)
    return row


def run(
    root: Path,
    groups: int,
    replicas: int,
    seconds: float,
    in_flight: int = IN_FLIGHT,
    receivers: int = RECEIVER_THREADS,
) -> dict[str, Any]:
    """Produce for ``seconds``, then receive+ack what was produced for ``seconds``."""
    cluster = Cluster(root, groups, replicas, seed=groups * 10 + replicas)
    cluster.start()
    try:
        leaders = [cluster.leader(g.broker_name) for g in cluster.plans]
        with cluster.admin(leaders[0]) as admin:
            request = admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=QUEUES_PER_GROUP)
            _until_everywhere(lambda: admin.CreateTopic(request, timeout=60))
            group = admin_pb2.CreateGroupRequest(name=CONSUMER_GROUP)
            _until_everywhere(lambda: admin.CreateGroup(group, timeout=60))
        want = groups * QUEUES_PER_GROUP
        wait_for(lambda: len(cluster.route(leaders[0], TOPIC)) == want, 30, "the whole route")
        route = _route(leaders[0])
        pids = {e: cluster.pid(e) for e in cluster.endpoints()}
        idle_before = sum(cpu_seconds(p) for p in pids.values())
        time.sleep(IDLE_WINDOW_S)
        idle_cpu = sum(cpu_seconds(p) for p in pids.values()) - idle_before
        produce(route, min(2.0, seconds), in_flight)  # warm-up (channels, first files)
        machine_before = _machine()
        row = _measured(cluster, lambda: produce(route, seconds, in_flight), pids)
        machine_after = _machine()
        receive_ack(route, min(1.0, seconds), receivers)  # warm-up, on the preload
        row["receive_ack"] = _measured(
            cluster, lambda: receive_ack(route, seconds, receivers), pids
        )
        row["receive_ack"]["machine_after"] = _machine()
        poll_us = poll_answer_cpu_us(leaders[0], cluster.pid(leaders[0]))
    finally:
        cluster.stop()
    return {
        "groups": groups,
        "replicas": replicas,
        **row,
        "poll_answer_cpu_us": poll_us,
        "idle_broker_cpu_ms_per_s": round(idle_cpu * 1e3 / IDLE_WINDOW_S, 1),
        "machine_before": machine_before,
        "machine_after": machine_after,
    }


def poll_cost(root: Path, topics: int, calls: int) -> dict[str, Any]:
    """Broker CPU per ``GetBrokerGroup`` answer of a 1 × 1 cluster holding ``topics`` topics
    (unchanged table, the steady state of every poll), and per answer right after a topic
    write (the first answer of a new table version)."""
    cluster = Cluster(root, 1, 1, seed=99)
    cluster.start()
    try:
        leader = cluster.leader(cluster.plans[0].broker_name)
        with cluster.admin(leader) as admin:
            for i in range(topics):
                request = admin_pb2.CreateTopicRequest(name=f"Poll{i:05d}", queue_nums=4)
                admin.CreateTopic(request, timeout=60)
        machine_before = _machine()
        unchanged = poll_answer_cpu_us(leader, cluster.pid(leader), calls)
        machine_after = _machine()
    finally:
        cluster.stop()
    return {
        "topics": topics,
        "calls": calls,
        "poll_answer_cpu_us": unchanged,
        "machine_before": machine_before,
        "machine_after": machine_after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 s windows")
    parser.add_argument("--seconds", type=float, help="produce window (default 5 / 15)")
    parser.add_argument("--replicas", default="1,3", help="replica counts to run, e.g. 1,3")
    parser.add_argument(
        "--in-flight", type=int, default=IN_FLIGHT, help="calls in flight per sender thread"
    )
    parser.add_argument(
        "--receivers", type=int, default=RECEIVER_THREADS, help="receive+ack threads"
    )
    parser.add_argument("--groups", default="1,2", help="group counts to run, e.g. 1,2")
    parser.add_argument(
        "--per-group",
        action="store_true",
        help="scale the calls in flight and the receive+ack threads with the number of groups"
        " (each group sees the load one group sees alone, as when clients grow with a cluster)",
    )
    parser.add_argument("--no-record", action="store_true", help="do not append to groups.jsonl")
    parser.add_argument(
        "--poll-topics",
        type=int,
        metavar="N",
        help=f"only the poll answer's cost, 1 x 1 cluster with N topics (e.g. {POLL_TOPICS})",
    )
    parser.add_argument("--label", default="", help="recorded with the run (e.g. the build)")
    args = parser.parse_args()
    if args.poll_topics is not None:
        _main_polls(args.poll_topics, args.label, record=not args.no_record)
        return
    seconds = args.seconds or (5.0 if args.quick else 15.0)
    replica_counts = [int(r) for r in args.replicas.split(",") if r.strip()]
    base = Path(tempfile.mkdtemp(prefix="gannet-bench-groups-"))
    rows = []
    try:
        for replicas in replica_counts:
            for groups in [int(g) for g in args.groups.split(",") if g.strip()]:
                root = base / f"g{groups}r{replicas}"
                scale = groups if args.per_group else 1
                row = run(
                    root, groups, replicas, seconds, args.in_flight * scale, args.receivers * scale
                )
                row["in_flight_per_thread"] = args.in_flight * scale
                row["receivers"] = args.receivers * scale
                print(json.dumps(row), flush=True)
                rows.append(row)
                shutil.rmtree(base / f"g{groups}r{replicas}", ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    line: dict[str, Any] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": seconds,
        "in_flight_per_thread": args.in_flight,
        "receivers": args.receivers,
        "per_group": args.per_group,
        "label": args.label,
        "runs": rows,
    }
    for replicas in replica_counts:
        pair = [r for r in rows if r["replicas"] == replicas]
        if len(pair) != 2:
            continue
        one, two = pair
        per_cpu = two["msgs_per_broker_cpu_s"] / max(one["msgs_per_broker_cpu_s"], 1e-9)
        raw = two["msgs_per_s"] / max(one["msgs_per_s"], 1e-9)
        line[f"r{replicas}_two_vs_one_per_cpu"] = round(per_cpu, 3)
        line[f"r{replicas}_two_vs_one_raw"] = round(raw, 3)
        line[f"r{replicas}_projection"] = projection(
            one["cpu_us_per_msg"], two["poll_answer_cpu_us"], replicas
        )
        print(
            f"R{replicas}: 2 groups / 1 group: messages per broker-CPU-second {per_cpu:.2f} "
            f"(target >= 0.9); raw aggregate {raw:.2f} on {os.cpu_count()} shared cores"
        )
        one_r, two_r = one["receive_ack"], two["receive_ack"]
        per_cpu = two_r["msgs_per_broker_cpu_s"] / max(one_r["msgs_per_broker_cpu_s"], 1e-9)
        raw = two_r["msgs_per_s"] / max(one_r["msgs_per_s"], 1e-9)
        line[f"r{replicas}_receive_ack_two_vs_one_per_cpu"] = round(per_cpu, 3)
        line[f"r{replicas}_receive_ack_two_vs_one_raw"] = round(raw, 3)
        print(
            f"R{replicas} receive+ack: 2 groups / 1 group: messages per broker-CPU-second "
            f"{per_cpu:.2f}; raw aggregate {raw:.2f}"
        )
    if not args.no_record:
        results_log.append("groups", line)


def _main_polls(topics: int, label: str, *, record: bool) -> None:
    base = Path(tempfile.mkdtemp(prefix="gannet-bench-polls-"))
    try:
        row = poll_cost(base / "polls", topics, calls=1000)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    line = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "scenario": "poll_answer"}
    line.update(label=label, **row)
    print(json.dumps(line), flush=True)
    if record:
        results_log.append("groups", line)


if __name__ == "__main__":
    main()
