"""Broker benchmark over ``apache.rocketmq.v2``: a ``gannet broker run`` subprocess (ASYNC_FLUSH,
one Raft member) driven by client processes on the same machine.

Scenarios (``docs/benchmarks.md`` §2, S2–S4):

* ``official`` — the official ``rocketmq-python-client`` Producer, 1 KiB, 1 message per RPC,
  64 sends in flight in total (``send_async``) over ``OFFICIAL_PROCESSES`` processes;
* ``batched`` — our own load generator: raw gRPC on ``rocketmq.grpc_protocol`` stubs, one
  pre-serialised ``SendMessageRequest`` of 32 messages of 100 B, ``BATCHED_IN_FLIGHT`` calls in
  flight per process over ``BATCHED_PROCESSES`` processes;
* ``pop`` — ReceiveMessage (batch 32) then one AckMessage of the 32 handles, raw stubs, over
  ``POP_PROCESSES`` processes, draining what ``batched`` wrote;
* ``latency`` — 1 KiB single-message SendMessage at half the ``official`` rate, open loop (each
  latency is measured from the send's scheduled time), p50/p99;
* ``e2e_latency`` — at a fixed ``E2E_RATE_PER_S``, send and send → receive p50/p99 through a
  long-polling receiver (:mod:`bench.latency`).

For each the broker's CPU time (``/proc/<pid>/stat`` utime + stime, all threads) over the
measured window gives **broker CPU µs per message**; ``1e6 / µs`` is what one broker core could
sustain if the clients were free — on a 2-core machine the clients compete with the broker, so
the achieved rate is lower. Each server style (``asyncio``: grpc.aio on the default loop;
``uvloop``: grpc.aio on uvloop) gets a fresh broker and store.

``--profile`` also samples the broker with py-spy during ``batched`` and ``official`` and
prints the top functions.

Run with ``make bench`` (``--quick``: short windows) or ``python -m bench.broker``. Figures are
appended to ``bench/results/broker.jsonl``; ``bench/results/BROKER.md`` is the write-up.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from bench import latency, results_log

if TYPE_CHECKING:
    from gannet.node.store.config import StoreConfig

RESULTS = Path(__file__).parent / "results"
TOPIC, GROUP, QUEUES = "BrokerBench", "BrokerBenchGroup", 16
CLIENT_ID = (("x-mq-client-id", "bench@1@0@broker"),)
OFFICIAL_IN_FLIGHT = 64
OFFICIAL_PROCESSES = 2
BATCH_MESSAGES = 32
BATCHED_PROCESSES = 3
BATCHED_IN_FLIGHT = 4
POP_PROCESSES = 3
BODY_OFFICIAL_BYTES = 1024
BODY_BATCHED_BYTES = 100
LATENCY_THREADS = 4
STYLES = ("asyncio", "uvloop")
E2E_RATE_PER_S = 200.0  # moderate: far below what one broker core serves
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------- broker process
@dataclass
class BrokerProcess:
    proc: subprocess.Popen[str]
    endpoint: str

    def cpu_s(self) -> float:
        """utime + stime of every thread of the broker so far."""
        text = Path(f"/proc/{self.proc.pid}/stat").read_text()
        fields = text[text.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A fresh temporary directory for one run's stores, removed when the run ends (also when it
    fails). Used by :func:`run_style`, :mod:`bench.official` and :mod:`bench.transactions`."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def broker_process(root: Path, style: str) -> Iterator[BrokerProcess]:
    if style not in STYLES:
        raise ValueError(f"unknown server style {style!r}; use one of {STYLES}")
    command = [
        sys.executable, "-m", "gannet.node.cli", "broker", "run", "--data-dir", str(root),
        "--listen", "127.0.0.1:0", "--flush", "async", "--metrics-listen", "",
        "--event-loop", style, "--file-size-mb", "256",
    ]  # fmt: skip
    with _serving_process(command, "broker serving") as running:
        yield running


@contextlib.contextmanager
def _serving_process(command: list[str], ready_text: str) -> Iterator[BrokerProcess]:
    """Start ``command``; its first line containing ``ready_text`` names ``on host:port``."""
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=repo
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if ready_text in line:
                break
        match = re.search(r"on (127\.0\.0\.1:\d+)", "".join(seen))
        if match is None:
            raise RuntimeError(f"{command[:3]} did not start:\n" + "".join(seen))
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
        yield BrokerProcess(proc, match.group(1))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _echo_server(style: str) -> None:
    """A grpc.aio server answering every SendMessage with a canned OK: the per-call floor of
    the server style, with none of Gannet's work (run in a subprocess by :func:`echo_process`)."""
    import asyncio

    reply = service_pb2.SendMessageResponse()
    reply.status.code, reply.status.message = 20000, "OK"

    async def send(request: object, context: object) -> service_pb2.SendMessageResponse:
        return reply

    handler = grpc.method_handlers_generic_handler(
        "apache.rocketmq.v2.MessagingService",
        {
            "SendMessage": grpc.unary_unary_rpc_method_handler(
                send,
                request_deserializer=service_pb2.SendMessageRequest.FromString,
                response_serializer=service_pb2.SendMessageResponse.SerializeToString,
            )
        },
    )

    async def serve() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(f"echo serving on 127.0.0.1:{port}", flush=True)
        stopping = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        await stopping.wait()
        await server.stop(1)

    if style == "sync":
        _sync_echo_server()
        return
    factory = None
    if style == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve())


