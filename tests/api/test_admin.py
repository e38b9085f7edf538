"""Admin API round trips and the v2 offset RPCs, over a real channel."""

from __future__ import annotations

import grpc
import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.protocol.gen import admin_pb2

from .conftest import settle, unique


def _send(messaging, topic: str, count: int) -> None:
    request = service_pb2.SendMessageRequest()
    for i in range(count):
        msg = request.messages.add(body=b"payload")
        msg.topic.name = topic
        msg.system_properties.message_id = f"0102FC000000013E000B13F97D{i:08X}"
        msg.system_properties.keys.append(f"key-{i}")
    assert messaging.SendMessage(request, timeout=5).status.code == Code.OK


def _status(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code()


def test_topic_crud(admin) -> None:
    name = unique("AdminTopic")
    created = admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=name, queue_nums=2, message_type=admin_pb2.MIXED)
    ).topic
    assert (created.read_queue_nums, created.write_queue_nums, created.perm) == (2, 2, 6)
    assert created.message_type == admin_pb2.MIXED
    duplicate = admin_pb2.CreateTopicRequest(name=name)
    assert _status(lambda: admin.CreateTopic(duplicate)) == grpc.StatusCode.ALREADY_EXISTS
    illegal = admin_pb2.CreateTopicRequest(name="no spaces")
    assert _status(lambda: admin.CreateTopic(illegal)) == grpc.StatusCode.INVALID_ARGUMENT
    updated = admin.UpdateTopic(admin_pb2.UpdateTopicRequest(name=name, queue_nums=4, perm=4)).topic
    assert (updated.write_queue_nums, updated.perm, updated.message_type) == (4, 4, admin_pb2.MIXED)
    names = [t.name for t in admin.ListTopics(admin_pb2.ListTopicsRequest()).topics]
    assert name in names
    assert not any(n.startswith("rmq_sys_") for n in names)
    described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=name))
    assert [q.queue_id for q in described.queues] == [0, 1, 2, 3]
    assert all(q.earliest_store_time_ms == -1 for q in described.queues)
    assert admin.DeleteTopic(admin_pb2.DeleteTopicRequest(name=name)).deleted
    gone = admin_pb2.DescribeTopicRequest(name=name)
    assert _status(lambda: admin.DescribeTopic(gone)) == grpc.StatusCode.NOT_FOUND


def test_topic_tier_retention_attribute_is_set_changed_and_removed(admin) -> None:
    name = unique("TierRetention")
    attribute = "gannet.tier.remote.retention.s"
    created = admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=name, attributes={attribute: "0"})
    ).topic
    assert created.attributes[attribute] == "0"
    changed = admin.UpdateTopic(
        admin_pb2.UpdateTopicRequest(name=name, attribute_changes={f"+{attribute}": "3600"})
    ).topic
    assert changed.attributes[attribute] == "3600"
    assert changed.attributes["message.type"] == "NORMAL"
    bad = admin_pb2.UpdateTopicRequest(name=name, attribute_changes={f"+{attribute}": "1h"})
    assert _status(lambda: admin.UpdateTopic(bad)) == grpc.StatusCode.INVALID_ARGUMENT
    other = admin_pb2.UpdateTopicRequest(name=name, attribute_changes={"+message.type": "FIFO"})
    assert _status(lambda: admin.UpdateTopic(other)) == grpc.StatusCode.INVALID_ARGUMENT
    removed = admin.UpdateTopic(
        admin_pb2.UpdateTopicRequest(name=name, attribute_changes={f"-{attribute}": ""})
    ).topic
    assert attribute not in removed.attributes


def test_read_only_topic_refuses_sends(admin, messaging) -> None:
    name = unique("ReadOnly")
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=name, perm=4))
    request = service_pb2.SendMessageRequest()
    msg = request.messages.add(body=b"x")
    msg.topic.name = name
    msg.system_properties.message_id = "0102FC000000013E000B13F97D00000009"
    reply = messaging.SendMessage(request, timeout=5)
    assert reply.status.code == Code.FORBIDDEN
    route = messaging.QueryRoute(
        service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=name)), timeout=5
    )
    assert {q.permission for q in route.message_queues} == {definition_pb2.READ}


