from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MessageType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_TYPE_UNSPECIFIED: _ClassVar[MessageType]
    NORMAL: _ClassVar[MessageType]
    FIFO: _ClassVar[MessageType]
    DELAY: _ClassVar[MessageType]
    TRANSACTION: _ClassVar[MessageType]
    MIXED: _ClassVar[MessageType]
    LITE: _ClassVar[MessageType]
    PRIORITY: _ClassVar[MessageType]
MESSAGE_TYPE_UNSPECIFIED: MessageType
NORMAL: MessageType
FIFO: MessageType
DELAY: MessageType
TRANSACTION: MessageType
MIXED: MessageType
LITE: MessageType
PRIORITY: MessageType

class Topic(_message.Message):
    __slots__ = ("name", "read_queue_nums", "write_queue_nums", "perm", "message_type", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    message_type: MessageType
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., message_type: _Optional[_Union[MessageType, str]] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "queue_nums", "message_type", "perm", "broker_groups", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue_nums: int
    message_type: MessageType
    perm: int
    broker_groups: _containers.RepeatedScalarFieldContainer[str]
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., queue_nums: _Optional[int] = ..., message_type: _Optional[_Union[MessageType, str]] = ..., perm: _Optional[int] = ..., broker_groups: _Optional[_Iterable[str]] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("name", "queue_nums", "message_type", "perm", "attribute_changes")
    class AttributeChangesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTE_CHANGES_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue_nums: int
    message_type: MessageType
    perm: int
    attribute_changes: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., queue_nums: _Optional[int] = ..., message_type: _Optional[_Union[MessageType, str]] = ..., perm: _Optional[int] = ..., attribute_changes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class TopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: bool = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("include_system",)
    INCLUDE_SYSTEM_FIELD_NUMBER: _ClassVar[int]
    include_system: bool
    def __init__(self, include_system: bool = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[Topic, _Mapping]]] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "earliest_store_time_ms")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_STORE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    earliest_store_time_ms: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., earliest_store_time_ms: _Optional[int] = ...) -> None: ...

class DescribeTopicResponse(_message.Message):
    __slots__ = ("topic", "queues", "groups", "delayed_messages", "delayed_last_due_ms", "delayed_counted", "prepared_transactions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    DELAYED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DELAYED_LAST_DUE_MS_FIELD_NUMBER: _ClassVar[int]
    DELAYED_COUNTED_FIELD_NUMBER: _ClassVar[int]
    PREPARED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    groups: _containers.RepeatedScalarFieldContainer[str]
    delayed_messages: int
    delayed_last_due_ms: int
    delayed_counted: bool
    prepared_transactions: int
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ..., groups: _Optional[_Iterable[str]] = ..., delayed_messages: _Optional[int] = ..., delayed_last_due_ms: _Optional[int] = ..., delayed_counted: bool = ..., prepared_transactions: _Optional[int] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("name", "fifo", "retry_max_times", "consume_enable", "retry_policy")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    CONSUME_ENABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    name: str
    fifo: bool
    retry_max_times: int
    consume_enable: bool
    retry_policy: str
    def __init__(self, name: _Optional[str] = ..., fifo: bool = ..., retry_max_times: _Optional[int] = ..., consume_enable: bool = ..., retry_policy: _Optional[str] = ...) -> None: ...

class CreateGroupRequest(_message.Message):
    __slots__ = ("name", "fifo", "retry_max_times")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    name: str
    fifo: bool
    retry_max_times: int
    def __init__(self, name: _Optional[str] = ..., fifo: bool = ..., retry_max_times: _Optional[int] = ...) -> None: ...

class UpdateGroupRequest(_message.Message):
    __slots__ = ("name", "fifo", "retry_max_times", "consume_enable")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    CONSUME_ENABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    fifo: bool
    retry_max_times: int
    consume_enable: bool
    def __init__(self, name: _Optional[str] = ..., fifo: bool = ..., retry_max_times: _Optional[int] = ..., consume_enable: bool = ...) -> None: ...

class GroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[Group]
    def __init__(self, groups: _Optional[_Iterable[_Union[Group, _Mapping]]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GroupQueueOffset(_message.Message):
    __slots__ = ("topic", "queue_id", "committed_offset", "max_offset", "lag", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    committed_offset: int
    max_offset: int
    lag: int
    broker: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., committed_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., lag: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("group", "queues", "total_lag")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    group: Group
    queues: _containers.RepeatedCompositeFieldContainer[GroupQueueOffset]
    total_lag: int
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[GroupQueueOffset, _Mapping]]] = ..., total_lag: _Optional[int] = ...) -> None: ...

class ResetOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "timestamp_ms", "offset", "dry_run")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    timestamp_ms: int
    offset: int
    dry_run: bool
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., offset: _Optional[int] = ..., dry_run: bool = ...) -> None: ...

