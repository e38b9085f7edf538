"""Replicated configuration: topics, groups and consumer offsets travel through the log.

In-process 3-broker groups on 127.0.0.1 (see ``conftest``): admin writes on the leader (or sent
to a follower, which forwards them) reach every member; a new leader after a crash has every
committed topic, group and offset; a restarted member replays what it missed; a Pop consumer
continues on the new leader without getting acknowledged messages again.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import receiving
from gannet.node.pop.service import PopBroker
from gannet.node.protocol.gen import admin_pb2
from gannet.node.replication import config_log
from gannet.node.store.config import StoreConfig
from gannet.node.store.configs.fastjson import JsonObject
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.order_infos import OrderInfo
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.message_store import MessageStore

from .conftest import Cluster
from .test_cluster import CLIENT_ID, _send_all, _stub

pytestmark = pytest.mark.timeout(120)


def _tables(cluster: Cluster, node_id: int) -> tuple[object, object, object]:
    store = cluster.nodes[node_id].broker.store
    offsets = store.consumer_offsets.table()
    offsets.pop(f"{config_log.CONFIG_TOPIC}@{config_log.APPLIER_GROUP}", None)
    return (
        {t.topic_name: t for t in store.topic_configs.list()},
        {g.group_name: g for g in store.group_configs.list()},
        offsets,
    )


def test_record_format_round_trips_and_names_bad_input() -> None:
    change: JsonObject = {"op": "topic.put", "name": "T", "config": TopicConfig("T").to_json()}
    origin, decoded = config_log.decode_record(config_log.encode_record(change, "1:ab"))
    assert origin == "1:ab"
    assert decoded["op"] == "topic.put"
    assert decoded["name"] == "T"
    with pytest.raises(config_log.ConfigRecordError, match="not JSON"):
        config_log.decode_record(b"{nope")
    with pytest.raises(config_log.ConfigRecordError, match="version 7"):
        config_log.decode_record(json.dumps({"v": 7, "origin": "x", "op": "a"}).encode())
    with pytest.raises(config_log.ConfigRecordError, match="needs an 'op'"):
        config_log.encode_record({"name": "T"}, "1:ab")


def test_admin_writes_on_the_leader_reach_every_member_and_followers_forward(
    cluster: Cluster,
) -> None:
    cluster.start_all()
    leader = cluster.leader()
    follower = next(i for i in cluster.nodes if i != leader)
    cluster.create_topic("CfgTopic", queues=4)
    cluster.admin(
        leader,
        lambda a: a.CreateGroup(
            admin_pb2.CreateGroupRequest(name="CfgGroup", retry_max_times=3), timeout=10
        ),
    )
    cluster.admin(
        leader,
        lambda a: a.UpdateTopic(admin_pb2.UpdateTopicRequest(name="CfgTopic", queue_nums=6)),
    )
    _send_all(cluster.endpoint(leader), "CfgTopic", [b"a", b"b", b"c"])
    cluster.admin(
        leader,
        lambda a: a.ResetOffset(
            admin_pb2.ResetOffsetRequest(group="CfgGroup", topic="CfgTopic", offset=0),
            timeout=10,
        ),
    )
    cluster.wait_replicated(cluster.last_offset(leader))
    expected = _tables(cluster, leader)
    topics, groups, offsets = expected
    assert isinstance(topics, dict)
    assert topics["CfgTopic"].write_queue_nums == 6
    assert isinstance(groups, dict)
    assert groups["CfgGroup"].retry_max_times == 3
    assert isinstance(offsets, dict)
    assert set(offsets["CfgTopic@CfgGroup"]) == set(range(6))
    for node_id in cluster.nodes:
        assert _tables(cluster, node_id) == expected, f"node {node_id} differs"
    # A follower forwards the write to the leader (test_admin_forwarding has the rest).
    cluster.admin(
        follower, lambda a: a.CreateTopic(admin_pb2.CreateTopicRequest(name="Fwd"), timeout=10)
    )
    cluster.admin(leader, lambda a: a.DeleteGroup(admin_pb2.DeleteGroupRequest(name="CfgGroup")))
    cluster.wait_replicated(cluster.last_offset(leader))
    for node_id in cluster.nodes:
        store = cluster.nodes[node_id].broker.store
        assert "CfgGroup" not in store.group_configs
        assert store.consumer_offsets.query_all("CfgGroup", "CfgTopic") == {}
        assert "Fwd" in store.topic_configs


def test_new_leader_has_every_committed_topic_group_and_offset(cluster: Cluster) -> None:
    cluster.start_all()
    old = cluster.leader()
    cluster.create_topic("CfgFail", queues=2)
    cluster.admin(old, lambda a: a.CreateGroup(admin_pb2.CreateGroupRequest(name="GFail")))
    _send_all(cluster.endpoint(old), "CfgFail", [f"m{i}".encode() for i in range(6)])
    with grpc.insecure_channel(cluster.endpoint(old)) as channel:
        request = service_pb2.UpdateOffsetRequest(offset=2)
        request.group.name = "GFail"
        request.message_queue.topic.name = "CfgFail"
        request.message_queue.id = 1
        reply = _stub(channel).UpdateOffset(request, metadata=CLIENT_ID, timeout=10)
        assert reply.status.code == definition_pb2.OK, reply.status.message
    cluster.admin(old, lambda a: a.DeleteTopic(admin_pb2.DeleteTopicRequest(name="CfgFail")))
    cluster.create_topic("CfgFail2", queues=3)  # waits until every member applied it
    expected = _tables(cluster, old)
    cluster.crash(old)
    survivors = sorted(cluster.nodes)
    new = cluster.leader(survivors)
    assert _tables(cluster, new) == expected
    store = cluster.nodes[new].broker.store
    assert "CfgFail" not in store.topic_configs
    assert "GFail" in store.group_configs
    # the new leader takes admin writes and its snapshot leaves the tables as they were
    cluster.create_topic("CfgAfter")
    for node_id in survivors:
        topics, groups, _offsets = _tables(cluster, node_id)
        assert isinstance(topics, dict)
        assert "CfgAfter" in topics
        assert "CfgFail2" in topics
        assert groups == expected[1]
    # the old leader comes back empty-handed of nothing: it replays and converges
    cluster.start(old)
    cluster.wait_replicated(cluster.last_offset(new))
    assert _tables(cluster, old) == _tables(cluster, new)


def test_pop_consumer_continues_on_the_new_leader_without_acknowledged_redeliveries(
    cluster: Cluster,
) -> None:
    cluster.start_all()
    old = cluster.leader()
    topic, group = "CfgPop", "GPop"
    cluster.create_topic(topic, queues=1)
    cluster.admin(old, lambda a: a.CreateGroup(admin_pb2.CreateGroupRequest(name=group)))
    bodies = [f"pop-{i}".encode() for i in range(20)]
    _send_all(cluster.endpoint(old), topic, bodies)
    acked = _receive_and_ack(cluster.endpoint(old), topic, group, count=10)
    assert len(acked) == 10
    # the acks were answered after commit: nothing to wait for before the crash
    cluster.crash(old)
    new = cluster.leader(sorted(cluster.nodes))
    rest = _receive_and_ack(cluster.endpoint(new), topic, group, count=10)
    assert sorted(acked + rest) == sorted(bodies), "lost or repeated after the failover"
    assert not set(acked) & set(rest)


def _receive_and_ack(endpoint: str, topic: str, group: str, count: int) -> list[bytes]:
    """Receive (60 s invisible) and ack until ``count`` messages came or 15 s passed."""
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    got: list[bytes] = []
    try:
        for _ in range(30):
            if len(got) >= count:
                break
            for message in consumer.receive(min(count - len(got), 32), 60) or []:
                consumer.ack(message)
                got.append(bytes(message.body))
    finally:
        consumer.shutdown()
    return got


def test_snapshot_replaces_stray_tables_and_keeps_the_applier_progress(tmp_path: Path) -> None:
    """A deposed leader's stray local change is replaced by the new leader's snapshot."""
    with MessageStore(StoreConfig.for_tests(tmp_path)).open() as store:
        store.topic_configs.put(TopicConfig("Stray"))
        store.consumer_offsets.commit("G", "A", 0, 99)
        store.consumer_offsets.commit(config_log.APPLIER_GROUP, config_log.CONFIG_TOPIC, 0, 7)
        snapshot: JsonObject = {
            "op": "snapshot",
            "topics": {"A": TopicConfig("A", read_queue_nums=2, write_queue_nums=2).to_json()},
            "groups": {"G": SubscriptionGroupConfig("G").to_json()},
            "offsets": {"A@G": {"0": 5, "1": 6}},
        }
        _, change = config_log.decode_record(config_log.encode_record(snapshot, "9:ff"))
        config_log.apply_change(store, change)
        assert [t.topic_name for t in store.topic_configs.list()] == ["A"]
        assert store.topic_configs.get("A") == TopicConfig(
            "A", read_queue_nums=2, write_queue_nums=2
        )
        assert "G" in store.group_configs
        assert store.consumer_offsets.query_all("G", "A") == {0: 5, 1: 6}
        assert (
            store.consumer_offsets.query(config_log.APPLIER_GROUP, config_log.CONFIG_TOPIC, 0) == 7
        )
        with pytest.raises(config_log.ConfigRecordError, match="unknown op 'bogus'"):
            config_log.apply_change(store, {"op": "bogus"})
        with pytest.raises(config_log.ConfigRecordError, match="'offset' is not an integer"):
            config_log.apply_change(
                store, {"op": "offset.commit", "group": "G", "topic": "A", "queue": 0}
            )


def _pop(cluster: Cluster, node_id: int) -> PopBroker:
    handler = cluster.nodes[node_id].broker.messaging
    assert handler is not None
    assert isinstance(handler.pop, receiving.PopHandler)
    return handler.pop.pop


def test_only_the_leader_revives_and_a_new_leader_resumes(tmp_path: Path) -> None:
    limits = receiving.ReceiveLimits(receive_invisible_ms_min=0, polling_ms_min=0)
    cluster = Cluster(tmp_path, 3, pop=receiving.factory(limits))
    try:
        _revive_on_the_leader_only(cluster)
    finally:
        cluster.stop_all()


def _revive_on_the_leader_only(cluster: Cluster) -> None:
    cluster.start_all()
    old = cluster.leader()
    followers = [i for i in cluster.nodes if i != old]
    assert _pop(cluster, old).leading
    assert not any(_pop(cluster, i).leading for i in followers)
    topic, group = "CfgRevive", "GRevive"
    cluster.create_topic(topic, queues=1)
    cluster.admin(old, lambda a: a.CreateGroup(admin_pb2.CreateGroupRequest(name=group)))
    _send_all(cluster.endpoint(old), topic, [b"revive-me"])
    with grpc.insecure_channel(cluster.endpoint(old)) as channel:
        stub = _stub(channel)
        first = _raw_receive(stub, topic, group, invisible_s=1)
        assert first == [b"revive-me"]  # invisible for 1 s, never acked
        again: list[bytes] = []
        for _ in range(20):  # the leader revives it: delivered a second time
            again = _raw_receive(stub, topic, group, invisible_s=60)
            if again:
                break
        assert again == [b"revive-me"]
    end = cluster.nodes[old].broker.store.commitlog.max_offset()
    cluster.wait(old, lambda: cluster.last_offset(old) >= end)
    cluster.wait_replicated(cluster.last_offset(old))
    assert _pop(cluster, old).statistics().revived_total >= 1
    for node_id in followers:
        assert _pop(cluster, node_id).statistics().revived_total == 0
        assert cluster.commitlog_bytes(node_id, end) == cluster.commitlog_bytes(old, end)
    target = followers[0]
    cluster.admin(
        old,
        lambda a: a.TransferLeadership(
            admin_pb2.TransferLeadershipRequest(target_node_id=str(target), timeout_ms=10_000),
            timeout=15,
        ),
    )
    assert cluster.leader() == target
    assert _pop(cluster, target).leading
    assert not _pop(cluster, old).leading


def _raw_receive(
    stub: service_pb2_grpc.MessagingServiceStub, topic: str, group: str, invisible_s: int
) -> list[bytes]:
    """One ReceiveMessage over the wire (the official client refuses invisible times < 10 s)."""
    request = service_pb2.ReceiveMessageRequest(batch_size=1, auto_renew=False)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.filter_expression.type = definition_pb2.TAG
    request.filter_expression.expression = "*"
    request.invisible_duration.seconds = invisible_s
    request.long_polling_timeout.seconds = 1
    bodies = []
    for response in stub.ReceiveMessage(request, metadata=CLIENT_ID, timeout=10):
        if response.WhichOneof("content") == "message":
            bodies.append(bytes(response.message.body))
    return bodies


def test_a_cut_off_leaders_uncommitted_change_is_undone_by_the_new_leaders_snapshot(
    cluster: Cluster,
) -> None:
    cluster.start_all()
    old = cluster.leader()
    cluster.create_topic("CfgKept")
    node = cluster.raft(old)
    store = cluster.nodes[old].broker.store

    async def change_while_cut_off() -> int:
        node.transport.partitioned = True  # from here on nothing reaches the others
        store.topic_configs.put(TopicConfig("CfgStray"))  # applied here, journaled, never committed
        return node.propose_local()

    stray_end = cluster.run(old, change_while_cut_off, 10)
    assert stray_end > cluster.commit_offset(old)
    assert "CfgStray" in store.topic_configs
    others = [i for i in cluster.nodes if i != old]
    new = cluster.leader(others)
    cluster.create_topic_on(new, "CfgAfterCut")
    node.transport.partitioned = False  # heal: the old leader's suffix is cut, snapshot applied
    cluster.wait_replicated(cluster.last_offset(new))
    assert "CfgStray" not in store.topic_configs
    assert _tables(cluster, old) == _tables(cluster, new)
    applied = store.consumer_offsets.query(config_log.APPLIER_GROUP, config_log.CONFIG_TOPIC, 0)
    assert applied == store.max_offset_in_queue(config_log.CONFIG_TOPIC, 0)


def test_replay_from_the_saved_progress_is_idempotent(tmp_path: Path) -> None:
    """Records in the config queue are applied from the applier's saved offset on start; a
    replay from an older offset (offsets file older than the topics file) changes nothing."""
    with MessageStore(StoreConfig.for_tests(tmp_path)).open() as store:
        writer = config_log.ConfigLog(store, 1, lambda: True)
        changes: list[JsonObject] = [
            {"op": "topic.put", "name": "R", "config": TopicConfig("R").to_json()},
            {"op": "group.put", "name": "G", "config": SubscriptionGroupConfig("G").to_json()},
            {"op": "offset.commit", "group": "G", "topic": "R", "queue": 0, "offset": 3},
            {"op": "offset.commit", "group": "G", "topic": "R", "queue": 0, "offset": 7},
            {"op": "topic.delete", "name": "R"},
            {"op": "topic.put", "name": "R", "config": TopicConfig("R", perm=4).to_json()},
        ]
        end = 0
        for change in changes:
            end = writer.append(change)
        assert store.wait_dispatched(end, 10)
        reader = config_log.ConfigLog(store, 2, lambda: False)  # another node's view
        reader.install()
        try:
            first = _store_tables(store)
            assert reader.applied_offset() == len(changes)
            assert store.topic_configs.get("R") == TopicConfig("R", perm=4)
            assert store.consumer_offsets.query("G", "R", 0) == 7
            with store.consumer_offsets.replaying():
                store.consumer_offsets.commit(
                    config_log.APPLIER_GROUP, config_log.CONFIG_TOPIC, 0, 1
                )
            reader.catch_up(store.max_offset_in_queue(config_log.CONFIG_TOPIC, 0))
            assert _store_tables(store) == first
            assert reader.applied_total == 2 * len(changes) - 1
        finally:
            reader.uninstall()


def _store_tables(store: MessageStore) -> tuple[object, ...]:
    offsets = store.consumer_offsets.table()
    offsets.pop(f"{config_log.CONFIG_TOPIC}@{config_log.APPLIER_GROUP}", None)
    return (store.topic_configs.list(), store.group_configs.list(), offsets)


def test_order_infos_travel_as_records_and_in_the_snapshot(tmp_path: Path) -> None:
    """A FIFO batch's lease and ack bits (``order.put`` / ``order.remove``) reach a replica,
    and a new leader's snapshot replaces a stray one; bad records name the problem."""
    info = OrderInfo(pop_time_ms=1_000, invisible_time_ms=60_000, offsets=(4, 5, 6), commit_bits=5)
    with MessageStore(StoreConfig.for_tests(tmp_path)).open() as store:
        put: JsonObject = {"op": "order.put", "key": "A@G", "queue": 0, "info": info.to_json()}
        _, change = config_log.decode_record(config_log.encode_record(put, "9:ff"))
        config_log.apply_change(store, change)
        got = store.order_infos.get("A@G", 0)
        assert got == info
        assert got.next_offset() == 5  # offset 4 and 6 acked
        snapshot = config_log.snapshot_of(store)
        assert snapshot["orders"] == {"A@G": {"0": info.to_json()}}
        config_log.apply_change(store, {"op": "order.remove", "key": "A@G", "queue": 0})
        assert store.order_infos.get("A@G", 0) is None
        store.order_infos.put("Stray@G", 1, info)  # a deposed leader's, never committed
        config_log.apply_change(store, snapshot)
        assert store.order_infos.table_json() == {"A@G": {"0": info.to_json()}}
        with pytest.raises(config_log.ConfigRecordError, match="'info' is not an order info"):
            config_log.apply_change(
                store, {"op": "order.put", "key": "A@G", "queue": 0, "info": {"o": []}}
            )
        assert store.order_infos.persist()
    with MessageStore(StoreConfig.for_tests(tmp_path)).open() as store:  # reloaded from its file
        assert store.order_infos.get("A@G", 0) == info
