"""Commit-log message records: the byte layout RocketMQ writes, encoded and decoded.

The byte layout, its field positions and the one walk over a record are :mod:`layout`'s; this
module builds records from messages and messages from records on top of it.

Pure: no IO. Called by :mod:`commitlog` (append, recovery scan, reads), :mod:`dispatching`,
the CLI and the pipeline.
"""

from __future__ import annotations

import ipaddress
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

from gannet.node.store import properties as props
from gannet.node.store.errors import (
    MessageIllegal,
    MessageTooLarge,
    PropertiesTooLarge,
    TopicNameIllegal,
)
from gannet.node.store.log.layout import (
    BLANK,
    CRC32_RESERVED_LENGTH,
    FIXED_V4,
    HEAD,
    INT,
    LONG,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    PHYSICAL_OFFSET_POSITION,
    QUEUE_OFFSET_POSITION,
    SHORT,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_POSITION,
    SYSFLAG_STOREHOST_V6,
    Buffer,
    encoded_length,
    middle_struct,
    store_timestamp_position,
    walk,
)

HOSTS_DECODED_CACHED_MAX = 1024  # distinct (address, port) pairs kept by decode_host
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE = 0x0
SYSFLAG_TRANSACTION_PREPARED_TYPE = 0x4
SYSFLAG_TRANSACTION_COMMIT_TYPE = 0x8
SYSFLAG_TRANSACTION_ROLLBACK_TYPE = 0xC
SYSFLAG_NEED_UNWRAP = 0x40
SYSFLAG_INNER_BATCH = 0x80
SYSFLAG_COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_LZ4 = 0x100
COMPRESSION_ZSTD = 0x200
COMPRESSION_ZLIB = 0x300

TOPIC_LENGTH_MAX_V1 = 127
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def transaction_type(sys_flag: int) -> int:
    """``MessageSysFlag.getTransactionValue``: bits 2-3 of the sysFlag."""
    return sys_flag & 0xC


@lru_cache(maxsize=4096)
def encode_host(host: str, port: int) -> bytes:
    """``socketAddress2ByteBuffer``: address bytes, then the port as a 4-byte int."""
    return ipaddress.ip_address(host).packed + INT.pack(port)


def decode_host(data: bytes | bytearray | memoryview) -> tuple[str, int]:
    return _decoded_host(bytes(data))


@lru_cache(maxsize=HOSTS_DECODED_CACHED_MAX)
def _decoded_host(raw: bytes) -> tuple[str, int]:
    """Memoised: every popped message decodes its born and store hosts, and ``ipaddress``
    costs more than the rest of a record's decoding (``bench/results/PROFILE.md``)."""
    (port,) = INT.unpack(raw[-4:])
    return str(ipaddress.ip_address(raw[:-4])), port


def is_ipv6(host: str) -> bool:
    return ipaddress.ip_address(host).version == 6


