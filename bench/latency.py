"""End-to-end latency at a fixed moderate rate: send → answer and send → receive, p50/p99.

Called by :mod:`bench.broker` (the ``e2e_latency`` figures of ``bench/results/broker.jsonl``)
against a running ``gannet broker run``. On a topic and group of its own (so no backlog of the
throughput scenarios is in the way), one thread long-polls ``ReceiveMessage`` (batch 32) and acks
what it gets with one ``AckMessage``; the main thread sends 1 KiB single-message
``SendMessage`` requests open loop at ``rate_per_s``. Each body starts with the message's
index, so the receiver knows when it was scheduled. Both latencies are measured from the
scheduled time (coordinated omission is not corrected beyond that), on one clock, in one
process.
"""

from __future__ import annotations

import contextlib
import statistics
import struct
import threading
import time
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

TOPIC, GROUP, QUEUES = "LatencyBench", "LatencyBenchGroup", 4
BODY_BYTES = 1024
RECEIVE_BATCH = 32
DRAIN_WAIT_S = 10.0
_INDEX = struct.Struct(">q")


def setup(endpoint: str) -> None:
    """Create the topic and the group (admin API)."""
    from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=QUEUES), timeout=10)
        admin.CreateGroup(admin_pb2.CreateGroupRequest(name=GROUP), timeout=10)


def _percentiles(values_ms: list[float]) -> dict[str, float]:
    ordered = sorted(values_ms)
    if not ordered:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0, "mean_ms": 0.0}

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3)

    return {
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(ordered[-1], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
    }


class _Receiver:
    """Long-polls the group and notes when each index arrives."""

    def __init__(self, channel: grpc.Channel, client_id: tuple[tuple[str, str], ...]) -> None:
        self.stub = service_pb2_grpc.MessagingServiceStub(channel)
        self.client_id = client_id
        self.arrived_at: dict[int, float] = {}
        self.stop = threading.Event()
        self.errors = 0
        self.thread = threading.Thread(target=self._run, name="e2e-receiver", daemon=True)

    def _run(self) -> None:
        request = service_pb2.ReceiveMessageRequest(batch_size=RECEIVE_BATCH)
        request.group.name = GROUP
        request.message_queue.topic.name = TOPIC
        request.filter_expression.expression = "*"
        request.invisible_duration.FromSeconds(60)
        request.long_polling_timeout.FromSeconds(1)
        while not self.stop.is_set():
            handles = []
            try:
                for frame in self.stub.ReceiveMessage(request, timeout=10, metadata=self.client_id):
                    if frame.WhichOneof("content") != "message":
                        continue
                    now = time.perf_counter()
                    (index,) = _INDEX.unpack_from(frame.message.body)
                    self.arrived_at.setdefault(index, now)
                    handles.append(frame.message.system_properties.receipt_handle)
                if handles:
                    ack = service_pb2.AckMessageRequest(
                        entries=[service_pb2.AckMessageEntry(receipt_handle=h) for h in handles]
                    )
                    ack.group.name = GROUP
                    ack.topic.name = TOPIC
                    self.stub.AckMessage(ack, timeout=10, metadata=self.client_id)
            except grpc.RpcError:
                self.errors += 1
                time.sleep(0.05)


def send_to_receive(
    endpoint: str,
    rate_per_s: float,
    seconds: float,
    client_id: tuple[tuple[str, str], ...],
    cpu_s: Any = None,
) -> dict[str, Any]:
    """Send at ``rate_per_s`` for ``seconds``; send and send→receive latency percentiles.

    ``cpu_s``: a callable giving the broker's CPU seconds so far, for broker µs per message
    (sends, receives and acks together)."""
    total = int(rate_per_s * seconds)
    bodies = [_INDEX.pack(i) + b"e" * (BODY_BYTES - _INDEX.size) for i in range(total)]
    send_ms: list[float] = []
    errors = [0]
    lock = threading.Lock()
    with grpc.insecure_channel(endpoint) as channel:
        receiver = _Receiver(channel, client_id)
        receiver.thread.start()
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=service_pb2.SendMessageRequest.SerializeToString,
            response_deserializer=service_pb2.SendMessageResponse.FromString,
        )
        template = service_pb2.SendMessageRequest()
        msg = template.messages.add()
        msg.topic.name = TOPIC
        msg.system_properties.body_encoding = definition_pb2.IDENTITY
        msg.system_properties.message_type = definition_pb2.NORMAL

        def done(scheduled: float, future: Any) -> None:
            finished = time.perf_counter()
            ok = future.exception() is None and future.result().status.code == 20000
            with lock:
                if ok:
                    send_ms.append((finished - scheduled) * 1000)
                else:
                    errors[0] += 1

        time.sleep(0.5)  # the receiver's first long poll is parked
        cpu_before = cpu_s() if cpu_s is not None else 0.0
        began = time.perf_counter()
        scheduled_at: list[float] = []
        pending = []
        for i in range(total):
            scheduled = began + i / rate_per_s
            scheduled_at.append(scheduled)
            delay = scheduled - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            request = service_pb2.SendMessageRequest()
            request.CopyFrom(template)
            request.messages[0].body = bodies[i]
            request.messages[0].system_properties.message_id = f"01E2E{i:029X}"
            future = call.future(request, timeout=30, metadata=client_id)
            future.add_done_callback(lambda f, s=scheduled: done(s, f))
            pending.append(future)
        for future in pending:
            with contextlib.suppress(Exception):
                future.result()
        deadline = time.perf_counter() + DRAIN_WAIT_S
        while len(receiver.arrived_at) < total and time.perf_counter() < deadline:
            time.sleep(0.05)
        cpu_used = (cpu_s() - cpu_before) if cpu_s is not None else 0.0
        receiver.stop.set()
        receiver.thread.join(timeout=15)
    e2e_ms = [(at - scheduled_at[i]) * 1000 for i, at in receiver.arrived_at.items() if i < total]
    return {
        "rate_per_s": rate_per_s,
        "sent": len(send_ms),
        "received": len(e2e_ms),
        "errors": errors[0] + receiver.errors,
        "send": _percentiles(send_ms),
        "send_to_receive": _percentiles(e2e_ms),
        "broker_cpu_us_per_msg": round(cpu_used / max(total, 1) * 1e6, 2),
    }
