"""A 3-broker Raft group in one process: elect, replicate byte for byte, redirect, fail over,
catch up an empty member, cut a divergent suffix. Real files and sockets on 127.0.0.1; the
official ``rocketmq-python-client`` Producer writes."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import routes
from gannet.node.api.forwarding import ForwardStats
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log import records

from .conftest import Cluster

pytestmark = pytest.mark.timeout(120)
CLIENT_ID = (("x-mq-client-id", "tests@1@0@replication"),)


def _producer(endpoint: str, topic: str) -> Producer:
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    producer = Producer(config, (topic,))
    producer.startup()
    return producer


def _message(topic: str, body: bytes) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    return msg


def _send_request(topic: str, body: bytes) -> service_pb2.SendMessageRequest:
    msg = definition_pb2.Message(body=body)
    msg.topic.name = topic
    msg.system_properties.message_id = "0102FC000000013E000B13F97D00000001"
    msg.system_properties.body_encoding = definition_pb2.IDENTITY
    return service_pb2.SendMessageRequest(messages=[msg])


def _stub(channel: grpc.Channel) -> service_pb2_grpc.MessagingServiceStub:
    return service_pb2_grpc.MessagingServiceStub(channel)


def _bodies(cluster: Cluster, node_id: int, topic: str) -> list[bytes]:
    store = cluster.nodes[node_id].broker.store
    found = []
    for queue_id in range(4):
        result = store.get_messages(topic, queue_id, 0, 10_000)
        for stored in result.messages:
            message = store.read_message(stored.commit_offset)
            assert message is not None
            found.append(message.body)
    return sorted(found)


def _send_all(endpoint: str, topic: str, bodies: list[bytes]) -> None:
    producer = _producer(endpoint, topic)
    try:
        for body in bodies:
            producer.send(_message(topic, body))
    finally:
        producer.shutdown()


def forward_stats(cluster: Cluster, node_id: int) -> ForwardStats:
    """What a member's forwarder counted (it forwards what only the leader may do)."""
    messaging = cluster.nodes[node_id].broker.messaging
    assert messaging is not None
    assert messaging.forwarder is not None
    return messaging.forwarder.stats


def _last_offset(cluster: Cluster, node_id: int) -> int:
    core = cluster.raft(node_id).core
    assert core is not None
    return int(core.log.last_offset)


def test_group_elects_replicates_byte_for_byte_and_followers_forward(cluster: Cluster) -> None:
    cluster.start_all()
    leader = cluster.leader()
    follower = next(i for i in cluster.nodes if i != leader)
    topic = "RepBasic"
    cluster.create_topic(topic)
    bodies = [f"m{i}".encode() * (i + 1) for i in range(30)]
    # Through a follower's endpoint: its route names every member, the leader first.
    _send_all(cluster.endpoint(follower), topic, bodies)
    end = _last_offset(cluster, leader)
    cluster.wait_replicated(end)
    logs = {i: cluster.commitlog_bytes(i, end) for i in cluster.nodes}
    assert len(logs[leader]) == end
    assert all(data == logs[leader] for data in logs.values())
    for node_id in cluster.nodes:
        assert _bodies(cluster, node_id, topic) == sorted(bodies)
    leader_port = cluster.peers[leader - 1].client_port
    with grpc.insecure_channel(cluster.endpoint(follower)) as channel:
        stub = _stub(channel)
        published: dict[str, set[tuple[int, ...]]] = {}
        for language in ("PYTHON", "HTTP"):  # the Node.js client says HTTP
            route = stub.QueryRoute(
                service_pb2.QueryRouteRequest(
                    topic=definition_pb2.Resource(name=topic),
                    endpoints=routes.endpoints_of(
                        "127.0.0.1", cluster.peers[follower - 1].client_port
                    ),
                ),
                metadata=(*CLIENT_ID, ("x-mq-language", language)),
                timeout=5,
            )
            assert route.status.code == definition_pb2.OK
            published[language] = {
                tuple(a.port for a in q.broker.endpoints.addresses) for q in route.message_queues
            }
        others = [p.client_port for p in cluster.peers if p.client_port != leader_port]
        assert published["PYTHON"] == {(leader_port, *others)}
        # A client that cannot dial a list of addresses gets the one it used.
        assert published["HTTP"] == {(cluster.peers[follower - 1].client_port,)}
        before = forward_stats(cluster, follower).forwarded_total.get("SendMessage", 0)
        sent = stub.SendMessage(_send_request(topic, b"x"), metadata=CLIENT_ID, timeout=5)
        assert sent.status.code == definition_pb2.OK, sent.status.message
        # The follower forwarded it: the leader appended and committed it for every member.
        assert forward_stats(cluster, follower).forwarded_total["SendMessage"] == before + 1
    cluster.wait_replicated(_last_offset(cluster, leader))
    for node_id in cluster.nodes:
        assert _bodies(cluster, node_id, topic) == sorted([*bodies, b"x"])


