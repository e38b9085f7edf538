"""Topic configurations and ``<root>/config/topics.json``, RocketMQ's ``TopicConfigManager``.

On disk (``TopicConfigSerializeWrapper``, written by :mod:`fastjson` as strict JSON)::

    {
        "dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},
        "topicConfigTable":{
            "TopicTest":{
                "attributes":{"message.type":"FIFO"},
                "order":false,
                "perm":6,
                "readQueueNums":4,
                "topicFilterType":"SINGLE_TAG",
                "topicName":"TopicTest",
                "topicSysFlag":0,
                "writeQueueNums":4
            }
        }
    }

Every change bumps ``dataVersion`` and, unless the caller batches with ``persist=False``, is
written at once (write temp, fsync, rotate the old file to ``.bak``, rename). Loading falls back
to ``.bak`` when the main file is missing, empty or unparsable (:func:`fastjson.read_config_file`).
Fields this module does not know are kept and written back, so a file from a newer RocketMQ
survives a round trip.

The message type of a topic is the attribute ``message.type`` (RocketMQ 5 ``TopicAttributes``):
NORMAL, FIFO, DELAY, TRANSACTION or MIXED; a missing attribute means NORMAL. Admin requests name
attributes with a ``+`` (set) or ``-`` (remove) prefix: :func:`apply_attribute_changes`.

Gannet's own attribute ``gannet.tier.remote.retention.s`` (:data:`TIER_REMOTE_RETENTION_ATTRIBUTE`,
whole seconds, ``0`` or more) bounds how long the topic's messages are served from the tier
(``docs/tiered-storage.md`` §6): a record read from the bucket is answered as removed once its
store time is older than that; ``0`` means never served from the tier. Missing: the tier's own
retention only. Local files are not affected.

Called by the broker (auto-create, system topics), the admin service and the replication apply
path. Thread-safe.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gannet.node.store import validation
from gannet.node.store.configs.fastjson import JsonObject, JsonValue
from gannet.node.store.configs.tables import (
    NamedConfigTable,
    json_int,
    json_str,
    json_str_map,
    now_ms,
)
from gannet.node.store.errors import MessageIllegal

TOPICS_FILE_NAME = "topics.json"

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1

QUEUE_NUMS_DEFAULT = 16
QUEUE_NUMS_MAX = 65_535
FILTER_SINGLE_TAG = "SINGLE_TAG"
FILTER_MULTI_TAG = "MULTI_TAG"
MESSAGE_TYPE_ATTRIBUTE = "message.type"
TIER_REMOTE_RETENTION_ATTRIBUTE = "gannet.tier.remote.retention.s"
SETTABLE_ATTRIBUTES = (TIER_REMOTE_RETENTION_ATTRIBUTE,)
"""Attributes the admin API sets by name (``message.type`` has its own field)."""


class MessageType(enum.Enum):
    """``TopicMessageType``: which messages a topic accepts."""

    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"
    LITE = "LITE"
    PRIORITY = "PRIORITY"


_ACCEPTS = {
    MessageType.MIXED: frozenset(
        {MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION}
    )
}


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic (``org.apache.rocketmq.common.TopicConfig``), with RocketMQ's class defaults."""

    topic_name: str
    read_queue_nums: int = QUEUE_NUMS_DEFAULT
    write_queue_nums: int = QUEUE_NUMS_DEFAULT
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = FILTER_SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False)
    extra: Mapping[str, JsonValue] = field(default_factory=dict, hash=False, compare=False)
    """JSON properties this module does not model, written back unchanged."""

    @property
    def message_type(self) -> MessageType:
        """The ``message.type`` attribute; NORMAL when it is missing."""
        value = self.attributes.get(MESSAGE_TYPE_ATTRIBUTE)
        if value is None:
            return MessageType.NORMAL
        return _parse_message_type(value, self.topic_name)

    @property
    def tier_remote_retention_s(self) -> int | None:
        """How long the topic's records are served from the tier (module docstring); None: no
        limit of the topic's own."""
        value = self.attributes.get(TIER_REMOTE_RETENTION_ATTRIBUTE)
        return None if value is None else _parse_retention(value, self.topic_name)

    @property
    def accepted_message_types(self) -> frozenset[MessageType]:
        """What producers may send here (MIXED accepts all four kinds)."""
        kind = self.message_type
        return _ACCEPTS.get(kind, frozenset({kind}))

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def with_message_type(self, kind: MessageType) -> TopicConfig:
        return dataclasses.replace(
            self, attributes={**self.attributes, MESSAGE_TYPE_ATTRIBUTE: kind.value}
        )

    def to_json(self) -> JsonObject:
        document: JsonObject = dict(self.extra)
        document.update(
            {
                "attributes": dict(self.attributes),
                "order": self.order,
                "perm": self.perm,
                "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type,
                "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums,
            }
        )
        return document

    @classmethod
    def from_json(cls, value: JsonValue, name: str) -> TopicConfig:
        """Decode one table entry; ``name`` (its table key) fills a missing ``topicName``."""
        if not isinstance(value, dict):
            raise MessageIllegal(f"topic {name!r}: config is {type(value).__name__}, not object")
        extra = {k: v for k, v in value.items() if k not in _TOPIC_KEYS}
        return cls(
            topic_name=json_str(value.get("topicName"), name),
            read_queue_nums=json_int(value.get("readQueueNums"), QUEUE_NUMS_DEFAULT),
            write_queue_nums=json_int(value.get("writeQueueNums"), QUEUE_NUMS_DEFAULT),
            perm=json_int(value.get("perm"), PERM_READ | PERM_WRITE),
            topic_filter_type=json_str(value.get("topicFilterType"), FILTER_SINGLE_TAG),
            topic_sys_flag=json_int(value.get("topicSysFlag"), 0),
            order=value.get("order") is True,
            attributes=json_str_map(value.get("attributes")),
            extra=extra,
        )

    def check(self) -> None:
        """Raise :class:`MessageIllegal` (or :class:`TopicNameIllegal`) for a bad config."""
        validation.validate_topic(self.topic_name)
        for label, count in (
            ("readQueueNums", self.read_queue_nums),
            ("writeQueueNums", self.write_queue_nums),
        ):
            if not 0 <= count <= QUEUE_NUMS_MAX:
                raise MessageIllegal(
                    f"topic {self.topic_name!r}: {label} is {count}; use 0 to {QUEUE_NUMS_MAX}"
                )
        if not 0 <= self.perm <= (PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT):
            raise MessageIllegal(
                f"topic {self.topic_name!r}: perm is {self.perm}; combine READ=4, WRITE=2, "
                "INHERIT=1, PRIORITY=8"
            )
        if MESSAGE_TYPE_ATTRIBUTE in self.attributes:
            _parse_message_type(self.attributes[MESSAGE_TYPE_ATTRIBUTE], self.topic_name)
        if TIER_REMOTE_RETENTION_ATTRIBUTE in self.attributes:
            _parse_retention(self.attributes[TIER_REMOTE_RETENTION_ATTRIBUTE], self.topic_name)


