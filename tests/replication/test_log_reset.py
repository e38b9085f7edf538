"""Catch-up below the leader's retention, in a 3-broker in-process group (64 KiB commit-log
files, real sockets on 127.0.0.1).

A member is stopped and its store wiped (or it is cut off, still running); meanwhile the
group writes several files, sets a consumer offset and creates a topic, and the leader's
cleanup deletes every commit-log file but the last. The member rejoins: the leader tells it
to restart at its first file (``ResetLogStart``), it ends byte-identical to the leader from
there, gets the config tables through a fresh snapshot, keeps its reset log over a restart,
and after a leadership transfer serves the topics and offsets.
"""

from __future__ import annotations

import functools
import shutil
import time

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.protocol.gen import admin_pb2
from gannet.node.store.message_store import MessageStore

from .conftest import Cluster
from .test_cluster import CLIENT_ID, _send_all, _stub
from .test_config import _tables

pytestmark = pytest.mark.timeout(150)

YEAR_MS = 365 * 24 * 3_600_000


def _committed(cluster: Cluster, node_id: int, offset: int) -> bool:
    return cluster.commit_offset(node_id) >= offset


def _clean_all_but_the_last_file(store: MessageStore) -> None:
    """Cleanup as if every file were past its reserved time (a run deletes a few at most)."""
    later_ms = time.time_ns() // 1_000_000 + YEAR_MS
    for _ in range(50):
        if len(store.commitlog.files.files) <= 1:
            return
        store.cleaner.run(manual=True, now_ms=later_ms)
    raise AssertionError(f"cleanup left {len(store.commitlog.files.files)} commit-log files")


@pytest.mark.parametrize("how", ["wiped", "partitioned"])
def test_a_member_behind_retention_restarts_at_the_leaders_log_start(
    cluster: Cluster, how: str
) -> None:
    cluster.start_all()
    leader = cluster.leader()
    wiped = next(i for i in cluster.nodes if i != leader)
    topic, group = "ResetTopic", "GReset"
    cluster.create_topic(topic, queues=2)
    cluster.admin(leader, lambda a: a.CreateGroup(admin_pb2.CreateGroupRequest(name=group)))
    if how == "wiped":
        cluster.crash(wiped)
        shutil.rmtree(cluster.root / f"node{wiped}")
    else:
        cluster.raft(wiped).transport.partitioned = True  # keeps running, hears nothing
    bodies = [bytes([i]) * 4000 for i in range(80)]  # about five 64 KiB files
    _send_all(cluster.endpoint(leader), topic, bodies)
    with grpc.insecure_channel(cluster.endpoint(leader)) as channel:
        request = service_pb2.UpdateOffsetRequest(offset=7)
        request.group.name = group
        request.message_queue.topic.name = topic
        request.message_queue.id = 1
        reply = _stub(channel).UpdateOffset(request, metadata=CLIENT_ID, timeout=15)
        assert reply.status.code == definition_pb2.OK, reply.status.message
    cluster.create_topic_on(leader, "ResetAfter", queues=1)
    target = cluster.last_offset(leader)
    for node_id in cluster.nodes:
        if node_id != wiped:
            cluster.wait(node_id, functools.partial(_committed, cluster, node_id, target))
    leader_store = cluster.nodes[leader].broker.store
    _clean_all_but_the_last_file(leader_store)
    start = leader_store.commitlog.min_offset()
    assert start >= 4 * leader_store.config.commitlog_file_size_bytes
    node = cluster.raft(leader)
    cluster.wait(leader, lambda: node.core is not None and node.core.log.start_offset == start)

    if how == "wiped":
        cluster.start(wiped)  # it needs bytes the leader deleted
    else:
        assert cluster.last_offset(wiped) < start
        # An append the leader sent before its cleanup may still be on its way to the member
        # (queued under load): delivered after the heal, it carries the deleted bytes and
        # catches the member up without a reset (tests/raft/test_log_reset.py). What the
        # leader sends after the cleanup is a ResetLogStart, behind such appends on the same
        # ordered lane: heal once one has arrived (and been dropped).
        transport = cluster.raft(wiped).transport
        cluster.wait(wiped, lambda: transport.dropped_while_partitioned["ResetLogStart"] > 0)
        transport.partitioned = False
    end = cluster.last_offset(leader)
    cluster.wait_replicated(end)
    cluster.wait(wiped, lambda: cluster.raft(wiped).state.log_resets_total == 1)
    wiped_store = cluster.nodes[wiped].broker.store
    assert wiped_store.commitlog.min_offset() == start
    end = min(cluster.commit_offset(leader), cluster.commit_offset(wiped))
    assert end > start
    assert cluster.commitlog_bytes(wiped, end - start) == cluster.commitlog_bytes(
        leader, end - start
    ), "the reset member's commit log differs from the leader's"
    # The config tables came with a snapshot appended for the reset member.
    assert _tables(cluster, wiped) == _tables(cluster, leader)
    assert wiped_store.consumer_offsets.query(group, topic, 1) == 7
    assert "ResetAfter" in wiped_store.topic_configs

    # A restart keeps the reset log (and its start term, from raft/log-start): no second reset.
    assert (cluster.root / f"node{wiped}" / "raft" / "log-start").read_text() != ""
    cluster.crash(wiped)
    cluster.start(wiped)
    cluster.wait_replicated(cluster.last_offset(leader))
    assert cluster.raft(wiped).state.log_resets_total == 0
    core = cluster.raft(wiped).core
    assert core is not None
    assert node.core is not None
    assert (core.log.start_offset, core.log.start_term) == (start, node.core.log.start_term)
    cluster.admin(
        leader,
        lambda a: a.TransferLeadership(
            admin_pb2.TransferLeadershipRequest(target_node_id=str(wiped), timeout_ms=10_000),
            timeout=15,
        ),
    )
    assert cluster.leader() == wiped
    _send_all(cluster.endpoint(wiped), topic, [b"on-the-reset-leader"])
    with grpc.insecure_channel(cluster.endpoint(wiped)) as channel:
        request = service_pb2.QueryOffsetRequest(query_offset_policy=definition_pb2.END)
        request.message_queue.topic.name = topic
        request.message_queue.id = 1
        top = _stub(channel).QueryOffset(request, metadata=CLIENT_ID, timeout=10)
        assert top.status.code == definition_pb2.OK, top.status.message
        assert top.offset > 7
        get = service_pb2.GetOffsetRequest()
        get.group.name = group
        get.message_queue.topic.name = topic
        get.message_queue.id = 1
        got = _stub(channel).GetOffset(get, metadata=CLIENT_ID, timeout=10)
        assert got.status.code == definition_pb2.OK, got.status.message
        assert got.offset == 7
    cluster.wait_replicated(cluster.last_offset(wiped))
    assert _tables(cluster, wiped) == _tables(cluster, leader)
