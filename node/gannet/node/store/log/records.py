"""Commit-log message records: the byte layout RocketMQ writes, encoded and decoded.

Layout (big-endian; ``MessageExtEncoder.encode`` / ``MessageDecoder.decode``)::

    off  size  field
      0     4  TOTALSIZE            whole record, this field included
      4     4  MAGICCODE            V1 0xDAA320A7 (1-byte topic length), V2 0xDAA320AB (2-byte)
      8     4  BODYCRC              zlib.crc32(body) & 0x7FFFFFFF
     12     4  QUEUEID
     16     4  FLAG                 producer's user flag
     20     8  QUEUEOFFSET          position in the consume queue (0 for prepared/rollback tx)
     28     8  PHYSICALOFFSET       global commit-log offset of this record
     36     4  SYSFLAG              see the SYSFLAG_* constants
     40     8  BORNTIMESTAMP
     48   8|20 BORNHOST             4 (IPv4) or 16 (IPv6) address bytes, then int port
      .     8  STORETIMESTAMP
      .   8|20 STOREHOST
      .     4  RECONSUMETIMES
      .     8  PREPARED TRANSACTION OFFSET
      .   4+n  BODY length + body
      . 1|2+t  TOPIC length + UTF-8 topic
      .   2+p  PROPERTIES length (short) + UTF-8 properties string

Total size = 4+4+4+4+4+8+8+4+8+bornHostLen+8+storeHostLen+4+8+4+n+topicLenSize+t+2+p, i.e.
``91 + n + t + p`` for V1 with two IPv4 hosts. A BLANK record (end of a file) is 8 bytes:
int remaining-bytes-in-file, int 0xCBD43194. The optional whole-record CRC reserves the last 20
bytes of the properties: ``__CRC32#`` ``\\x01`` ten digits least-significant first ``\\x02``.

Pure: no IO. Called by :mod:`commitlog` (append, recovery scan, reads), :mod:`dispatching`,
the CLI and the pipeline.
"""

from __future__ import annotations

import ipaddress
import mmap
import struct
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

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
MAGIC_BLANK = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

HOSTS_DECODED_CACHED_MAX = 1024  # distinct (address, port) pairs kept by decode_host
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE = 0x0
SYSFLAG_TRANSACTION_PREPARED_TYPE = 0x4
SYSFLAG_TRANSACTION_COMMIT_TYPE = 0x8
SYSFLAG_TRANSACTION_ROLLBACK_TYPE = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
SYSFLAG_NEED_UNWRAP = 0x40
SYSFLAG_INNER_BATCH = 0x80
SYSFLAG_COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_LZ4 = 0x100
COMPRESSION_ZSTD = 0x200
COMPRESSION_ZLIB = 0x300

CRC32_RESERVED_LENGTH = 20
TOPIC_LENGTH_MAX_V1 = 127
QUEUE_OFFSET_POSITION = 20
PHYSICAL_OFFSET_POSITION = 28
SYSFLAG_POSITION = 36
BORN_HOST_POSITION = 48

_HEAD = struct.Struct(">iiiiiqqiq")  # total..borntimestamp: 48 bytes
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_BLANK = struct.Struct(">ii")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Buffer = bytes | bytearray | memoryview | mmap.mmap
"""Anything records can be read from: a file's mapping, a slice, a network buffer."""


def transaction_type(sys_flag: int) -> int:
    """``MessageSysFlag.getTransactionValue``: bits 2-3 of the sysFlag."""
    return sys_flag & 0xC


def host_length(sys_flag: int, v6_flag: int) -> int:
    """Encoded size of a host field: 8 bytes for IPv4, 20 for IPv6."""
    return 20 if sys_flag & v6_flag else 8


def store_timestamp_position(sys_flag: int) -> int:
    """Position of STORETIMESTAMP, which moves by 12 when the born host is IPv6."""
    return BORN_HOST_POSITION + host_length(sys_flag, SYSFLAG_BORNHOST_V6)


