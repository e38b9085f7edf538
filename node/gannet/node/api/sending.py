"""SendMessage: validate a v2 ``SendMessageRequest`` and turn it into store records.

The rules are the v2 proxy's (``docs/protocol.md`` §6), each failure an
:class:`~gannet.node.protocol.statuses.ApiError` whose message names the field:

* zero messages, or messages for different topics → ``MESSAGE_CORRUPTED``; more than
  ``batch_messages_max`` → ``PAYLOAD_TOO_LARGE``;
* topic name → ``ILLEGAL_TOPIC``; unknown topic → ``TOPIC_NOT_FOUND`` (topics are created with
  ``gannet topic create``; auto-creation is off unless the broker enables it); not writable →
  ``FORBIDDEN``;
* body empty / above 4 MiB → ``MESSAGE_BODY_EMPTY`` / ``MESSAGE_BODY_TOO_LARGE``;
* stricter than the proxy (issue 21; each would poison a queue or the record): an encoding
  other than IDENTITY/GZIP, or a ``message_type`` that is no ``MessageType`` → ``BAD_REQUEST``;
  a declared type the fields contradict → ``MESSAGE_PROPERTY_CONFLICT_WITH_TYPE``; a GZIP body
  that does not inflate (gzip or zlib) or a body digest that does not match →
  ``MESSAGE_CORRUPTED``, one inflating past 64 MiB → ``MESSAGE_BODY_TOO_LARGE``; a message id
  over 128 characters or outside printable non-blank ASCII → ``ILLEGAL_MESSAGE_ID``; a tag
  over 256 characters → ``ILLEGAL_MESSAGE_TAG``; a born time outside protobuf's Timestamp
  range → ``BAD_REQUEST`` (the record's field is a long: int64 min/max once failed the append
  after a queue offset was reserved);
* blank message id → ``ILLEGAL_MESSAGE_ID``; tag → ``ILLEGAL_MESSAGE_TAG``; keys →
  ``ILLEGAL_MESSAGE_KEY``; user properties → ``ILLEGAL_MESSAGE_PROPERTY_KEY`` or
  ``MESSAGE_PROPERTIES_TOO_LARGE``; message group (blank, ≥ 64 bytes, control characters) →
  ``ILLEGAL_MESSAGE_GROUP``; delivery time more than a day ahead → ``ILLEGAL_DELIVERY_TIME``;
* the message's type (FIFO when it has a group, DELAY when it has a delivery time, else NORMAL)
  must be one the topic accepts → ``MESSAGE_PROPERTY_CONFLICT_WITH_TYPE``. A transactional
  message (``message_type`` TRANSACTION) is sent alone, without message group or delivery time
  (``BAD_REQUEST`` / ``MESSAGE_PROPERTY_CONFLICT_WITH_TYPE``); :mod:`transactions` stores it as
  a half message. Lite-topic and priority messages need a LITE / PRIORITY topic
  (:mod:`lite_topics`, :mod:`priorities`).

The client's message id is kept as ``UNIQ_KEY`` (it is the id consumers see); the message group
becomes ``__SHARDINGKEY`` and picks the queue by a stable hash; a delivery time becomes
``TIMER_DELIVER_MS`` so the store's timer delivers it. The Python client writes epoch
*milliseconds* into ``Timestamp.seconds``; a seconds value above :data:`SECONDS_THAT_ARE_MS_MIN`
is read as milliseconds.

Pure functions; called by :mod:`messaging`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import socket
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import Encoding, definition_pb2, service_pb2

from gannet.node.api import lite_topics, priorities
from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.store import errors, validation
from gannet.node.store import properties as props
from gannet.node.store.configs.topics import MessageType, TopicConfig
from gannet.node.store.log import records

BODY_SIZE_MAX_BYTES = 4 * 1024 * 1024  # maxMessageSize
BATCH_MESSAGES_MAX = 1024
MESSAGE_GROUP_BYTES_MAX = 64  # maxMessageGroupSize: a group of this size or more is refused
DELAY_MS_MAX = 24 * 3600 * 1000  # maxDelayTimeMills
SECONDS_THAT_ARE_MS_MIN = 100_000_000_000  # year 5138 in seconds, 1973 in milliseconds
TIMESTAMP_SECONDS_MIN = -62_135_596_800  # 0001-01-01T00:00:00Z (protobuf Timestamp range)
TIMESTAMP_SECONDS_MAX = 253_402_300_799  # 9999-12-31T23:59:59Z
TRACE_CONTEXT = "TRACE_CONTEXT"
_GZIP = int(Encoding.GZIP)  # the enum wrapper's attribute lookup is a Python call per use
IP_LITERALS_CACHED_MAX = 4096
MESSAGE_ID_CHARS_MAX = 128
TAG_CHARS_MAX = 256
GZIP_INFLATED_BYTES_MAX = 64 * 1024 * 1024  # the Python consumer's default cache per queue
_INFLATE_STEP_BYTES = 1024 * 1024
_DECLARED_TYPES = {
    int(definition_pb2.NORMAL): MessageType.NORMAL.value,
    int(definition_pb2.FIFO): MessageType.FIFO.value,
    int(definition_pb2.DELAY): MessageType.DELAY.value,
    int(definition_pb2.TRANSACTION): MessageType.TRANSACTION.value,
    int(definition_pb2.LITE): MessageType.LITE.value,
    int(definition_pb2.PRIORITY): MessageType.PRIORITY.value,
}
_KIND_OF = {
    int(definition_pb2.NORMAL): MessageType.NORMAL,
    int(definition_pb2.FIFO): MessageType.FIFO,
    int(definition_pb2.DELAY): MessageType.DELAY,
    int(definition_pb2.TRANSACTION): MessageType.TRANSACTION,
    int(definition_pb2.LITE): MessageType.LITE,
    int(definition_pb2.PRIORITY): MessageType.PRIORITY,
}
_IDENTITY = int(Encoding.IDENTITY)
_NORMAL = int(definition_pb2.NORMAL)
_TRANSACTION = int(definition_pb2.TRANSACTION)
_UNIQ_KEY, _TAGS, _KEYS = props.UNIQ_KEY, props.TAGS, props.KEYS
_ENCODINGS = frozenset({int(Encoding.ENCODING_UNSPECIFIED), int(Encoding.IDENTITY), _GZIP})


@dataclass(frozen=True, slots=True)
class SendLimits:
    body_size_max_bytes: int = BODY_SIZE_MAX_BYTES
    batch_messages_max: int = BATCH_MESSAGES_MAX
    message_group_bytes_max: int = MESSAGE_GROUP_BYTES_MAX
    delay_ms_max: int = DELAY_MS_MAX


DEFAULT_LIMITS = SendLimits()
TopicLookup = Callable[[str], TopicConfig | None]
"""A topic's config by name, None when unknown (may auto-create; see :mod:`messaging`)."""


