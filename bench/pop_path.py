"""``python -m bench.pop_path``: CPU µs per message of the v2 Pop receive and ack paths in one
process, without gRPC, split into receive and ack.

Each round is one ReceiveMessage of 32 through :class:`MessagingServicer` as the gRPC server
calls it (request decoded, every streamed frame encoded), then the acks of what came: either
one AckMessage of all the round's entries (``--acks-per-call 32``, the S3 shape: a batching
consumer) or one AckMessage per message (``--acks-per-call 1``, the S2 shape: the official
``SimpleConsumer``), each request decoded and its answer encoded. The store (ASYNC_FLUSH,
single broker) is prefilled with 1 KiB messages. Figures: CPU of the event-loop thread (the
pops and acks run on it) per message, for the receive part and the ack part, and of every
thread of the process (``process_time``) for the whole round.

``--profile N`` prints the N functions with the most own time (cProfile) instead of timing
figures being trusted (cProfile slows the path down). ``--json`` prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from bench.broker import (
    BODY_OFFICIAL_BYTES,
    CLIENT_ID,
    GROUP,
    QUEUES,
    TOPIC,
    _batch_request_bytes,
    path_store_config,
)

RECEIVE_BATCH = 32
INVISIBLE_S = 60
WARMUP_ROUNDS = 10


class _Context:
    """What the Pop handlers read of a ``grpc.aio.ServicerContext``."""

    def time_remaining(self) -> float:
        return 30.0

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return CLIENT_ID


def _receive_bytes() -> bytes:
    receive = service_pb2.ReceiveMessageRequest(batch_size=RECEIVE_BATCH)
    receive.group.name = GROUP
    receive.message_queue.topic.name = TOPIC
    receive.filter_expression.type = definition_pb2.TAG
    receive.filter_expression.expression = "*"
    receive.invisible_duration.seconds = INVISIBLE_S
    receive.long_polling_timeout.seconds = 5
    return bytes(receive.SerializeToString())


def _ack_payloads(entries: list[tuple[str, str]], per_call: int) -> list[bytes]:
    out = []
    for start in range(0, len(entries), per_call):
        ack = service_pb2.AckMessageRequest()
        ack.group.name = GROUP
        ack.topic.name = TOPIC
        for message_id, handle in entries[start : start + per_call]:
            ack.entries.add(message_id=message_id, receipt_handle=handle)
        out.append(ack.SerializeToString())
    return out


async def _measure(
    root: Path, rounds: int, per_call: int, profiler: cProfile.Profile | None
) -> dict[str, float]:
    from gannet.node.api import receiving, routes, sending
    from gannet.node.api.messaging import MessagingServicer
    from gannet.node.store.configs.groups import SubscriptionGroupConfig
    from gannet.node.store.configs.topics import TopicConfig
    from gannet.node.store.message_store import MessageStore

    send = service_pb2.SendMessageRequest.FromString(_batch_request_bytes(BODY_OFFICIAL_BYTES, 1))
    receive_bytes = _receive_bytes()
    totals = {"receive_s": 0.0, "ack_s": 0.0, "msgs": 0.0}

    async def once(servicer: MessagingServicer, context: Any, counted: bool) -> None:
        t0 = time.thread_time()
        request = service_pb2.ReceiveMessageRequest.FromString(receive_bytes)
        entries = []
        async for frame in servicer.ReceiveMessage(request, context):  # type: ignore[no-untyped-call]
            frame.SerializeToString()
            if frame.HasField("message"):
                sp = frame.message.system_properties
                entries.append((sp.message_id, sp.receipt_handle))
        t1 = time.thread_time()
        payloads = _ack_payloads(entries, per_call)  # the client's work: not counted
        t2 = time.thread_time()
        for payload in payloads:
            answer = await servicer.AckMessage(  # type: ignore[no-untyped-call]
                service_pb2.AckMessageRequest.FromString(payload), context
            )
            if answer.status.code != 20000:
                raise RuntimeError(f"AckMessage answered {answer.status}")
            answer.SerializeToString()
        t3 = time.thread_time()
        if len(entries) != RECEIVE_BATCH:
            raise RuntimeError(f"ReceiveMessage gave {len(entries)} messages, not {RECEIVE_BATCH}")
        if counted:
            totals["receive_s"] += t1 - t0
            totals["ack_s"] += t3 - t2
            totals["msgs"] += len(entries)

    with MessageStore(path_store_config(root)).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES))
        store.group_configs.put(SubscriptionGroupConfig(GROUP))
        for _ in range(rounds + WARMUP_ROUNDS):
            prepared = sending.prepare(
                send, store.topic_configs.get, peer_host="127.0.0.1",
                now_ms=time.time_ns() // 1_000_000,
            )  # fmt: skip
            store.put_messages([prepared.messages[0].copy() for _ in range(RECEIVE_BATCH)])
        store.wait_dispatched(store.commitlog.max_offset(), 60)
        identity = routes.BrokerIdentity(broker_name="broker-a", host="127.0.0.1", port=8081)
        servicer = MessagingServicer(store, identity, pop=receiving.factory())
        context = _Context()
        try:
            for _ in range(WARMUP_ROUNDS):
                await once(servicer, context, False)
            cpu_before = time.process_time()
            if profiler is not None:
                profiler.enable()
            for _ in range(rounds):
                await once(servicer, context, True)
            if profiler is not None:
                profiler.disable()
            cpu_used = time.process_time() - cpu_before
        finally:
            if servicer.pop is not None:
                servicer.pop.close()
    msgs = max(totals["msgs"], 1.0)
    return {
        "msgs": totals["msgs"],
        "acks_per_call": per_call,
        "receive_loop_us_per_msg": round(totals["receive_s"] / msgs * 1e6, 2),
        "ack_loop_us_per_msg": round(totals["ack_s"] / msgs * 1e6, 2),
        "loop_us_per_msg": round((totals["receive_s"] + totals["ack_s"]) / msgs * 1e6, 2),
        "process_us_per_msg": round(cpu_used / msgs * 1e6, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=300, help="counted rounds of 32 messages")
    parser.add_argument("--acks-per-call", type=int, choices=(1, 32), default=32)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    profiler = cProfile.Profile() if args.profile else None
    root = Path(tempfile.mkdtemp(prefix="gannet-bench-pop-path-"))
    try:
        figures = asyncio.run(_measure(root, args.rounds, args.acks_per_call, profiler))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.profile)
        print(text.getvalue())
    print(json.dumps(figures) if args.json else figures)


if __name__ == "__main__":
    main()
