"""Remoting send requests as v2 ``Message``s: properties, batches, delay levels.

A remoting send carries the message's properties as one string (``name\\x01value\\x02`` per
pair, RocketMQ's ``MessageDecoder.messageProperties2String``) and the body; a batch
(``SEND_BATCH_MESSAGE``) carries in its body one entry per message, RocketMQ's
``MessageDecoder.encodeMessage``: ``totalSize:i32 magic:i32 bodyCRC:i32 flag:i32 bodyLen:i32
body propertiesLen:i16 properties``.

:func:`v2_message` turns one into the v2 message the gRPC servicer validates and stores, so both
protocols share one path (:meth:`gannet.node.api.messaging.MessagingServicer.SendMessage`):
``UNIQ_KEY`` → message id (one is made when absent), ``TAGS`` → tag, ``KEYS`` (space separated)
→ keys, ``DELAY`` (a level of RocketMQ's default ``messageDelayLevel``) and ``TIMER_DELIVER_MS``
/ ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` → delivery time, ``__SHARDINGKEY`` → message group, a
compressed body (sysFlag bit 0: zlib, as the 4.x producer compresses bodies over 4 KiB) → GZIP
encoding (stored compressed, flag kept). ``WAIT`` and the other broker-reserved names are
dropped; every other pair is a user property.
"""

from __future__ import annotations

import os
import struct
import threading
import time

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import Encoding, definition_pb2

from gannet.node.store import msgids
from gannet.node.store import properties as props
from gannet.node.store.validation import GANNET_RESERVED_PROPERTY_KEYS, RESERVED_PROPERTY_KEYS

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_TRANSACTION_PREPARED = 0x4