@dataclass(frozen=True, slots=True)
class PreparedSend:
    """Store records ready to append (all to one queue) and the ids to answer with."""

    topic: TopicConfig
    messages: tuple[records.Message, ...]
    message_ids: tuple[str, ...]
    message_group: str | None
    transactional: bool = False
    priority: int | None = None
    """The highest priority of a PRIORITY batch: it picks the queue (:mod:`priorities`)."""
    queue_id: int | None = None
    """The queue the client chose (remoting clients do); None: the broker chooses."""


class QueueSelector:
    """Round-robin over a topic's write queues (thread-safe, bounded by the counter only)."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def select(self, write_queue_nums: int, message_group: str | None) -> int:
        if message_group is not None:
            return zlib.crc32(message_group.encode("utf-8")) % write_queue_nums
        with self._lock:
            return next(self._counter) % write_queue_nums


def prepare(
    request: service_pb2.SendMessageRequest,
    topic_of: TopicLookup,
    *,
    peer_host: str,
    now_ms: int,
    limits: SendLimits = DEFAULT_LIMITS,
    queue_id: int | None = None,
) -> PreparedSend:
    """Validate the whole request; raise :class:`ApiError` for the first problem found.
    ``queue_id``: the queue the client chose (a remoting client does: :func:`requested_queue_id`),
    None to let the broker choose."""
    messages: Sequence[definition_pb2.Message] = request.messages
    if not messages:
        raise ApiError(statuses.MESSAGE_CORRUPTED, "SendMessageRequest.messages is empty")
    if len(messages) > limits.batch_messages_max:
        raise ApiError(
            statuses.PAYLOAD_TOO_LARGE,
            f"SendMessageRequest has {len(messages)} messages; at most "
            f"{limits.batch_messages_max} per request",
        )
    topic_name = str(messages[0].topic.name)
    if len({m.topic.name for m in messages}) != 1:
        raise ApiError(statuses.MESSAGE_CORRUPTED, "all messages of a batch must share the topic")
    topic = writable_topic(topic_of, topic_name)
    # Parsed from the attributes once per request; a tuple: ``in`` finds an enum member by
    # identity, where a frozenset calls Enum.__hash__ (Python code) for every message.
    accepted = tuple(topic.accepted_message_types)
    converted, id_list, transactional = _convert_all(
        messages, topic, accepted, peer_host, now_ms, limits
    )
    group_key = props.LITE_TOPIC if MessageType.LITE in accepted else props.SHARDING_KEY
    groups = {m.properties.get(group_key) for m in converted}
    group = groups.pop() if len(groups) == 1 else None
    ids = tuple(id_list)  # = each message's UNIQ_KEY
    if transactional and len(messages) > 1:
        raise ApiError(
            statuses.BAD_REQUEST,
            f"a transactional message is sent alone; this request has {len(messages)} messages",
        )
    priority = None
    if MessageType.PRIORITY in accepted:  # only there: this is the hot path
        priority = max((priorities.of(m.properties) or 0) for m in converted)
    if queue_id is not None and not 0 <= queue_id < topic.write_queue_nums:
        raise ApiError(
            statuses.BAD_REQUEST,
            f"queue {queue_id} is not a write queue of topic {topic.topic_name!r} "
            f"(0..{topic.write_queue_nums - 1})",
        )
    return PreparedSend(topic, tuple(converted), ids, group, transactional, priority, queue_id)


QUEUE_ID_HEADER = "x-gannet-queue-id"
"""Call metadata naming the queue a send goes to (or a ReceiveMessage pops, :mod:`receiving`):
a remoting client picks its queue, and the remoting layer passes it on this way so that a
follower's forwarding carries it to the leader."""