def java_length(text: str) -> int:
    """Java ``String.length()``: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-be")) // 2


@dataclass(slots=True)
class Message:
    """A message as the store receives it and as it reads it back.

    Fields set by the store on append (queue offset, physical offset, store timestamp, store
    host, body CRC) are overwritten there; on read they carry the stored values.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp_ms: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    body_crc: int = 0
    store_size: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(props.TAGS)

    @property
    def keys(self) -> list[str]:
        return props.split_keys(self.properties.get(props.KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(props.UNIQ_KEY)

    def copy(self) -> Message:
        """A copy with its own property map (positional: ``dataclasses.replace`` walks the
        fields at run time, several times the cost)."""
        return Message(
            self.topic, self.body, self.queue_id, self.flag, dict(self.properties),
            self.sys_flag, self.born_timestamp_ms, self.born_host, self.store_timestamp_ms,
            self.store_host, self.reconsume_times, self.prepared_transaction_offset,
            self.queue_offset, self.physical_offset, self.body_crc, self.store_size,
        )  # fmt: skip


class RecordParts(NamedTuple):
    """A record encoded up to the fields only known under the put lock.

    The append path packs the head with :func:`pack_head` once QUEUEOFFSET, PHYSICALOFFSET
    and STORETIMESTAMP are known, then writes ``head + body + tail`` — no second copy, no
    patching. ``tail`` is the TOPIC field, the PROPERTIES length and the properties.
    """

    total: int
    magic: int
    crc: int
    queue_id: int
    flag: int
    sys_flag: int
    born_timestamp_ms: int
    born: bytes
    store: bytes
    reconsume_times: int
    prepared_offset: int
    body: bytes
    tail: bytes


def checked_body(msg: Message, body_size_max_bytes: int) -> bytes:
    """The message's body; :class:`MessageTooLarge` when it is over ``maxMessageSize``."""
    body = msg.body
    if len(body) > body_size_max_bytes:
        raise MessageTooLarge(
            f"message body is {len(body)} bytes; the limit (maxMessageSize) is "
            f"{body_size_max_bytes} bytes"
        )
    return body


def properties_field(prop_text: str, *, append_crc: bool) -> bytes:
    """The PROPERTIES field of a record: ``prop_text`` in UTF-8 and, with ``append_crc``, room
    for the ``__CRC32#`` property that :func:`patch_append_fields` fills in (``prop_text`` then
    ends with a separator). :class:`PropertiesTooLarge` when it does not fit the 16-bit length."""
    if append_crc:
        if prop_text and not prop_text.endswith(props.PROPERTY_SEPARATOR):
            prop_text += props.PROPERTY_SEPARATOR
        prop_bytes = prop_text.encode("utf-8") + bytes(CRC32_RESERVED_LENGTH)
    else:
        prop_bytes = prop_text.encode("utf-8")
    if len(prop_bytes) > props.PROPERTIES_LENGTH_MAX_BYTES:
        raise PropertiesTooLarge(
            f"encoded properties are {len(prop_bytes)} bytes; at most "
            f"{props.PROPERTIES_LENGTH_MAX_BYTES} fit the record"
        )
    return prop_bytes


def split_record(
    msg: Message,
    *,
    body_size_max_bytes: int,
    append_crc: bool = False,
    force_v2: bool = False,
) -> RecordParts:
    """Validate and encode everything of ``msg`` that does not depend on its position.

    Host-IPv6 sysFlag bits are derived from the addresses, the body CRC is computed here.
    Raises :class:`MessageIllegal` subclasses for oversize parts and for a field outside its
    Java type's range: every value :func:`pack_head` packs later is checked here, so that the
    append path, which reserves queue offsets, cannot fail on a message's own fields.
    """
    check_ranges(msg)
    body = checked_body(msg, body_size_max_bytes)
    sys_flag = msg.sys_flag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    born = encode_host(*msg.born_host)
    store = encode_host(*msg.store_host)
    if len(born) == 20:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if len(store) == 20:
        sys_flag |= SYSFLAG_STOREHOST_V6
    v2, topic_field = topic_field_of(msg.topic, force_v2)
    prop_text = props.encode(msg.properties)
    prop_bytes = properties_field(prop_text, append_crc=append_crc)
    tail = topic_field + SHORT.pack(len(prop_bytes)) + prop_bytes
    topic_len = len(topic_field) - (2 if v2 else 1)
    total = encoded_length(len(body), topic_len, len(prop_bytes), sys_flag, v2=v2)
    return RecordParts(
        total,
        MAGIC_V2 if v2 else MAGIC_V1,
        zlib.crc32(body) & 0x7FFFFFFF,
        msg.queue_id,
        msg.flag,
        sys_flag,
        msg.born_timestamp_ms,
        born,
        store,
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        body,
        tail,
    )


def check_ranges(msg: Message) -> None:
    """Raise :class:`MessageIllegal` naming the first int/long field out of range."""
    int32_fields = (
        ("queue id", msg.queue_id),
        ("flag", msg.flag),
        ("sysFlag", msg.sys_flag),
        ("reconsume times", msg.reconsume_times),
    )
    for name, value in int32_fields:
        if not INT32_MIN <= value <= INT32_MAX:
            raise MessageIllegal(f"record field {name} is {value}; it must fit a 32-bit int")
    for name, value in (
        ("born timestamp", msg.born_timestamp_ms),
        ("prepared transaction offset", msg.prepared_transaction_offset),
    ):
        if not INT64_MIN <= value <= INT64_MAX:
            raise MessageIllegal(f"record field {name} is {value}; it must fit a 64-bit long")


def pack_head(
    p: RecordParts, queue_offset: int, physical_offset: int, store_timestamp_ms: int
) -> bytes:
    """TOTALSIZE … BODY LENGTH of a record, with its position-dependent fields."""
    if len(p.born) == 8 and len(p.store) == 8:
        return FIXED_V4.pack(
            p.total, p.magic, p.crc, p.queue_id, p.flag, queue_offset, physical_offset,
            p.sys_flag, p.born_timestamp_ms, p.born, store_timestamp_ms, p.store,
            p.reconsume_times, p.prepared_offset, len(p.body),
        )  # fmt: skip
    head = HEAD.pack(
        p.total, p.magic, p.crc, p.queue_id, p.flag, queue_offset, physical_offset,
        p.sys_flag, p.born_timestamp_ms,
    )  # fmt: skip
    middle = middle_struct(len(p.born), len(p.store)).pack(
        p.born, store_timestamp_ms, p.store, p.reconsume_times, p.prepared_offset, len(p.body)
    )
    return head + middle


def seal_crc(record: bytearray) -> None:
    """Fill the 20 reserved bytes at the end of a record with its whole-record CRC."""
    covered = len(record) - CRC32_RESERVED_LENGTH
    record[covered:] = crc_property_tail(zlib.crc32(record[:covered]) & 0x7FFFFFFF)


def encode(
    msg: Message,
    *,
    body_size_max_bytes: int,
    append_crc: bool = False,
    force_v2: bool = False,
) -> bytearray:
    """Encode ``msg`` into one record buffer with the offsets and store time it carries.

    The append path uses :func:`split_record` and :func:`pack_head` directly; this is the
    same layout in one call (tests, tools). With ``append_crc`` the reserved CRC tail is left
    zeroed until :func:`patch_append_fields` (or :func:`seal_crc`) fills it.
    """
    p = split_record(
        msg, body_size_max_bytes=body_size_max_bytes, append_crc=append_crc, force_v2=force_v2
    )
    head = pack_head(p, msg.queue_offset, msg.physical_offset, msg.store_timestamp_ms)
    buf = bytearray().join((head, p.body, p.tail))
    if len(buf) != p.total:
        raise AssertionError(f"encoded {len(buf)} bytes, computed {p.total}")
    return buf


@lru_cache(maxsize=4096)
def topic_field_of(topic: str, force_v2: bool) -> tuple[bool, bytes]:
    """(is V2, the TOPIC length + bytes field) of a topic; cached, topics repeat."""
    topic_bytes = topic.encode("utf-8")
    v2 = force_v2 or java_length(topic) > TOPIC_LENGTH_MAX_V1
    if len(topic_bytes) > (0x7FFF if v2 else 0xFF):
        raise TopicNameIllegal(f"topic is {len(topic_bytes)} bytes, too long for the record")
    length = SHORT.pack(len(topic_bytes)) if v2 else bytes((len(topic_bytes),))
    return v2, length + topic_bytes


def patch_append_fields(
    buf: bytearray | memoryview,
    start: int,
    *,
    queue_offset: int,
    physical_offset: int,
    store_timestamp_ms: int,
    append_crc: bool = False,
) -> None:
    """Write the fields only known under the put lock into an encoded record at ``start``."""
    LONG.pack_into(buf, start + QUEUE_OFFSET_POSITION, queue_offset)
    LONG.pack_into(buf, start + PHYSICAL_OFFSET_POSITION, physical_offset)
    (sys_flag,) = INT.unpack_from(buf, start + SYSFLAG_POSITION)
    LONG.pack_into(buf, start + store_timestamp_position(sys_flag), store_timestamp_ms)
    if append_crc:
        (total,) = INT.unpack_from(buf, start)
        covered = total - CRC32_RESERVED_LENGTH
        crc = zlib.crc32(buf[start : start + covered]) & 0x7FFFFFFF
        buf[start + covered : start + total] = crc_property_tail(crc)


def crc_property_tail(crc: int) -> bytes:
    """``__CRC32#`` \\x01 ten digits least-significant first (0-padded) \\x02 — 20 bytes."""
    digits = str(crc)[::-1].ljust(10, "0")
    return f"{props.CRC32}\x01{digits}\x02".encode("ascii")


def blank_record(remaining_bytes: int) -> bytes:
    """The 8-byte end-of-file marker: remaining length, then the BLANK magic."""
    return BLANK.pack(remaining_bytes, MAGIC_BLANK)


class DispatchInfo(NamedTuple):
    """What one valid record contributes to consume queues and the index (``DispatchRequest``).

    A named tuple, not a dataclass: one is built per dispatched record, on the hot path.
    """

    topic: str
    queue_id: int
    commit_offset: int
    size: int
    tags_code: int
    store_timestamp_ms: int
    queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties: dict[str, str]


def decode_properties(buf: Buffer, pos: int = 0) -> dict[str, str]:
    """Only the PROPERTIES of the record at ``pos``, skipping the body (for message filters).

    Raises ValueError on a record that does not hold together.
    """
    span, _, error = walk(buf, pos, len(buf), check_crc=False)
    if span is None:
        raise ValueError(f"undecodable record at {pos}: {error or 'a BLANK'}")
    at = span.properties_at
    return props.decode(bytes(buf[at : at + span.properties_length]).decode("utf-8", "replace"))


def decode(buf: Buffer, pos: int = 0) -> Message:
    """Decode a whole record (``MessageDecoder.decode``, body not decompressed).

    Raises ValueError on a record that does not hold together (:func:`layout.walk`).
    """
    span, _, error = walk(buf, pos, len(buf), check_crc=False)
    if span is None:
        raise ValueError(f"undecodable record at {pos}: {error or 'a BLANK'}")
    (total, _, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, born_at,
     born_len, store_ts, store_at, store_len, reconsume, prepared, body_at, body_len, topic_at,
     topic_len, props_at, props_len) = span  # fmt: skip
    try:
        topic = bytes(buf[topic_at : topic_at + topic_len]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"undecodable record at {pos}: {exc}") from exc
    prop_map = props.decode(bytes(buf[props_at : props_at + props_len]).decode("utf-8", "replace"))
    return Message(
        topic, bytes(buf[body_at : body_at + body_len]), queue_id, flag, prop_map, sys_flag,
        born_ts, decode_host(buf[born_at : born_at + born_len]), store_ts,
        decode_host(buf[store_at : store_at + store_len]), reconsume, prepared, queue_offset,
        physical_offset, crc, total,
    )  # fmt: skip
