"""Send deduplication's index lookups and what they cost the broker per one-message send.

A broker's window map holds a bounded number of message ids; once it drops ids that are still
within the 2-minute window, a send of an id the map does not hold may be a retry whose original
only the index files know (``gannet.node.api.dedup``). Two measurements, each run for the code
before and after a change (alternate runs with ``PYTHONPATH`` pointing at the other tree's
``node/``, and give each a ``--label``):

* ``path``: one-message sends (1 KiB, a fresh message id, ``born_timestamp`` the current whole
  second as the official Python client stamps it) through ``MessagingServicer.SendMessage`` in
  this process, no gRPC, one at a time: CPU µs per send over every thread of the process (the
  lookup runs on a worker thread), of the event loop's thread alone, and the lookups made
  (``SendDeduplicator.log_lookups_total``). First ``--fill`` unique ids are appended in batches
  of 32 (more than the map holds: it drops ids for room), then ``--pause-s`` pass, so the
  map's oldest ids are older than the born-time margin, as on a broker that has taken ~1,400
  unique ids/s for a while (100,000 ids span 71 s). ``--fill 0``: no id dropped. The CPU per
  fill record (append and dispatch, 32 per put, every thread) is recorded too: what a new id
  costs the map.
* ``official``: a ``gannet broker run`` process (uvloop, ASYNC_FLUSH, as :mod:`bench.broker`);
  raw 32-message SendMessage requests append ``--fill`` unique ids, ``--pause-s`` pass, then
  the official ``Producer`` sends for ``--seconds`` (:mod:`bench.broker`'s official phase):
  broker CPU µs per send, the lookups from ``/metrics``
  (``gannet_send_dedup_log_lookups_total``; None for code without the counter) and the
  broker's resident memory after the fill (the window map's size shows there).

``python -m bench.dedup path --fill 120000 --pause-s 22 --entries-max 100000 --label after``;
records go to ``bench/results/broker.jsonl`` (``scenario`` ``dedup_path`` / ``dedup_official``),
the write-up is ``bench/results/BROKER.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import socket
import time
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from bench import results_log
from bench.broker import (
    BATCH_MESSAGES,
    BODY_OFFICIAL_BYTES,
    CLIENT_ID,
    OFFICIAL_IN_FLIGHT,
    OFFICIAL_PROCESSES,
    QUEUES,
    TOPIC,
    _admin_setup,
    _machine,
    _official_worker,
    _run_workers,
    _serving_process,
    path_store_config,
    scratch_dir,
)

FILL_BODY_BYTES = 100
FILL_IN_FLIGHT = 8
LOOKUPS_METRIC = "gannet_send_dedup_log_lookups_total"


def _add_message(
    request: service_pb2.SendMessageRequest, body: bytes, message_id: str, born_s: int
) -> None:
    """A NORMAL message of ``TOPIC`` as the official client fills it (born in whole seconds)."""
    msg = request.messages.add(body=body)
    msg.topic.name = TOPIC
    sp = msg.system_properties
    sp.message_id = message_id
    sp.body_encoding = definition_pb2.IDENTITY
    sp.message_type = definition_pb2.NORMAL
    sp.born_timestamp.seconds = born_s
    sp.born_host = "127.0.0.1"


def _fill_request(first: int) -> bytes:
    """32 messages with unique ids ``first``.. (hex), 100-byte bodies."""
    request = service_pb2.SendMessageRequest()
    born_s = int(time.time())
    for i in range(first, first + BATCH_MESSAGES):
        _add_message(request, b"f" * FILL_BODY_BYTES, f"0F{i:032X}", born_s)
    return bytes(request.SerializeToString())


def _send_request(seq: int) -> bytes:
    """One official-client-like message: 1 KiB, a fresh id, born this whole second."""
    request = service_pb2.SendMessageRequest()
    _add_message(request, b"o" * BODY_OFFICIAL_BYTES, f"05{seq:032X}", int(time.time()))
    return bytes(request.SerializeToString())


class _Context:
    """What the send handler reads of a ``grpc.aio.ServicerContext``."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def time_remaining(self) -> float:
        return 30.0

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return CLIENT_ID


