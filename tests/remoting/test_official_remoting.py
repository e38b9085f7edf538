"""The official RocketMQ remoting Java client, unchanged (rocketmq-client 4.9.8), against a
broker's name-server and remoting ports: DefaultMQProducer (sync with keys, tags and a user
property; oneway; a batch; a delay level; a body the client compresses), DefaultMQPushConsumer
(every message once; a tag filter; every message failed once, sent back and consumed from the
retry topic; an orderly listener, locking its queues) and DefaultLitePullConsumer; and both
protocols on one store: what the Java client sent is received by the official Python gRPC
SimpleConsumer, what the Python gRPC Producer sent is received by the Java push consumer."""

from __future__ import annotations

import zlib
from collections import Counter
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

from gannet.node.broker import threads

from . import java_clients

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
COUNT = 5
LARGE = bytes(ord("a") + i % 26 for i in range(8192))


def _body(key: str) -> bytes:
    return LARGE if key.endswith("-large") else f"body of {key}".encode()


def _expected(prefix: str) -> dict[str, str]:
    """Key → tag of everything the producer mode sends."""
    keys = {f"{prefix}-sync-{i}": "TagA" if i % 2 == 0 else "TagB" for i in range(COUNT)}
    keys.update({f"{prefix}-oneway-{i}": "TagA" for i in range(COUNT)})
    keys.update({f"{prefix}-batch-{i}": "TagB" for i in range(COUNT)})
    keys.update({f"{prefix}-delayed": "TagA", f"{prefix}-large": "TagB"})
    return keys


def _received(lines: list[str]) -> list[tuple[str, str, int, int, str]]:
    assert lines[-1].startswith("consumed "), lines[-5:]
    got = []
    for line in lines:
        if line.startswith("got "):
            _, key, tag, length, crc, origin = line.split(" ")
            got.append((key, tag, int(length), int(crc), origin))
    return got


