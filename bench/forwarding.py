"""Forwarding benchmark: sends through a follower (forwarded to the leader over the peer port)
against sends to the leader itself, on a 3-node group of ``gannet broker run`` processes with
SYNC_FLUSH (the process harness of ``e2e/replication``, peers dialling each other directly).

What the official clients send: one message per ``SendMessage`` (raw ``rocketmq.grpc_protocol``
stubs, 100 B bodies, a fresh message id per message so that no send is a duplicate), ``CALLERS``
calls in flight from ``THREADS`` threads. Windows alternate leader, follower, leader, follower
(``--rounds`` pairs) so that drift of a shared machine's load hits both alike. Figures per
target: messages/s over its windows, the latency p50/p99 of each call, and the CPU time the
three broker processes spent per message (``/proc/<pid>/stat``) beyond what they spend idle
(their timers and scans, measured over ``IDLE_S`` without load first): on a loaded machine
throughput mostly measures the other work on the cores, CPU per message much less.

The forwarder sends one peer call per client call (``api/forwarding.py``); this measures what
that extra hop costs, which is what batching several client calls into one peer call could
save. Run ``python -m bench.forwarding`` (``--quick``: 2 pairs of 4 s windows); figures are
appended to ``bench/results/forwarding.jsonl`` with the load average before and after.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from bench import results_log
from bench.peers.procfs import parse_stat
from bench.replication import CLIENT_ID, OK, _machine, _send_call
from e2e.replication.harness import ProcessGroup

TOPIC = "ForwardingBench"
BODY_BYTES = 100
THREADS = 2
CALLERS = 16
IDLE_S = 5.0
"""Calls in flight at once over all threads."""


class Ids:
    """Unique message ids (a repeated id would be answered from the dedup window)."""

    def __init__(self) -> None:
        self._count = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            n = next(self._count)
        return f"01{os.getpid():08X}{n:016X}{0:08X}"[:34]


def _request(message_id: str) -> bytes:
    request = service_pb2.SendMessageRequest()
    msg = request.messages.add(body=b"f" * BODY_BYTES)
    msg.topic.name = TOPIC
    sp = msg.system_properties
    sp.message_id = message_id
    sp.body_encoding = definition_pb2.IDENTITY
    sp.message_type = definition_pb2.NORMAL
    sp.born_timestamp.FromMilliseconds(time.time_ns() // 1_000_000)
    sp.born_host = "127.0.0.1"
    return bytes(request.SerializeToString())


def window(endpoint: str, seconds: float, ids: Ids) -> tuple[int, int, list[float]]:
    """Messages acknowledged, calls failed, and every call's latency (ms) in one window."""
    latencies_ms: list[float] = []
    counts = [0, 0]
    lock = threading.Lock()
    start = threading.Barrier(THREADS + 1)
    stop_at = [0.0]

    def sender() -> None:
        with grpc.insecure_channel(endpoint) as channel:
            call = _send_call(channel)
            start.wait()
            in_flight: list[tuple[float, Any]] = []
            while time.monotonic() < stop_at[0] or in_flight:
                while time.monotonic() < stop_at[0] and len(in_flight) < CALLERS // THREADS:
                    payload = _request(ids.next())
                    began = time.perf_counter()
                    in_flight.append((began, call.future(payload, timeout=30, metadata=CLIENT_ID)))
                began, future = in_flight.pop(0)
                reply = future.result()
                took_ms = (time.perf_counter() - began) * 1000
                with lock:
                    if reply.status.code == OK:
                        counts[0] += 1
                        latencies_ms.append(took_ms)
                    else:
                        counts[1] += 1

    threads = [threading.Thread(target=sender) for _ in range(THREADS)]
    for t in threads:
        t.start()
    stop_at[0] = time.monotonic() + seconds
    start.wait()
    for t in threads:
        t.join()
    return counts[0], counts[1], latencies_ms


def _figures(
    acked: int, failed: int, seconds: float, latencies_ms: list[float], cpu_s: float
) -> dict[str, Any]:
    """``cpu_s``: the brokers' CPU time beyond idle over the windows."""
    q = statistics.quantiles(sorted(latencies_ms), n=100) if len(latencies_ms) > 1 else [0.0] * 99
    return {
        "msgs": acked,
        "failed": failed,
        "msgs_per_s": round(acked / seconds, 1),
        "p50_ms": round(q[49], 2),
        "p99_ms": round(q[98], 2),
        "broker_cpu_ms_per_msg": round(cpu_s * 1000 / max(1, acked), 3),
    }


def _brokers_cpu_s(group: ProcessGroup) -> float:
    """User + system CPU time of every broker process so far."""
    return sum(
        parse_stat(Path(f"/proc/{process.pid}/stat").read_text()).total_s
        for process in group.processes.values()
    )


def run(root: Path, seconds: float, rounds: int) -> dict[str, Any]:
    group = ProcessGroup(root, 3, flush="sync", proxied=False)
    try:
        group.start()
        group.create_topic(TOPIC, queues=8)
        leader = group.current_leader()
        follower = next(i for i in group.ids if i != leader)
        ids = Ids()
        window(group.client_endpoint(follower), 1.0, ids)  # warm both paths' channels
        result: dict[str, Any] = {"machine_before": _machine(), "seconds": seconds}
        idle_before = _brokers_cpu_s(group)
        time.sleep(IDLE_S)  # the idle rate itself is the measurement: nothing to await
        idle_cpu_per_s = (_brokers_cpu_s(group) - idle_before) / IDLE_S
        result["idle_broker_cpu_per_s"] = round(idle_cpu_per_s, 3)
        totals: dict[str, list[Any]] = {"leader": [0, 0, [], 0.0], "follower": [0, 0, [], 0.0]}
        for _ in range(rounds):
            for name, node_id in (("leader", leader), ("follower", follower)):
                cpu_before = _brokers_cpu_s(group)
                acked, failed, latencies = window(group.client_endpoint(node_id), seconds, ids)
                cpu_s = _brokers_cpu_s(group) - cpu_before - idle_cpu_per_s * seconds
                totals[name][0] += acked
                totals[name][1] += failed
                totals[name][2].extend(latencies)
                totals[name][3] += cpu_s
                print(
                    f"{name}: {acked / seconds:.0f} msgs/s, "
                    f"{cpu_s * 1000 / max(1, acked):.2f} broker CPU ms/msg",
                    flush=True,
                )
        assert group.current_leader() == leader, "the leader changed during the run"
        for name, (acked, failed, latencies, cpu_s) in totals.items():
            result[name] = _figures(acked, failed, seconds * rounds, latencies, cpu_s)
        result["follower_over_leader"] = round(
            result["follower"]["msgs_per_s"] / max(1.0, result["leader"]["msgs_per_s"]), 3
        )
        result["machine_after"] = _machine()
        return result
    finally:
        group.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2 pairs of 4 s windows")
    parser.add_argument("--seconds", type=float, default=8.0, help="one window (default 8)")
    parser.add_argument("--rounds", type=int, default=4, help="leader/follower pairs")
    parser.add_argument("--no-record", action="store_true", help="do not append to results")
    args = parser.parse_args()
    seconds, rounds = (4.0, 2) if args.quick else (args.seconds, args.rounds)
    with tempfile.TemporaryDirectory(prefix="gannet-bench-forwarding-") as temporary:
        result = run(Path(temporary), seconds, rounds)
    result["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(json.dumps(result, indent=1))
    if not args.no_record:
        results_log.append("forwarding", result)


if __name__ == "__main__":
    main()
