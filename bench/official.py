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
    QUEUES,
    TOPIC,
    _admin_setup,
    _batch_request_bytes,
    _machine,
    _official_worker,
    _run_workers,
    broker_process,
    path_store_config,
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


class _Context:
    """What the Pop handlers read of a ``grpc.aio.ServicerContext``."""

    def time_remaining(self) -> float:
        return 30.0

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return CLIENT_ID


def receive_path(rounds: int) -> dict[str, float]:
    """CPU µs per message of the broker's receive + ack path without gRPC, in this process
    (every thread): ``rounds`` × (one ReceiveMessage of 32 decoded, answered and its frames
    encoded; one AckMessage per message decoded, answered and encoded), through
    :class:`MessagingServicer` as the gRPC server calls it, on a store prefilled with 1 KiB
    messages (ASYNC_FLUSH), and of its event-loop thread alone. The gRPC stack itself is what
    the ``receive`` phase adds."""
    import asyncio
    import shutil
    import tempfile
    from pathlib import Path

    from rocketmq.grpc_protocol import definition_pb2

    from gannet.node.api import receiving, routes, sending
    from gannet.node.api.messaging import MessagingServicer
    from gannet.node.store.configs.groups import SubscriptionGroupConfig
    from gannet.node.store.configs.topics import TopicConfig
    from gannet.node.store.message_store import MessageStore

    root = Path(tempfile.mkdtemp(prefix="gannet-bench-receive-"))
    config = path_store_config(root)
    send = service_pb2.SendMessageRequest.FromString(_batch_request_bytes(BODY_OFFICIAL_BYTES, 1))
    receive = service_pb2.ReceiveMessageRequest(batch_size=RECEIVE_BATCH)
    receive.group.name = GROUP
    receive.message_queue.topic.name = TOPIC
    receive.filter_expression.type = definition_pb2.TAG
    receive.filter_expression.expression = "*"
    receive.invisible_duration.seconds = INVISIBLE_S
    receive.long_polling_timeout.seconds = 5
    receive_bytes = receive.SerializeToString()

    async def once(servicer: MessagingServicer, context: Any) -> int:
        request = service_pb2.ReceiveMessageRequest.FromString(receive_bytes)
        acks = []
        async for frame in servicer.ReceiveMessage(request, context):  # type: ignore[no-untyped-call]
            frame.SerializeToString()
            if frame.HasField("message"):
                ack = service_pb2.AckMessageRequest()
                ack.group.name = GROUP
                ack.topic.name = TOPIC
                ack.entries.add(
                    message_id=frame.message.system_properties.message_id,
                    receipt_handle=frame.message.system_properties.receipt_handle,
                )
                acks.append(ack.SerializeToString())
        for payload in acks:
            answer = await servicer.AckMessage(  # type: ignore[no-untyped-call]
                service_pb2.AckMessageRequest.FromString(payload), context
            )
            if answer.status.code != 20000:
                raise RuntimeError(f"AckMessage answered {answer.status}")
            answer.SerializeToString()
        return len(acks)

    async def measure(store: MessageStore) -> dict[str, float]:
        identity = routes.BrokerIdentity(broker_name="broker-a", host="127.0.0.1", port=8081)
        servicer = MessagingServicer(store, identity, pop=receiving.factory())
        context = _Context()
        try:
            for _ in range(10):
                await once(servicer, context)
            count = 0
            cpu_before, loop_before = time.process_time(), time.thread_time()
            for _ in range(rounds):
                count += await once(servicer, context)
            loop_used = time.thread_time() - loop_before
            cpu_used = time.process_time() - cpu_before
        finally:
            if servicer.pop is not None:
                servicer.pop.close()
        return {
            "msgs": count,
            "cpu_us_per_msg": round(cpu_used / max(count, 1) * 1e6, 2),
            # The loop thread alone: the pops and acks run on it (nothing contends for their
            # locks here); leaves out the store's flush of the prefilled log.
            "loop_cpu_us_per_msg": round(loop_used / max(count, 1) * 1e6, 2),
        }

    async def main() -> dict[str, float]:
        # The store closes while the loop runs (as in the broker): its flush thread wakes
        # waiters on this loop.
        with MessageStore(config).open() as store:
            store.topic_configs.put(
                TopicConfig(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            )
            store.group_configs.put(SubscriptionGroupConfig(GROUP))
            for _ in range(rounds + 10):
                prepared = sending.prepare(
                    send, store.topic_configs.get, peer_host="127.0.0.1",
                    now_ms=time.time_ns() // 1_000_000,
                )  # fmt: skip
                batch = [prepared.messages[0].copy() for _ in range(RECEIVE_BATCH)]
                store.put_messages(batch)
            store.wait_dispatched(store.commitlog.max_offset(), 60)
            return await measure(store)

    try:
        return asyncio.run(main())
    finally:
        shutil.rmtree(root, ignore_errors=True)


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
    parser.add_argument(
        "--receive-path-rounds",
        type=int,
        default=0,
        help="only the in-process receive + ack path (no gRPC), this many receives of 32",
    )
    args = parser.parse_args()
    if args.receive_path_rounds:
        path = receive_path(args.receive_path_rounds)
        print("receive+ack path without gRPC:", path, flush=True)
        results_log.append(
            "broker",
            {
                "scenario": "receive_path",
                "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "label": args.label,
                "result": path,
                "machine": _machine(),
            },
        )
        return
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