def _sync_echo_server() -> None:
    """The same canned reply from grpc's sync server (thread pool of 8)."""
    from concurrent import futures

    reply = service_pb2.SendMessageResponse()
    reply.status.code, reply.status.message = 20000, "OK"
    sync_handler = grpc.method_handlers_generic_handler(
        "apache.rocketmq.v2.MessagingService",
        {
            "SendMessage": grpc.unary_unary_rpc_method_handler(
                lambda request, context: reply,
                request_deserializer=service_pb2.SendMessageRequest.FromString,
                response_serializer=service_pb2.SendMessageResponse.SerializeToString,
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((sync_handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"echo serving on 127.0.0.1:{port}", flush=True)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    stopping.wait()
    server.stop(1)


def echo_process(style: str) -> contextlib.AbstractContextManager[BrokerProcess]:
    code = f"from bench.broker import _echo_server; _echo_server({style!r})"
    return _serving_process([sys.executable, "-c", code], "echo serving")


def _admin_setup(endpoint: str) -> None:
    from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=QUEUES), timeout=10)
        admin.CreateGroup(admin_pb2.CreateGroupRequest(name=GROUP), timeout=10)


# ---------------------------------------------------------------------- workers
# Each worker waits on ``start`` (a multiprocessing Event), works until ``stop_at`` (a
# time.time() value) and puts one result dict on ``out``.


def _official_worker(
    endpoint: str, in_flight: int, start: Any, stop_at: Any, out: Any, ready: Any
) -> None:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), (TOPIC,))
    producer.startup()
    body = b"o" * BODY_OFFICIAL_BYTES
    window: collections.deque[Any] = collections.deque()
    sent = errors = 0

    def message() -> Any:
        msg = Message()
        msg.topic = TOPIC
        msg.body = body
        return msg

    producer.send(message())  # warm the route and channel
    ready.put(1)
    start.wait()
    deadline = stop_at.value
    while time.time() < deadline:
        window.append(producer.send_async(message()))
        if len(window) >= in_flight:
            try:
                window.popleft().result(timeout=30)
                sent += 1
            except Exception:
                errors += 1
    for future in window:
        try:
            future.result(timeout=30)
            sent += 1
        except Exception:
            errors += 1
    out.put({"sent": sent, "errors": errors, "ended": time.time()})
    producer.shutdown()


