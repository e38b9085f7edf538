"""Every v2 client write on a Raft group is answered after commit, through any member.

In-process 3-broker groups on 127.0.0.1 (see ``conftest``). A consumer offset set with
``UpdateOffset`` and an invisible time changed with ``ChangeInvisibleDuration`` (through a
follower, which forwards them to the leader) are present on the leader elected after it crashes
right after answering; Pop's receive and ack work through a follower; a send through a follower
while the leader has just crashed is held until a new leader takes it, and one that finds no
majority is answered ``HA_NOT_AVAILABLE`` (retried by the clients) before the caller's deadline.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.protocol.gen import admin_pb2

from .conftest import Cluster
from .test_cluster import (
    CLIENT_ID,
    _last_offset,
    _send_all,
    _send_request,
    _stub,
    forward_stats,
)

pytestmark = pytest.mark.timeout(120)


def _update_offset(
    stub: service_pb2_grpc.MessagingServiceStub, group: str, topic: str, queue_id: int, offset: int
) -> definition_pb2.Status:
    request = service_pb2.UpdateOffsetRequest(offset=offset)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.message_queue.id = queue_id
    reply = stub.UpdateOffset(request, metadata=CLIENT_ID, timeout=15)
    return reply.status


def _receive(
    stub: service_pb2_grpc.MessagingServiceStub, topic: str, group: str, invisible_s: int
) -> list[definition_pb2.Message]:
    request = service_pb2.ReceiveMessageRequest(batch_size=1, auto_renew=False)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.filter_expression.type = definition_pb2.TAG
    request.filter_expression.expression = "*"
    request.invisible_duration.seconds = invisible_s
    request.long_polling_timeout.seconds = 1
    return [
        response.message
        for response in stub.ReceiveMessage(request, metadata=CLIENT_ID, timeout=10)
        if response.WhichOneof("content") == "message"
    ]


def _change_invisible(
    stub: service_pb2_grpc.MessagingServiceStub,
    topic: str,
    group: str,
    message: definition_pb2.Message,
    invisible_s: int,
) -> service_pb2.ChangeInvisibleDurationResponse:
    request = service_pb2.ChangeInvisibleDurationRequest(
        receipt_handle=message.system_properties.receipt_handle,
        message_id=message.system_properties.message_id,
    )
    request.group.name = group
    request.topic.name = topic
    request.invisible_duration.seconds = invisible_s
    reply: service_pb2.ChangeInvisibleDurationResponse = stub.ChangeInvisibleDuration(
        request, metadata=CLIENT_ID, timeout=15
    )
    return reply


def _forward_to_dlq(
    stub: service_pb2_grpc.MessagingServiceStub,
    topic: str,
    group: str,
    message: definition_pb2.Message,
) -> definition_pb2.Status:
    request = service_pb2.ForwardMessageToDeadLetterQueueRequest(
        receipt_handle=message.system_properties.receipt_handle,
        message_id=message.system_properties.message_id,
        delivery_attempt=1,
        max_delivery_attempts=16,
    )
    request.group.name = group
    request.topic.name = topic
    reply = stub.ForwardMessageToDeadLetterQueue(request, metadata=CLIENT_ID, timeout=15)
    return reply.status


def _setup(cluster: Cluster, topic: str, group: str, queues: int) -> int:
    cluster.start_all()
    leader = cluster.leader()
    cluster.create_topic(topic, queues=queues)
    cluster.admin(leader, lambda a: a.CreateGroup(admin_pb2.CreateGroupRequest(name=group)))
    return leader


def test_an_offset_just_sent_to_is_accepted_before_its_dispatch(cluster: Cluster) -> None:
    """On a group dispatch follows the commit point, so a send is answered before its message
    is in the consume queue; an offset update up to that message must not be refused as
    beyond the queue (it was, under load: ILLEGAL_OFFSET "outside CwLag/0 (0..3)")."""
    topic, group = "CwLag", "GCwLag"
    leader = _setup(cluster, topic, group, queues=1)
    dispatch = cluster.nodes[leader].broker.store.dispatch
    replies: list[definition_pb2.Status] = []
    with grpc.insecure_channel(cluster.endpoint(leader)) as channel:
        caller = threading.Thread(
            target=lambda: replies.append(_update_offset(_stub(channel), group, topic, 0, 2))
        )
        with dispatch.paused():  # the leader's consume queue stays where it is
            _send_all(cluster.endpoint(leader), topic, [b"one", b"two"])  # both answered OK
            caller.start()
            deadline = time.monotonic() + 15
            # Release dispatch once the update waits for it (or has been answered already).
            while not replies and dispatch._dispatched_waiters == 0:
                assert time.monotonic() < deadline, "the update neither answered nor waited"
                time.sleep(0.01)
        caller.join(timeout=15)
    assert [r.code for r in replies] == [definition_pb2.OK], replies
    assert cluster.nodes[leader].broker.store.consumer_offsets.query(group, topic, 0) == 2


def test_update_offset_commits_before_the_answer_also_through_a_follower(
    cluster: Cluster,
) -> None:
    topic, group = "CwOffset", "GCwOffset"
    old = _setup(cluster, topic, group, queues=1)
    _send_all(cluster.endpoint(old), topic, [f"m{i}".encode() for i in range(5)])
    follower = next(i for i in cluster.nodes if i != old)
    with grpc.insecure_channel(cluster.endpoint(follower)) as channel:
        status = _update_offset(_stub(channel), group, topic, 0, 4)
    assert status.code == definition_pb2.OK, status.message  # forwarded to the leader
    assert cluster.nodes[old].broker.store.consumer_offsets.query(group, topic, 0) == 4
    with grpc.insecure_channel(cluster.endpoint(old)) as channel:
        status = _update_offset(_stub(channel), group, topic, 0, 3)
    assert status.code == definition_pb2.OK, status.message
    cluster.crash(old)  # at once: the answer came after the record committed
    new = cluster.leader(sorted(cluster.nodes))
    assert cluster.nodes[new].broker.store.consumer_offsets.query(group, topic, 0) == 3


def test_changed_invisible_time_and_dlq_through_a_follower_survive_failover(
    cluster: Cluster,
) -> None:
    topic, group = "CwInvisible", "GCwInvisible"
    old = _setup(cluster, topic, group, queues=1)
    _send_all(cluster.endpoint(old), topic, [b"come-back", b"to-dlq"])
    with grpc.insecure_channel(cluster.endpoint(old)) as channel:
        stub = _stub(channel)
        popped = _receive(stub, topic, group, invisible_s=3600)
        popped += _receive(stub, topic, group, invisible_s=3600)
    assert sorted(m.body for m in popped) == [b"come-back", b"to-dlq"]
    back = next(m for m in popped if m.body == b"come-back")
    dead = next(m for m in popped if m.body == b"to-dlq")
    follower = next(i for i in cluster.nodes if i != old)
    with grpc.insecure_channel(cluster.endpoint(follower)) as channel:  # forwarded to the leader
        stub = _stub(channel)
        changed = _change_invisible(stub, topic, group, back, 1)
        assert changed.status.code == definition_pb2.OK, changed.status.message
        forwarded = _forward_to_dlq(stub, topic, group, dead)
        assert forwarded.code == definition_pb2.OK, forwarded.message
    cluster.crash(old)  # at once: both answers came after their records committed
    new = cluster.leader(sorted(cluster.nodes))
    again: list[bytes] = []
    with grpc.insecure_channel(cluster.endpoint(new)) as channel:
        stub = _stub(channel)
        for _ in range(25):  # 1 s invisible now, not an hour: the new leader revives it
            again += [m.body for m in _receive(stub, topic, group, invisible_s=3600)]
            if again:
                break
    assert again == [b"come-back"]
    store = cluster.nodes[new].broker.store
    dlq = f"%DLQ%{group}"
    assert dlq in store.topic_configs
    bodies = []
    for stored in store.get_messages(dlq, 0, 0, 10).messages:
        message = store.read_message(stored.commit_offset)
        assert message is not None
        bodies.append(message.body)
    assert bodies == [b"to-dlq"]


def _send_status(
    stub: service_pb2_grpc.MessagingServiceStub, topic: str, body: bytes, timeout_s: float
) -> definition_pb2.Status:
    return stub.SendMessage(
        _send_request(topic, body), metadata=CLIENT_ID, timeout=timeout_s
    ).status


def test_receive_and_ack_through_a_follower(cluster: Cluster) -> None:
    topic, group = "CwFollowerPop", "GCwFollowerPop"
    leader = _setup(cluster, topic, group, queues=1)
    _send_all(cluster.endpoint(leader), topic, [b"one"])
    follower = next(i for i in cluster.nodes if i != leader)
    with grpc.insecure_channel(cluster.endpoint(follower)) as channel:
        stub = _stub(channel)
        popped = _receive(stub, topic, group, invisible_s=3600)
        assert [m.body for m in popped] == [b"one"]
        request = service_pb2.AckMessageRequest()
        request.group.name = group
        request.topic.name = topic
        entry = request.entries.add()
        entry.message_id = popped[0].system_properties.message_id
        entry.receipt_handle = popped[0].system_properties.receipt_handle
        acked = stub.AckMessage(request, metadata=CLIENT_ID, timeout=10)
        assert acked.status.code == definition_pb2.OK, acked.status.message
        assert [e.status.code for e in acked.entries] == [definition_pb2.OK]
    stats = forward_stats(cluster, follower)
    assert stats.forwarded_total["ReceiveMessage"] >= 1
    assert stats.forwarded_total["AckMessage"] == 1


def _ack(
    stub: service_pb2_grpc.MessagingServiceStub, topic: str, group: str, m: definition_pb2.Message
) -> service_pb2.AckMessageResponse:
    request = service_pb2.AckMessageRequest()
    request.group.name = group
    request.topic.name = topic
    entry = request.entries.add()
    entry.message_id = m.system_properties.message_id
    entry.receipt_handle = m.system_properties.receipt_handle
    return stub.AckMessage(request, metadata=CLIENT_ID, timeout=10)


def test_a_pop_and_its_ack_survive_a_leader_change(cluster: Cluster) -> None:
    """``e2e/faults`` seed 101 and most runs with a leader change: a pop's checkpoint kept in
    the old leader's memory (buffer merge) was lost with its leadership, so the new leader
    handed the message out again during its invisible time, and after an ack it answered OK
    (its ACK record matched no checkpoint in the log, its consumer offset was behind)."""
    topic, group = "CwPopKept", "GCwPopKept"
    old = _setup(cluster, topic, group, queues=1)
    _send_all(cluster.endpoint(old), topic, [b"once"])
    with grpc.insecure_channel(cluster.endpoint(old)) as channel:
        popped = _receive(_stub(channel), topic, group, invisible_s=3600)
    assert [m.body for m in popped] == [b"once"]
    target = next(i for i in cluster.nodes if i != old)
    cluster.admin(
        old,
        lambda a: a.TransferLeadership(
            admin_pb2.TransferLeadershipRequest(target_node_id=str(target), timeout_ms=10_000),
            timeout=15,
        ),
    )
    assert cluster.leader() == target
    with grpc.insecure_channel(cluster.endpoint(target)) as channel:
        stub = _stub(channel)
        assert _receive(stub, topic, group, invisible_s=3600) == []  # still invisible
        acked = _ack(stub, topic, group, popped[0])
        assert acked.status.code == definition_pb2.OK, acked.status.message
        assert _receive(stub, topic, group, invisible_s=3600) == []  # acked


def test_send_through_a_follower_is_held_across_a_leader_crash(cluster: Cluster) -> None:
    topic = "CwHeld"
    # The hold path itself, with the port kept open (no port gate): with the gate, a member
    # that knows no leader for 0.5 s answers HA_NOT_AVAILABLE and closes its port, and an
    # election on a loaded machine can take longer than that (test_port_gate_cluster).
    cluster.leaderless_close_after_s = None
    old = _setup(cluster, topic, "GCwHeld", queues=1)
    follower = next(i for i in cluster.nodes if i != old)
    cluster.crash(old)
    with grpc.insecure_channel(cluster.endpoint(follower)) as channel:
        status = _send_status(_stub(channel), topic, b"held", timeout_s=15)
    assert status.code == definition_pb2.OK, status.message
    new = cluster.leader(sorted(cluster.nodes))
    cluster.wait_replicated(_last_offset(cluster, new))  # answered at commit; dispatch follows
    store = cluster.nodes[new].broker.store
    stored = store.get_messages(topic, 0, 0, 10).messages
    bodies = [m.body for s in stored if (m := store.read_message(s.commit_offset)) is not None]
    assert bodies == [b"held"]


def test_send_without_a_majority_is_answered_retryable_before_the_deadline(
    cluster: Cluster,
) -> None:
    topic = "CwNoMajority"
    # The hold path's answer, with the port kept open (no port gate): with the gate the member
    # answers the same once, then refuses connections (test_port_gate_cluster).
    cluster.leaderless_close_after_s = None
    old = _setup(cluster, topic, "GCwNoMajority", queues=1)
    survivor, other = (i for i in cluster.nodes if i != old)
    cluster.crash(old)
    cluster.crash(other)
    with grpc.insecure_channel(cluster.endpoint(survivor)) as channel:
        status = _send_status(_stub(channel), topic, b"lost", timeout_s=2.5)
    assert status.code == Code.HA_NOT_AVAILABLE, status.message
    assert "retry" in status.message