def requested_queue_id(metadata: Iterable[tuple[str, str]] | None) -> int | None:
    """The queue named by :data:`QUEUE_ID_HEADER` in ``metadata``; None when absent."""
    for key, value in metadata or ():
        if key == QUEUE_ID_HEADER:
            try:
                return int(value)
            except ValueError:
                raise ApiError(statuses.BAD_REQUEST, f"{QUEUE_ID_HEADER} {value!r}") from None
    return None


COMMIT_OFFSETS_HEADER = "x-gannet-commit-offsets"
"""Call metadata (any value) asking a send's answer to name where each message was stored: each
entry's ``transaction_id`` is then the message's commit-log offset in the transaction-id form
(16 upper-case hex digits; a half message's transaction id already is). The remoting layer asks
for it to answer RocketMQ's *offset message id* (store address + commit-log offset), and a
follower's forwarding carries the header to the leader, which alone knows the offsets."""


def wants_commit_offsets(metadata: Iterable[tuple[str, str]] | None) -> bool:
    """Whether ``metadata`` holds :data:`COMMIT_OFFSETS_HEADER`."""
    return any(key == COMMIT_OFFSETS_HEADER for key, _ in metadata or ())


PRODUCER_GROUP_HEADER = "x-gannet-producer-group"
"""Call metadata naming the producer group of a transactional send (remoting clients name it;
stored as the half message's ``PGROUP``, as RocketMQ does, so a check-back finds the group's
producers after a restart or failover too)."""


