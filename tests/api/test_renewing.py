"""Server-side renewal of ``auto_renew`` receipts: the table (pure, virtual time) and an
official PushConsumer whose listener outlasts the auto-renew invisible time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)

from gannet.node.api import receiving
from gannet.node.api.renewing import RenewalLimits, RenewalTable
from gannet.node.broker import threads
from gannet.node.pop.config import PopConfig
from gannet.node.pop.receipts import ReceiptHandle, TopicFlag
from gannet.node.protocol.gen import admin_pb2

from .conftest import pop_broker, settle, unique

pytestmark = pytest.mark.timeout(60)


def _handle(pop_time_ms: int, invisible_ms: int = 60_000) -> ReceiptHandle:
    return ReceiptHandle(0, pop_time_ms, invisible_ms, 1, TopicFlag.NORMAL, "b", 0, 7, 99)


LIMITS = RenewalLimits(
    renew_ahead_ms=10_000, renew_duration_ms_max=600_000, client_silence_ms_max=30_000,
    entries_max=2,
)  # fmt: skip


def test_due_renews_ahead_and_take_returns_the_newest_handle() -> None:
    table = RenewalTable(LIMITS)
    seen = {"c1": 45_000}
    assert table.add("G", "T", "orig", _handle(0), "c1", now_ms=0)
    assert table.due(49_999, seen.get) == []  # visible at 60 s: not yet within 10 s
    [entry] = table.due(50_000, seen.get)
    assert entry.renewing
    assert table.due(50_001, seen.get) == []  # one renewal at a time
    assert table.take("G", "orig") is entry  # still renewing: the caller must wait
    assert len(table) == 1
    table.renewed(entry, _handle(50_000))
    taken = table.take("G", "orig")
    assert taken is not None
    assert taken.current == _handle(50_000)
    assert len(table) == 0
    assert table.take("G", "orig") is None
    assert table.renewed_total == 1


def test_entries_are_dropped_when_the_client_is_gone_or_renewal_failed() -> None:
    table = RenewalTable(LIMITS)
    table.add("G", "T", "a", _handle(0), "gone", now_ms=0)
    table.add("G", "T", "b", _handle(0), "quiet", now_ms=0)
    assert not table.add("G", "T", "c", _handle(0), "quiet", now_ms=0)  # entries_max
    seen = {"quiet": 10_000}.get
    assert table.due(50_000, seen) == []  # "gone" unknown, "quiet" silent for 40 s
    assert len(table) == 0
    assert table.dropped_total == 2
    table.add("G", "T", "d", _handle(0), "c", now_ms=0)
    [entry] = table.due(55_000, {"c": 55_000}.get)
    table.renewed(entry, None)
    assert len(table) == 0


def test_renewal_ends_after_the_maximum_duration() -> None:
    table = RenewalTable(LIMITS)
    table.add("G", "T", "a", _handle(0), "c", now_ms=0)
    assert table.due(600_000, {"c": 600_000}.get) == []
    assert len(table) == 0


# ------------------------------------------------------------------------ live broker
FAST = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200, auto_renew_invisible_ms=2_000)
RENEW = RenewalLimits(renew_ahead_ms=1_000, check_interval_ms=100)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    root = tmp_path_factory.mktemp("renew-broker")
    with pop_broker(root, FAST, PopConfig(revive_interval_ms=100), RENEW) as running:
        yield running


def test_slow_push_listener_keeps_its_message_and_acks_the_original_handle(
    broker, admin, make_topic, caplog: pytest.LogCaptureFixture
) -> None:
    topic, group = make_topic(), unique("G")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    release = threading.Event()
    deliveries: list[tuple[str, int]] = []

    class Slow(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            deliveries.append((message.message_id, message.delivery_attempt))
            release.wait(20)
            return ConsumeResult.SUCCESS

    clients: list[Any] = []
    try:
        push = PushConsumer(config, group, Slow(), {topic: FilterExpression("*")})
        push.startup()
        clients.append(push)
        producer = Producer(config, (topic,))
        producer.startup()
        clients.append(producer)
        message = Message()
        message.topic, message.body = topic, b"slow work"
        message_id = producer.send(message).message_id
        deadline = time.monotonic() + 15
        while not deliveries:
            assert time.monotonic() < deadline, "no delivery"
            time.sleep(0.02)
        settle(broker)
        other = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=0)
        other.startup()
        clients.append(other)
        # 6 s: three times the 2 s auto-renew invisible time, plus revive lag.
        watch_until = time.monotonic() + 6
        while time.monotonic() < watch_until:
            assert other.receive(1, 10) == [], "redelivered while the listener still works"
        pop = broker.broker.messaging.pop
        assert isinstance(pop, receiving.PopHandler)
        assert pop.renewals.renewed_total >= 2
        release.set()
        while len(pop.renewals):  # the ack with the original handle ended the renewal
            assert time.monotonic() < deadline + 10, "ack did not arrive"
            time.sleep(0.02)
        watch_until = time.monotonic() + 4  # longer than invisible time + revive margin
        while time.monotonic() < watch_until:
            assert other.receive(1, 10) == [], "came back although it was acked"
        assert deliveries == [(message_id, 1)]
        refused = [r for r in caplog.records if "invalid receipt handle" in r.getMessage()]
        assert refused == []  # without renewal the client's ack of the expired handle fails
    finally:
        release.set()
        for client in reversed(clients):
            client.shutdown()
