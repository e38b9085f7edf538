"""Conversions between the store's types and ``gannet.admin.v1`` messages.

Pure functions (reads of offsets excepted); called by :mod:`admin`.
"""

from __future__ import annotations

from gannet.node.protocol.gen import admin_pb2
from gannet.node.store import querying, validation
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.topics import MessageType, TopicConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore, StoreStatistics
from gannet.node.store.upkeep.cleaning import CleanPolicy, CleanResult

__all__ = ["MessageType"]

_TYPES_TO_PB = {
    MessageType.NORMAL: admin_pb2.NORMAL,
    MessageType.FIFO: admin_pb2.FIFO,
    MessageType.DELAY: admin_pb2.DELAY,
    MessageType.TRANSACTION: admin_pb2.TRANSACTION,
    MessageType.MIXED: admin_pb2.MIXED,
    MessageType.LITE: admin_pb2.LITE,
    MessageType.PRIORITY: admin_pb2.PRIORITY,
}
_TYPES_FROM_PB: dict[int, MessageType] = {int(pb): kind for kind, pb in _TYPES_TO_PB.items()}


def message_type_of(value: int) -> MessageType | None:
    """The store's message type for a proto value; None for UNSPECIFIED."""
    return _TYPES_FROM_PB.get(value)


def is_internal_topic(name: str) -> bool:
    return (
        validation.is_system_topic(name)
        or validation.is_retry_topic(name)
        or validation.is_dlq_topic(name)
    )


def topic_pb(config: TopicConfig) -> admin_pb2.Topic:
    return admin_pb2.Topic(
        name=config.topic_name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        message_type=_TYPES_TO_PB[config.message_type],
        attributes=dict(config.attributes),
    )


def queue_offsets_pb(store: MessageStore, topic: str, queue_id: int) -> admin_pb2.QueueOffsets:
    return admin_pb2.QueueOffsets(
        queue_id=queue_id,
        min_offset=store.min_offset_in_queue(topic, queue_id),
        max_offset=store.max_offset_in_queue(topic, queue_id),
        earliest_store_time_ms=querying.earliest_store_time(store, topic, queue_id),
    )


def group_pb(config: SubscriptionGroupConfig) -> admin_pb2.Group:
    return admin_pb2.Group(
        name=config.group_name,
        fifo=config.consume_message_orderly,
        retry_max_times=config.retry_max_times,
        consume_enable=config.consume_enable,
        retry_policy=config.group_retry_policy.policy_type,
    )


def group_queue_pb(
    store: MessageStore, group: str, topic: str, queue_id: int
) -> admin_pb2.GroupQueueOffset:
    committed = store.consumer_offsets.query(group, topic, queue_id)
    top = store.max_offset_in_queue(topic, queue_id)
    lag = top - max(committed, store.min_offset_in_queue(topic, queue_id))
    return admin_pb2.GroupQueueOffset(
        topic=topic,
        queue_id=queue_id,
        committed_offset=committed,
        max_offset=top,
        lag=max(lag, 0),
    )


def stored_message_pb(msg: Message) -> admin_pb2.StoredMessage:
    return admin_pb2.StoredMessage(
        topic=msg.topic,
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        commit_offset=msg.physical_offset,
        message_id=msg.uniq_key or "",
        tag=msg.tags or "",
        keys=msg.keys,
        properties=dict(msg.properties),
        body=msg.body,
        born_timestamp_ms=msg.born_timestamp_ms,
        store_timestamp_ms=msg.store_timestamp_ms,
        born_host=f"{msg.born_host[0]}:{msg.born_host[1]}",
        store_size=msg.store_size,
    )


def policy_changes(change: admin_pb2.CleanupPolicyChange) -> dict[str, object]:
    """The CleanPolicy fields a change sets (keyword arguments for ``set_policy``)."""
    names = (
        "file_reserved_hours",
        "delete_when",
        "disk_max_used_ratio_percent",
        "disk_warning_ratio",
        "disk_clean_forcibly_ratio",
    )
    return {name: getattr(change, name) for name in names if change.HasField(name)}


def cleanup_pb(policy: CleanPolicy, last: CleanResult | None) -> admin_pb2.CleanupResponse:
    response = admin_pb2.CleanupResponse(
        policy=admin_pb2.CleanupPolicy(
            file_reserved_hours=policy.file_reserved_hours,
            delete_when=policy.delete_when,
            disk_max_used_ratio_percent=policy.disk_max_used_ratio_percent,
            disk_warning_ratio=policy.disk_warning_ratio,
            disk_clean_forcibly_ratio=policy.disk_clean_forcibly_ratio,
        )
    )
    if last is not None:
        response.last_result.CopyFrom(
            admin_pb2.CleanupResult(
                started_ms=last.started_ms,
                reason=last.reason,
                disk_used_ratio=last.disk_used_ratio,
                commitlog_files_deleted=last.commitlog_files_deleted,
                consume_queue_files_deleted=last.consume_queue_files_deleted,
                index_files_deleted=last.index_files_deleted,
                bytes_freed=last.bytes_freed,
            )
        )
    return response


def statistics_pb(stats: StoreStatistics) -> admin_pb2.StoreStatistics:
    return admin_pb2.StoreStatistics(
        min_offset=stats.min_offset,
        max_offset=stats.max_offset,
        flushed_offset=stats.flushed_offset,
        commit_offset=stats.commit_offset,
        dispatched_offset=stats.dispatched_offset,
        commitlog_files=stats.commitlog_files,
        consume_queues=stats.consume_queues,
        index_files=stats.index_files,
        timer_backlog=stats.timer_backlog,
        last_exit_ok=stats.last_exit_ok,
        disk_full=stats.disk_full,
    )
