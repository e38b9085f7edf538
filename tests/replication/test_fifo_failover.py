"""FIFO Pop across a leader change: a new leader keeps the old leader's leases and acks.

Fault-injection seeds 602-619 (``e2e/faults``): the order info of a FIFO queue (the batch popped,
its lease, the ack bits of its messages) lived only in the leader's memory, so a new leader popped
the queue again at once from the replicated consumer offset — handing out a message whose lease
was live and, behind it, messages already acked. Order infos now go through the Raft log as
config records (``order.put``), committed before the pop or ack is answered.

In process: three brokers on 127.0.0.1 (``conftest``), a FIFO group on a one-queue topic, raw
ReceiveMessage / AckMessage calls (the official client refuses invisible times under 10 s and
hides handles), the leader stopped as SIGKILL would.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.protocol.gen import admin_pb2

from .conftest import Cluster
from .test_cluster import CLIENT_ID, _send_all, _stub

pytestmark = pytest.mark.timeout(120)

TOPIC, GROUP = "FifoFailover", "GFifoFailover"


@dataclass(frozen=True)
class Received:
    body: bytes
    message_id: str
    handle: str


def _receive(endpoint: str, batch: int) -> list[Received]:
    request = service_pb2.ReceiveMessageRequest(batch_size=batch, auto_renew=False)
    request.group.name = GROUP
    request.message_queue.topic.name = TOPIC
    request.filter_expression.type = definition_pb2.TAG
    request.filter_expression.expression = "*"
    request.invisible_duration.seconds = 60
    request.long_polling_timeout.seconds = 1
    got = []
    with grpc.insecure_channel(endpoint) as channel:
        for response in _stub(channel).ReceiveMessage(request, metadata=CLIENT_ID, timeout=10):
            if response.WhichOneof("content") == "message":
                m = response.message
                got.append(
                    Received(
                        bytes(m.body),
                        m.system_properties.message_id,
                        m.system_properties.receipt_handle,
                    )
                )
    return got


def _ack(endpoint: str, received: Received) -> int:
    request = service_pb2.AckMessageRequest()
    request.group.name = GROUP
    request.topic.name = TOPIC
    entry = request.entries.add()
    entry.message_id = received.message_id
    entry.receipt_handle = received.handle
    with grpc.insecure_channel(endpoint) as channel:
        response = _stub(channel).AckMessage(request, metadata=CLIENT_ID, timeout=10)
    return int(response.status.code)


def test_a_new_leader_keeps_the_fifo_lease_and_the_acks_of_the_old_one(
    cluster: Cluster,
) -> None:
    cluster.start_all()
    old = cluster.leader()
    cluster.create_topic(TOPIC, queues=1)
    cluster.admin(old, lambda a: a.CreateGroup(admin_pb2.CreateGroupRequest(name=GROUP, fifo=True)))
    bodies = [f"fifo-{i}".encode() for i in range(6)]
    _send_all(cluster.endpoint(old), TOPIC, bodies)

    first = _receive(cluster.endpoint(old), batch=3)
    assert [r.body for r in first] == bodies[:3]
    ok = definition_pb2.Code.OK
    assert _ack(cluster.endpoint(old), first[0]) == ok
    assert _ack(cluster.endpoint(old), first[2]) == ok  # fifo-1 stays leased, unacked

    cluster.crash(old)  # every answer above came after commit: nothing to wait for
    new = cluster.leader(sorted(cluster.nodes))
    endpoint = cluster.endpoint(new)
    # fifo-1's lease (60 s) is live: the queue is blocked, nothing is handed out
    assert _receive(endpoint, batch=3) == []
    # the old leader's handle is honoured by the new one; fifo-2 stays acked
    assert _ack(endpoint, first[1]) == ok
    rest = _receive(endpoint, batch=8)
    assert [r.body for r in rest] == bodies[3:], "order broken or an acked message redelivered"