class ResetOffsetResponse(_message.Message):
    __slots__ = ("queues", "before")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[GroupQueueOffset]
    before: _containers.RepeatedCompositeFieldContainer[GroupQueueOffset]
    def __init__(self, queues: _Optional[_Iterable[_Union[GroupQueueOffset, _Mapping]]] = ..., before: _Optional[_Iterable[_Union[GroupQueueOffset, _Mapping]]] = ...) -> None: ...

class QueueOffsetRef(_message.Message):
    __slots__ = ("queue_id", "offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    offset: int
    def __init__(self, queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class TimeRange(_message.Message):
    __slots__ = ("begin_ms", "end_ms")
    BEGIN_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    begin_ms: int
    end_ms: int
    def __init__(self, begin_ms: _Optional[int] = ..., end_ms: _Optional[int] = ...) -> None: ...

class QueryMessageRequest(_message.Message):
    __slots__ = ("topic", "message_id", "key", "queue_offset", "time", "max_count")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_id: str
    key: str
    queue_offset: QueueOffsetRef
    time: TimeRange
    max_count: int
    def __init__(self, topic: _Optional[str] = ..., message_id: _Optional[str] = ..., key: _Optional[str] = ..., queue_offset: _Optional[_Union[QueueOffsetRef, _Mapping]] = ..., time: _Optional[_Union[TimeRange, _Mapping]] = ..., max_count: _Optional[int] = ...) -> None: ...

class StoredMessage(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset", "commit_offset", "message_id", "tag", "keys", "properties", "body", "born_timestamp_ms", "store_timestamp_ms", "born_host", "store_size")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_SIZE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    commit_offset: int
    message_id: str
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    body: bytes
    born_timestamp_ms: int
    store_timestamp_ms: int
    born_host: str
    store_size: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., commit_offset: _Optional[int] = ..., message_id: _Optional[str] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., body: _Optional[bytes] = ..., born_timestamp_ms: _Optional[int] = ..., store_timestamp_ms: _Optional[int] = ..., born_host: _Optional[str] = ..., store_size: _Optional[int] = ...) -> None: ...

class QueryMessageResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[StoredMessage, _Mapping]]] = ...) -> None: ...

class CleanupPolicy(_message.Message):
    __slots__ = ("file_reserved_hours", "delete_when", "disk_max_used_ratio_percent", "disk_warning_ratio", "disk_clean_forcibly_ratio")
    FILE_RESERVED_HOURS_FIELD_NUMBER: _ClassVar[int]
    DELETE_WHEN_FIELD_NUMBER: _ClassVar[int]
    DISK_MAX_USED_RATIO_PERCENT_FIELD_NUMBER: _ClassVar[int]
    DISK_WARNING_RATIO_FIELD_NUMBER: _ClassVar[int]
    DISK_CLEAN_FORCIBLY_RATIO_FIELD_NUMBER: _ClassVar[int]
    file_reserved_hours: float
    delete_when: str
    disk_max_used_ratio_percent: int
    disk_warning_ratio: float
    disk_clean_forcibly_ratio: float
    def __init__(self, file_reserved_hours: _Optional[float] = ..., delete_when: _Optional[str] = ..., disk_max_used_ratio_percent: _Optional[int] = ..., disk_warning_ratio: _Optional[float] = ..., disk_clean_forcibly_ratio: _Optional[float] = ...) -> None: ...