def requested_producer_group(metadata: Iterable[tuple[str, str]] | None) -> str | None:
    """The group named by :data:`PRODUCER_GROUP_HEADER` in ``metadata``; None when absent."""
    for key, value in metadata or ():
        if key == PRODUCER_GROUP_HEADER and value:
            check_group_name(value)
            return value
    return None


def writable_topic(topic_of: TopicLookup, name: str) -> TopicConfig:
    """The config of a topic clients may write; ApiError when the name or topic is wrong."""
    check_topic_name(name)
    config = topic_of(name)
    if config is None:
        raise ApiError(statuses.TOPIC_NOT_FOUND, topic_not_found_message(name))
    if not config.writable or config.write_queue_nums <= 0:
        raise ApiError(
            statuses.FORBIDDEN,
            f"topic {name!r} has no writable queue (perm={config.perm}, "
            f"writeQueueNums={config.write_queue_nums}); change it with `gannet topic update`",
        )
    return config


def check_topic_name(name: str) -> None:
    try:
        validation.validate_topic(name, allow_system=False)
    except errors.MessageIllegal as exc:
        raise ApiError(statuses.ILLEGAL_TOPIC, str(exc)) from None


def check_group_name(name: str) -> None:
    """A consumer group name clients may use (no system group), or ILLEGAL_CONSUMER_GROUP."""
    try:
        validation.validate_group(name, allow_system=False)
    except errors.MessageIllegal as exc:
        raise ApiError(statuses.ILLEGAL_CONSUMER_GROUP, str(exc)) from None


def topic_not_found_message(name: str) -> str:
    return (
        f"topic {name!r} does not exist (this broker does not create topics automatically); "
        f"create it with `gannet topic create {name}`"
    )


def _convert_all(
    messages: Sequence[definition_pb2.Message],
    topic: TopicConfig,
    accepted: tuple[MessageType, ...],
    peer_host: str,
    now_ms: int,
    limits: SendLimits,
) -> tuple[list[records.Message], list[str], bool]:
    """Every message of a request checked and converted, in order: the records, their message
    ids and whether one is TRANSACTION. One pass; the common message (NORMAL, IDENTITY, no
    digest, group, delivery time, lite topic or priority) is converted inline with what is
    the same for the whole batch (limits, the topic, the born host's IP) read once. Any other
    message, and any that fails a check, goes through :func:`_convert`, which raises the
    error; the inline path is :func:`_convert` for the messages it takes (tests pin it)."""
    body_max = limits.body_size_max_bytes
    topic_name = topic.topic_name
    inline = MessageType.NORMAL in accepted
    message_class = records.Message
    converted: list[records.Message] = []
    ids: list[str] = []
    transactional = False
    last_born_host, last_born_ip = "", ""
    for pb in messages:
        sp = pb.system_properties
        body = pb.body
        declared = sp.message_type
        message_id = sp.message_id
        if (
            not inline
            or not 0 <= declared <= _NORMAL  # enums are open: a negative one is refused
            or not body
            or len(body) > body_max
            or not 0 <= sp.body_encoding <= _IDENTITY
            or not 0 < len(message_id) <= MESSAGE_ID_CHARS_MAX
            or not message_id.isascii()
            or not message_id.isprintable()
            or " " in message_id
            or sp.HasField("body_digest")
            or sp.HasField("lite_topic")
            or sp.HasField("priority")
            or sp.HasField("message_group")
            or sp.HasField("delivery_timestamp")
        ):
            message = _convert(pb, topic, accepted, peer_host, now_ms, limits)
            converted.append(message)
            ids.append(message.properties[props.UNIQ_KEY])
            transactional = transactional or declared == _TRANSACTION
            continue
        tag = sp.tag if sp.HasField("tag") else None
        key_field, user_field = sp.keys, pb.user_properties
        keys = list(key_field) if key_field else []
        properties = dict(user_field) if user_field else {}
        if tag is not None or keys or properties:
            if tag is not None and len(tag) > TAG_CHARS_MAX:
                _convert(pb, topic, accepted, peer_host, now_ms, limits)  # raises
            _check_tag_keys_properties(tag, keys, properties)
        properties[_UNIQ_KEY] = message_id
        if tag is not None:
            properties[_TAGS] = tag
        if keys:
            properties[_KEYS] = props.KEY_SEPARATOR.join(keys)
        if sp.HasField("trace_context"):
            properties[TRACE_CONTEXT] = sp.trace_context
        born_ms = 0
        if sp.HasField("born_timestamp"):
            born = sp.born_timestamp
            seconds, nanos = born.seconds, born.nanos
            if not (
                TIMESTAMP_SECONDS_MIN <= seconds <= TIMESTAMP_SECONDS_MAX
                and 0 <= nanos < 1_000_000_000
            ):
                _born_ms(born)  # raises BAD_REQUEST
            born_ms = seconds * 1000 + nanos // 1_000_000
        born_host = sp.born_host
        if born_host != last_born_host or not last_born_ip:
            last_born_host, last_born_ip = born_host, _born_ip(born_host, peer_host)
        converted.append(
            message_class(topic_name, body, 0, 0, properties, 0, born_ms, (last_born_ip, 0))
        )
        ids.append(message_id)
    return converted, ids, transactional


