"""Names and user properties: what the broker accepts, and the names it builds itself.

Topic and group names follow the broker's ``TopicValidator`` (RocketMQ 5):

* not blank (empty or whitespace only);
* characters only from ``[%|a-zA-Z0-9_-]`` — the broker's rule. The Python client's own regex
  ``^[%a-zA-Z0-9_-]+$`` is stricter (no ``|``); the broker accepts what any client may create;
* a topic is at most 127 bytes, or 255 bytes when it starts with ``%RETRY%`` or ``%DLQ%``
  (these embed a group and a topic); the charset is ASCII, so bytes and characters agree;
* a group is at most 120 bytes, so that ``%RETRY%<group>_<topic>`` always fits in 255.
  Older RocketMQ releases allowed 255; pass ``length_max_bytes`` to accept those when loading
  legacy metadata;
* system topics (``TBW102``, ``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``, any ``rmq_sys_`` prefix,
  ...) and system groups (``CID_RMQ_SYS_`` prefix) are valid names, but clients may not use
  them: the v2 front door validates with ``allow_system=False``.

User properties of a sent message follow the v2 proxy (``SendMessageActivity``): at most 128
entries, no key from ``MessageConst.STRING_HASH_SET`` (:data:`RESERVED_PROPERTY_KEYS`) nor the
other system names Gannet reads (:data:`GANNET_RESERVED_PROPERTY_KEYS`), no ISO
control character (U+0000–U+001F, U+007F–U+009F) in a key or value, and at most 16 KiB of UTF-8
in keys, values, the tag and the message keys together.

Errors are :class:`TopicNameIllegal`, :class:`GroupNameIllegal`, :class:`MessageIllegal` and
:class:`PropertiesTooLarge`; each message names the value, the rule it breaks and the fix.
Pure functions; called by the v2 and admin services, the config managers and the Pop path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gannet.node.store import properties as props
from gannet.node.store.errors import (
    GroupNameIllegal,
    MessageIllegal,
    PropertiesTooLarge,
    TopicNameIllegal,
)

NAME_CHARSET = "[%|a-zA-Z0-9_-]"
_NAME_CHARS = frozenset("%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

TOPIC_NAME_BYTES_MAX = 127
RETRY_OR_DLQ_TOPIC_NAME_BYTES_MAX = 255
GROUP_NAME_BYTES_MAX = 120
GROUP_NAME_LEGACY_BYTES_MAX = 255

RETRY_TOPIC_PREFIX = "%RETRY%"
DLQ_TOPIC_PREFIX = "%DLQ%"
RETRY_TOPIC_V1_SEPARATOR = "_"
RETRY_TOPIC_V2_SEPARATOR = "+"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
REVIVE_TOPIC_PREFIX = SYSTEM_TOPIC_PREFIX + "REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"

AUTO_CREATE_TEMPLATE_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC = "BenchmarkTest"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT_TOPIC = "OFFSET_MOVED_EVENT"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
TIMER_TOPIC = SYSTEM_TOPIC_PREFIX + "wheel_timer"

SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TEMPLATE_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT_TOPIC,
        CHECKPOINT_TOPIC,
    }
)
"""``TopicValidator.SYSTEM_TOPIC_SET``; every ``rmq_sys_``-prefixed topic is a system topic too."""

USER_PROPERTIES_COUNT_MAX = 128  # userPropertyMaxNum
USER_PROPERTIES_BYTES_MAX = 16 * 1024  # maxUserPropertySize

RESERVED_PROPERTY_KEYS = frozenset(
    {
        "TRACE_ON",
        "MSG_REGION",
        props.KEYS,
        props.TAGS,
        props.WAIT_STORE_MSG_OK,
        props.DELAY_TIME_LEVEL,
        props.RETRY_TOPIC,
        props.REAL_TOPIC,
        props.REAL_QUEUE_ID,
        props.TRANSACTION_PREPARED,
        props.PRODUCER_GROUP,
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        props.ORIGIN_MESSAGE_ID,
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        props.RECONSUME_TIME,
        props.UNIQ_KEY,
        props.MAX_RECONSUME_TIMES,
        "CONSUME_START_TIME",
        props.POP_CK,
        props.POP_CK_OFFSET,
        props.FIRST_POP_TIME,
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        props.CLUSTER,
        props.MESSAGE_TYPE,
        "INNER_MULTI_QUEUE_OFFSET",
        props.TIMER_DELAY_MS,
        props.TIMER_DELAY_SEC,
        props.TIMER_DELIVER_MS,
        props.TIMER_ENQUEUE_MS,
        props.TIMER_DEQUEUE_MS,
        props.TIMER_ROLL_TIMES,
        props.TIMER_OUT_MS,
        props.TIMER_DEL_UNIQKEY,
        "TIMER_DELAY_LEVEL",
        props.BORN_HOST,
        props.BORN_TIMESTAMP,
        props.DLQ_ORIGIN_TOPIC,
        props.DLQ_ORIGIN_MESSAGE_ID,
        props.CRC32,
    }
)
"""``MessageConst.STRING_HASH_SET`` (51 keys): properties only the broker or client sets."""

GANNET_RESERVED_PROPERTY_KEYS = frozenset(
    {
        props.SHARDING_KEY,  # the message group: would make any message look FIFO
        "__STARTDELIVERTIME",  # a deliver-at time other RocketMQ brokers act on
        "TRACE_CONTEXT",  # system_properties.trace_context
        props.INNER_NUM,
        props.INNER_BASE,
        props.LITE_TOPIC,
        props.PRIORITY,
    }
)
"""System properties outside RocketMQ's set that Gannet (or a broker reading its store)
interprets; refused as user properties too, so a user property is never taken for one."""

_SHOWN_CHARS_MAX = 64


def _shown(value: str) -> str:
    """``value`` quoted for an error message, shortened when long."""
    if len(value) <= _SHOWN_CHARS_MAX:
        return repr(value)
    return repr(value[:_SHOWN_CHARS_MAX]) + f"… ({len(value)} characters)"


def _first_illegal_char(name: str) -> tuple[int, str] | None:
    if _NAME_CHARS.issuperset(name):  # one C call for the usual, valid name
        return None
    for index, char in enumerate(name):
        if char not in _NAME_CHARS:
            return index, char
    return None


def _is_blank(value: str) -> bool:
    return not value or value.isspace()


def _check_name(kind: str, name: str, length_max_bytes: int) -> str | None:
    """Why ``name`` breaks the shared topic/group rules, or None when it does not."""
    if _is_blank(name):
        return f"{kind} name is blank; give a name of 1 to {length_max_bytes} characters"
    illegal = _first_illegal_char(name)
    if illegal is not None:
        index, char = illegal
        return (
            f"{kind} name {_shown(name)} has the illegal character {char!r} (U+{ord(char):04X}) "
            f"at position {index}; use only {NAME_CHARSET}"
        )
    size_bytes = len(name.encode("utf-8"))
    if size_bytes > length_max_bytes:
        return (
            f"{kind} name {_shown(name)} is {size_bytes} bytes; at most {length_max_bytes} "
            "bytes are allowed, use a shorter name"
        )
    return None


def topic_name_bytes_max(name: str) -> int:
    """The length limit that applies to ``name``: 255 for retry/DLQ topics, else 127."""
    if is_retry_topic(name) or is_dlq_topic(name):
        return RETRY_OR_DLQ_TOPIC_NAME_BYTES_MAX
    return TOPIC_NAME_BYTES_MAX


def validate_topic(name: str, *, allow_system: bool = True) -> None:
    """Raise :class:`TopicNameIllegal` unless ``name`` is a valid topic name.

    With ``allow_system=False`` (client requests) system topics are refused as well.
    """
    problem = _check_name("topic", name, topic_name_bytes_max(name))
    if problem is not None:
        raise TopicNameIllegal(problem)
    if not allow_system and is_system_topic(name):
        raise TopicNameIllegal(
            f"topic {_shown(name)} is a system topic (reserved names and the "
            f"{SYSTEM_TOPIC_PREFIX!r} prefix); clients cannot use it, pick another name"
        )


def refuse_reserved_topic(name: str, cluster_name: str, broker_name: str) -> None:
    """Raise :class:`TopicNameIllegal` for a name a user topic may not take.

    Besides the system topics (:func:`validate_topic` with ``allow_system=False``): the
    ``%RETRY%`` and ``%DLQ%`` prefixes (the broker makes those topics for consumer groups; a
    user one would be hidden from listings and mixed into redelivery) and the cluster and broker
    names (RocketMQ routes by them: ``AdminBrokerProcessor`` refuses both). Called by the admin
    API's CreateTopic.
    """
    for prefix in (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX):
        if name.startswith(prefix):
            raise TopicNameIllegal(
                f"topic {_shown(name)} starts with {prefix!r}, which is reserved for the "
                "retry and dead-letter topics the broker makes for consumer groups; pick another "
                "name"
            )
    for what, reserved in (("cluster", cluster_name), ("broker", broker_name)):
        if name == reserved:
            raise TopicNameIllegal(
                f"topic {_shown(name)} is the {what} name; RocketMQ routes by it, pick another name"
            )


def validate_group(
    name: str, *, allow_system: bool = True, length_max_bytes: int = GROUP_NAME_BYTES_MAX
) -> None:
    """Raise :class:`GroupNameIllegal` unless ``name`` is a valid consumer-group name.

    With ``allow_system=False`` (client requests) groups starting with ``CID_RMQ_SYS_`` are
    refused as well.
    """
    problem = _check_name("group", name, length_max_bytes)
    if problem is not None:
        raise GroupNameIllegal(problem)
    if not allow_system and is_system_group(name):
        raise GroupNameIllegal(
            f"group {_shown(name)} starts with {SYSTEM_GROUP_PREFIX!r}, which is reserved for "
            "the broker's own groups; pick another name"
        )


def is_system_topic(name: str) -> bool:
    """``TopicValidator.isSystemTopic``: a reserved name or the ``rmq_sys_`` prefix."""
    return name in SYSTEM_TOPICS or name.startswith(SYSTEM_TOPIC_PREFIX)


def is_system_group(name: str) -> bool:
    return name.startswith(SYSTEM_GROUP_PREFIX)


# --- names the broker builds (KeyBuilder, MixAll, PopAckConstants) ---------------------------


def retry_topic_v1(group: str, topic: str) -> str:
    """Pop retry topic, V1 form: ``%RETRY%<group>_<topic>``."""
    return f"{RETRY_TOPIC_PREFIX}{group}{RETRY_TOPIC_V1_SEPARATOR}{topic}"


def retry_topic_v2(group: str, topic: str) -> str:
    """Pop retry topic, V2 form (``enableRetryTopicV2``): ``%RETRY%<group>+<topic>``."""
    return f"{RETRY_TOPIC_PREFIX}{group}{RETRY_TOPIC_V2_SEPARATOR}{topic}"


def group_retry_topic(group: str) -> str:
    """The group's retry topic for push/pull consumers: ``%RETRY%<group>``."""
    return RETRY_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """The group's dead-letter topic: ``%DLQ%<group>``."""
    return DLQ_TOPIC_PREFIX + group