def _batch_request_bytes(body_bytes: int, seed: int) -> bytes:
    request = service_pb2.SendMessageRequest()
    for i in range(BATCH_MESSAGES):
        msg = request.messages.add(body=b"b" * body_bytes)
        msg.topic.name = TOPIC
        sp = msg.system_properties
        sp.message_id = f"01{seed:010X}{i:04X}{os.getpid():08X}0000000000"[:34]
        sp.body_encoding = definition_pb2.IDENTITY
        sp.message_type = definition_pb2.NORMAL
        sp.born_timestamp.FromMilliseconds(time.time_ns() // 1_000_000)
        sp.born_host = "127.0.0.1"
    return bytes(request.SerializeToString())


def _batched_worker(
    endpoint: str, in_flight: int, start: Any, stop_at: Any, out: Any, ready: Any
) -> None:
    payload = _batch_request_bytes(BODY_BATCHED_BYTES, os.getpid())
    _raw_send(endpoint, payload, BATCH_MESSAGES, in_flight, start, stop_at, out, ready)


def _single_worker(
    endpoint: str, in_flight: int, start: Any, stop_at: Any, out: Any, ready: Any
) -> None:
    """Raw 1-message (1 KiB) SendMessage calls: the official client's RPCs without its cost."""
    request = service_pb2.SendMessageRequest.FromString(
        _batch_request_bytes(BODY_OFFICIAL_BYTES, os.getpid())
    )
    del request.messages[1:]
    payload = request.SerializeToString()
    _raw_send(endpoint, payload, 1, in_flight, start, stop_at, out, ready)


def _raw_send(
    endpoint: str,
    payload: bytes,
    batch: int,
    in_flight: int,
    start: Any,
    stop_at: Any,
    out: Any,
    ready: Any,
) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=None,
            response_deserializer=service_pb2.SendMessageResponse.FromString,
        )
        assert call(payload, timeout=10, metadata=CLIENT_ID).status.code == 20000
        ready.put(1)
        start.wait()
        deadline = stop_at.value
        sent = errors = 0
        window: collections.deque[Any] = collections.deque()
        while time.time() < deadline:
            window.append(call.future(payload, timeout=30, metadata=CLIENT_ID))
            if len(window) >= in_flight:
                reply = window.popleft().result()
                if reply.status.code == 20000:
                    sent += batch
                else:
                    errors += 1
        for future in window:
            reply = future.result()
            sent += batch if reply.status.code == 20000 else 0
        out.put({"sent": sent, "errors": errors, "ended": time.time()})


def _pop_worker(endpoint: str, _: int, start: Any, stop_at: Any, out: Any, ready: Any) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.ReceiveMessageRequest(batch_size=BATCH_MESSAGES)
        request.group.name = GROUP
        request.message_queue.topic.name = TOPIC
        request.filter_expression.expression = "*"
        request.invisible_duration.FromSeconds(60)
        request.long_polling_timeout.FromSeconds(5)
        ready.put(1)
        start.wait()
        deadline = stop_at.value
        acked = errors = empty = 0
        while time.time() < deadline:
            handles = [
                frame.message.system_properties.receipt_handle
                for frame in stub.ReceiveMessage(request, timeout=15, metadata=CLIENT_ID)
                if frame.WhichOneof("content") == "message"
            ]
            if not handles:
                empty += 1
                break  # drained
            ack = service_pb2.AckMessageRequest(
                entries=[service_pb2.AckMessageEntry(receipt_handle=h) for h in handles]
            )
            ack.group.name = GROUP
            ack.topic.name = TOPIC
            reply = stub.AckMessage(ack, timeout=15, metadata=CLIENT_ID)
            if reply.status.code == 20000:
                acked += len(handles)
            else:
                errors += 1
        out.put({"sent": acked, "errors": errors, "ended": time.time(), "drained": empty > 0})


