"""Replication benchmark: a 3-node Raft group vs a single broker, both ``gannet broker run``
processes with SYNC_FLUSH on this machine (``docs/benchmarks.md``; issue 5 "Must show").

Figures:

* **produce throughput** — batched SendMessage (32 messages of 100 B per RPC, raw
  ``rocketmq.grpc_protocol`` stubs, ``IN_FLIGHT`` calls in flight from ``SENDER_THREADS``
  threads) to the leader, messages/s over the window; the replicated/single ratio (target
  ≥ 0.5);
* **commit latency** — single 1 KiB SendMessage calls one at a time (closed loop): each answer
  comes after the majority fsync'ed the record (3 nodes) or the local fsync (1 node); p50/p99;
* **failover time** — SIGKILL of the leader → first SendMessage answered OK by the new leader
  (a sender tries every member in turn every ``RETRY_PAUSE_S``), ``FAILOVER_TRIALS`` times; the
  killed node is restarted and the group converges between trials (target ≤ 3 s with the
  default 100 ms tick and 10-tick election timeout).

The machine's load average is recorded before and after (the 2 cores are shared). Run with
``make bench`` (``--quick``: about 1 min) or ``python -m bench.replication``. Figures are
appended to ``bench/results/replication.jsonl``; ``bench/results/REPLICATION.md`` is the
write-up. Uses the process harness of ``e2e/replication`` (without fault proxies).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from bench import results_log
from e2e.processes import wait_for
from e2e.replication.harness import ProcessGroup

RESULTS = results_log.RESULTS
TOPIC = "ReplicationBench"
CLIENT_ID = (("x-mq-client-id", "bench@1@0@replication"),)
BATCH_MESSAGES = 32
BATCH_BODY_BYTES = 100
SINGLE_BODY_BYTES = 1024
SENDER_THREADS = 2
IN_FLIGHT = 8
FAILOVER_TRIALS = 3
RETRY_PAUSE_S = 0.02
OK = definition_pb2.Code.Value("OK")


CALL_MARKER = b"ZZZZZZZZ"  # replaced by each call's number: see _Payloads


class _Payloads:
    """Serialized send requests whose message ids differ on every call.

    The broker drops a send whose message id it has seen within its dedup window and answers
    it with the first receipt, so a bench that re-sent one payload would measure the window,
    not the log. The request is serialized once; each call swaps the call number into it."""

    def __init__(self, count: int, body_bytes: int, seed: int) -> None:
        self._template = _request(count, body_bytes, seed)
        self._calls = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> bytes:
        with self._lock:
            call = next(self._calls)
        return self._template.replace(CALL_MARKER, b"%08X" % call)


def _request(count: int, body_bytes: int, seed: int) -> bytes:
    request = service_pb2.SendMessageRequest()
    for i in range(count):
        msg = request.messages.add(body=b"r" * body_bytes)
        msg.topic.name = TOPIC
        sp = msg.system_properties
        marker = CALL_MARKER.decode()
        sp.message_id = f"01{seed:02X}{marker}{i:04X}{os.getpid():08X}0000000000"[:34]
        sp.body_encoding = definition_pb2.IDENTITY
        sp.message_type = definition_pb2.NORMAL
        sp.born_timestamp.FromMilliseconds(time.time_ns() // 1_000_000)
        sp.born_host = "127.0.0.1"
    return bytes(request.SerializeToString())


def _send_call(channel: grpc.Channel) -> Any:
    return channel.unary_unary(
        "/apache.rocketmq.v2.MessagingService/SendMessage",
        request_serializer=None,
        response_deserializer=service_pb2.SendMessageResponse.FromString,
    )


def throughput(endpoint: str, seconds: float) -> dict[str, float]:
    """Batched sends from ``SENDER_THREADS`` threads, ``IN_FLIGHT`` calls each."""
    payloads = _Payloads(BATCH_MESSAGES, BATCH_BODY_BYTES, 1)
    sent = [0] * SENDER_THREADS
    errors = [0] * SENDER_THREADS
    start = threading.Barrier(SENDER_THREADS + 1)
    stop_at = [0.0]

    def sender(index: int) -> None:
        with grpc.insecure_channel(endpoint) as channel:
            call = _send_call(channel)
            start.wait()
            window: list[Any] = []
            while time.monotonic() < stop_at[0] or window:
                while time.monotonic() < stop_at[0] and len(window) < IN_FLIGHT:
                    window.append(call.future(payloads.next(), timeout=30, metadata=CLIENT_ID))
                reply = window.pop(0).result()
                if reply.status.code == OK:
                    sent[index] += BATCH_MESSAGES
                else:
                    errors[index] += 1

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(SENDER_THREADS)]
    for t in threads:
        t.start()
    began = time.monotonic()
    stop_at[0] = began + seconds
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - began
    return {
        "msgs": sum(sent),
        "errors": sum(errors),
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(sum(sent) / elapsed, 1),
    }


def commit_latency(endpoint: str, seconds: float) -> dict[str, float]:
    """One 1 KiB send at a time; the answer means committed (majority durable)."""
    payloads = _Payloads(1, SINGLE_BODY_BYTES, 2)
    latencies_ms: list[float] = []
    with grpc.insecure_channel(endpoint) as channel:
        call = _send_call(channel)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            began = time.perf_counter()
            reply = call(payloads.next(), timeout=10, metadata=CLIENT_ID)
            if reply.status.code == OK:
                latencies_ms.append((time.perf_counter() - began) * 1000)
    latencies_ms.sort()
    q = statistics.quantiles(latencies_ms, n=100) if len(latencies_ms) >= 2 else [0.0] * 99
    return {
        "count": len(latencies_ms),
        "p50_ms": round(q[49], 2),
        "p99_ms": round(q[98], 2),
        "max_ms": round(latencies_ms[-1], 2) if latencies_ms else 0.0,
    }


def failover(group: ProcessGroup) -> float:
    """SIGKILL the leader; seconds until a member answers a send with OK."""
    payloads = _Payloads(1, SINGLE_BODY_BYTES, 3)
    leader = group.current_leader()
    survivors = [i for i in group.ids if i != leader]
    channels = {i: grpc.insecure_channel(group.client_endpoint(i)) for i in survivors}
    try:
        calls = {i: _send_call(c) for i, c in channels.items()}
        killed_at = time.monotonic()
        group.kill(leader)
        pause = threading.Event()
        while True:
            for node_id in survivors:
                try:
                    reply = calls[node_id](payloads.next(), timeout=1, metadata=CLIENT_ID)
                except grpc.RpcError:
                    continue
                if reply.status.code == OK:
                    elapsed = time.monotonic() - killed_at
                    group.start(leader)  # back in the group for the next trial
                    group.converged(60)
                    return elapsed
            if time.monotonic() - killed_at > 30:
                raise AssertionError("no member accepted a send within 30 s of the kill")
            pause.wait(RETRY_PAUSE_S)
    finally:
        for c in channels.values():
            c.close()


def _machine() -> dict[str, Any]:
    load1, load5, _ = os.getloadavg()
    return {"cpus": os.cpu_count(), "load1": round(load1, 2), "load5": round(load5, 2)}


def run_group(root: Path, nodes: int, seconds: float, trials: int) -> dict[str, Any]:
    group = ProcessGroup(root, nodes, proxied=False, replicated=nodes > 1)
    try:
        group.start()
        wait_for(lambda: group.status(1) is not None, 30, "the brokers to serve")
        group.create_topic(TOPIC, queues=8)
        leader = group.current_leader()
        endpoint = group.client_endpoint(leader)
        result: dict[str, Any] = {"nodes": nodes, "machine_before": _machine()}
        result["throughput"] = throughput(endpoint, seconds)
        print(nodes, "nodes: throughput", result["throughput"], flush=True)
        result["commit_latency"] = commit_latency(endpoint, min(seconds, 4.0))
        print(nodes, "nodes: commit latency", result["commit_latency"], flush=True)
        if nodes > 1 and trials:
            result["failover_s"] = [round(failover(group), 3) for _ in range(trials)]
            print(nodes, "nodes: failover", result["failover_s"], flush=True)
        result["machine_after"] = _machine()
        return result
    finally:
        group.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 s windows, 3 failovers")
    parser.add_argument("--seconds", type=float, help="throughput window (default 5 / 15)")
    parser.add_argument("--trials", type=int, default=FAILOVER_TRIALS, help="failover trials")
    parser.add_argument(
        "--no-record", action="store_true", help=f"do not append to {RESULTS}/replication.jsonl"
    )
    args = parser.parse_args()
    seconds = args.seconds or (5.0 if args.quick else 15.0)
    if seconds <= 0 or args.trials < 0:
        parser.error("--seconds must be positive and --trials not negative")
    base = Path(tempfile.mkdtemp(prefix="gannet-bench-repl-"))
    try:
        single = run_group(base / "single", 1, seconds, 0)
        replicated = run_group(base / "three", 3, seconds, args.trials)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ratio = replicated["throughput"]["msgs_per_s"] / max(single["throughput"]["msgs_per_s"], 1e-9)
    failovers = replicated.get("failover_s", [])
    line = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": seconds,
        "single": single,
        "replicated": replicated,
        "throughput_ratio": round(ratio, 3),
        "failover_max_s": max(failovers) if failovers else None,
    }
    print(json.dumps(line))
    print(
        f"3 nodes / 1 node produce throughput: {ratio:.2f} (target >= 0.5); "
        f"failover {failovers} s (target <= 3 s)"
    )
    if not args.no_record:
        results_log.append("replication", line)


if __name__ == "__main__":
    main()