def revive_topic(cluster: str) -> str:
    """The Pop revive topic of a cluster: ``rmq_sys_REVIVE_LOG_<cluster>``."""
    return REVIVE_TOPIC_PREFIX + cluster


def is_retry_topic(name: str) -> bool:
    return name.startswith(RETRY_TOPIC_PREFIX)


def is_dlq_topic(name: str) -> bool:
    return name.startswith(DLQ_TOPIC_PREFIX)


def original_topic(retry_topic: str, group: str) -> str | None:
    """The topic a Pop retry topic of ``group`` was made for (V1 or V2), or None.

    ``KeyBuilder.parseNormalTopic``: ``%RETRY%<group>_t`` and ``%RETRY%<group>+t`` give ``t``.
    """
    for separator in (RETRY_TOPIC_V2_SEPARATOR, RETRY_TOPIC_V1_SEPARATOR):
        prefix = f"{RETRY_TOPIC_PREFIX}{group}{separator}"
        if retry_topic.startswith(prefix) and len(retry_topic) > len(prefix):
            return retry_topic[len(prefix) :]
    return None


# --- user properties, tag, keys (v2 SendMessage) ---------------------------------------------


def _is_iso_control(char: str) -> bool:
    """Java's ``Character.isISOControl``."""
    code = ord(char)
    return code <= 0x1F or 0x7F <= code <= 0x9F