def _run_workers(
    broker: BrokerProcess, target: Any, processes: int, in_flight: int, seconds: float
) -> dict[str, float]:
    """Start ``processes`` workers, time the window, return msgs/s and broker CPU µs/msg."""
    ctx = mp.get_context("spawn")
    start, out, ready = ctx.Event(), ctx.Queue(), ctx.Queue()
    stop_at = ctx.Value("d", 0.0)
    workers = [
        ctx.Process(target=target, args=(broker.endpoint, in_flight, start, stop_at, out, ready))
        for _ in range(processes)
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=120)
    cpu_before = broker.cpu_s()
    began = time.time()
    stop_at.value = began + seconds
    start.set()
    results = [out.get(timeout=seconds + 120) for _ in workers]
    ended = max(r["ended"] for r in results)
    cpu_used = broker.cpu_s() - cpu_before
    for w in workers:
        w.join(timeout=60)
    count = sum(r["sent"] for r in results)
    elapsed = ended - began
    return {
        "msgs": count,
        "errors": sum(r["errors"] for r in results),
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(count / elapsed, 1),
        "broker_cpu_us_per_msg": round(cpu_used / max(count, 1) * 1e6, 2),
        "broker_cpu_util": round(cpu_used / elapsed, 3),
        "one_core_msgs_per_s": round(count / cpu_used, 1) if cpu_used > 0 else 0.0,
    }


# ---------------------------------------------------------------------- latency
def _latency(broker: BrokerProcess, rate_per_s: float, seconds: float) -> dict[str, float]:
    """Open-loop 1 KiB single-message sends at ``rate_per_s``; latency from the schedule."""
    request = service_pb2.SendMessageRequest()
    msg = request.messages.add(body=b"l" * BODY_OFFICIAL_BYTES)
    msg.topic.name = TOPIC
    msg.system_properties.message_id = "0102FC000000013E000B13F97D0000AAAA"
    msg.system_properties.body_encoding = definition_pb2.IDENTITY
    payload = request.SerializeToString()
    latencies_ms: list[float] = []
    lock = threading.Lock()
    errors = [0]
    with grpc.insecure_channel(broker.endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=None,
            response_deserializer=service_pb2.SendMessageResponse.FromString,
        )
        call(payload, timeout=10, metadata=CLIENT_ID)
        total = int(rate_per_s * seconds)
        interval_s = 1 / rate_per_s
        cpu_before = broker.cpu_s()
        began = time.perf_counter()
        pending: list[Any] = []

        def done(scheduled: float, future: Any) -> None:
            finished = time.perf_counter()
            ok = future.exception() is None and future.result().status.code == 20000
            with lock:
                if ok:
                    latencies_ms.append((finished - scheduled) * 1000)
                else:
                    errors[0] += 1

        for i in range(total):
            scheduled = began + i * interval_s
            delay = scheduled - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            future = call.future(payload, timeout=30, metadata=CLIENT_ID)
            future.add_done_callback(lambda f, s=scheduled: done(s, f))
            pending.append(future)
        for future in pending:
            with contextlib.suppress(Exception):
                future.result()
        elapsed = time.perf_counter() - began
        cpu_used = broker.cpu_s() - cpu_before
    ordered = sorted(latencies_ms)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3) if ordered else 0.0

    return {
        "rate_per_s": round(rate_per_s, 1),
        "achieved_per_s": round(len(ordered) / elapsed, 1),
        "msgs": len(ordered),
        "errors": errors[0],
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(ordered[-1], 3) if ordered else 0.0,
        "mean_ms": round(statistics.fmean(ordered), 3) if ordered else 0.0,
        "broker_cpu_us_per_msg": round(cpu_used / max(len(ordered), 1) * 1e6, 2),
    }


# ---------------------------------------------------------------------- send path, no gRPC
def path_store_config(root: Path) -> StoreConfig:
    """The in-process path benches' store (ASYNC_FLUSH, 256 MiB commit-log files, a big
    index): a ``StoreConfig``, imported here so that the bench imports the store lazily."""
    from gannet.node.store.config import FlushMode, StoreConfig

    return StoreConfig(
        root_dir=root,
        flush_mode=FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=256 * 1024 * 1024,
        index_hash_slots=500_000,
        index_items_max=2_000_000,
    )


