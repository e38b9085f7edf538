"""Topic and ConsumerGroup resources reconciled by kopf (in-process, KMock API emulator) against
a real in-process Gannet broker: create, update, refusals, conflicts, delete with finalizer."""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import grpc
import pytest

from gannet.node.broker import threads
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from tests.operator import fake_admin
from tests.operator.conftest import operator_env, ready

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]


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
            tier_never = {"remoteRetentionSeconds": 0}
            await env.apply("Topic", "orders", {"cluster": "main", "queues": 4, "tier": tier_never})
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
            assert found.topic.attributes["gannet.tier.remote.retention.s"] == "0"
            # `kubectl describe` shows the step and the Ready transition as Events.
            created = await env.wait_for_event("Topic", "orders", "Normal", "Created")
            assert "created topic orders on the brokers (queues=4" in created["message"]
            assert created["involvedObject"]["uid"] == obj["metadata"]["uid"]
            assert created["source"] == {"component": "gannet-operator"}
            await env.wait_for_event("Topic", "orders", "Normal", "Reconciled")

            # Update: more queues, read-only, FIFO, served from the tier for an hour.
            await env.apply(
                "Topic",
                "orders",
                {
                    "cluster": "main",
                    "queues": 6,
                    "permission": "ReadOnly",
                    "messageType": "FIFO",
                    "tier": {"remoteRetentionSeconds": 3600},
                },
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
            assert found.topic.attributes["gannet.tier.remote.retention.s"] == "3600"
            await env.wait_for_event("Topic", "orders", "Normal", "Updated", contains="queues=6")

            # Shrink is refused and changes nothing on the broker.
            await env.apply("Topic", "orders", {"cluster": "main", "queues": 2})
            obj = await env.wait_for(
                "Topic", "orders", lambda o: ready(o, status="False", reason="NotSupported")
            )
            assert obj is not None
            message = obj["status"]["conditions"][0]["message"]
            assert "from 6 to 2" in message
            await env.wait_for_event(
                "Topic", "orders", "Warning", "NotSupported", contains="from 6 to 2"
            )
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
            await env.wait_for_event("Topic", "orders", "Normal", "Deleted")

            figures = env.metrics.reconciliations
            assert figures.labels(kind="Topic", result="success")._value.get() >= 2
            assert figures.labels(kind="Topic", result="refused")._value.get() >= 2

    asyncio.run(scenario())


def describe_group(
    broker: threads.BrokerThread, name: str
) -> admin_pb2.DescribeGroupResponse | None:
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        try:
            found: admin_pb2.DescribeGroupResponse = stub.DescribeGroup(
                admin_pb2.DescribeGroupRequest(name=name), timeout=5
            )
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            return None
        return found


def test_second_topic_resource_for_the_same_topic_is_a_conflict(
    broker: threads.BrokerThread,
) -> None:
    async def scenario() -> None:
        async with operator_env(broker.endpoint) as env:
            await env.apply("GannetCluster", "main", {"replicas": 1})
            await env.apply("Topic", "payments", {"cluster": "main", "queues": 2})
            await env.wait_for("Topic", "payments", ready)
            await env.apply(
                "Topic", "payments-copy", {"cluster": "main", "topicName": "payments", "queues": 8}
            )
            obj = await env.wait_for(
                "Topic",
                "payments-copy",
                lambda o: ready(o, status="False", reason="ResourceConflict"),
            )
            assert obj is not None
            assert "'payments'" in obj["status"]["conditions"][0]["message"]
            assert "topicName" not in obj["status"]
            found = await asyncio.to_thread(describe, broker, "payments")
            assert found is not None
            assert found.topic.write_queue_nums == 2  # the loser changed nothing

            # Deleting the loser leaves the topic alone.
            await env.delete("Topic", "payments-copy")
            await env.wait_for("Topic", "payments-copy", lambda o: o is None)
            assert await asyncio.to_thread(describe, broker, "payments") is not None
            owner = await env.get("Topic", "payments")
            assert ready(owner)

    asyncio.run(scenario())


def test_consumer_group_lifecycle(broker: threads.BrokerThread) -> None:
    async def scenario() -> None:
        async with operator_env(broker.endpoint) as env:
            await env.apply("GannetCluster", "main", {"replicas": 1})
            await env.apply(
                "ConsumerGroup",
                "billing",
                {"cluster": "main", "fifo": True, "maxDeliveryAttempts": 5},
            )
            obj = await env.wait_for("ConsumerGroup", "billing", ready)
            assert obj is not None
            assert obj["status"]["groupName"] == "billing"
            assert obj["status"]["lag"] == 0
            found = await asyncio.to_thread(describe_group, broker, "billing")
            assert found is not None
            assert (found.group.fifo, found.group.retry_max_times) == (True, 4)

            await env.apply(
                "ConsumerGroup",
                "billing",
                {
                    "cluster": "main",
                    "fifo": False,
                    "maxDeliveryAttempts": 3,
                    "consumeEnabled": False,
                },
            )
            await env.wait_for(
                "ConsumerGroup",
                "billing",
                lambda o: ready(o) and o is not None and o["metadata"]["generation"] == 2,
            )
            found = await asyncio.to_thread(describe_group, broker, "billing")
            assert found is not None
            assert (found.group.fifo, found.group.retry_max_times) == (False, 2)
            assert found.group.consume_enable is False

            # A retry policy the admin API cannot set is reported, not silently ignored.
            await env.apply(
                "ConsumerGroup",
                "billing",
                {
                    "cluster": "main",
                    "retryPolicy": "EXPONENTIAL"
                    if found.group.retry_policy != "EXPONENTIAL"
                    else "CUSTOMIZED",
                },
            )
            obj = await env.wait_for(
                "ConsumerGroup",
                "billing",
                lambda o: ready(o, status="False", reason="NotSupported"),
            )
            assert obj is not None
            assert "retry policy" in obj["status"]["conditions"][0]["message"]

            await env.delete("ConsumerGroup", "billing")
            await env.wait_for("ConsumerGroup", "billing", lambda o: o is None)
            assert await asyncio.to_thread(describe_group, broker, "billing") is None

    asyncio.run(scenario())


def test_unreachable_broker_is_reported_and_retried() -> None:
    async def scenario() -> None:
        with socket.socket() as closed:  # a port nobody listens on
            closed.bind(("127.0.0.1", 0))
            endpoint = f"127.0.0.1:{closed.getsockname()[1]}"
        async with operator_env(endpoint) as env:
            await env.apply("Topic", "lonely", {"cluster": "main"})
            obj = await env.wait_for(
                "Topic", "lonely", lambda o: ready(o, status="False", reason="BrokerUnavailable")
            )
            assert obj is not None
            assert endpoint in obj["status"]["conditions"][0]["message"]
            await env.wait_for_event(
                "Topic", "lonely", "Warning", "BrokerUnavailable", contains=endpoint
            )
            # Retried after retry_delay_s (0.5 s here): more than one failed attempt is counted.
            failed = env.metrics.reconciliations.labels(kind="Topic", result="failed")
            await env.wait_for("Topic", "lonely", lambda o: failed._value.get() >= 2)

    asyncio.run(scenario())


def test_topic_deleted_behind_the_operators_back_is_created_again(
    broker: threads.BrokerThread,
) -> None:
    async def scenario() -> None:
        async with operator_env(broker.endpoint, refresh_interval_s=0.2) as env:
            await env.apply("GannetCluster", "main", {"replicas": 1})
            await env.apply("Topic", "drifting", {"cluster": "main", "queues": 3})
            await env.wait_for("Topic", "drifting", ready)
            with grpc.insecure_channel(broker.endpoint) as channel:
                stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
                stub.DeleteTopic(admin_pb2.DeleteTopicRequest(name="drifting"), timeout=5)
            assert await asyncio.to_thread(describe, broker, "drifting") is None
            # Two more refresh passes (each writes status, so each is a watch event) are at
            # least one full pass after the deletion.
            done = env.metrics.reconciliations.labels(kind="Topic", result="success")
            target = done._value.get() + 2
            await env.wait_for("Topic", "drifting", lambda o: done._value.get() >= target)
            found = await asyncio.to_thread(describe, broker, "drifting")
            assert found is not None
            assert found.topic.write_queue_nums == 3

    asyncio.run(scenario())


@dataclasses.dataclass
class SplitEndpoints:
    """The client Service lands on a follower (the fake admin server, which names node 2 as
    leader and refuses everything else); pod main-1 (node 2) is the real broker."""

    follower: str
    leader: str

    def client(self, namespace: str, cluster: str) -> str:
        return self.follower

    def pod(self, namespace: str, cluster: str, ordinal: int) -> str:
        return self.leader if ordinal == 1 else self.follower

    def member(self, namespace: str, cluster: str, ordinal: int) -> tuple[str, str]:
        return self.pod(namespace, cluster, ordinal), self.pod(namespace, cluster, ordinal)


def test_admin_writes_go_to_the_raft_leader(broker: threads.BrokerThread) -> None:
    follower = fake_admin.FakeAdmin(leader_id="2")

    async def scenario() -> None:
        with fake_admin.serving(follower) as follower_endpoint:
            endpoints = SplitEndpoints(follower_endpoint, broker.endpoint)
            async with operator_env(broker.endpoint, endpoints=endpoints) as env:
                await env.apply("GannetCluster", "main", {"replicas": 3})
                await env.apply("Topic", "routed", {"cluster": "main", "queues": 2})
                await env.wait_for("Topic", "routed", ready)
                assert await asyncio.to_thread(describe, broker, "routed") is not None
                assert follower.count("GetRaftStatus") >= 1

    asyncio.run(scenario())