def _convert(
    pb: definition_pb2.Message,
    topic: TopicConfig,
    accepted: tuple[MessageType, ...],
    peer_host: str,
    now_ms: int,
    limits: SendLimits,
) -> records.Message:
    """One message checked and converted. The checks run in the order of the module docstring;
    each protobuf field is read once (a read costs about as much as a small Python call), and
    empty repeated fields and maps are not walked."""
    sp = pb.system_properties
    body = bytes(pb.body)
    _check_body(body, limits)
    encoding = _check_encoding_and_digest(sp, body)
    message_id = str(sp.message_id)
    _check_message_id(message_id)
    tag = str(sp.tag) if sp.HasField("tag") else None
    if tag is not None and len(tag) > TAG_CHARS_MAX:
        raise ApiError(
            statuses.ILLEGAL_MESSAGE_TAG,
            f"system_properties.tag is {len(tag)} characters; at most {TAG_CHARS_MAX}",
        )
    key_field, user_field = sp.keys, pb.user_properties
    keys = [str(k) for k in key_field] if key_field else []
    user = {str(k): str(v) for k, v in user_field.items()} if user_field else {}
    if tag is not None or keys or user:
        _check_tag_keys_properties(tag, keys, user)
    properties = user  # a fresh dict
    properties[props.UNIQ_KEY] = message_id
    if tag is not None:
        properties[props.TAGS] = tag
    if keys:
        properties[props.KEYS] = props.KEY_SEPARATOR.join(keys)
    kind = _kind_and_special_properties(sp, properties, now_ms, limits)
    declared = sp.message_type
    if declared != definition_pb2.MESSAGE_TYPE_UNSPECIFIED and _KIND_OF.get(declared) is not kind:
        _check_declared_type(declared, kind)  # raises with the field names
    if kind not in accepted:
        _refuse_kind(kind, topic)
    if sp.HasField("trace_context"):
        properties[TRACE_CONTEXT] = str(sp.trace_context)
    born_ms = 0
    if sp.HasField("born_timestamp"):
        born = sp.born_timestamp
        seconds, nanos = born.seconds, born.nanos
        if TIMESTAMP_SECONDS_MIN <= seconds <= TIMESTAMP_SECONDS_MAX and 0 <= nanos < 1_000_000_000:
            born_ms = seconds * 1000 + nanos // 1_000_000
        else:
            born_ms = _born_ms(born)  # raises BAD_REQUEST
    return records.Message(
        topic=topic.topic_name,
        body=body,
        properties=properties,
        sys_flag=records.SYSFLAG_COMPRESSED if encoding == _GZIP else 0,
        born_timestamp_ms=born_ms,
        born_host=(_born_ip(str(sp.born_host), peer_host), 0),
    )


