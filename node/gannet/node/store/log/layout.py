"""The commit-log record layout: field positions, lengths and the one walk over a record.

This module is the single source of the layout. :mod:`records` (encode, decode),
:mod:`packing` (the append path's packer) and :mod:`record_checks` (validation on read-back)
call it; ``_native.c`` mirrors it in C for the hot paths (batch encoding, the record-boundary
walk of the pipeline's segment parser) and ``tests/store/test_layout.py`` checks the C walker
and encoder against :func:`walk` on generated records. ``docs/formats/commitlog.md`` describes
the same bytes for readers.

Layout (big-endian; ``MessageExtEncoder.encode`` / ``MessageDecoder.decode``)::

    off  size  field
      0     4  TOTALSIZE            whole record, this field included
      4     4  MAGICCODE            V1 0xDAA320A7 (1-byte topic length), V2 0xDAA320AB (2-byte)
      8     4  BODYCRC              zlib.crc32(body) & 0x7FFFFFFF
     12     4  QUEUEID
     16     4  FLAG                 producer's user flag
     20     8  QUEUEOFFSET          position in the consume queue (0 for prepared/rollback tx)
     28     8  PHYSICALOFFSET       global commit-log offset of this record
     36     4  SYSFLAG              see the SYSFLAG_* constants of :mod:`records`
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

Pure: no IO.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
MAGIC_BLANK = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
HOST_V4_LENGTH = 8  # 4 address bytes + int port
HOST_V6_LENGTH = 20  # 16 address bytes + int port

MAGIC_POSITION = 4
BODY_CRC_POSITION = 8
QUEUE_OFFSET_POSITION = 20
PHYSICAL_OFFSET_POSITION = 28
SYSFLAG_POSITION = 36
BORN_HOST_POSITION = 48
RECORD_LENGTH_MIN = 91
"""TOTALSIZE of the smallest record: V1, two IPv4 hosts, empty body, topic and properties."""
FIXED_FIELDS_LENGTH = 72
"""TOTALSIZE less the two hosts, the body, the TOPIC field (its length included) and the
PROPERTIES field (its length included): the fixed fields and the BODY length field."""
CRC32_RESERVED_LENGTH = 20
CRC32_TAIL_HEAD = b"__CRC32#\x01"  # then ten digits, then \x02

HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP: 48 bytes
FIXED_V4 = struct.Struct(">iiiiiqqiq8sq8siqi")  # both hosts IPv4: every field to BODY LENGTH
INT = struct.Struct(">i")
LONG = struct.Struct(">q")
SHORT = struct.Struct(">h")
BLANK = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE: enough to step over any record

Buffer = bytes | bytearray | memoryview | mmap.mmap
"""Anything records can be read from: a file's mapping, a slice, a network buffer."""


def host_length(sys_flag: int, v6_flag: int) -> int:
    """Encoded size of a host field: 8 bytes for IPv4, 20 for IPv6."""
    return HOST_V6_LENGTH if sys_flag & v6_flag else HOST_V4_LENGTH


def store_timestamp_position(sys_flag: int) -> int:
    """Position of STORETIMESTAMP, which moves by 12 when the born host is IPv6."""
    return BORN_HOST_POSITION + host_length(sys_flag, SYSFLAG_BORNHOST_V6)


def encoded_length(
    body_len: int, topic_len: int, props_len: int, sys_flag: int, *, v2: bool
) -> int:
    """``calMsgLength``: the TOTALSIZE of a record with these field sizes."""
    return (
        FIXED_FIELDS_LENGTH
        + host_length(sys_flag, SYSFLAG_BORNHOST_V6)
        + host_length(sys_flag, SYSFLAG_STOREHOST_V6)
        + body_len
        + (2 if v2 else 1) + topic_len
        + 2 + props_len
    )  # fmt: skip


@lru_cache(maxsize=4)
def middle_struct(born_len: int, store_len: int) -> struct.Struct:
    """BORNHOST … BODY LENGTH in one pack: host bytes, store time, host, reconsume, prepared."""
    return struct.Struct(f">{born_len}sq{store_len}siqi")


class RecordSpan(NamedTuple):
    """A record as :func:`walk` found it: its fixed fields and where its variable ones lie.

    Positions are absolute in the buffer walked; hosts are ``(position, length)`` pairs.
    """

    total: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp_ms: int
    born_host_at: int
    born_host_length: int
    store_timestamp_ms: int
    store_host_at: int
    store_host_length: int
    reconsume_times: int
    prepared_offset: int
    body_at: int
    body_length: int
    topic_at: int
    topic_length: int
    properties_at: int
    properties_length: int


_new_span: Callable[[type[RecordSpan], tuple[int, ...]], RecordSpan] = tuple.__new__
"""Builds a span without the named tuple's Python-level ``__new__`` (one per record walked)."""