class CleanupPolicyChange(_message.Message):
    __slots__ = ("file_reserved_hours", "delete_when", "disk_max_used_ratio_percent", "disk_warning_ratio", "disk_clean_forcibly_ratio")
    FILE_RESERVED_HOURS_FIELD_NUMBER: _ClassVar[int]
    DELETE_WHEN_FIELD_NUMBER: _ClassVar[int]
    DISK_MAX_USED_RATIO_PERCENT_FIELD_NUMBER: _ClassVar[int]
    DISK_WARNING_RATIO_FIELD_NUMBER: _ClassVar[int]
    DISK_CLEAN_FORCIBLY_RATIO_FIELD_NUMBER: _ClassVar[int]
    file_reserved_hours: float
    delete_when: str
    disk_max_used_ratio_percent: int
    disk_warning_ratio: float
    disk_clean_forcibly_ratio: float
    def __init__(self, file_reserved_hours: _Optional[float] = ..., delete_when: _Optional[str] = ..., disk_max_used_ratio_percent: _Optional[int] = ..., disk_warning_ratio: _Optional[float] = ..., disk_clean_forcibly_ratio: _Optional[float] = ...) -> None: ...

class CleanupResult(_message.Message):
    __slots__ = ("started_ms", "reason", "disk_used_ratio", "commitlog_files_deleted", "consume_queue_files_deleted", "index_files_deleted", "bytes_freed")
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DISK_USED_RATIO_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_FILES_DELETED_FIELD_NUMBER: _ClassVar[int]
    CONSUME_QUEUE_FILES_DELETED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FILES_DELETED_FIELD_NUMBER: _ClassVar[int]
    BYTES_FREED_FIELD_NUMBER: _ClassVar[int]
    started_ms: int
    reason: str
    disk_used_ratio: float
    commitlog_files_deleted: int
    consume_queue_files_deleted: int
    index_files_deleted: int
    bytes_freed: int
    def __init__(self, started_ms: _Optional[int] = ..., reason: _Optional[str] = ..., disk_used_ratio: _Optional[float] = ..., commitlog_files_deleted: _Optional[int] = ..., consume_queue_files_deleted: _Optional[int] = ..., index_files_deleted: _Optional[int] = ..., bytes_freed: _Optional[int] = ...) -> None: ...

class CleanupRequest(_message.Message):
    __slots__ = ("change", "trigger")
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    change: CleanupPolicyChange
    trigger: bool
    def __init__(self, change: _Optional[_Union[CleanupPolicyChange, _Mapping]] = ..., trigger: bool = ...) -> None: ...

