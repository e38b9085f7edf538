"""An orphan check reaches a producer whose only Telemetry stream is on a follower.

Only the leader decides that a half message is due for a check and appends the check record;
the record is replicated, and every member, dispatching it, pushes the check to its own
producers of the topic (docs/architecture.md, "Orphan checks ... relayed"). So a producer
connected to a follower alone is asked, answers COMMIT through that follower (forwarded to the
leader), and the message is stored and readable on every member — instead of staying in doubt
until the check limit discards it.

The members applying the check must pass it on whatever their wall clock says: a check
record's store time is the leader's clock, and a member whose clock ran 5-60 s ahead (the
fault harness's ``clock`` nemesis) took every check for an old one and dropped it. The second
case sets the members' clock for checks 30 s ahead (an injected clock, as the harness's clock
shim does to a member's ``time.time``); it fails without the fix.

A real 3-member group in process (real sockets and stores); the producer is a raw gRPC
Telemetry stream (the official clients pick their stream's member themselves, so they cannot
be pinned to a follower), speaking the commands the official clients send.
"""

from __future__ import annotations

import queue
import threading
import time

import grpc
import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api.transactions import TransactionHandler
from gannet.node.protocol.gen import admin_pb2
from gannet.node.transactions import service as transaction_service

from .conftest import WAIT_S, Cluster

CLIENT_ID = (("x-mq-client-id", "tests@1@0@relayed-check"),)
MESSAGE_ID = "0102FC000000013E000B13F97D00000042"
LIMITS = transaction_service.TransactionLimits(
    check_after_ms=300, check_interval_ms=300, check_max=100
)


def _handler(cluster: Cluster, node_id: int) -> TransactionHandler:
    messaging = cluster.nodes[node_id].broker.messaging
    assert messaging is not None
    assert messaging.transactions is not None
    return messaging.transactions


def _half_request(topic: str) -> service_pb2.SendMessageRequest:
    message = definition_pb2.Message(body=b"in doubt")
    message.topic.name = topic
    message.system_properties.message_id = MESSAGE_ID
    message.system_properties.message_type = definition_pb2.TRANSACTION
    message.system_properties.body_encoding = definition_pb2.IDENTITY
    return service_pb2.SendMessageRequest(messages=[message])


@pytest.mark.parametrize("skew_s", [0, 30], ids=["same-clock", "clock-30s-ahead"])
def test_a_check_reaches_a_producer_connected_only_to_a_follower(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, skew_s: int
) -> None:
    if skew_s:
        monkeypatch.setattr(
            transaction_service, "wall_ms", lambda: time.time_ns() // 1_000_000 + skew_s * 1000
        )
    cluster.start_all()
    leader = cluster.leader()
    follower, other = [i for i in cluster.nodes if i != leader]
    topic = "RelayedTx"
    request = admin_pb2.CreateTopicRequest(
        name=topic, queue_nums=1, message_type=admin_pb2.TRANSACTION
    )
    cluster.admin(leader, lambda stub: stub.CreateTopic(request, timeout=10))
    cluster.wait_replicated(cluster.last_offset(leader))
    for node_id in cluster.nodes:
        _handler(cluster, node_id).service.limits = LIMITS

    settings = definition_pb2.Settings(client_type=definition_pb2.PRODUCER)
    settings.publishing.topics.add().name = topic
    outbox: queue.Queue[service_pb2.TelemetryCommand | None] = queue.Queue(16)
    outbox.put(service_pb2.TelemetryCommand(settings=settings))
    commands: queue.Queue[service_pb2.TelemetryCommand] = queue.Queue(64)
    with (
        grpc.insecure_channel(cluster.endpoint(follower)) as follower_channel,
        grpc.insecure_channel(cluster.endpoint(leader)) as leader_channel,
    ):
        on_follower = service_pb2_grpc.MessagingServiceStub(follower_channel)
        stream = on_follower.Telemetry(iter(outbox.get, None), metadata=CLIENT_ID)
        assert next(stream).status.code == Code.OK  # the settings' answer: stream registered

        def read() -> None:
            try:
                for command in stream:
                    commands.put(command)
            except grpc.RpcError:
                pass  # the channel closed at the end of the test

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            on_leader = service_pb2_grpc.MessagingServiceStub(leader_channel)
            sent = on_leader.SendMessage(_half_request(topic), metadata=CLIENT_ID, timeout=10)
            assert sent.status.code == Code.OK, sent.status
            transaction_id = sent.entries[0].transaction_id
            # never ended by the producer: the leader's check must find it on the follower
            try:
                check = commands.get(timeout=WAIT_S)
            except queue.Empty:
                pytest.fail(f"no check reached the producer on follower {follower} in {WAIT_S} s")
            assert check.HasField("recover_orphaned_transaction_command"), check
            asked = check.recover_orphaned_transaction_command
            assert asked.transaction_id == transaction_id
            assert asked.message.system_properties.message_id == MESSAGE_ID
            end = service_pb2.EndTransactionRequest(
                message_id=MESSAGE_ID, transaction_id=transaction_id,
                resolution=definition_pb2.COMMIT, source=definition_pb2.SOURCE_SERVER_CHECK,
            )  # fmt: skip
            end.topic.name = topic
            ended = on_follower.EndTransaction(end, metadata=CLIENT_ID, timeout=10)
            assert ended.status.code == Code.OK, ended.status
        finally:
            outbox.put(None)
    assert _handler(cluster, leader).checks_sent_total == 0  # the leader holds no stream
    assert _handler(cluster, other).checks_sent_total == 0
    assert _handler(cluster, follower).checks_sent_total >= 1
    cluster.wait_replicated(cluster.last_offset(leader))
    for node_id in cluster.nodes:
        store = cluster.nodes[node_id].broker.store
        stored = store.get_messages(topic, 0, 0, 10).messages
        bodies = [m.body for m in (store.read_message(s.commit_offset) for s in stored) if m]
        assert bodies == [b"in doubt"], f"member {node_id}: {bodies}"