def _check(got: list[tuple[str, str, int, int, str]], wanted: dict[str, str], origin: str) -> None:
    counts = Counter(key for key, *_ in got)
    assert counts == Counter(wanted.keys()), "every message exactly once"
    for key, tag, length, crc, seen_origin in got:
        assert tag == wanted[key]
        assert (length, crc) == (len(_body(key)), zlib.crc32(_body(key)))
        assert seen_origin == origin


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the Java client writes its log (by default it writes under ~/logs)."""
    return tmp_path_factory.mktemp("rocketmq-client-logs")


@pytest.fixture(scope="module")
def produced(nameserver_endpoint: str, logs: Path) -> tuple[str, dict[str, str]]:
    java_clients.lib()
    topic, prefix = "RemJavaT", "j"
    lines = java_clients.run(logs, "produce", nameserver_endpoint, topic, prefix, str(COUNT))
    assert lines[-1] == "done"
    sent = [line.split(" ")[1] for line in lines if line.startswith(("sent ", "oneway "))]
    assert sorted(sent) == sorted(_expected(prefix))
    # viewMessage(SendResult.getOffsetMsgId()) dialed the broker's remoting address in the
    # offset message id and found the message, whose msgId is the send's unique key
    assert f"viewed {prefix}-sync-0 {prefix}-sync-0 true" in lines
    for line in lines:
        if line.startswith("sent "):
            _, key, queue, offset = line.split(" ")
            PLACES[key] = (int(queue), int(offset))
    return topic, _expected(prefix)


PLACES: dict[str, tuple[int, int]] = {}
"""Queue and queue offset of each acknowledged send (a batch answers its first's offset)."""


def test_push_tag_filtered_push_and_lite_pull_consumers_get_everything_once(
    nameserver_endpoint: str, produced: tuple[str, dict[str, str]], logs: Path
) -> None:
    topic, wanted = produced
    tag_a = {k: t for k, t in wanted.items() if t == "TagA"}
    push = java_clients.start(
        logs, "push", nameserver_endpoint, topic, "RemJavaPush", str(len(wanted)), "*"
    )
    tagged = java_clients.start(
        logs, "push", nameserver_endpoint, topic, "RemJavaTagA", str(len(tag_a)), "TagA"
    )
    lite = java_clients.start(
        logs, "litepull", nameserver_endpoint, topic, "RemJavaLite", str(len(wanted))
    )
    _check(_received(java_clients.finish(push)), wanted, "remoting")
    _check(_received(java_clients.finish(tagged)), tag_a, "remoting")
    _check(_received(java_clients.finish(lite)), wanted, "remoting")


def test_a_failed_message_comes_back_from_the_retry_topic(
    broker: threads.BrokerThread,
    nameserver_endpoint: str,
    produced: tuple[str, dict[str, str]],
    logs: Path,
) -> None:
    topic, wanted = produced
    lines = java_clients.run(
        logs, "pushretry", nameserver_endpoint, topic, "RemJavaRetry", str(len(wanted)), "*"
    )
    _check(_received(lines), wanted, "remoting")
    # every message went through the broker's retry topic (CONSUMER_SEND_MSG_BACK), not the
    # client's own fallback of consuming it again locally
    store = broker.broker.store
    retry = store.topic_configs.get("%RETRY%RemJavaRetry")
    assert retry is not None
    stored = sum(
        store.max_offset_in_queue(retry.topic_name, q) for q in range(retry.write_queue_nums)
    )
    assert stored == len(wanted)


def test_an_orderly_consumer_locks_its_queues_and_reads_each_in_order(
    broker: threads.BrokerThread,
    nameserver_endpoint: str,
    produced: tuple[str, dict[str, str]],
    logs: Path,
) -> None:
    topic, wanted = produced
    lines = java_clients.run(
        logs, "orderly", nameserver_endpoint, topic, "RemJavaOrderly", str(len(wanted))
    )
    got = _received(lines)
    _check(got, wanted, "remoting")
    seen: dict[int, list[int]] = {}
    for key, *_ in got:
        if key in PLACES and "-batch-" not in key:
            queue, offset = PLACES[key]
            seen.setdefault(queue, []).append(offset)
    assert seen
    assert all(offsets == sorted(offsets) for offsets in seen.values()), seen
    requests = broker.broker.remoting_requests
    assert requests is not None
    assert requests.locks.granted_total["RemJavaOrderly"] >= 8  # each of its queues, locked
    # and released when it shut down (UNLOCK_BATCH_MQ): another client may lock them now
    assert requests.locks.lock("RemJavaOrderly", "another", [(topic, "broker-a", 0)])


def test_sent_over_remoting_received_over_grpc(
    broker: threads.BrokerThread, produced: tuple[str, dict[str, str]]
) -> None:
    topic, wanted = produced
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    consumer = SimpleConsumer(
        config, "RemGrpcReader", {topic: FilterExpression("*")}, await_duration=0
    )
    consumer.startup()
    try:
        got: list[Any] = []
        for _ in range(100):
            if len(got) >= len(wanted):
                break
            batch = consumer.receive(32, 15)
            for message in batch:
                consumer.ack(message)
            got.extend(batch)
    finally:
        consumer.shutdown()
    assert Counter(k for m in got for k in m.keys) == Counter(wanted.keys())
    for message in got:
        [key] = message.keys
        assert message.tag == wanted[key]
        assert message.body == _body(key)  # the compressed one inflated by the gRPC path too
        assert message.properties["origin"] == "remoting"


def test_sent_over_grpc_received_by_the_remoting_push_consumer(
    broker: threads.BrokerThread, nameserver_endpoint: str, logs: Path
) -> None:
    topic = "RemGrpcT"
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,))
    producer.startup()
    wanted = {}
    try:
        for i in range(COUNT):
            key = f"g-{i}"
            message = Message()
            message.topic = topic
            message.body = _body(key)
            message.tag = "TagA"
            message.keys = key
            message.add_property("origin", "grpc")
            producer.send(message)
            wanted[key] = "TagA"
    finally:
        producer.shutdown()
    lines = java_clients.run(
        logs, "push", nameserver_endpoint, topic, "RemJavaFromGrpc", str(COUNT), "*"
    )
    _check(_received(lines), wanted, "grpc")