def walk(
    buf: Buffer, pos: int, limit: int, *, check_crc: bool
) -> tuple[RecordSpan | None, int, str]:
    """Walk the record at ``buf[pos:limit]``: every length must stay inside the readable region
    and add up to TOTALSIZE, so that a torn write never passes; with ``check_crc`` the body CRC
    and, when the properties end with one, the whole-record CRC are verified.

    Returns ``(span, size, "")`` for a record, ``(None, 0, "")`` for a BLANK (end of file), and
    ``(None, size, error)`` for an invalid one: ``size`` > 0 when TOTALSIZE can be trusted
    enough to step over the record, else -1; ``error`` names what is wrong.
    """
    if limit - pos < BLANK.size:
        return None, -1, "fewer than 8 bytes remain"
    total, magic = BLANK.unpack_from(buf, pos)
    if magic == MAGIC_BLANK:
        return None, 0, ""
    if magic not in (MAGIC_V1, MAGIC_V2):
        return None, -1, f"bad magic code 0x{magic & 0xFFFFFFFF:08X}"
    if total > limit - pos or total < RECORD_LENGTH_MIN:
        return None, -1, f"total size {total} outside the readable region"
    try:
        (sys_flag,) = INT.unpack_from(buf, pos + SYSFLAG_POSITION)
        if sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) == 0:
            (_, _, crc, queue_id, flag, queue_offset, physical_offset, _, born_ts, _, store_ts,
             _, reconsume, prepared, body_len) = FIXED_V4.unpack_from(buf, pos)  # fmt: skip
            born_len = store_len = HOST_V4_LENGTH
            store_at = pos + BORN_HOST_POSITION + HOST_V4_LENGTH + 8
            p = pos + FIXED_V4.size
        else:
            _, _, crc, queue_id, flag, queue_offset, physical_offset, _, born_ts = HEAD.unpack_from(
                buf, pos
            )
            born_len = host_length(sys_flag, SYSFLAG_BORNHOST_V6)
            store_len = host_length(sys_flag, SYSFLAG_STOREHOST_V6)
            p = pos + BORN_HOST_POSITION + born_len
            (store_ts,) = LONG.unpack_from(buf, p)
            store_at = p + 8
            p = store_at + store_len
            (reconsume,) = INT.unpack_from(buf, p)
            (prepared,) = LONG.unpack_from(buf, p + 4)
            (body_len,) = INT.unpack_from(buf, p + 12)
            p += 16
        end = pos + total
        if body_len < 0 or p + body_len > end:
            return None, total, f"body length {body_len} overruns the record"
        body_at = p
        if check_crc and zlib.crc32(buf[p : p + body_len]) & 0x7FFFFFFF != crc:
            return None, total, "body CRC mismatch"
        p += body_len
        if magic == MAGIC_V2:
            (topic_len,) = SHORT.unpack_from(buf, p)
            p += 2
        else:
            topic_len = buf[p]
            p += 1
        if topic_len < 0 or p + topic_len + 2 > end:
            return None, total, f"topic length {topic_len} overruns the record"
        topic_at = p
        p += topic_len
        (props_len,) = SHORT.unpack_from(buf, p)
        p += 2
        if props_len < 0 or p + props_len != end:
            return None, total, f"lengths add up to {p + props_len - pos}, TOTALSIZE is {total}"
        if check_crc and props_len >= CRC32_RESERVED_LENGTH:
            tail = bytes(buf[end - CRC32_RESERVED_LENGTH : end])
            if tail.startswith(CRC32_TAIL_HEAD) and tail.endswith(b"\x02"):
                expected = int(tail[9:19].decode("ascii")[::-1])
                if zlib.crc32(buf[pos : end - CRC32_RESERVED_LENGTH]) & 0x7FFFFFFF != expected:
                    return None, total, "whole-record CRC mismatch"
    except (struct.error, IndexError, ValueError) as exc:
        return None, total, f"undecodable record: {exc}"
    span = _new_span(RecordSpan, (
        total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts,
        pos + BORN_HOST_POSITION, born_len, store_ts, store_at, store_len, reconsume, prepared,
        body_at, body_len, topic_at, topic_len, p, props_len,
    ))  # fmt: skip
    return span, total, ""


def record_starts(buf: Buffer, start: int, limit: int) -> list[int]:
    """Where each record begins from ``start``, stepping by TOTALSIZE while the record at hand
    is a whole one (:func:`walk` without CRCs); stops at a BLANK, a bad record or ``limit``.

    The reference for ``_native.record_starts`` on well-formed records (which, as the segment
    parser's fast path, checks only MAGICCODE and TOTALSIZE): ``tests/store/test_layout.py``.
    """
    starts: list[int] = []
    pos = start
    while pos < limit:
        span, size, _ = walk(buf, pos, limit, check_crc=False)
        if span is None:
            break
        starts.append(pos)
        pos += size
    return starts
