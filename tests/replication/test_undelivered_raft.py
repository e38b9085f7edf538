"""The figures an operator's drain reads (``DescribeTopic``: delayed messages in the timer
wheel, prepared transactions) on a 3-member Raft group in one process: the leader counts its
timer wheel, a follower says it does not, and after the leader is SIGKILLed the new leader
counts the same delayed message (it takes the replicated timer topic into its own wheel)."""

from __future__ import annotations

import time

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.protocol.gen import admin_pb2

from .conftest import Cluster

pytestmark = pytest.mark.timeout(120)
TOPIC = "RepLater"
CLIENT_ID = (("x-mq-client-id", "tests@1@0@undelivered"),)


def _describe(cluster: Cluster, node_id: int) -> admin_pb2.DescribeTopicResponse:
    request = admin_pb2.DescribeTopicRequest(name=TOPIC)
    answer: admin_pb2.DescribeTopicResponse = cluster.admin(
        node_id, lambda stub: stub.DescribeTopic(request, timeout=10)
    )
    return answer


def test_delayed_figures_follow_the_leader(cluster: Cluster) -> None:
    cluster.start_all()
    leader = cluster.leader()
    create = admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=2, message_type=admin_pb2.DELAY)
    cluster.admin(leader, lambda stub: stub.CreateTopic(create, timeout=10))
    msg = definition_pb2.Message(body=b"later")
    msg.topic.name = TOPIC
    msg.system_properties.message_id = "0102FC000000013E000B13F97D0000F001"
    msg.system_properties.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 90_000)
    with grpc.insecure_channel(cluster.endpoint(leader)) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.SendMessageRequest(messages=[msg])
        sent = stub.SendMessage(request, metadata=CLIENT_ID, timeout=10)
    assert sent.status.code == definition_pb2.OK, sent.status.message
    cluster.wait_replicated(cluster.last_offset(leader))
    described = _describe(cluster, leader)
    assert (described.delayed_counted, described.delayed_messages) == (True, 1)
    follower = next(i for i in cluster.nodes if i != leader)
    assert not _describe(cluster, follower).delayed_counted  # its wheel is not running
    cluster.crash(leader)
    new = cluster.leader(sorted(cluster.nodes))
    described = _describe(cluster, new)
    assert (described.delayed_counted, described.delayed_messages) == (True, 1)
    assert (
        described.delayed_last_due_ms >= msg.system_properties.delivery_timestamp.ToMilliseconds()
    )