@lru_cache(maxsize=4096)
def encode_host(host: str, port: int) -> bytes:
    """``socketAddress2ByteBuffer``: address bytes, then the port as a 4-byte int."""
    return ipaddress.ip_address(host).packed + _INT.pack(port)


def decode_host(data: bytes | bytearray | memoryview) -> tuple[str, int]:
    return _decoded_host(bytes(data))


@lru_cache(maxsize=HOSTS_DECODED_CACHED_MAX)
def _decoded_host(raw: bytes) -> tuple[str, int]:
    """Memoised: every popped message decodes its born and store hosts, and ``ipaddress``
    costs more than the rest of a record's decoding (``bench/results/PROFILE.md``)."""
    (port,) = _INT.unpack(raw[-4:])
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


def encoded_length(
    body_len: int, topic_len: int, props_len: int, sys_flag: int, *, v2: bool
) -> int:
    """``calMsgLength``: the TOTALSIZE of a record with these field sizes."""
    return (
        4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
        + host_length(sys_flag, SYSFLAG_BORNHOST_V6)
        + 8
        + host_length(sys_flag, SYSFLAG_STOREHOST_V6)
        + 4 + 8 + 4 + body_len
        + (2 if v2 else 1) + topic_len
        + 2 + props_len
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
    _check_ranges(msg)
    body = checked_body(msg, body_size_max_bytes)
    sys_flag = msg.sys_flag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    born = encode_host(*msg.born_host)
    store = encode_host(*msg.store_host)
    if len(born) == 20:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if len(store) == 20:
        sys_flag |= SYSFLAG_STOREHOST_V6
    v2, topic_field = _topic_field(msg.topic, force_v2)
    prop_text = props.encode(msg.properties)
    prop_bytes = properties_field(prop_text, append_crc=append_crc)
    tail = topic_field + _SHORT.pack(len(prop_bytes)) + prop_bytes
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


def _check_ranges(msg: Message) -> None:
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
        return _FIXED_V4.pack(
            p.total, p.magic, p.crc, p.queue_id, p.flag, queue_offset, physical_offset,
            p.sys_flag, p.born_timestamp_ms, p.born, store_timestamp_ms, p.store,
            p.reconsume_times, p.prepared_offset, len(p.body),
        )  # fmt: skip
    head = _HEAD.pack(
        p.total, p.magic, p.crc, p.queue_id, p.flag, queue_offset, physical_offset,
        p.sys_flag, p.born_timestamp_ms,
    )  # fmt: skip
    middle = _middle_struct(len(p.born), len(p.store)).pack(
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


@lru_cache(maxsize=4)
def _middle_struct(born_len: int, store_len: int) -> struct.Struct:
    """BORNHOST … BODY LENGTH in one pack: host bytes, store time, host, reconsume, prepared."""
    return struct.Struct(f">{born_len}sq{store_len}siqi")


@lru_cache(maxsize=4096)
def _topic_field(topic: str, force_v2: bool) -> tuple[bool, bytes]:
    """(is V2, the TOPIC length + bytes field) of a topic; cached, topics repeat."""
    topic_bytes = topic.encode("utf-8")
    v2 = force_v2 or java_length(topic) > TOPIC_LENGTH_MAX_V1
    if len(topic_bytes) > (0x7FFF if v2 else 0xFF):
        raise TopicNameIllegal(f"topic is {len(topic_bytes)} bytes, too long for the record")
    length = _SHORT.pack(len(topic_bytes)) if v2 else bytes((len(topic_bytes),))
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
    _LONG.pack_into(buf, start + QUEUE_OFFSET_POSITION, queue_offset)
    _LONG.pack_into(buf, start + PHYSICAL_OFFSET_POSITION, physical_offset)
    (sys_flag,) = _INT.unpack_from(buf, start + SYSFLAG_POSITION)
    _LONG.pack_into(buf, start + store_timestamp_position(sys_flag), store_timestamp_ms)
    if append_crc:
        (total,) = _INT.unpack_from(buf, start)
        covered = total - CRC32_RESERVED_LENGTH
        crc = zlib.crc32(buf[start : start + covered]) & 0x7FFFFFFF
        buf[start + covered : start + total] = crc_property_tail(crc)


def crc_property_tail(crc: int) -> bytes:
    """``__CRC32#`` \\x01 ten digits least-significant first (0-padded) \\x02 — 20 bytes."""
    digits = str(crc)[::-1].ljust(10, "0")
    return f"{props.CRC32}\x01{digits}\x02".encode("ascii")


def blank_record(remaining_bytes: int) -> bytes:
    """The 8-byte end-of-file marker: remaining length, then the BLANK magic."""
    return _BLANK.pack(remaining_bytes, MAGIC_BLANK)


_FIXED_V4 = struct.Struct(">iiiiiqqiq8sq8siqi")  # both hosts IPv4: every field to BODY LENGTH


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
    try:
        sys_flag, magic = (
            _INT.unpack_from(buf, pos + SYSFLAG_POSITION)[0],
            _INT.unpack_from(buf, pos + 4)[0],
        )
        p = pos + BORN_HOST_POSITION + host_length(sys_flag, SYSFLAG_BORNHOST_V6) + 8
        p += host_length(sys_flag, SYSFLAG_STOREHOST_V6) + 12
        (body_len,) = _INT.unpack_from(buf, p)
        p += 4 + body_len
        if magic == MAGIC_V2:
            (topic_len,) = _SHORT.unpack_from(buf, p)
            p += 2 + topic_len
        else:
            p += 1 + buf[p]
        (props_len,) = _SHORT.unpack_from(buf, p)
        text = bytes(buf[p + 2 : p + 2 + props_len]).decode("utf-8", errors="replace")
    except (struct.error, IndexError) as exc:
        raise ValueError(f"undecodable record at {pos}: {exc}") from exc
    return props.decode(text)


def decode(buf: Buffer, pos: int = 0) -> Message:
    """Decode a whole record (``MessageDecoder.decode``, body not decompressed).

    The caller has validated the record (or accepts a :class:`ValueError` on garbage).
    """
    try:
        total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts = (
            _HEAD.unpack_from(buf, pos)
        )
        if magic not in (MAGIC_V1, MAGIC_V2):
            raise ValueError(f"bad magic code 0x{magic & 0xFFFFFFFF:08X} at {pos}")
        p = pos + 48
        bl = host_length(sys_flag, SYSFLAG_BORNHOST_V6)
        born_host = decode_host(buf[p : p + bl])
        p += bl
        (store_ts,) = _LONG.unpack_from(buf, p)
        p += 8
        sl = host_length(sys_flag, SYSFLAG_STOREHOST_V6)
        store_host = decode_host(buf[p : p + sl])
        p += sl
        (reconsume,) = _INT.unpack_from(buf, p)
        (prepared,) = _LONG.unpack_from(buf, p + 4)
        (body_len,) = _INT.unpack_from(buf, p + 12)
        p += 16
        body = bytes(buf[p : p + body_len])
        p += body_len
        if magic == MAGIC_V2:
            (topic_len,) = _SHORT.unpack_from(buf, p)
            p += 2
        else:
            topic_len = buf[p]
            p += 1
        topic = bytes(buf[p : p + topic_len]).decode("utf-8")
        p += topic_len
        (props_len,) = _SHORT.unpack_from(buf, p)
        p += 2
        prop_map = props.decode(bytes(buf[p : p + props_len]).decode("utf-8", errors="replace"))
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"undecodable record at {pos}: {exc}") from exc
    return Message(
        topic=topic,
        body=body,
        queue_id=queue_id,
        flag=flag,
        properties=prop_map,
        sys_flag=sys_flag,
        born_timestamp_ms=born_ts,
        born_host=born_host,
        store_timestamp_ms=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        body_crc=crc,
        store_size=total,
    )
