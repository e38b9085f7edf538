"""End-to-end: the operator as a real process manages topics on a real broker process, and the
official RocketMQ client uses them.

Pieces (all on 127.0.0.1): a ``gannet broker run`` process; the Kubernetes API played by the KMock
emulator of ``tests/operator/emulating.py`` in this process (no real control plane can be built
on this machine: see docs/operator.md); ``gannet operator run --server <emulator>
--broker-endpoint <broker>`` as a separate process. Timeline (about 15 s):

1. Start the broker and the emulator, then the operator; wait for its ``/healthz``.
2. Apply a GannetCluster, a Topic (4 queues) and a ConsumerGroup; wait until both report
   ``Ready=True`` for their generation; the topic and group exist on the broker.
3. The official ``Producer`` sends 20 messages to the topic; the official ``SimpleConsumer`` of
   the group receives and acks all 20.
4. Revive-queue count changed under load: 30 messages received, half acked, the other half
   made visible again after 1 s (their checkpoints sit in the revive queues); the
   GannetCluster's ``pop.reviveQueueCount`` goes 8 → 2 while 30 more messages are sent; the
   operator rolls it out (status shows 2 active queues); every one of the 60 messages is
   received and acked — none lost across the draining queues.
5. Grow the topic to 6 queues; the broker follows. Try to shrink it to 2: ``NotSupported``.
6. Delete the Topic and the ConsumerGroup; the finalizer holds them until the broker has
   dropped them; then both are gone from the broker.
7. The operator's ``/metrics`` counts successful Topic reconciliations.

Run ``python -m e2e.operator.scenario``; ``tests/operator/test_e2e.py`` runs it in CI.
``make e2e-kind`` (``e2e/kind/``) tells the story with real pods on a kind cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import kmock
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from e2e.processes import free_port
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.testing import small_stores
from gannet.operator import kube, metrics, resources
from tests.operator.conftest import Env, ready
from tests.operator.emulating import ApiServerEmulator
from tests.operator.stores import stack_store

START_TIMEOUT_S = 60.0  # upper bounds: a shared 2-core machine can be very busy
MESSAGES = 20


def gannet_command() -> list[str]:
    found = Path(sys.executable).parent / "gannet"
    return [str(found)] if found.exists() else [sys.executable, "-m", "gannet.node.cli"]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return int(response.status) == 200
    except OSError:
        return False


def wait_until_answers(process: subprocess.Popen[bytes], url: str, what: str, log: Path) -> None:
    """Poll a process's HTTP endpoint (another process: nothing to await) until it answers."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(url):
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{log.read_text()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not answer {url} in {START_TIMEOUT_S} s")
        time.sleep(0.1)


@contextlib.contextmanager
def process(command: list[str], log: Path, ready_url: str, what: str) -> Iterator[None]:
    with log.open("wb") as out:
        running = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_answers(running, ready_url, what, log)
        yield
    finally:
        running.send_signal(signal.SIGTERM)
        try:
            running.wait(15)
        except subprocess.TimeoutExpired:
            running.kill()
            running.wait()


@dataclasses.dataclass
class Report:
    sent: int
    received: int
    revive_sent: int
    revive_acked: int
    revive_active_after: int
    topic_queues_after_growth: int
    shrink_reason: str
    topic_reconciliations: float
    elapsed_s: float


def _admin(endpoint: str) -> Any:
    return admin_pb2_grpc.AdminStub(grpc.insecure_channel(endpoint))  # type: ignore[no-untyped-call]


def _exists(endpoint: str, kind: str, name: str) -> bool:
    stub = _admin(endpoint)
    try:
        if kind == "topic":
            stub.DescribeTopic(admin_pb2.DescribeTopicRequest(name=name), timeout=5)
        else:
            stub.DescribeGroup(admin_pb2.DescribeGroupRequest(name=name), timeout=5)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            return False
        raise
    return True


def _queues(endpoint: str, topic: str) -> int:
    answer = _admin(endpoint).DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic), timeout=5)
    return int(answer.topic.write_queue_nums)


def send(endpoint: str, topic: str, bodies: list[bytes]) -> None:
    """Send with the official Producer (each send answered after the broker stored it)."""
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        for body in bodies:
            message = Message()
            message.topic = topic
            message.body = body
            message.tag = "e2e"
            producer.send(message)
    finally:
        producer.shutdown()