DELAY_LEVELS_S = (
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip
"""RocketMQ's default ``messageDelayLevel`` "1s 5s 10s 30s 1m 2m ... 1h 2h" (levels 1..18)."""

BATCH_MESSAGES_MAX = 4096
COMMIT_OFFSET_HEX_DIGITS = 16
"""A commit-log offset in a v2 send answer's ``transaction_id`` (the transaction-id form)."""


class BadMessage(ValueError):
    """A send request that cannot be turned into messages; answered MESSAGE_ILLEGAL."""


def parse_properties(text: str) -> dict[str, str]:
    """``name\\x01value\\x02...`` as a dict; pairs without a separator are skipped."""
    out: dict[str, str] = {}
    for pair in text.split(props.PROPERTY_SEPARATOR):
        name, sep, value = pair.partition(props.NAME_VALUE_SEPARATOR)
        if sep and name:
            out[name] = value
    return out


def format_properties(properties: dict[str, str]) -> str:
    return "".join(
        f"{k}{props.NAME_VALUE_SEPARATOR}{v}{props.PROPERTY_SEPARATOR}"
        for k, v in properties.items()
    )


_ENTRY_FIXED = struct.Struct(">iiiii")


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """The (flag, body, properties) of each message of a batch body (module docstring)."""
    out: list[tuple[int, bytes, dict[str, str]]] = []
    pos = 0
    while pos < len(body):
        if len(body) - pos < _ENTRY_FIXED.size:
            raise BadMessage(f"batch entry at byte {pos} is cut short")
        total, _magic, _crc, flag, body_length = _ENTRY_FIXED.unpack_from(body, pos)
        if total < _ENTRY_FIXED.size + 2 or total > len(body) - pos:
            raise BadMessage(f"batch entry at byte {pos} has a bad total size {total}")
        start = pos + _ENTRY_FIXED.size
        if body_length < 0 or body_length > total - _ENTRY_FIXED.size - 2:
            raise BadMessage(f"batch entry at byte {pos} has a bad body length {body_length}")
        payload = body[start : start + body_length]
        (props_length,) = struct.unpack_from(">h", body, start + body_length)
        props_start = start + body_length + 2
        if props_length < 0 or props_start + props_length != pos + total:
            raise BadMessage(f"batch entry at byte {pos} has a bad properties length")
        try:
            text = body[props_start : props_start + props_length].decode("utf-8")
        except UnicodeDecodeError:
            raise BadMessage(f"batch entry at byte {pos}: properties are not UTF-8") from None
        out.append((flag, bytes(payload), parse_properties(text)))
        if len(out) > BATCH_MESSAGES_MAX:
            raise BadMessage(f"a batch holds at most {BATCH_MESSAGES_MAX} messages")
        pos += total
    if not out:
        raise BadMessage("the batch body holds no message")
    return out


_TRANSLATED = frozenset({
    props.UNIQ_KEY, props.TAGS, props.KEYS, props.DELAY_TIME_LEVEL, props.TIMER_DELIVER_MS,
    props.TIMER_DELAY_SEC, props.TIMER_DELAY_MS, props.SHARDING_KEY, props.WAIT_STORE_MSG_OK,
})  # fmt: skip
_DROPPED = RESERVED_PROPERTY_KEYS | GANNET_RESERVED_PROPERTY_KEYS


def v2_message(
    topic: str,
    body: bytes,
    properties: dict[str, str],
    *,
    sys_flag: int,
    born_ms: int,
    now_ms: int,
) -> definition_pb2.Message:
    """One remoting message as the v2 message the gRPC path sends (module docstring)."""
    sp = definition_pb2.SystemProperties(
        message_id=properties.get(props.UNIQ_KEY) or new_message_id(),
        body_encoding=Encoding.GZIP if sys_flag & SYSFLAG_COMPRESSED else Encoding.IDENTITY,
        born_timestamp=_timestamp(born_ms or now_ms),
    )
    if is_transactional(sys_flag, properties):
        sp.message_type = definition_pb2.TRANSACTION  # a half message (remoting.transactions)
    tag = properties.get(props.TAGS)
    if tag:
        sp.tag = tag
    keys = [k for k in properties.get(props.KEYS, "").split(props.KEY_SEPARATOR) if k]
    if keys:
        sp.keys.extend(keys)
    deliver_ms = _delivery_ms(properties, now_ms)
    if deliver_ms is not None:
        sp.delivery_timestamp.CopyFrom(_timestamp(deliver_ms))
    group = properties.get(props.SHARDING_KEY)
    if group:
        sp.message_group = group
    user = {k: v for k, v in properties.items() if k not in _TRANSLATED and k not in _DROPPED and v}
    return definition_pb2.Message(
        topic=definition_pb2.Resource(name=topic),
        user_properties=user,
        system_properties=sp,
        body=body,
    )


def is_transactional(sys_flag: int, properties: dict[str, str]) -> bool:
    """A half message: sysFlag ``TRANSACTION_PREPARED_TYPE`` or ``TRAN_MSG=true``."""
    return bool(sys_flag & SYSFLAG_TRANSACTION_PREPARED) or (
        properties.get(props.TRANSACTION_PREPARED) == "true"
    )


def _delivery_ms(properties: dict[str, str], now_ms: int) -> int | None:
    level = properties.get(props.DELAY_TIME_LEVEL)
    if level:
        n = _number(level, props.DELAY_TIME_LEVEL)
        if n <= 0:
            return None
        return now_ms + DELAY_LEVELS_S[min(n, len(DELAY_LEVELS_S)) - 1] * 1000
    if props.TIMER_DELIVER_MS in properties:
        return _number(properties[props.TIMER_DELIVER_MS], props.TIMER_DELIVER_MS)
    if props.TIMER_DELAY_SEC in properties:
        return now_ms + _number(properties[props.TIMER_DELAY_SEC], props.TIMER_DELAY_SEC) * 1000
    if props.TIMER_DELAY_MS in properties:
        return now_ms + _number(properties[props.TIMER_DELAY_MS], props.TIMER_DELAY_MS)
    return None


def _number(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadMessage(f"property {name} = {text[:40]!r} is not a number") from None


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


_counter_lock = threading.Lock()
_counter = 0
_PREFIX = os.urandom(6).hex().upper()


def new_message_id() -> str:
    """A unique message id for a message sent without ``UNIQ_KEY`` (32 hex digits)."""
    global _counter  # noqa: PLW0603
    with _counter_lock:
        _counter = (_counter + 1) & 0xFFFFFFFF
        n = _counter
    return f"{_PREFIX}{int(time.time()) & 0xFFFFFFFF:08X}{n:08X}{os.getpid() & 0xFFFF:04X}"


def offset_message_id(host: str, port: int, commit_offset: int) -> str:
    """RocketMQ's offset message id of the record at ``commit_offset`` served at
    ``host:port`` (``host`` an IP address; :func:`~gannet.node.store.msgids.create_offset_msg_id`:
    4 or 16 address bytes, the port, the offset, in upper-case hex)."""
    return msgids.create_offset_msg_id(host, port, commit_offset)


def commit_offset_of(transaction_id: str) -> int | None:
    """The commit-log offset a v2 send answer names as ``transaction_id`` when asked
    (:data:`gannet.node.api.sending.COMMIT_OFFSETS_HEADER`); None when it is not that form."""
    if len(transaction_id) != COMMIT_OFFSET_HEX_DIGITS:
        return None
    try:
        return int(transaction_id, 16)
    except ValueError:
        return None