def path(sends: int, fill: int, pause_s: float, entries_max: int | None) -> dict[str, Any]:
    """CPU per one-message send through ``MessagingServicer.SendMessage`` (module docstring)."""
    from gannet.node.api import routes
    from gannet.node.api.messaging import MessagingServicer
    from gannet.node.store.configs.topics import TopicConfig
    from gannet.node.store.log import records
    from gannet.node.store.message_store import MessageStore

    async def measure(store: MessageStore) -> dict[str, Any]:
        identity = routes.BrokerIdentity(broker_name="broker-a", host="127.0.0.1", port=8081)
        extra: dict[str, Any] = {} if entries_max is None else {"dedup_entries_max": entries_max}
        servicer = MessagingServicer(store, identity, **extra)
        checker = servicer.dedup
        fill_cpu_before = time.process_time()
        for first in range(0, fill, BATCH_MESSAGES):
            store.put_messages(
                [
                    records.Message(
                        topic=TOPIC,
                        body=b"f" * FILL_BODY_BYTES,
                        queue_id=i % QUEUES,
                        properties={"UNIQ_KEY": f"0F{i:032X}"},
                    )
                    for i in range(first, min(first + BATCH_MESSAGES, fill))
                ]
            )
        store.wait_dispatched(store.commitlog.max_offset(), 300)
        fill_cpu_s = time.process_time() - fill_cpu_before
        await asyncio.sleep(pause_s)
        context = _Context()
        send = servicer.SendMessage
        decode = service_pb2.SendMessageRequest.FromString
        for seq in range(50):  # warm-up
            await send(decode(_send_request(seq)), context)  # type: ignore[no-untyped-call]
        payloads = [_send_request(1_000 + seq) for seq in range(sends)]
        lookups_before = checker.log_lookups_total
        cpu_before, loop_before = time.process_time(), time.thread_time()
        began = time.perf_counter()
        for payload in payloads:
            answer = await send(decode(payload), context)  # type: ignore[no-untyped-call]
            if answer.status.code != 20000:
                raise RuntimeError(f"SendMessage answered {answer.status}")
        elapsed = time.perf_counter() - began
        loop_used = time.thread_time() - loop_before
        cpu_used = time.process_time() - cpu_before
        return {
            "sends": sends,
            "fill": fill,
            "pause_s": pause_s,
            "entries_max": entries_max,
            "held": checker.held(),
            "log_lookups": checker.log_lookups_total - lookups_before,
            "cpu_us_per_send": round(cpu_used / sends * 1e6, 2),
            "loop_cpu_us_per_send": round(loop_used / sends * 1e6, 2),
            "sends_per_s": round(sends / elapsed, 1),
            # Appending and dispatching the fill (32 per put): what a new id costs the map.
            "fill_cpu_us_per_record": round(fill_cpu_s / fill * 1e6, 2) if fill else None,
        }

    async def main(store_root: Any) -> dict[str, Any]:
        # The store closes while the loop runs (as in the broker): its flush thread wakes
        # waiters on this loop.
        with MessageStore(path_store_config(store_root)).open() as store:
            store.topic_configs.put(
                TopicConfig(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            )
            return await measure(store)

    with scratch_dir("gannet-bench-dedup-path-") as root:
        return asyncio.run(main(root / "store"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lookups(metrics_port: int) -> float | None:
    """``gannet_send_dedup_log_lookups_total`` of the broker, None when it exports none."""
    connection = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    for line in text.splitlines():
        if line.startswith(LOOKUPS_METRIC):
            return float(line.split()[-1])
    return None


def _fill_broker(endpoint: str, messages: int) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=None,
            response_deserializer=service_pb2.SendMessageResponse.FromString,
        )
        pending: list[Any] = []
        for first in range(0, messages, BATCH_MESSAGES):
            pending.append(call.future(_fill_request(first), timeout=60, metadata=CLIENT_ID))
            if len(pending) >= FILL_IN_FLIGHT:
                code = pending.pop(0).result().status.code
                if code != 20000:
                    raise RuntimeError(f"fill SendMessage answered status {code}")
        for future in pending:
            future.result()


def official(seconds: float, fill: int, pause_s: float) -> dict[str, Any]:
    """Official-client sends after a fill (module docstring)."""
    import sys

    metrics_port = _free_port()
    with scratch_dir("gannet-bench-dedup-official-") as root:
        command = [
            sys.executable, "-m", "gannet.node.cli", "broker", "run",
            "--data-dir", str(root / "store"), "--listen", "127.0.0.1:0", "--flush", "async",
            "--metrics-listen", f"127.0.0.1:{metrics_port}", "--event-loop", "uvloop",
            "--file-size-mb", "256",
        ]  # fmt: skip
        with _serving_process(command, "broker serving") as broker:
            _admin_setup(broker.endpoint)
            began = time.time()
            _fill_broker(broker.endpoint, fill)
            fill_s = time.time() - began
            rss_after_fill = broker.rss_bytes()
            time.sleep(pause_s)
            lookups_before = _lookups(metrics_port)
            machine_before = _machine()
            sent = _run_workers(
                broker, _official_worker, OFFICIAL_PROCESSES,
                OFFICIAL_IN_FLIGHT // OFFICIAL_PROCESSES, seconds,
            )  # fmt: skip
            lookups_after = _lookups(metrics_port)
            return {
                "fill": fill,
                "fill_s": round(fill_s, 1),
                "rss_mb_after_fill": round(rss_after_fill / 2**20, 1),
                "pause_s": pause_s,
                "official_send": sent,
                "log_lookups": None
                if lookups_before is None or lookups_after is None
                else lookups_after - lookups_before,
                "machine_before": machine_before,
                "machine_after": _machine(),
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("path", "official"))
    parser.add_argument("--fill", type=int, default=120_000, help="unique ids appended first")
    parser.add_argument("--pause-s", type=float, default=22.0, help="wait after the fill")
    parser.add_argument("--sends", type=int, default=3_000, help="path: one-message sends")
    parser.add_argument(
        "--entries-max", type=int, default=None, help="path: the map's size (default: the code's)"
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="official: send window")
    parser.add_argument("--label", default="", help="recorded with each figure (paired runs)")
    args = parser.parse_args()
    if args.kind == "path":
        result = path(args.sends, args.fill, args.pause_s, args.entries_max)
    else:
        result = official(args.seconds, args.fill, args.pause_s)
    print(args.kind, args.label, result, flush=True)
    results_log.append(
        "broker",
        {
            "scenario": f"dedup_{args.kind}",
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "label": args.label,
            "result": result,
            "machine": _machine(),
        },
    )


if __name__ == "__main__":
    main()