def test_leader_crash_elects_another_and_keeps_every_acknowledged_message(
    cluster: Cluster,
) -> None:
    cluster.start_all()
    old = cluster.leader()
    topic = "RepFailover"
    cluster.create_topic(topic)
    acknowledged = [f"before-{i}".encode() for i in range(20)]
    _send_all(cluster.endpoint(old), topic, acknowledged)
    cluster.crash(old)
    survivors = sorted(cluster.nodes)
    new = cluster.leader(survivors)
    assert new != old
    more = [f"after-{i}".encode() for i in range(10)]
    _send_all(cluster.endpoint(new), topic, more)
    end = _last_offset(cluster, new)
    cluster.wait_replicated(end)
    for node_id in survivors:
        assert _bodies(cluster, node_id, topic) == sorted(acknowledged + more)
    assert cluster.commitlog_bytes(survivors[0], end) == cluster.commitlog_bytes(survivors[1], end)


def test_empty_member_catches_up_across_segment_files(cluster: Cluster) -> None:
    for node_id in (1, 2):
        cluster.start(node_id)
    leader = cluster.leader([1, 2])
    topic = "RepCatchUp"
    cluster.create_topic(topic)
    # ~200 KiB: several 64 KiB commit-log files before node 3 exists.
    bodies = [bytes([i % 251]) * 2000 + str(i).encode() for i in range(100)]
    _send_all(cluster.endpoint(leader), topic, bodies)
    cluster.start(3)
    end = _last_offset(cluster, leader)
    assert end > 3 * 64 * 1024
    cluster.wait_replicated(end)
    assert cluster.commitlog_bytes(3, end) == cluster.commitlog_bytes(leader, end)
    assert len(list((cluster.root / "node3" / "commitlog").iterdir())) >= 4


def test_divergent_suffix_of_a_cut_off_leader_is_truncated(cluster: Cluster) -> None:
    cluster.start_all()
    old = cluster.leader()
    topic = "RepDiverge"
    cluster.create_topic(topic)
    _send_all(cluster.endpoint(old), topic, [b"common-1", b"common-2"])
    committed = _last_offset(cluster, old)
    cluster.wait_replicated(committed)
    node = cluster.raft(old)
    store = cluster.nodes[old].broker.store

    async def append_while_cut_off() -> int:
        node.transport.partitioned = True  # from here on nothing reaches the others
        store.put_messages_nowait([records.Message(topic=topic, body=b"lost", queue_id=0)])
        return node.propose_local()

    lost_end = cluster.run(old, append_while_cut_off, 10)
    assert lost_end > committed  # appended, never committed
    others = [i for i in cluster.nodes if i != old]
    new = cluster.leader(others)
    _send_all(cluster.endpoint(new), topic, [b"new-1", b"new-2", b"new-3"])
    node.transport.partitioned = False  # heal
    end = _last_offset(cluster, new)
    cluster.wait_replicated(end)
    assert cluster.commitlog_bytes(old, end) == cluster.commitlog_bytes(new, end)
    expected = sorted([b"common-1", b"common-2", b"new-1", b"new-2", b"new-3"])
    assert _bodies(cluster, old, topic) == expected


def test_raft_status_and_leadership_transfer_over_the_admin_api(cluster: Cluster) -> None:
    cluster.start_all()
    leader = cluster.leader()
    target = next(i for i in cluster.nodes if i != leader)
    cluster.wait(leader, lambda: cluster.commit_offset(leader) > 0)
    with grpc.insecure_channel(cluster.endpoint(leader)) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        status = admin.GetRaftStatus(admin_pb2.GetRaftStatusRequest(), timeout=5)
        assert (status.role, status.node_id, status.leader_id) == (
            "leader",
            str(leader),
            str(leader),
        )
        assert status.term >= 1
        assert status.commit_offset > 0  # the no-op record committed
        assert sorted(p.node_id for p in status.peers) == sorted(
            str(i) for i in cluster.nodes if i != leader
        )
        reply = admin.TransferLeadership(
            admin_pb2.TransferLeadershipRequest(target_node_id=str(target), timeout_ms=10_000),
            timeout=15,
        )
        assert reply.leader_id == str(target)
        with pytest.raises(grpc.RpcError) as refused:
            admin.TransferLeadership(
                admin_pb2.TransferLeadershipRequest(target_node_id="9"), timeout=5
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert cluster.leader() == target
    with grpc.insecure_channel(cluster.endpoint(leader)) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        status = admin.GetRaftStatus(admin_pb2.GetRaftStatusRequest(), timeout=5)
        assert status.role == "follower"
        assert status.leader_id == str(target)
        assert status.leader_client_endpoint == cluster.peers[target - 1].client_endpoint


def test_single_node_broker_reports_a_group_of_one(tmp_path: Path) -> None:
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    running = threads.start(BrokerConfig(store=store, listen_port=0))
    try:
        with grpc.insecure_channel(running.endpoint) as channel:
            admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            status = admin.GetRaftStatus(admin_pb2.GetRaftStatusRequest(), timeout=5)
            assert (status.role, status.leader_id, len(status.peers)) == ("leader", "1", 0)
            with pytest.raises(grpc.RpcError) as refused:
                admin.TransferLeadership(admin_pb2.TransferLeadershipRequest(), timeout=5)
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        running.stop()
