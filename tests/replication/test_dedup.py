"""Retried sends (same client message id) get the original receipt and are not stored twice.

In-process Raft groups on 127.0.0.1 (``conftest``): a send repeated on the leader, through a
follower, and on the leader elected after the first one crashed (it learnt the id from the
replicated log) each gets the first receipt and leaves one copy, also after a restart; a batch
and a new id are stored as usual. The in-memory map is bounded: ids dropped for room, and ids
indexed before the process started, are looked up in the index files.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.api import dedup
from gannet.node.api.dedup import SendDeduplicator
from gannet.node.store.config import StoreConfig
from gannet.node.store.message_store import MessageStore

from .conftest import Cluster
from .test_cluster import CLIENT_ID, _stub

pytestmark = pytest.mark.timeout(120)
TOPIC = "Dedup"


def _request(message_id: str, body: bytes, *more: str) -> service_pb2.SendMessageRequest:
    messages = []
    for mid in (message_id, *more):
        msg = definition_pb2.Message(body=body)
        msg.topic.name = TOPIC
        msg.system_properties.message_id = mid
        msg.system_properties.body_encoding = definition_pb2.IDENTITY
        messages.append(msg)
    return service_pb2.SendMessageRequest(messages=messages)


def _send(
    cluster: Cluster, node_id: int, message_id: str, body: bytes, *more: str
) -> list[tuple[str, int]]:
    with grpc.insecure_channel(cluster.endpoint(node_id)) as channel:
        reply = _stub(channel).SendMessage(
            _request(message_id, body, *more), metadata=CLIENT_ID, timeout=15
        )
    assert reply.status.code == definition_pb2.OK, reply.status.message
    return [(e.message_id, e.offset) for e in reply.entries]


def _stored(cluster: Cluster, node_id: int) -> list[bytes]:
    """The topic's messages on ``node_id`` once dispatch has written the queue entries of
    everything in its commit log (a send is answered when committed, not when dispatched)."""
    store = cluster.nodes[node_id].broker.store
    assert store.wait_dispatched(store.commitlog.max_offset(), 30.0), "dispatch did not catch up"
    found = []
    for stored in store.get_messages(TOPIC, 0, 0, 100).messages:
        message = store.read_message(stored.commit_offset)
        assert message is not None
        found.append(message.body)
    return found


def _duplicates(cluster: Cluster, node_id: int) -> int:
    messaging = cluster.nodes[node_id].broker.messaging
    assert messaging is not None
    return messaging.dedup.duplicates_total


def test_a_retry_gets_the_original_receipt_on_any_member_and_after_failover(
    cluster: Cluster,
) -> None:
    cluster.start_all()
    old = cluster.leader()
    cluster.create_topic(TOPIC, queues=1)
    follower = next(i for i in cluster.nodes if i != old)
    first = _send(cluster, old, "ID-A", b"a")
    assert _send(cluster, old, "ID-A", b"a") == first
    assert _send(cluster, follower, "ID-A", b"a") == first  # forwarded, then deduplicated
    assert _duplicates(cluster, old) == 2
    second = _send(cluster, old, "ID-B", b"b")
    assert second[0][1] == first[0][1] + 1
    batch = _send(cluster, old, "ID-A", b"batch", "ID-C")  # batches are appended as they come
    assert [offset for _, offset in batch] == [2, 3]
    cluster.crash(old)
    new = cluster.leader(sorted(cluster.nodes))
    assert _send(cluster, new, "ID-B", b"b") == second  # learnt through the replicated log
    assert _duplicates(cluster, new) == 1
    assert _stored(cluster, new) == [b"a", b"b", b"batch", b"batch"]


def test_after_a_restart_the_ids_come_from_the_index(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 1)
    try:
        cluster.start_all()
        leader = cluster.leader()
        cluster.create_topic(TOPIC, queues=1)
        first = _send(cluster, leader, "ID-R", b"r")
        cluster.stop_all()
        cluster.start_all()
        leader = cluster.leader()
        messaging = cluster.nodes[leader].broker.messaging
        assert messaging is not None
        assert messaging.dedup.looks_in_log()  # ids indexed before the start are recent
        assert _send(cluster, leader, "ID-R", b"r") == first
        assert _duplicates(cluster, leader) == 1
        assert _stored(cluster, leader) == [b"r"]
    finally:
        cluster.stop_all()


def test_the_window_map_is_bounded_and_dropped_ids_are_found_in_the_index(
    tmp_path: Path,
) -> None:
    store = MessageStore(StoreConfig.for_tests(tmp_path))
    store.open()
    try:
        dedup = SendDeduplicator(store, window_s=120, entries_max=3)
        from gannet.node.store.log import records

        for i in range(5):
            message = records.Message(topic=TOPIC, body=b"x", properties={"UNIQ_KEY": f"M{i}"})
            store.put_messages_nowait([message], dispatch_inline=True)
        assert dedup.held() == 3
        assert dedup._in_log((TOPIC, "M0")) is not None
        assert dedup._in_log((TOPIC, "unknown")) is None
    finally:
        store.close()


def test_after_a_restart_a_send_born_past_the_margin_skips_the_index(tmp_path: Path) -> None:
    """The born time travels from the request to the deduplicator: a send born after the
    start + the margin is not looked up, one without a born time is."""
    cluster = Cluster(tmp_path, 1)
    try:
        cluster.start_all()
        leader = cluster.leader()
        cluster.create_topic(TOPIC, queues=1)
        _send(cluster, leader, "ID-S", b"s")
        cluster.stop_all()
        cluster.start_all()
        leader = cluster.leader()
        messaging = cluster.nodes[leader].broker.messaging
        assert messaging is not None
        assert messaging.dedup.looks_in_log()
        born_s = messaging.dedup.complete_since_ms() // 1000 + int(dedup.BORN_MARGIN_S) + 2
        request = _request("ID-NEW", b"n")
        request.messages[0].system_properties.born_timestamp.seconds = born_s
        with grpc.insecure_channel(cluster.endpoint(leader)) as channel:
            reply = _stub(channel).SendMessage(request, metadata=CLIENT_ID, timeout=15)
        assert reply.status.code == definition_pb2.OK, reply.status.message
        assert messaging.dedup.log_lookups_total == 0
        _send(cluster, leader, "ID-UNBORN", b"u")
        assert messaging.dedup.log_lookups_total == 1
        assert _stored(cluster, leader) == [b"s", b"n", b"u"]
    finally:
        cluster.stop_all()