class CleanupResponse(_message.Message):
    __slots__ = ("policy", "last_result")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    LAST_RESULT_FIELD_NUMBER: _ClassVar[int]
    policy: CleanupPolicy
    last_result: CleanupResult
    def __init__(self, policy: _Optional[_Union[CleanupPolicy, _Mapping]] = ..., last_result: _Optional[_Union[CleanupResult, _Mapping]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StoreStatistics(_message.Message):
    __slots__ = ("min_offset", "max_offset", "flushed_offset", "commit_offset", "dispatched_offset", "commitlog_files", "consume_queues", "index_files", "timer_backlog", "last_exit_ok", "disk_full")
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_FILES_FIELD_NUMBER: _ClassVar[int]
    CONSUME_QUEUES_FIELD_NUMBER: _ClassVar[int]
    INDEX_FILES_FIELD_NUMBER: _ClassVar[int]
    TIMER_BACKLOG_FIELD_NUMBER: _ClassVar[int]
    LAST_EXIT_OK_FIELD_NUMBER: _ClassVar[int]
    DISK_FULL_FIELD_NUMBER: _ClassVar[int]
    min_offset: int
    max_offset: int
    flushed_offset: int
    commit_offset: int
    dispatched_offset: int
    commitlog_files: int
    consume_queues: int
    index_files: int
    timer_backlog: int
    last_exit_ok: bool
    disk_full: bool
    def __init__(self, min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., flushed_offset: _Optional[int] = ..., commit_offset: _Optional[int] = ..., dispatched_offset: _Optional[int] = ..., commitlog_files: _Optional[int] = ..., consume_queues: _Optional[int] = ..., index_files: _Optional[int] = ..., timer_backlog: _Optional[int] = ..., last_exit_ok: bool = ..., disk_full: bool = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("broker_name", "cluster_name", "endpoint", "version", "data_dir", "flush_mode", "topics", "groups", "clients", "store")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    FLUSH_MODE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    cluster_name: str
    endpoint: str
    version: str
    data_dir: str
    flush_mode: str
    topics: int
    groups: int
    clients: int
    store: StoreStatistics
    def __init__(self, broker_name: _Optional[str] = ..., cluster_name: _Optional[str] = ..., endpoint: _Optional[str] = ..., version: _Optional[str] = ..., data_dir: _Optional[str] = ..., flush_mode: _Optional[str] = ..., topics: _Optional[int] = ..., groups: _Optional[int] = ..., clients: _Optional[int] = ..., store: _Optional[_Union[StoreStatistics, _Mapping]] = ...) -> None: ...

class GetTierStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TierStatus(_message.Message):
    __slots__ = ("enabled", "endpoint", "bucket", "prefix", "objects", "bytes", "has_objects", "start_offset", "end_offset", "local_start_offset", "leader", "passes_total", "last_success_ms", "failing_reason", "last_error", "failures_total", "gap", "credentials_rejected", "offloaded_files_total", "offloaded_bytes_total", "local_deleted_files_total")
    class FailuresTotalEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    HAS_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOCAL_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    PASSES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LAST_SUCCESS_MS_FIELD_NUMBER: _ClassVar[int]
    FAILING_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILURES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GAP_FIELD_NUMBER: _ClassVar[int]
    CREDENTIALS_REJECTED_FIELD_NUMBER: _ClassVar[int]
    OFFLOADED_FILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    OFFLOADED_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LOCAL_DELETED_FILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    endpoint: str
    bucket: str
    prefix: str
    objects: int
    bytes: int
    has_objects: bool
    start_offset: int
    end_offset: int
    local_start_offset: int
    leader: bool
    passes_total: int
    last_success_ms: int
    failing_reason: str
    last_error: str
    failures_total: _containers.ScalarMap[str, int]
    gap: bool
    credentials_rejected: bool
    offloaded_files_total: int
    offloaded_bytes_total: int
    local_deleted_files_total: int
    def __init__(self, enabled: bool = ..., endpoint: _Optional[str] = ..., bucket: _Optional[str] = ..., prefix: _Optional[str] = ..., objects: _Optional[int] = ..., bytes: _Optional[int] = ..., has_objects: bool = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., local_start_offset: _Optional[int] = ..., leader: bool = ..., passes_total: _Optional[int] = ..., last_success_ms: _Optional[int] = ..., failing_reason: _Optional[str] = ..., last_error: _Optional[str] = ..., failures_total: _Optional[_Mapping[str, int]] = ..., gap: bool = ..., credentials_rejected: bool = ..., offloaded_files_total: _Optional[int] = ..., offloaded_bytes_total: _Optional[int] = ..., local_deleted_files_total: _Optional[int] = ...) -> None: ...

class GetReviveQueuesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetReviveQueueCountRequest(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class ReviveQueue(_message.Message):
    __slots__ = ("queue_id", "draining", "revive_offset", "max_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    REVIVE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    draining: bool
    revive_offset: int
    max_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., draining: bool = ..., revive_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class ReviveQueuesResponse(_message.Message):
    __slots__ = ("active_count", "queues", "parked_messages", "parked_counted")
    ACTIVE_COUNT_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    PARKED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PARKED_COUNTED_FIELD_NUMBER: _ClassVar[int]
    active_count: int
    queues: _containers.RepeatedCompositeFieldContainer[ReviveQueue]
    parked_messages: int
    parked_counted: bool
    def __init__(self, active_count: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[ReviveQueue, _Mapping]]] = ..., parked_messages: _Optional[int] = ..., parked_counted: bool = ...) -> None: ...

class GetRaftStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RaftPeer(_message.Message):
    __slots__ = ("node_id", "peer_endpoint", "client_endpoint", "match_offset", "lag_bytes", "reachable")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    MATCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    peer_endpoint: str
    client_endpoint: str
    match_offset: int
    lag_bytes: int
    reachable: bool
    def __init__(self, node_id: _Optional[str] = ..., peer_endpoint: _Optional[str] = ..., client_endpoint: _Optional[str] = ..., match_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., reachable: bool = ...) -> None: ...

class RaftStatus(_message.Message):
    __slots__ = ("node_id", "role", "term", "leader_id", "leader_client_endpoint", "commit_offset", "last_offset", "durable_offset", "peers", "elections_total", "leader_changes_total")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_CLIENT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DURABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    ELECTIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LEADER_CHANGES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    role: str
    term: int
    leader_id: str
    leader_client_endpoint: str
    commit_offset: int
    last_offset: int
    durable_offset: int
    peers: _containers.RepeatedCompositeFieldContainer[RaftPeer]
    elections_total: int
    leader_changes_total: int
    def __init__(self, node_id: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., leader_id: _Optional[str] = ..., leader_client_endpoint: _Optional[str] = ..., commit_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., durable_offset: _Optional[int] = ..., peers: _Optional[_Iterable[_Union[RaftPeer, _Mapping]]] = ..., elections_total: _Optional[int] = ..., leader_changes_total: _Optional[int] = ...) -> None: ...

class TransferLeadershipRequest(_message.Message):
    __slots__ = ("target_node_id", "timeout_ms")
    TARGET_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    target_node_id: str
    timeout_ms: int
    def __init__(self, target_node_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class TransferLeadershipResponse(_message.Message):
    __slots__ = ("leader_id", "term")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    leader_id: str
    term: int
    def __init__(self, leader_id: _Optional[str] = ..., term: _Optional[int] = ...) -> None: ...

class GetBrokerGroupRequest(_message.Message):
    __slots__ = ("known_topics_version",)
    KNOWN_TOPICS_VERSION_FIELD_NUMBER: _ClassVar[int]
    known_topics_version: str
    def __init__(self, known_topics_version: _Optional[str] = ...) -> None: ...

class RouteTopic(_message.Message):
    __slots__ = ("name", "read_queue_nums", "write_queue_nums", "perm", "message_type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    message_type: str
    def __init__(self, name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., message_type: _Optional[str] = ...) -> None: ...

class BrokerGroup(_message.Message):
    __slots__ = ("broker_name", "cluster_name", "member_endpoints", "leader_endpoint", "topics_version", "topics_included", "topics", "configured_endpoints")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    LEADER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOPICS_INCLUDED_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    cluster_name: str
    member_endpoints: _containers.RepeatedScalarFieldContainer[str]
    leader_endpoint: str
    topics_version: str
    topics_included: bool
    topics: _containers.RepeatedCompositeFieldContainer[RouteTopic]
    configured_endpoints: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, broker_name: _Optional[str] = ..., cluster_name: _Optional[str] = ..., member_endpoints: _Optional[_Iterable[str]] = ..., leader_endpoint: _Optional[str] = ..., topics_version: _Optional[str] = ..., topics_included: bool = ..., topics: _Optional[_Iterable[_Union[RouteTopic, _Mapping]]] = ..., configured_endpoints: _Optional[_Iterable[str]] = ...) -> None: ...

class GetClusterViewRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterGroupState(_message.Message):
    __slots__ = ("group", "local", "age_seconds", "last_error", "topic_count")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    group: BrokerGroup
    local: bool
    age_seconds: float
    last_error: str
    topic_count: int
    def __init__(self, group: _Optional[_Union[BrokerGroup, _Mapping]] = ..., local: bool = ..., age_seconds: _Optional[float] = ..., last_error: _Optional[str] = ..., topic_count: _Optional[int] = ...) -> None: ...

class ClusterView(_message.Message):
    __slots__ = ("groups", "seeds", "poll_interval_seconds")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    POLL_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ClusterGroupState]
    seeds: _containers.RepeatedScalarFieldContainer[str]
    poll_interval_seconds: float
    def __init__(self, groups: _Optional[_Iterable[_Union[ClusterGroupState, _Mapping]]] = ..., seeds: _Optional[_Iterable[str]] = ..., poll_interval_seconds: _Optional[float] = ...) -> None: ...

class SetClusterSeedsRequest(_message.Message):
    __slots__ = ("seeds",)
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    seeds: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, seeds: _Optional[_Iterable[str]] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("node_id", "peer_endpoint", "client_endpoint", "voter", "match_offset", "lag_bytes", "reachable", "leader")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    MATCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    peer_endpoint: str
    client_endpoint: str
    voter: bool
    match_offset: int
    lag_bytes: int
    reachable: bool
    leader: bool
    def __init__(self, node_id: _Optional[str] = ..., peer_endpoint: _Optional[str] = ..., client_endpoint: _Optional[str] = ..., voter: bool = ..., match_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., reachable: bool = ..., leader: bool = ...) -> None: ...

class ListMembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListMembersResponse(_message.Message):
    __slots__ = ("members", "config_offset", "change_in_flight", "leader_id")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CHANGE_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    config_offset: int
    change_in_flight: bool
    leader_id: str
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., config_offset: _Optional[int] = ..., change_in_flight: bool = ..., leader_id: _Optional[str] = ...) -> None: ...

class AddMemberRequest(_message.Message):
    __slots__ = ("node_id", "peer_endpoint", "client_endpoint", "learner_only", "timeout_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    LEARNER_ONLY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    peer_endpoint: str
    client_endpoint: str
    learner_only: bool
    timeout_ms: int
    def __init__(self, node_id: _Optional[str] = ..., peer_endpoint: _Optional[str] = ..., client_endpoint: _Optional[str] = ..., learner_only: bool = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class RemoveMemberRequest(_message.Message):
    __slots__ = ("node_id", "timeout_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    timeout_ms: int
    def __init__(self, node_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class MemberChangeResponse(_message.Message):
    __slots__ = ("members", "config_offset")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    config_offset: int
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., config_offset: _Optional[int] = ...) -> None: ...

class PullRecordsRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "messages_max", "bytes_max", "group", "tag_expression", "polling_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_MAX_FIELD_NUMBER: _ClassVar[int]
    BYTES_MAX_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TAG_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    POLLING_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    messages_max: int
    bytes_max: int
    group: str
    tag_expression: str
    polling_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., messages_max: _Optional[int] = ..., bytes_max: _Optional[int] = ..., group: _Optional[str] = ..., tag_expression: _Optional[str] = ..., polling_ms: _Optional[int] = ...) -> None: ...

class PullRecordsResponse(_message.Message):
    __slots__ = ("records", "count", "next_offset", "min_offset", "max_offset")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    count: int
    next_offset: int
    min_offset: int
    max_offset: int
    def __init__(self, records: _Optional[bytes] = ..., count: _Optional[int] = ..., next_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...