_TOPIC_KEYS = frozenset(TopicConfig("-").to_json())


def _parse_message_type(value: str, topic: str) -> MessageType:
    try:
        return MessageType(value)
    except ValueError:
        allowed = ", ".join(kind.value for kind in MessageType)
        raise MessageIllegal(
            f"topic {topic!r}: {MESSAGE_TYPE_ATTRIBUTE} is {value!r}; use one of {allowed}"
        ) from None


def _parse_retention(value: str, topic: str) -> int:
    if not value.isascii() or not value.isdigit():
        raise MessageIllegal(
            f"topic {topic!r}: {TIER_REMOTE_RETENTION_ATTRIBUTE} is {value!r}; use whole seconds,"
            " 0 or more (0: never served from the tier)"
        )
    return int(value)


def check_settable(changes: Mapping[str, str]) -> None:
    """Refuse an attribute the admin API does not set by name, naming it and the ones it sets
    (``changes`` keys may carry the ``+``/``-`` prefix of :func:`apply_attribute_changes`)."""
    for key in changes:
        name = key[1:] if key[:1] in ("+", "-") else key
        if name not in SETTABLE_ATTRIBUTES:
            raise MessageIllegal(
                f"topic attribute {name!r} cannot be set here; settable: "
                f"{', '.join(SETTABLE_ATTRIBUTES)} (the message type has its own field)"
            )


def apply_attribute_changes(
    attributes: Mapping[str, str], changes: Mapping[str, str]
) -> dict[str, str]:
    """Apply admin-style changes: ``{"+message.type": "FIFO", "-other": ""}`` set and remove."""
    result = dict(attributes)
    for key, value in changes.items():
        if key.startswith("+") and len(key) > 1:
            result[key[1:]] = value
        elif key.startswith("-") and len(key) > 1:
            result.pop(key[1:], None)
        else:
            raise MessageIllegal(
                f"attribute change {key!r} must start with '+' (set) or '-' (remove)"
            )
    return result


class TopicConfigManager(NamedConfigTable[TopicConfig]):
    """The topic table of one broker and its file ``<config_dir>/topics.json``.

    Invariant: ``_data_version`` changes whenever the table changes; ``_dirty`` is true while
    the file does not hold the current table.
    """

    kind = "topic"
    table_key = "topicConfigTable"

    def __init__(self, config_dir: Path, *, clock_ms: Callable[[], int] = now_ms) -> None:
        super().__init__(config_dir / TOPICS_FILE_NAME, clock_ms)

    def _entry_from_json(self, value: JsonValue, name: str) -> TopicConfig:
        return TopicConfig.from_json(value, name)

    def put(self, config: TopicConfig, *, persist: bool = True) -> None:
        """Create or replace a topic after checking it; bumps the data version.

        With ``persist`` (the default) the file is written before this returns.
        """
        config.check()
        self._put(config.topic_name, config, persist=persist)
