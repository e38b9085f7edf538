"""A step of the broker's wall clock does not end a Pop lease (the fault harness's +59 s clock
strobe, docs/architecture.md "Faults as Jepsen injects them").

Leases, receipt expiry, revive and the timer wheel read :mod:`gannet.node.store.steady_clock`:
the wall clock at the anchor, then monotonic time. Here the in-process broker's wall clock is
stepped forward by 59 s while the official Python client holds a message: the message stays
invisible until its lease runs out in real time, then comes back. Before the steady clock, the
timer wheel saw the lease 59 s old at once and revived it within a second.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
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

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.protocol.gen import admin_pb2
from gannet.node.store import steady_clock

from .conftest import pop_broker, settle, unique

QUICK = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200, receive_invisible_ms_min=1000)
INVISIBLE_S = 4
STEP_S = 59
RETURN_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    with pop_broker(tmp_path_factory.mktemp("clock-step-broker"), QUICK) as running:
        yield running


def _step_wall_clock(monkeypatch: pytest.MonkeyPatch, step_s: int) -> None:
    """What ``date -s`` or an NTP step does to the process: the wall clock jumps, the
    monotonic clock does not."""
    real_ns, real_s = time.time_ns, time.time
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + step_s * 1_000_000_000)
    monkeypatch.setattr(time, "time", lambda: real_s() + step_s)
    monkeypatch.setattr(steady_clock.CLOCK, "_wall_ns", time.time_ns)


def test_a_forward_step_of_the_wall_clock_does_not_end_a_lease(
    broker: threads.BrokerThread, admin: Any, make_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = make_topic()
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,))
    producer.startup()
    group = unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=0)
    consumer.startup()
    try:
        message = Message()
        message.topic = topic
        message.body = b"leased"
        sent = producer.send(message).message_id
        settle(broker)
        got: list[Any] = []
        deadline = time.monotonic() + RETURN_TIMEOUT_S
        while not got and time.monotonic() < deadline:
            got = consumer.receive(1, INVISIBLE_S)
        assert [m.message_id for m in got] == [sent]
        leased_at = time.monotonic()

        _step_wall_clock(monkeypatch, STEP_S)
        assert steady_clock.CLOCK.offset_ms() < -(STEP_S - 1) * 1000

        while time.monotonic() - leased_at < INVISIBLE_S - 1.0:  # the lease still runs
            assert consumer.receive(1, INVISIBLE_S) == [], "delivered again during its lease"
        back: list[Any] = []
        while not back and time.monotonic() < deadline:  # it runs out in real time
            back = consumer.receive(1, INVISIBLE_S)
        assert [m.message_id for m in back] == [sent]
        assert time.monotonic() - leased_at >= INVISIBLE_S - 0.5
        consumer.ack(back[0])
    finally:
        consumer.shutdown()
        producer.shutdown()
