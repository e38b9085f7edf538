"""Topic and ConsumerGroup resources reconciled by kopf (in-process, KMock API emulator) against
a real in-process Gannet broker: create, update, refusals, conflicts, delete with finalizer."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gannet.node.api.gen import admin_pb2, admin_pb2_grpc
from gannet.node.broker import threads
from tests.operator.conftest import operator_env, ready

pytestmark = pytest.mark.timeout(60)


def describe(broker: threads.BrokerThread, name: str) -> admin_pb2.DescribeTopicResponse | None:
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        try:
            found: admin_pb2.DescribeTopicResponse = stub.DescribeTopic(
                admin_pb2.DescribeTopicRequest(name=name), timeout=5
            )
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            return None
        return found


def test_topic_lifecycle(broker: threads.BrokerThread) -> None:
    async def scenario() -> None:
        async with operator_env(broker.endpoint) as env:
            await env.apply("GannetCluster", "main", {"replicas": 1})
            await env.apply("Topic", "orders", {"cluster": "main", "queues": 4})
            obj = await env.wait_for("Topic", "orders", ready)
            assert obj is not None
            assert obj["status"]["topicName"] == "orders"
            assert obj["status"]["queues"] == 4
            assert obj["status"]["maxOffsets"] == [0, 0, 0, 0]
            assert "gannet.io/finalizer" in obj["metadata"]["finalizers"]
            found = await asyncio.to_thread(describe, broker, "orders")
            assert found is not None
            assert found.topic.write_queue_nums == 4
            assert found.topic.message_type == admin_pb2.NORMAL

            # Update: more queues, read-only, FIFO.
            await env.apply(
                "Topic",
                "orders",
                {"cluster": "main", "queues": 6, "permission": "ReadOnly", "messageType": "FIFO"},
            )
            obj = await env.wait_for(
                "Topic",
                "orders",
                lambda o: ready(o) and o is not None and o["status"]["queues"] == 6,
            )
            assert obj is not None
            assert obj["metadata"]["generation"] == 2
            assert obj["status"]["permission"] == "ReadOnly"
            found = await asyncio.to_thread(describe, broker, "orders")
            assert found is not None
            assert (found.topic.write_queue_nums, found.topic.perm) == (6, 4)
            assert found.topic.message_type == admin_pb2.FIFO

            # Shrink is refused and changes nothing on the broker.
            await env.apply("Topic", "orders", {"cluster": "main", "queues": 2})
            obj = await env.wait_for(
                "Topic", "orders", lambda o: ready(o, status="False", reason="NotSupported")
            )
            assert obj is not None
            message = obj["status"]["conditions"][0]["message"]
            assert "from 6 to 2" in message
            found = await asyncio.to_thread(describe, broker, "orders")
            assert found is not None
            assert found.topic.write_queue_nums == 6

            # Rename is refused too.
            await env.apply("Topic", "orders", {"cluster": "main", "queues": 6, "topicName": "x"})
            obj = await env.wait_for(
                "Topic", "orders", lambda o: ready(o, status="False", reason="NotSupported")
            )
            assert obj is not None
            assert "renaming topic 'orders' to 'x'" in obj["status"]["conditions"][0]["message"]
            assert await asyncio.to_thread(describe, broker, "x") is None

            # Delete: the finalizer holds the resource until the topic is gone.
            await env.delete("Topic", "orders")
            await env.wait_for("Topic", "orders", lambda o: o is None)
            assert await asyncio.to_thread(describe, broker, "orders") is None

            figures = env.metrics.reconciliations
            assert figures.labels(kind="Topic", result="success")._value.get() >= 2
            assert figures.labels(kind="Topic", result="refused")._value.get() >= 2

    asyncio.run(scenario())
