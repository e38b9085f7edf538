"""End-to-end: the operator as a real process manages topics on a real broker process, and the
official RocketMQ client uses them.

Pieces (all on 127.0.0.1): a ``gannet broker run`` process; the Kubernetes API played by the KMock
emulator of ``tests/operator/emulating.py`` in this process (no real control plane can be built
on this machine: see docs/operator.md); ``gannet operator run --server <emulator>
--broker-endpoint <broker>`` as a separate process. Timeline (about 10 s):

1. Start the broker and the emulator, then the operator; wait for its ``/healthz``.
2. Apply a GannetCluster, a Topic (4 queues) and a ConsumerGroup; wait until both report
   ``Ready=True`` for their generation; the topic and group exist on the broker.
3. The official ``Producer`` sends 20 messages to the topic; the official ``SimpleConsumer`` of
   the group receives and acks all 20.
4. Grow the topic to 6 queues; the broker follows. Try to shrink it to 2: ``NotSupported``.
5. Delete the Topic and the ConsumerGroup; the finalizer holds them until the broker has
   dropped them; then both are gone from the broker.
6. The operator's ``/metrics`` counts successful Topic reconciliations.

Run ``python -m e2e.operator.scenario``; ``tests/operator/test_e2e.py`` runs it in CI.
``make e2e-kind`` is the same story on a real kind cluster for machines with Docker
(``e2e/operator/kind.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
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

from gannet.node.api.gen import admin_pb2, admin_pb2_grpc
from gannet.operator import kube, metrics, resources
from tests.operator.conftest import Env, ready
from tests.operator.emulating import ApiServerEmulator

START_TIMEOUT_S = 30.0
MESSAGES = 20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def produce_and_consume(endpoint: str, topic: str, group: str) -> tuple[int, int]:
    """Send MESSAGES with the official Producer, receive and ack them with SimpleConsumer."""
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        for i in range(MESSAGES):
            message = Message()
            message.topic = topic
            message.body = f"order-{i}".encode()
            message.tag = "e2e"
            producer.send(message)
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    bodies: set[bytes] = set()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(bodies) < MESSAGES and time.monotonic() < deadline:
            for received in consumer.receive(32, 30):
                bodies.add(received.body)
                consumer.ack(received)
    finally:
        consumer.shutdown()
    return MESSAGES, len(bodies)


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
    (workdir / "store").mkdir(parents=True, exist_ok=True)
    broker_command = [
        *gannet_command(),
        "broker",
        "run",
        "--data-dir",
        str(workdir / "store"),
        "--listen",
        broker,
        "--metrics-listen",
        broker_metrics,
        "--flush",
        "sync",
        "--file-size-mb",
        "16",
    ]
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
            client = kube.Kube(kube.Access(server=url), timeout_s=10)
            try:
                env = Env(api, url, client, metrics.OperatorMetrics())
                report = await _story(env, broker, operator_metrics)
            finally:
                await client.close()
    report.elapsed_s = time.monotonic() - started
    return report


async def _story(env: Env, broker: str, operator_metrics: str) -> Report:
    await env.apply("GannetCluster", "main", {"replicas": 1})
    await env.apply("Topic", "e2e-orders", {"cluster": "main", "queues": 4})
    await env.apply("ConsumerGroup", "e2e-readers", {"cluster": "main"})
    await env.wait_for("Topic", "e2e-orders", ready, timeout_s=30)
    await env.wait_for("ConsumerGroup", "e2e-readers", ready, timeout_s=30)
    assert await asyncio.to_thread(_exists, broker, "topic", "e2e-orders")
    assert await asyncio.to_thread(_exists, broker, "group", "e2e-readers")

    sent, received = await asyncio.to_thread(
        produce_and_consume, broker, "e2e-orders", "e2e-readers"
    )
    if received != sent:
        raise AssertionError(f"sent {sent} messages, received {received}")

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
    return Report(sent, received, grown, refused["status"]["conditions"][0]["reason"], count, 0.0)


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