def send_path(batch: int, seconds: float) -> dict[str, float]:
    """CPU µs per message of the broker's send path without gRPC, in this process: decode a
    ``SendMessageRequest``, :func:`sending.prepare`, append (ASYNC_FLUSH; dispatch threads
    included, they run in this process), build and encode the response."""
    from gannet.node.api import sending
    from gannet.node.protocol import statuses
    from gannet.node.store.configs.topics import TopicConfig
    from gannet.node.store.message_store import MessageStore

    root = Path(tempfile.mkdtemp(prefix="gannet-bench-send-"))
    config = path_store_config(root)
    request = service_pb2.SendMessageRequest.FromString(_batch_request_bytes(100, 1))
    del request.messages[batch:]
    payload = request.SerializeToString()
    try:
        with MessageStore(config).open() as store:
            store.topic_configs.put(
                TopicConfig(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            )

            def once() -> None:
                decoded = service_pb2.SendMessageRequest.FromString(payload)
                prepared = sending.prepare(
                    decoded, store.topic_configs.get, peer_host="127.0.0.1",
                    now_ms=time.time_ns() // 1_000_000,
                )  # fmt: skip
                messages = list(prepared.messages)
                for m in messages:
                    m.queue_id = 0
                results, _ = store.put_messages_nowait(messages)
                entries = [
                    service_pb2.SendResultEntry(
                        status=statuses.ok(), message_id=i, transaction_id=i, offset=r.queue_offset
                    )
                    for i, r in zip(prepared.message_ids, results, strict=True)
                ]
                service_pb2.SendMessageResponse(
                    status=statuses.ok(), entries=entries
                ).SerializeToString()

            for _ in range(100):
                once()
            count = 0
            cpu_before, wall_end = time.process_time(), time.monotonic() + seconds
            while time.monotonic() < wall_end:
                once()
                count += batch
            store.wait_dispatched(store.commitlog.max_offset(), 60)
            cpu_used = time.process_time() - cpu_before
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"batch": batch, "msgs": count, "cpu_us_per_msg": round(cpu_used / count * 1e6, 2)}