class Reader:
    """The official SimpleConsumer of one group, remembering every body it acked."""

    def __init__(self, endpoint: str, topic: str, group: str) -> None:
        config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
        self.consumer = SimpleConsumer(
            config, group, {topic: FilterExpression("*")}, await_duration=1
        )
        self.consumer.startup()
        self.acked: set[bytes] = set()

    def receive(self, wanted: int, *, ack_every: int = 1) -> int:
        """Receive until ``wanted`` messages came; ack every ``ack_every``-th, and make the others
        visible again after 1 s (their checkpoints wait in the revive queues). Returns the count."""
        got = 0
        deadline = time.monotonic() + START_TIMEOUT_S
        while got < wanted and time.monotonic() < deadline:
            for received in self.consumer.receive(32, 30):
                got += 1
                if got % ack_every == 0 or received.body in self.acked:
                    self.consumer.ack(received)
                    self.acked.add(received.body)
                else:
                    self.consumer.change_invisible_duration(received, 1)
        return got

    def ack_until(self, bodies: set[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not bodies <= self.acked and time.monotonic() < deadline:
            for received in self.consumer.receive(32, 30):
                self.consumer.ack(received)
                self.acked.add(received.body)

    def close(self) -> None:
        self.consumer.shutdown()


def produce_and_consume(endpoint: str, topic: str, group: str) -> tuple[int, int]:
    """Send MESSAGES with the official Producer, receive and ack them with SimpleConsumer."""
    send(endpoint, topic, [f"order-{i}".encode() for i in range(MESSAGES)])
    reader = Reader(endpoint, topic, group)
    try:
        reader.ack_until({f"order-{i}".encode() for i in range(MESSAGES)})
    finally:
        reader.close()
    return MESSAGES, len(reader.acked)


async def _scenario(workdir: Path) -> Report:
    started = time.monotonic()
    api = ApiServerEmulator()
    api.resources.load_bundled()
    for kind, plural in resources.PLURALS.items():
        api.resources[f"{resources.GROUP}/{resources.VERSION}/{plural}"] = kmock.ResourceInfo(
            kind=kind,
            namespaced=True,
            verbs={"list", "watch", "get", "patch", "create", "delete"},
            subresources={"status"},
        )
    broker = f"127.0.0.1:{free_port()}"
    broker_metrics = f"127.0.0.1:{free_port()}"
    operator_metrics = f"127.0.0.1:{free_port()}"
    store = stack_store(workdir)
    broker_command = [
        *gannet_command(),
        "broker",
        "run",
        "--data-dir",
        str(store),
        "--listen",
        broker,
        "--metrics-listen",
        broker_metrics,
        "--flush",
        "sync",
        "--file-size-mb",
        "16",
        *small_stores.INDEX_ARGS,
    ]
    try:
        async with api, kmock.Server(api) as server:
            url = str(server.url).rstrip("/")
            operator_command = [
                *gannet_command(),
                "operator",
                "run",
                "--server",
                url,
                "--broker-endpoint",
                broker,
                "--metrics-listen",
                operator_metrics,
                "--refresh-interval-s",
                "1",
            ]
            with contextlib.ExitStack() as stack:
                await asyncio.to_thread(
                    stack.enter_context,
                    process(
                        broker_command,
                        workdir / "broker.log",
                        f"http://{broker_metrics}/readyz",
                        "broker",
                    ),
                )
                await asyncio.to_thread(
                    stack.enter_context,
                    process(
                        operator_command,
                        workdir / "operator.log",
                        f"http://{operator_metrics}/healthz",
                        "operator",
                    ),
                )
                client = kube.Kube.for_server(url, timeout_s=10)
                try:
                    env = Env(
                        api, url, client, metrics.OperatorMetrics(), wait_timeout_s=START_TIMEOUT_S
                    )
                    report = await _story(env, broker, operator_metrics)
                finally:
                    await client.close()
    finally:
        if not store.is_relative_to(workdir):
            shutil.rmtree(store, ignore_errors=True)
    report.elapsed_s = time.monotonic() - started
    return report


async def _story(env: Env, broker: str, operator_metrics: str) -> Report:
    # The operator pushes the cleanup policy and the revive-queue count to the broker
    # (condition BrokerSettings) before anything is sent.
    cluster_spec = {
        "replicas": 1,
        "pop": {"reviveQueueCount": 8},
        "cleanup": {"fileReservedHours": 48, "diskMaxUsedRatioPercent": 90},
    }
    await env.apply("GannetCluster", "main", cluster_spec)
    await env.wait_for("GannetCluster", "main", _settings_applied)
    await env.apply("Topic", "e2e-orders", {"cluster": "main", "queues": 4})
    await env.apply("ConsumerGroup", "e2e-readers", {"cluster": "main"})
    await env.wait_for("Topic", "e2e-orders", ready)
    await env.wait_for("ConsumerGroup", "e2e-readers", ready)
    assert await asyncio.to_thread(_exists, broker, "topic", "e2e-orders")
    assert await asyncio.to_thread(_exists, broker, "group", "e2e-readers")

    sent, received = await asyncio.to_thread(
        produce_and_consume, broker, "e2e-orders", "e2e-readers"
    )
    if received != sent:
        raise AssertionError(f"sent {sent} messages, received {received}")
    revive = await _revive_under_load(env, broker, cluster_spec)

    await env.apply("Topic", "e2e-orders", {"cluster": "main", "queues": 6})
    await env.wait_for(
        "Topic", "e2e-orders", lambda o: ready(o) and (o or {})["status"].get("queues") == 6
    )
    grown = await asyncio.to_thread(_queues, broker, "e2e-orders")
    await env.apply("Topic", "e2e-orders", {"cluster": "main", "queues": 2})
    refused = await env.wait_for(
        "Topic", "e2e-orders", lambda o: ready(o, status="False", reason="NotSupported")
    )
    assert refused is not None
    if await asyncio.to_thread(_queues, broker, "e2e-orders") != grown:
        raise AssertionError("a refused shrink changed the topic")

    await env.delete("Topic", "e2e-orders")
    await env.delete("ConsumerGroup", "e2e-readers")
    await env.wait_for("Topic", "e2e-orders", lambda o: o is None)
    await env.wait_for("ConsumerGroup", "e2e-readers", lambda o: o is None)
    if await asyncio.to_thread(_exists, broker, "topic", "e2e-orders"):
        raise AssertionError("the topic outlived its Topic resource")
    if await asyncio.to_thread(_exists, broker, "group", "e2e-readers"):
        raise AssertionError("the group outlived its ConsumerGroup resource")

    scraped = await asyncio.to_thread(_scrape, f"http://{operator_metrics}/metrics")
    line = 'gannet_operator_reconciliations_total{kind="Topic",result="success"} '
    count = next(float(x.split()[-1]) for x in scraped.splitlines() if x.startswith(line))
    reason = refused["status"]["conditions"][0]["reason"]
    return Report(sent, received, *revive, grown, reason, count, 0.0)


def _settings_applied(obj: dict[str, Any] | None) -> bool:
    found = [
        c
        for c in ((obj or {}).get("status") or {}).get("conditions") or ()
        if c["type"] == "BrokerSettings"
    ]
    return bool(found) and found[0]["status"] == "True"


async def _revive_under_load(
    env: Env, broker: str, cluster_spec: dict[str, Any]
) -> tuple[int, int, int]:
    """Change the revive-queue count while messages flow and checkpoints wait for revive."""
    first = [f"revive-a-{i}".encode() for i in range(30)]
    second = [f"revive-b-{i}".encode() for i in range(30)]
    await env.apply("Topic", "e2e-revive", {"cluster": "main", "queues": 4})
    await env.wait_for("Topic", "e2e-revive", ready)
    reader = await asyncio.to_thread(Reader, broker, "e2e-revive", "e2e-readers")
    try:
        await asyncio.to_thread(send, broker, "e2e-revive", first)
        await asyncio.to_thread(reader.receive, len(first), ack_every=2)
        # Under load: the count changes while the second batch is being sent.
        sending = asyncio.create_task(asyncio.to_thread(send, broker, "e2e-revive", second))
        await env.apply("GannetCluster", "main", {**cluster_spec, "pop": {"reviveQueueCount": 2}})
        cluster = await env.wait_for(
            "GannetCluster",
            "main",
            lambda o: ((o or {}).get("status") or {}).get("reviveQueues", {}).get("active") == 2,
        )
        await sending
        await asyncio.to_thread(reader.ack_until, set(first) | set(second))
    finally:
        await asyncio.to_thread(reader.close)
    missing = (set(first) | set(second)) - reader.acked
    if missing:
        raise AssertionError(f"{len(missing)} messages lost across the revive change: {missing}")
    await env.delete("Topic", "e2e-revive")
    assert cluster is not None
    return len(first) + len(second), len(reader.acked), cluster["status"]["reviveQueues"]["active"]


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return bytes(response.read()).decode()


def run(workdir: Path) -> Report:
    return asyncio.run(_scenario(workdir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gannet-operator-e2e-") as tmp:
        workdir = args.workdir or Path(tmp)
        report = run(workdir)
    print(report)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
