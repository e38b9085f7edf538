"""Lite topics and priority messages on an in-process 3-broker Raft group, with the official
Python clients given a follower's endpoint: the lite subscription reaches the leader (the
follower forwards SyncLiteSubscription, the leader runs Pop), a lite consumer gets exactly its
lite topics, and priority messages come most urgent first."""

from __future__ import annotations

import time
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    LiteSimpleConsumer,
    Message,
    Producer,
    SimpleConsumer,
)

from gannet.node.protocol.gen import admin_pb2
from tests.api.test_lite_priority import subscribe

from .conftest import Cluster
from .test_cluster import forward_stats

pytestmark = pytest.mark.timeout(150)


def _setup(cluster: Cluster) -> tuple[int, int]:
    cluster.start_all()
    leader = cluster.leader()

    def create(admin: Any) -> None:
        for name, kind in (("RLite", admin_pb2.LITE), ("RPrio", admin_pb2.PRIORITY)):
            topic = admin_pb2.CreateTopicRequest(name=name, queue_nums=4, message_type=kind)
            admin.CreateTopic(topic, timeout=10)
        for group in ("RLiteG", "RPrioG"):
            admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=10)

    cluster.admin(leader, create)
    cluster.wait_replicated(cluster.last_offset(leader))
    return leader, next(i for i in cluster.nodes if i != leader)


def _drain(consumer: Any, want: int, batch: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while len(got) < want and time.monotonic() < deadline:
        for message in consumer.receive(batch, 30):
            got.append(message)
            consumer.ack(message)
    return got


def test_lite_and_priority_through_a_follower(cluster: Cluster) -> None:
    _, follower = _setup(cluster)
    config = ClientConfiguration(cluster.endpoint(follower), Credentials(), request_timeout=10)
    started: list[Any] = []
    try:
        lite = LiteSimpleConsumer("RLite", config, "RLiteG", await_duration=1)
        lite.startup()
        started.append(lite)
        subscribe(lite, "chat-1")
        prio = SimpleConsumer(config, "RPrioG", {"RPrio": FilterExpression("*")}, await_duration=1)
        prio.startup()
        started.append(prio)
        producer = Producer(config, ("RLite", "RPrio"))
        producer.startup()
        started.append(producer)
        for i in range(3):
            for chat in ("chat-1", "chat-2"):
                msg = Message()
                msg.topic, msg.body, msg.lite_topic = "RLite", f"{chat}/{i}".encode(), chat
                producer.send(msg)
        for priority in (1, 3, 0, 2):
            msg = Message()
            msg.topic, msg.body, msg.priority = "RPrio", f"p{priority}".encode(), priority
            producer.send(msg)
        got = _drain(lite, 3, 16)
        assert [m.body for m in got] == [b"chat-1/0", b"chat-1/1", b"chat-1/2"]
        assert [m.body for m in _drain(prio, 4, 1)] == [b"p3", b"p2", b"p1", b"p0"]
    finally:
        for client in reversed(started):
            client.shutdown()
    assert forward_stats(cluster, follower).forwarded_total["SyncLiteSubscription"] >= 1