def _check_body(body: bytes, limits: SendLimits) -> None:
    if not body:
        raise ApiError(statuses.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(body) > limits.body_size_max_bytes:
        raise ApiError(
            statuses.MESSAGE_BODY_TOO_LARGE,
            f"message body is {len(body)} bytes; at most {limits.body_size_max_bytes} are allowed",
        )


def _check_message_id(message_id: str) -> None:
    """1 to 128 printable ASCII characters without blanks: ids are hex (34 characters from the
    official clients), and a control character would corrupt the record's property text."""
    if (
        0 < len(message_id) <= MESSAGE_ID_CHARS_MAX
        and message_id.isascii()
        and message_id.isprintable()
        and " " not in message_id
    ):
        return  # the common case, in C
    if not message_id.strip():
        raise ApiError(statuses.ILLEGAL_MESSAGE_ID, "system_properties.message_id is blank")
    if len(message_id) > MESSAGE_ID_CHARS_MAX:
        raise ApiError(
            statuses.ILLEGAL_MESSAGE_ID,
            f"system_properties.message_id is {len(message_id)} characters; at most "
            f"{MESSAGE_ID_CHARS_MAX}",
        )
    for index, char in enumerate(message_id):
        if not "!" <= char <= "~":
            raise ApiError(
                statuses.ILLEGAL_MESSAGE_ID,
                f"system_properties.message_id has the character U+{ord(char):04X} at position "
                f"{index}; only printable ASCII without blanks is allowed",
            )


def _check_encoding_and_digest(sp: definition_pb2.SystemProperties, body: bytes) -> int:
    """``body_encoding`` IDENTITY/GZIP (unset means IDENTITY); a GZIP body must inflate (gzip
    or zlib, as the official clients decode it) to at most :data:`GZIP_INFLATED_BYTES_MAX`;
    a ``body_digest``, when sent, must name a known algorithm and match the body. Returns the
    encoding."""
    encoding = int(sp.body_encoding)
    if encoding not in _ENCODINGS:
        raise ApiError(
            statuses.BAD_REQUEST,
            f"system_properties.body_encoding {encoding} is not IDENTITY (1) or GZIP (2)",
        )
    if encoding == _GZIP:
        problem = _inflate_problem(body)
        if problem:
            code = statuses.MESSAGE_BODY_TOO_LARGE if "inflates" in problem else None
            raise ApiError(
                code or statuses.MESSAGE_CORRUPTED,
                f"system_properties.body_encoding is GZIP but the body {problem}",
            )
    if not sp.HasField("body_digest"):
        return encoding
    digest = sp.body_digest
    kind, checksum = int(digest.type), str(digest.checksum)
    if kind == definition_pb2.DIGEST_TYPE_UNSPECIFIED and not checksum:
        return encoding
    if kind == definition_pb2.CRC32:
        expected = f"{zlib.crc32(body):08X}"
        matches = checksum.upper().rjust(8, "0") == expected
    elif kind == definition_pb2.MD5:
        expected = hashlib.md5(body).hexdigest().upper()  # a checksum, not a secret
        matches = checksum.upper() == expected
    elif kind == definition_pb2.SHA1:
        expected = hashlib.sha1(body).hexdigest().upper()
        matches = checksum.upper() == expected
    else:
        raise ApiError(
            statuses.BAD_REQUEST,
            f"system_properties.body_digest.type {kind} is not CRC32 (1), MD5 (2) or SHA1 (3)",
        )
    if not matches:
        raise ApiError(
            statuses.MESSAGE_CORRUPTED,
            f"system_properties.body_digest ({definition_pb2.DigestType.Name(kind)}) is "
            f"{checksum!r}, but the body's is {expected!r}",
        )
    return encoding


def _inflate_problem(body: bytes) -> str:
    """Why a GZIP body does not decode, or "" when it does: gzip members (magic 1f 8b) or
    one zlib stream, streamed in bounded steps so a bomb costs no memory."""
    gzip_format = body[:2] == b"\x1f\x8b"
    data = body
    inflated = 0
    while True:
        inflater = zlib.decompressobj(wbits=31 if gzip_format else 15)
        try:
            chunk = inflater.decompress(data, _INFLATE_STEP_BYTES)
            while True:
                inflated += len(chunk)
                if inflated > GZIP_INFLATED_BYTES_MAX:
                    return f"inflates to more than {GZIP_INFLATED_BYTES_MAX} bytes"
                if inflater.eof or not inflater.unconsumed_tail:
                    break
                chunk = inflater.decompress(inflater.unconsumed_tail, _INFLATE_STEP_BYTES)
        except zlib.error as exc:
            return f"is not a {'gzip' if gzip_format else 'gzip or zlib'} stream ({exc})"
        if not inflater.eof:
            return "is a truncated compressed stream"
        data = inflater.unused_data
        if not data:
            return ""
        if not (gzip_format and data[:2] == b"\x1f\x8b"):
            return f"has {len(data)} bytes after the compressed stream"


def _check_declared_type(declared: int, kind: MessageType) -> None:
    """A declared ``message_type`` must be a known one and agree with the fields that make the
    type (UNSPECIFIED: derive it, as older clients expect)."""
    if declared == definition_pb2.MESSAGE_TYPE_UNSPECIFIED:
        return
    name = _DECLARED_TYPES.get(declared)
    if name is None:
        raise ApiError(
            statuses.BAD_REQUEST,
            f"system_properties.message_type {declared} is not a MessageType (NORMAL 1, FIFO 2, "
            "DELAY 3, TRANSACTION 4, LITE 5, PRIORITY 6)",
        )
    if name != kind.value:
        raise ApiError(
            statuses.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"system_properties.message_type is {name}, but the message is {kind.value} "
            "(message_group makes FIFO, delivery_timestamp makes DELAY, lite_topic makes LITE, "
            "priority makes PRIORITY)",
        )


def _check_tag_keys_properties(tag: str | None, keys: list[str], user: dict[str, str]) -> None:
    if tag is not None:
        try:
            validation.validate_tag(tag)
        except errors.MessageIllegal as exc:
            raise ApiError(statuses.ILLEGAL_MESSAGE_TAG, str(exc)) from None
    try:
        validation.validate_keys(keys)
    except errors.MessageIllegal as exc:
        raise ApiError(statuses.ILLEGAL_MESSAGE_KEY, str(exc)) from None
    try:
        validation.validate_user_properties(user, tag, keys)
    except errors.PropertiesTooLarge as exc:
        raise ApiError(statuses.MESSAGE_PROPERTIES_TOO_LARGE, str(exc)) from None
    except errors.MessageIllegal as exc:
        raise ApiError(statuses.ILLEGAL_MESSAGE_PROPERTY_KEY, str(exc)) from None


def _kind_and_special_properties(
    sp: definition_pb2.SystemProperties,
    properties: dict[str, str],
    now_ms: int,
    limits: SendLimits,
) -> MessageType:
    """The message's type; sets ``__SHARDINGKEY`` / ``TIMER_DELIVER_MS`` as it goes."""
    if sp.HasField("lite_topic"):
        return lite_topics.mark(sp, properties)
    if sp.HasField("priority"):
        return priorities.mark(sp, properties)
    has_group = sp.HasField("message_group")
    has_delivery = sp.HasField("delivery_timestamp")
    if sp.message_type == definition_pb2.TRANSACTION:
        if has_group or has_delivery:
            raise ApiError(
                statuses.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a transactional message cannot have message_group or delivery_timestamp",
            )
        return MessageType.TRANSACTION
    if has_group and has_delivery:
        raise ApiError(
            statuses.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a message cannot have both message_group (FIFO) and delivery_timestamp (DELAY)",
        )
    if has_group:
        properties[props.SHARDING_KEY] = _checked_group(str(sp.message_group), limits)
        return MessageType.FIFO
    if has_delivery:
        deliver_ms = _delivery_ms(sp.delivery_timestamp)
        if deliver_ms - now_ms > limits.delay_ms_max:
            raise ApiError(
                statuses.ILLEGAL_DELIVERY_TIME,
                f"delivery_timestamp {deliver_ms} ms is {deliver_ms - now_ms} ms ahead; at most "
                f"{limits.delay_ms_max} ms (1 day) are allowed",
            )
        properties[props.TIMER_DELIVER_MS] = str(deliver_ms)
        return MessageType.DELAY
    return MessageType.NORMAL


def _checked_group(group: str, limits: SendLimits) -> str:
    if not group.strip():
        raise ApiError(statuses.ILLEGAL_MESSAGE_GROUP, "message_group is blank")
    size = len(group.encode("utf-8"))
    if size >= limits.message_group_bytes_max:
        raise ApiError(
            statuses.ILLEGAL_MESSAGE_GROUP,
            f"message_group is {size} bytes; it must be shorter than "
            f"{limits.message_group_bytes_max} bytes",
        )
    if any(ord(c) <= 0x1F or 0x7F <= ord(c) <= 0x9F for c in group):
        raise ApiError(statuses.ILLEGAL_MESSAGE_GROUP, "message_group has a control character")
    return group


def _refuse_kind(kind: MessageType, topic: TopicConfig) -> NoReturn:
    raise ApiError(
        statuses.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        f"topic {topic.topic_name!r} accepts {topic.message_type.value} messages; this "
        f"message is {kind.value} (message_group makes FIFO, delivery_timestamp makes DELAY)",
    )


def _timestamp_ms(ts: Timestamp) -> int:
    return int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000


def _valid_timestamp(ts: Timestamp) -> bool:
    """protobuf's ``Timestamps.isValid``: 0001-01-01 to 9999-12-31, nanos in [0, 1e9)."""
    return (
        TIMESTAMP_SECONDS_MIN <= int(ts.seconds) <= TIMESTAMP_SECONDS_MAX
        and 0 <= int(ts.nanos) < 1_000_000_000
    )


def _born_ms(ts: Timestamp) -> int:
    """Epoch ms of a born time; a Timestamp protobuf calls invalid is refused (the proxy's
    ``Timestamps.toMillis`` throws on it; the record field is a 64-bit long)."""
    if not _valid_timestamp(ts):
        raise ApiError(
            statuses.BAD_REQUEST,
            f"system_properties.born_timestamp (seconds={int(ts.seconds)}, "
            f"nanos={int(ts.nanos)}) is not a valid timestamp: seconds must lie in "
            f"[{TIMESTAMP_SECONDS_MIN}, {TIMESTAMP_SECONDS_MAX}] and nanos in [0, 999999999]",
        )
    return _timestamp_ms(ts)


def _delivery_ms(ts: Timestamp) -> int:
    """Epoch ms of a delivery time, tolerating the Python client's ms-in-seconds quirk.

    A time before the epoch or after year 9999 (as seconds or as the quirk's milliseconds)
    is ``ILLEGAL_DELIVERY_TIME``."""
    seconds, nanos = int(ts.seconds), int(ts.nanos)
    if SECONDS_THAT_ARE_MS_MIN <= seconds <= TIMESTAMP_SECONDS_MAX * 1000 and nanos == 0:
        return seconds
    if not _valid_timestamp(ts) or seconds < 0:
        raise ApiError(
            statuses.ILLEGAL_DELIVERY_TIME,
            f"system_properties.delivery_timestamp (seconds={seconds}, nanos={nanos}) is not "
            "a time between 1970 and 9999",
        )
    return _timestamp_ms(ts)


@functools.lru_cache(maxsize=IP_LITERALS_CACHED_MAX)
def _is_ip_literal(host: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
        return True
    return False


def _born_ip(born_host: str, peer_host: str) -> str:
    """The producer's address for the record: its own claim if it is an IP, else the peer's."""
    for candidate in (born_host, peer_host):
        if _is_ip_literal(candidate):
            return candidate
    return "127.0.0.1"