def test_group_offsets_lag_and_reset(broker, admin, messaging, make_topic) -> None:
    topic, group = make_topic(queues=1), unique("AdminGroup")
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group, retry_max_times=3))
    _send(messaging, topic, 5)
    settle(broker)
    queue = definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic), id=0)
    group_res = definition_pb2.Resource(name=group)
    get = service_pb2.GetOffsetRequest(group=group_res, message_queue=queue)
    assert messaging.GetOffset(get, timeout=5).status.code == Code.OFFSET_NOT_FOUND
    update = service_pb2.UpdateOffsetRequest(group=group_res, message_queue=queue, offset=2)
    assert messaging.UpdateOffset(update, timeout=5).status.code == Code.OK
    assert messaging.GetOffset(get, timeout=5).offset == 2
    too_far = service_pb2.UpdateOffsetRequest(group=group_res, message_queue=queue, offset=99)
    assert messaging.UpdateOffset(too_far, timeout=5).status.code == Code.ILLEGAL_OFFSET
    end = service_pb2.QueryOffsetRequest(
        message_queue=queue, query_offset_policy=definition_pb2.END
    )
    assert messaging.QueryOffset(end, timeout=5).offset == 5
    described = admin.DescribeGroup(admin_pb2.DescribeGroupRequest(name=group))
    assert described.group.retry_max_times == 3
    assert [(q.committed_offset, q.lag) for q in described.queues] == [(2, 3)]
    reset = admin.ResetOffset(admin_pb2.ResetOffsetRequest(group=group, topic=topic, offset=0))
    assert [q.committed_offset for q in reset.queues] == [0]
    by_time = admin.ResetOffset(
        admin_pb2.ResetOffsetRequest(group=group, topic=topic, timestamp_ms=2**62)
    )
    assert [q.committed_offset for q in by_time.queues] == [5]
    updated = admin.UpdateGroup(admin_pb2.UpdateGroupRequest(name=group, fifo=True)).group
    assert updated.fifo
    assert group in [g.name for g in admin.ListGroups(admin_pb2.ListGroupsRequest()).groups]
    assert admin.DeleteGroup(admin_pb2.DeleteGroupRequest(name=group)).deleted
    assert messaging.GetOffset(get, timeout=5).status.code == Code.CONSUMER_GROUP_NOT_FOUND


def test_query_message_by_each_criterion(broker, admin, messaging, make_topic) -> None:
    topic = make_topic(queues=1)
    _send(messaging, topic, 3)
    settle(broker)

    def query(**by) -> list[admin_pb2.StoredMessage]:
        request = admin_pb2.QueryMessageRequest(topic=topic, **by)
        return list(admin.QueryMessage(request).messages)

    assert [m.queue_offset for m in query(key="key-1")] == [1]
    assert [m.queue_offset for m in query(message_id="0102FC000000013E000B13F97D00000002")] == [2]
    at = query(queue_offset=admin_pb2.QueueOffsetRef(queue_id=0, offset=0))
    assert [m.message_id for m in at] == ["0102FC000000013E000B13F97D00000000"]
    window = admin_pb2.TimeRange(begin_ms=0, end_ms=2**62)
    assert [m.queue_offset for m in query(time=window, max_count=2)] == [0, 1]
    assert query(key="missing") == []


def test_cleanup_policy_trigger_and_status(admin) -> None:
    change = admin_pb2.CleanupPolicyChange(file_reserved_hours=48, delete_when="03;04")
    reply = admin.Cleanup(admin_pb2.CleanupRequest(change=change, trigger=True))
    assert (reply.policy.file_reserved_hours, reply.policy.delete_when) == (48, "03;04")
    assert reply.last_result.reason == "manual"
    bad = admin_pb2.CleanupRequest(change=admin_pb2.CleanupPolicyChange(file_reserved_hours=-1))
    assert _status(lambda: admin.Cleanup(bad)) == grpc.StatusCode.INVALID_ARGUMENT
    status = admin.GetStatus(admin_pb2.GetStatusRequest())
    assert status.broker_name == "broker-a"
    assert status.flush_mode == "SYNC_FLUSH"
    assert status.store.max_offset >= 0


def test_cleanup_refuses_a_clean_forcibly_ratio_above_the_warning_ratio(admin) -> None:
    """The rule ``gannet broker run`` has always checked holds at the admin API too, against
    the policy the broker has when the change names one ratio only (CleanPolicy.validate)."""
    original = admin.Cleanup(admin_pb2.CleanupRequest()).policy
    pair = admin_pb2.CleanupPolicyChange(disk_clean_forcibly_ratio=0.8, disk_warning_ratio=0.9)
    assert admin.Cleanup(admin_pb2.CleanupRequest(change=pair)).policy.disk_warning_ratio == 0.9
    try:
        for change in (
            admin_pb2.CleanupPolicyChange(disk_clean_forcibly_ratio=0.95),
            admin_pb2.CleanupPolicyChange(disk_clean_forcibly_ratio=0.95, disk_warning_ratio=0.9),
        ):
            with pytest.raises(grpc.RpcError) as caught:
                admin.Cleanup(admin_pb2.CleanupRequest(change=change))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert caught.value.details() == (
                "disk_clean_forcibly_ratio 0.95 is above disk_warning_ratio 0.9; cleanup must "
                "start before writes are refused"
            )
        kept = admin.Cleanup(admin_pb2.CleanupRequest()).policy
        assert (kept.disk_clean_forcibly_ratio, kept.disk_warning_ratio) == (0.8, 0.9)
    finally:
        back = admin_pb2.CleanupPolicyChange(
            disk_clean_forcibly_ratio=original.disk_clean_forcibly_ratio,
            disk_warning_ratio=original.disk_warning_ratio,
        )
        admin.Cleanup(admin_pb2.CleanupRequest(change=back))