# ---------------------------------------------------------------------- profile
def _profile(
    broker: BrokerProcess, target: Any, processes: int, in_flight: int, seconds: float
) -> str:
    """Run a scenario while py-spy samples the broker; the top functions by own time."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out_file = Path(tempfile.mkdtemp()) / "profile.txt"
    sampler = subprocess.Popen(
        [spy, "record", "--pid", str(broker.proc.pid), "--format", "raw", "--rate", "200",
         "--duration", str(int(seconds) + 2), "--output", str(out_file), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.0)  # py-spy attaches
    _run_workers(broker, target, processes, in_flight, seconds)
    _, err = sampler.communicate(timeout=seconds + 60)
    if not out_file.exists():
        return f"py-spy failed: {err.strip()[-300:]}"
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in out_file.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if "idle" in frames[-1] or frames[-1].startswith(("select ", "epoll", "wait ")):
            continue
        total += count
        own[frames[-1]] += count
    lines = [f"{count / total * 100:5.1f}%  {frame}" for frame, count in own.most_common(15)]
    return f"{total} busy samples\n" + "\n".join(lines)


# ---------------------------------------------------------------------- main
def _machine() -> dict[str, Any]:
    load1, load5, _ = os.getloadavg()
    return {"cpus": os.cpu_count(), "load1": round(load1, 2), "load5": round(load5, 2)}


def run_style(style: str, seconds: float, profile: bool) -> dict[str, Any]:
    with scratch_dir(f"gannet-bench-{style}-") as root:
        with broker_process(root / "store", style) as broker:
            _admin_setup(broker.endpoint)
            result: dict[str, Any] = {"style": style, "machine_before": _machine()}
            result["official"] = _run_workers(
                broker, _official_worker, OFFICIAL_PROCESSES,
                OFFICIAL_IN_FLIGHT // OFFICIAL_PROCESSES, seconds,
            )  # fmt: skip
            print(style, "official", result["official"], flush=True)
            result["batched"] = _run_workers(
                broker, _batched_worker, BATCHED_PROCESSES, BATCHED_IN_FLIGHT, seconds
            )
            print(style, "batched", result["batched"], flush=True)
            result["pop"] = _run_workers(broker, _pop_worker, POP_PROCESSES, 1, seconds)
            print(style, "pop", result["pop"], flush=True)
            result["single_raw"] = _run_workers(broker, _single_worker, 2, 16, seconds)
            print(style, "single raw", result["single_raw"], flush=True)
            half = result["official"]["msgs_per_s"] / 2
            result["latency"] = _latency(broker, max(half, 50.0), min(seconds, 5.0))
            print(style, "latency", result["latency"], flush=True)
            latency.setup(broker.endpoint)
            result["e2e_latency"] = latency.send_to_receive(
                broker.endpoint, E2E_RATE_PER_S, min(seconds, 10.0), CLIENT_ID, broker.cpu_s
            )
            print(style, "send -> receive", result["e2e_latency"], flush=True)
            if profile:
                result["profile_batched"] = _profile(
                    broker, _batched_worker, BATCHED_PROCESSES, BATCHED_IN_FLIGHT, seconds
                )
                print(result["profile_batched"], flush=True)
                result["profile_official"] = _profile(
                    broker, _official_worker, OFFICIAL_PROCESSES,
                    OFFICIAL_IN_FLIGHT // OFFICIAL_PROCESSES, seconds,
                )  # fmt: skip
                print(result["profile_official"], flush=True)
            result["broker_rss_bytes"] = broker.rss_bytes()
        with echo_process(style) as echo:
            result["grpc_floor"] = _run_workers(echo, _single_worker, 2, 16, seconds)
            print(style, "grpc floor (canned reply)", result["grpc_floor"], flush=True)
        result["machine_after"] = _machine()
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 s windows (about 2 min)")
    parser.add_argument("--seconds", type=float, help="window per scenario (default 4 / 15)")
    parser.add_argument("--style", choices=STYLES, action="append", help="repeatable")
    parser.add_argument("--profile", action="store_true", help="py-spy the broker")
    parser.add_argument(
        "--send-path-only", action="store_true", help="only the in-process send path (no gRPC)"
    )
    parser.add_argument("--label", default="", help="recorded with each figure (paired runs)")
    args = parser.parse_args()
    seconds = args.seconds or (4.0 if args.quick else 15.0)
    styles = args.style or list(STYLES)
    import grpc as grpc_module

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    with results_log.appending("broker") as out:
        paths = [send_path(batch, min(seconds, 3.0)) for batch in (1, BATCH_MESSAGES)]
        record = {
            "scenario": "send_path",
            "at": stamp,
            "label": args.label,
            "results": paths,
            "machine": _machine(),
        }
        out.write(json.dumps(record) + "\n")
        print("send path without gRPC:", paths, flush=True)
        if args.send_path_only:
            return
        with echo_process("sync") as echo:
            floor = _run_workers(echo, _single_worker, 2, 16, seconds)
        record = {
            "scenario": "grpc_floor_sync",
            "at": stamp,
            "result": floor,
            "machine": _machine(),
        }
        out.write(json.dumps(record) + "\n")
        print("grpc floor, sync thread-pool server (canned reply):", floor, flush=True)
        for style in styles:
            result = run_style(style, seconds, args.profile)
            result.update(
                {
                    "at": stamp,
                    "label": args.label,
                    "seconds": seconds,
                    "grpcio": grpc_module.__version__,
                }
            )
            out.write(json.dumps(result) + "\n")
            out.flush()
            print(
                f"{style:8} official {result['official']['msgs_per_s']:>9,.0f}/s "
                f"({result['official']['broker_cpu_us_per_msg']} us)  "
                f"batched {result['batched']['msgs_per_s']:>9,.0f}/s "
                f"({result['batched']['broker_cpu_us_per_msg']} us)  "
                f"pop {result['pop']['msgs_per_s']:>9,.0f}/s "
                f"({result['pop']['broker_cpu_us_per_msg']} us)  "
                f"latency p50 {result['latency']['p50_ms']} ms p99 {result['latency']['p99_ms']} ms"
            )


if __name__ == "__main__":
    main()
