"""A transactional message resent with the same id across a leader change is committed once
(issue 34, fault seed 1002: ``t1-126`` stored twice in ``jt``).

In-process group of three (``conftest``): a half message is sent and committed on the leader;
a second half message of the same id is stored as a resend answered with an error but
committed would be (appended and proposed on the leader, past the send path). The leader
crashes. The new leader learnt from the replicated log that the id is committed: a resend of
it is answered with the first transaction, and committing the second half message writes its
op record only. Every member holds the message once.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.protocol.gen import admin_pb2
from gannet.node.store import properties as props
from gannet.node.transactions import records as tr

from .conftest import Cluster
from .test_cluster import CLIENT_ID, _stub

pytestmark = pytest.mark.timeout(120)
TOPIC = "TxOnce"
MESSAGE_ID = "0102FC000000013E000B13F97D00000134"


def _send_half(cluster: Cluster, node_id: int) -> str:
    msg = definition_pb2.Message(body=b"once")
    msg.topic.name = TOPIC
    msg.system_properties.message_id = MESSAGE_ID
    msg.system_properties.message_type = definition_pb2.TRANSACTION
    msg.system_properties.body_encoding = definition_pb2.IDENTITY
    with grpc.insecure_channel(cluster.endpoint(node_id)) as channel:
        reply = _stub(channel).SendMessage(
            service_pb2.SendMessageRequest(messages=[msg]), metadata=CLIENT_ID, timeout=15
        )
    assert reply.status.code == definition_pb2.OK, reply.status.message
    return str(reply.entries[0].transaction_id)


def _commit(cluster: Cluster, node_id: int, transaction_id: str) -> None:
    request = service_pb2.EndTransactionRequest(
        transaction_id=transaction_id, message_id=MESSAGE_ID, resolution=definition_pb2.COMMIT
    )
    request.topic.name = TOPIC
    with grpc.insecure_channel(cluster.endpoint(node_id)) as channel:
        reply = _stub(channel).EndTransaction(request, metadata=CLIENT_ID, timeout=15)
    assert reply.status.code == definition_pb2.OK, reply.status.message


def _store_second_half(cluster: Cluster, leader: int, transaction_id: str) -> str:
    """Append and propose the half message of ``transaction_id`` again (the other queue)."""
    raft = cluster.raft(leader)
    store = cluster.nodes[leader].broker.store

    async def append() -> int:
        half = store.read_message(tr.parse_transaction_id(transaction_id))
        assert half is not None
        half.properties[props.REAL_QUEUE_ID] = str(1 - int(half.properties[props.REAL_QUEUE_ID]))
        [result], _ = store.put_messages_nowait([half])
        raft.propose_local()
        return result.wrote_offset

    offset: int = cluster.run(leader, append, 5.0)
    cluster.wait_replicated(cluster.last_offset(leader))
    return tr.transaction_id_of(offset)


def _stored(cluster: Cluster, node_id: int) -> int:
    store = cluster.nodes[node_id].broker.store
    assert store.wait_dispatched(store.commitlog.max_offset(), 30.0), "dispatch did not catch up"
    return sum(store.max_offset_in_queue(TOPIC, q) for q in range(2))


def test_a_resent_half_committed_at_a_new_leader_is_stored_once(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3)
    try:
        cluster.start_all()
        old = cluster.leader()
        request = admin_pb2.CreateTopicRequest(
            name=TOPIC, queue_nums=2, message_type=admin_pb2.TRANSACTION
        )
        cluster.admin(old, lambda stub: stub.CreateTopic(request, timeout=10))
        cluster.wait_replicated(cluster.last_offset(old))
        first = _send_half(cluster, old)
        _commit(cluster, old, first)
        second = _store_second_half(cluster, old, first)
        assert second != first
        cluster.crash(old)
        new = cluster.leader()
        _commit(cluster, new, second)  # e.g. a check answer for the second half: no copy
        cluster.wait_replicated(cluster.last_offset(new))
        assert {n: _stored(cluster, n) for n in cluster.nodes} == dict.fromkeys(cluster.nodes, 1)
        assert _send_half(cluster, new) == first  # a resend: the committed transaction
    finally:
        cluster.stop_all()
