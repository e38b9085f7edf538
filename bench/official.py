"""Official-client paths of one broker, for paired before/after runs: ``send`` (the official
``Producer``, 1 KiB, 1 message per SendMessage, as :mod:`bench.broker`'s ``official``) and
``receive`` (the official ``SimpleConsumer``: ``receive(32)`` then one ``ack`` per message, as
an application using the stock client does; ``CONSUMER_PROCESSES`` processes).

Before ``receive`` the topic is filled with raw 32 × 1 KiB SendMessage requests (more than the
window can drain, so no consumer ever polls an empty topic). The figure is **broker CPU µs per
message** (``/proc/<pid>/stat``, every broker thread) over each window, beside the achieved
rate and the machine's load average. A fresh ``gannet broker run`` (uvloop, ASYNC_FLUSH) per
run; to compare two versions of the broker, alternate runs with ``PYTHONPATH`` pointing at the
other tree's ``node/`` and give each a ``--label``.

``python -m bench.official --seconds 8 --label after``; records go to
``bench/results/broker.jsonl`` (``scenario`` ``official_paths``), the write-up is
``bench/results/PROFILE.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2

from bench import results_log
from bench.broker import (
    BODY_OFFICIAL_BYTES,
    CLIENT_ID,
    GROUP,
    OFFICIAL_IN_FLIGHT,
    OFFICIAL_PROCESSES,
    TOPIC,
    _admin_setup,
    _batch_request_bytes,
    _machine,
    _official_worker,
    _run_workers,
    broker_process,
    scratch_dir,
)

CONSUMER_PROCESSES = 4
RECEIVE_BATCH = 32
INVISIBLE_S = 60
PREFILL_MESSAGES_PER_S = 1_500
"""Messages sent before ``receive`` per second of its window: above what it drains."""


def _consumer_worker(endpoint: str, _: int, start: Any, stop_at: Any, out: Any, ready: Any) -> None:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    consumer = SimpleConsumer(config, GROUP, {TOPIC: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    ready.put(1)
    start.wait()
    deadline = stop_at.value
    acked = errors = 0
    try:
        while time.time() < deadline:
            for message in consumer.receive(RECEIVE_BATCH, INVISIBLE_S):
                try:
                    consumer.ack(message)
                    acked += 1
                except Exception:
                    errors += 1
        out.put({"sent": acked, "errors": errors, "ended": time.time()})
    finally:
        consumer.shutdown()


def _prefill(endpoint: str, messages: int) -> None:
    payload = _batch_request_bytes(BODY_OFFICIAL_BYTES, 1)
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=None,
            response_deserializer=service_pb2.SendMessageResponse.FromString,
        )
        futures = [
            call.future(payload, timeout=60, metadata=CLIENT_ID) for _ in range(-(-messages // 32))
        ]
        for future in futures:
            code = future.result().status.code
            if code != 20000:
                raise RuntimeError(f"prefill SendMessage answered status {code}")


def run(seconds: float, phases: list[str]) -> dict[str, Any]:
    with (
        scratch_dir("gannet-bench-official-") as root,
        broker_process(root / "store", "uvloop") as broker,
    ):
        _admin_setup(broker.endpoint)
        result: dict[str, Any] = {"machine_before": _machine()}
        if "send" in phases:
            result["official_send"] = _run_workers(
                broker, _official_worker, OFFICIAL_PROCESSES,
                OFFICIAL_IN_FLIGHT // OFFICIAL_PROCESSES, seconds,
            )  # fmt: skip
            print("official send", result["official_send"], flush=True)
        if "receive" in phases:
            _prefill(broker.endpoint, int(PREFILL_MESSAGES_PER_S * seconds))
            result["official_receive"] = _run_workers(
                broker, _consumer_worker, CONSUMER_PROCESSES, 1, seconds
            )
            print("official receive+ack", result["official_receive"], flush=True)
        result["machine_after"] = _machine()
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="window per phase")
    parser.add_argument(
        "--phase", choices=("send", "receive"), action="append", help="repeatable; default both"
    )
    parser.add_argument("--label", default="", help="recorded with each figure (paired runs)")
    args = parser.parse_args()
    result = run(args.seconds, args.phase or ["send", "receive"])
    record = {
        "scenario": "official_paths",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "label": args.label,
        "seconds": args.seconds,
        **result,
    }
    with results_log.appending("broker") as out:
        out.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