def _first_control_char(value: str) -> str | None:
    for char in value:
        if _is_iso_control(char):
            return char
    return None


def _refuse_control_char(what: str, value: str) -> None:
    char = _first_control_char(value)
    if char is not None:
        raise MessageIllegal(
            f"{what} {_shown(value)} contains the control character U+{ord(char):04X}; "
            "remove control characters"
        )


def validate_tag(tag: str) -> None:
    """A tag must not be blank, contain ``|`` (the filter separator) or a control character."""
    if _is_blank(tag):
        raise MessageIllegal("message tag is blank; send no tag or a non-blank one")
    if "|" in tag:
        raise MessageIllegal(
            f"message tag {_shown(tag)} contains '|', which separates tags in filters; remove it"
        )
    _refuse_control_char("message tag", tag)


def validate_keys(keys: Iterable[str]) -> None:
    """Each message key must not be blank or contain a control character."""
    for key in keys:
        if _is_blank(key):
            raise MessageIllegal("a message key is blank; drop it or give it text")
        _refuse_control_char("message key", key)


def _check_property_key(key: str) -> None:
    if not key:
        raise MessageIllegal("a user property has an empty key; give every property a name")
    if key in RESERVED_PROPERTY_KEYS or key in GANNET_RESERVED_PROPERTY_KEYS:
        raise MessageIllegal(
            f"user property {_shown(key)} is reserved for the broker's system properties; rename it"
        )
    if key.startswith(props.TRANSIENT_PREFIX):
        raise MessageIllegal(
            f"user property {_shown(key)} starts with {props.TRANSIENT_PREFIX!r}; such "
            "properties are never stored, rename it"
        )
    _refuse_control_char("user property key", key)


