"""10,000 messages through 4 official producers and 4 official SimpleConsumers of one group:
none lost and none delivered twice while every message is acked within its invisible time.

The broker is ``gannet broker run`` in a subprocess. Each
producer thread sends its share one message per RPC (``send_async``, at most 32 in flight);
each consumer thread receives batches of 32 with a 60 s invisible time and acks every message
of a batch before receiving again.
"""

from __future__ import annotations

import collections
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from gannet.node.cli.calls import channel
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.testing import small_stores

MESSAGES = 10_000
PRODUCERS = 4
CONSUMERS = 4
TIMEOUT_S = 90  # a failure guard; the run takes 30-50 s on a busy 2-core machine
SEND_WINDOW = 32  # sends in flight per producer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[str]:
    """``gannet broker run`` in its own process (the clients' threads keep this one busy)."""
    args = [
        sys.executable, "-m", "gannet.node.cli", "broker", "run",
        "--data-dir", str(tmp_path / "store"), "--listen", "127.0.0.1:0",
        "--file-size-mb", "64", *small_stores.INDEX_ARGS, "--flush", "async",
        "--metrics-listen", "",
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "broker serving" in line:
                break
        match = re.search(r"on (127\.0\.0\.1:\d+)", "".join(lines))
        assert match, "".join(lines)
        yield match.group(1)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ten_thousand_messages_four_producers_four_consumers(endpoint: str) -> None:
    with channel(endpoint) as opened:
        admin = admin_pb2_grpc.AdminStub(opened)  # type: ignore[no-untyped-call]
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name="Volume", queue_nums=8), timeout=5)
        admin.CreateGroup(admin_pb2.CreateGroupRequest(name="VolumeGroup"), timeout=5)
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    sent: list[str] = []
    delivered: collections.Counter[str] = collections.Counter()
    attempts: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()
    failures: list[BaseException] = []
    deadline = time.monotonic() + TIMEOUT_S
    producing_done = threading.Event()

    def produce(index: int) -> None:
        producer = Producer(config, ("Volume",))
        producer.startup()
        try:
            mine = []
            window: collections.deque[Any] = collections.deque()
            for i in range(index, MESSAGES, PRODUCERS):
                msg = Message()
                msg.topic = "Volume"
                msg.body = f"v{i}".encode()
                msg.keys = f"k{i}"
                window.append(producer.send_async(msg))
                if len(window) >= SEND_WINDOW:
                    mine.append(window.popleft().result(timeout=TIMEOUT_S).message_id)
            mine.extend(f.result(timeout=TIMEOUT_S).message_id for f in window)
            with lock:
                sent.extend(mine)
        except BaseException as exc:
            failures.append(exc)
        finally:
            producer.shutdown()

    def consume() -> None:
        consumer: Any = SimpleConsumer(
            config, "VolumeGroup", {"Volume": FilterExpression("*")}, await_duration=0
        )
        consumer.startup()
        try:
            while time.monotonic() < deadline and not failures:
                with lock:
                    if producing_done.is_set() and sum(delivered.values()) >= MESSAGES:
                        return
                batch = consumer.receive(32, 60)
                with lock:
                    for m in batch:
                        delivered[m.message_id] += 1
                        attempts[m.delivery_attempt] += 1
                for m in batch:
                    consumer.ack(m)
        except BaseException as exc:
            failures.append(exc)
        finally:
            consumer.shutdown()

    began = time.monotonic()
    workers = [threading.Thread(target=consume) for _ in range(CONSUMERS)]
    producers = [threading.Thread(target=produce, args=(i,)) for i in range(PRODUCERS)]
    for t in workers + producers:
        t.start()
    for t in producers:
        t.join(TIMEOUT_S)
    producing_done.set()
    print(f"produced in {time.monotonic() - began:.1f} s")
    for t in workers:
        t.join(TIMEOUT_S + 10)
    elapsed_s = time.monotonic() - began
    print(f"{MESSAGES} messages produced and consumed in {elapsed_s:.1f} s")
    assert failures == []
    assert len(sent) == MESSAGES
    assert len(set(sent)) == MESSAGES
    lost = set(sent) - set(delivered)
    assert not lost, f"{len(lost)} messages never delivered"
    twice = {m: n for m, n in delivered.items() if n > 1}
    assert not twice, f"{len(twice)} messages delivered more than once"
    assert set(delivered) == set(sent)
    assert attempts == {1: MESSAGES}