def validate_user_properties(
    properties: Mapping[str, str], tag: str | None = None, keys: Iterable[str] = ()
) -> None:
    """Check a message's user properties as the v2 proxy does (see the module docstring).

    Empty values are accepted, but RocketMQ's property decoding drops them on read.
    Raises :class:`PropertiesTooLarge` for the count and size limits, else
    :class:`MessageIllegal`.
    """
    if len(properties) > USER_PROPERTIES_COUNT_MAX:
        raise PropertiesTooLarge(
            f"message has {len(properties)} user properties; at most "
            f"{USER_PROPERTIES_COUNT_MAX} are allowed"
        )
    size_bytes = 0
    for key, value in properties.items():
        _check_property_key(key)
        _refuse_control_char(f"value of user property {_shown(key)}", value)
        size_bytes += len(key.encode("utf-8")) + len(value.encode("utf-8"))
    if tag is not None:
        size_bytes += len(tag.encode("utf-8"))
    size_bytes += sum(len(key.encode("utf-8")) for key in keys)
    if size_bytes > USER_PROPERTIES_BYTES_MAX:
        raise PropertiesTooLarge(
            f"user properties, tag and keys take {size_bytes} bytes; at most "
            f"{USER_PROPERTIES_BYTES_MAX} bytes are allowed, move large data into the body"
        )
