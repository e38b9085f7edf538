"""Checking commit-log records where they are read back: field by field with dispatch info
(:func:`check_record`, RocketMQ ``checkMessageAndReturnSize``), or structure only
(:func:`check_structure`, recovery's fast path). The layout is :mod:`records`'.

Every length must stay inside the readable region and add up to TOTALSIZE, so that a torn write
never passes; the body CRC and, when present, the whole-record CRC are verified on request.
Pure: no IO. Called by the commit log (recovery scans, reads), dispatch, verification,
replication (membership records) and the pipeline.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from gannet.node.store import properties as props
from gannet.node.store.hashing import tags_code
from gannet.node.store.log.records import (
    _BLANK,
    _FIXED_V4,
    _HEAD,
    _INT,
    _LONG,
    _SHORT,
    CRC32_RESERVED_LENGTH,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    PHYSICAL_OFFSET_POSITION,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_POSITION,
    SYSFLAG_STOREHOST_V6,
    Buffer,
    DispatchInfo,
    host_length,
)
from gannet.node.store.validation import SCHEDULE_TOPIC


class CheckResult(NamedTuple):
    """Outcome of :func:`check_record` (``checkMessageAndReturnSize``).

    ``ok`` with ``size == 0`` is a BLANK (end of file); ``ok`` with ``size > 0`` carries
    ``info``; not ``ok`` carries ``error`` and ``size`` (> 0 when the declared size can be
    trusted enough to skip the record, else -1).
    """

    ok: bool
    size: int
    info: DispatchInfo | None = None
    error: str = ""


def check_record(
    buf: Buffer,
    pos: int,
    limit: int,
    *,
    check_crc: bool,
    delivery_time_of_level: DelayResolver | None = None,
) -> CheckResult:
    """Validate the record at ``buf[pos:limit]`` field by field and extract its dispatch info.

    ``limit`` is the end of the readable region (file end or write position). The rules are
    RocketMQ's, tightened where a torn write could otherwise pass: every length must stay
    inside the region and add up to TOTALSIZE.
    """
    avail = limit - pos
    if avail < 8:
        return CheckResult(False, -1, error="fewer than 8 bytes remain")
    total, magic = _BLANK.unpack_from(buf, pos)
    if magic == MAGIC_BLANK:
        return CheckResult(True, 0)
    if magic not in (MAGIC_V1, MAGIC_V2):
        return CheckResult(False, -1, error=f"bad magic code 0x{magic & 0xFFFFFFFF:08X}")
    if total <= 0 or total > avail or total < 91:
        return CheckResult(False, -1, error=f"total size {total} outside the readable region")
    try:
        return _check_fields(buf, pos, total, magic, check_crc, delivery_time_of_level)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        return CheckResult(False, total, error=f"undecodable record: {exc}")


class DelayResolver:
    """Maps a legacy delay level to the delivery timestamp of a stored message
    (``docs/formats/commitlog.md`` §8, ``docs/formats/timers.md`` §4)."""

    def __init__(self, level_delays_ms: list[int]) -> None:
        self.level_delays_ms = level_delays_ms

    def delivery_timestamp(self, level: int, store_timestamp_ms: int) -> int:
        level = min(level, len(self.level_delays_ms))
        if level <= 0:
            return store_timestamp_ms + 1000
        return store_timestamp_ms + self.level_delays_ms[level - 1]


_TOPICS: dict[bytes, str] = {}
_TOPICS_CACHE_MAX = 10_000


def _host_dependent_fields(buf: Buffer, pos: int, sys_flag: int) -> tuple[int, int, int]:
    """(store time, prepared offset, position of BODY LENGTH) for any host kinds."""
    p = pos + 48 + host_length(sys_flag, SYSFLAG_BORNHOST_V6)
    (store_ts,) = _LONG.unpack_from(buf, p)
    p += 8 + host_length(sys_flag, SYSFLAG_STOREHOST_V6) + 4
    (prepared,) = _LONG.unpack_from(buf, p)
    return store_ts, prepared, p + 8


def _check_fields(
    buf: Buffer,
    pos: int,
    total: int,
    magic: int,
    check_crc: bool,
    resolver: DelayResolver | None,
) -> CheckResult:
    (sys_flag,) = _INT.unpack_from(buf, pos + SYSFLAG_POSITION)
    if sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) == 0:
        (_, _, crc, queue_id, _, queue_offset, physical_offset, _, _, _, store_ts, _, _,
         prepared, body_len) = _FIXED_V4.unpack_from(buf, pos)  # fmt: skip
        p = pos + _FIXED_V4.size
    else:
        _, _, crc, queue_id, _, queue_offset, physical_offset, _, _ = _HEAD.unpack_from(buf, pos)
        store_ts, prepared, p = _host_dependent_fields(buf, pos, sys_flag)
        (body_len,) = _INT.unpack_from(buf, p)
        p += 4
    end = pos + total
    if body_len < 0 or p + body_len > end:
        return CheckResult(False, total, error=f"body length {body_len} overruns the record")
    if check_crc and zlib.crc32(buf[p : p + body_len]) & 0x7FFFFFFF != crc:
        return CheckResult(False, total, error="body CRC mismatch")
    p += body_len
    if magic == MAGIC_V2:
        (topic_len,) = _SHORT.unpack_from(buf, p)
        p += 2
    else:
        topic_len = buf[p]
        p += 1
    if topic_len < 0 or p + topic_len > end:
        return CheckResult(False, total, error=f"topic length {topic_len} overruns the record")
    raw_topic = bytes(buf[p : p + topic_len])
    topic = _TOPICS.get(raw_topic)
    if topic is None:
        topic = raw_topic.decode("utf-8")
        if len(_TOPICS) < _TOPICS_CACHE_MAX:
            _TOPICS[raw_topic] = topic
    p += topic_len
    (props_len,) = _SHORT.unpack_from(buf, p)
    p += 2
    if props_len < 0 or p + props_len != end:
        return CheckResult(
            False, total, error=f"lengths add up to {p + props_len - pos}, TOTALSIZE is {total}"
        )
    prop_map: dict[str, str] = {}
    if props_len:
        raw = bytes(buf[p : p + props_len])
        if check_crc and raw.endswith(b"\x02") and raw[-20:-11] == b"__CRC32#\x01":
            expected = int(raw[-11:-1].decode("ascii")[::-1])
            actual = zlib.crc32(buf[pos : end - CRC32_RESERVED_LENGTH]) & 0x7FFFFFFF
            if expected != actual:
                return CheckResult(False, total, error="whole-record CRC mismatch")
        # Invalid UTF-8 becomes U+FFFD, as Java's new String(bytes, UTF_8) does in RocketMQ:
        # no CRC covers V1 properties, and recovery's fast path does not decode them either.
        prop_map = props.decode(raw.decode("utf-8", errors="replace"))
    code = tags_code(prop_map.get(props.TAGS))
    if resolver is not None and topic == SCHEDULE_TOPIC:
        level = prop_map.get(props.DELAY_TIME_LEVEL)
        if level is not None and level.isdigit():
            code = resolver.delivery_timestamp(int(level), store_ts)
    info = DispatchInfo(
        topic,
        queue_id,
        physical_offset,
        total,
        code,
        store_ts,
        queue_offset,
        prop_map.get(props.KEYS),
        prop_map.get(props.UNIQ_KEY),
        sys_flag,
        prepared,
        prop_map,
    )
    return CheckResult(True, total, info)


class RecordHead(NamedTuple):
    """The fields recovery needs of a record, read without decoding its properties."""

    size: int
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    store_timestamp_ms: int


def check_structure(
    buf: Buffer, pos: int, limit: int, *, check_crc: bool
) -> tuple[RecordHead | None, int, str]:
    """Validate a record like :func:`check_record` (lengths, magic, body CRC, whole-record
    CRC when present) but without parsing properties: recovery's fast path.

    Returns ``(head, size, error)``: a head for a valid record, ``(None, 0, "")`` for a BLANK,
    ``(None, size, error)`` for an invalid one.
    """
    if limit - pos < 8:
        return None, -1, "fewer than 8 bytes remain"
    total, magic = _BLANK.unpack_from(buf, pos)
    if magic == MAGIC_BLANK:
        return None, 0, ""
    if magic not in (MAGIC_V1, MAGIC_V2):
        return None, -1, f"bad magic code 0x{magic & 0xFFFFFFFF:08X}"
    if total <= 0 or total > limit - pos or total < 91:
        return None, -1, f"total size {total} outside the readable region"
    (sys_flag,) = _INT.unpack_from(buf, pos + SYSFLAG_POSITION)
    try:
        if sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) == 0:
            (_, _, crc, queue_id, _, queue_offset, physical_offset, _, _, _, store_ts, _, _,
             _, body_len) = _FIXED_V4.unpack_from(buf, pos)  # fmt: skip
            p = pos + _FIXED_V4.size
        else:
            _, _, crc, queue_id, _, queue_offset, physical_offset, _, _ = _HEAD.unpack_from(
                buf, pos
            )
            store_ts, _, p = _host_dependent_fields(buf, pos, sys_flag)
            (body_len,) = _INT.unpack_from(buf, p)
            p += 4
        end = pos + total
        if body_len < 0 or p + body_len > end:
            return None, total, f"body length {body_len} overruns the record"
        if check_crc and zlib.crc32(buf[p : p + body_len]) & 0x7FFFFFFF != crc:
            return None, total, "body CRC mismatch"
        p += body_len
        if magic == MAGIC_V2:
            (topic_len,) = _SHORT.unpack_from(buf, p)
            p += 2
        else:
            topic_len = buf[p]
            p += 1
        if topic_len < 0 or p + topic_len + 2 > end:
            return None, total, f"topic length {topic_len} overruns the record"
        raw_topic = bytes(buf[p : p + topic_len])
        (props_len,) = _SHORT.unpack_from(buf, p + topic_len)
        if props_len < 0 or p + topic_len + 2 + props_len != end:
            return (
                None,
                total,
                f"lengths add up to {p + topic_len + 2 + props_len - pos}, TOTALSIZE is {total}",
            )
        if check_crc and props_len >= CRC32_RESERVED_LENGTH:
            tail = bytes(buf[end - CRC32_RESERVED_LENGTH : end])
            if tail.startswith(b"__CRC32#\x01") and tail.endswith(b"\x02"):
                expected = int(tail[9:19].decode("ascii")[::-1])
                if zlib.crc32(buf[pos : end - CRC32_RESERVED_LENGTH]) & 0x7FFFFFFF != expected:
                    return None, total, "whole-record CRC mismatch"
        topic = _TOPICS.get(raw_topic)
        if topic is None:
            topic = raw_topic.decode("utf-8")
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        return None, total, f"undecodable record: {exc}"
    head = RecordHead(total, topic, queue_id, queue_offset, physical_offset, sys_flag, store_ts)
    return head, total, ""


def misplaced_start(data: bytes, offset: int, file_size: int) -> str | None:
    """Why ``data`` cannot be the bytes that start at ``offset``, a record boundary of the log
    it is written to (None: it may be; too few bytes to tell pass).

    A message record names its own position (PHYSICALOFFSET); a BLANK closes the file holding
    ``offset``. Bytes that start elsewhere (inside a record, or at a record written for another
    position) mean that this log's end is not the writer's: Raft's log matching was broken."""
    if len(data) < _BLANK.size:
        return None
    size, magic = _BLANK.unpack_from(data, 0)
    if magic == MAGIC_BLANK:
        if offset % file_size + size != file_size:
            return f"a BLANK of {size} bytes at {offset} does not close its file"
        return None
    if magic not in (MAGIC_V1, MAGIC_V2):
        return f"magic {magic:#x} at {offset} starts no record (bytes from inside one?)"
    if len(data) < PHYSICAL_OFFSET_POSITION + _LONG.size:
        return None
    (physical,) = _LONG.unpack_from(data, PHYSICAL_OFFSET_POSITION)
    if physical != offset:
        return f"the record written at {offset} was made for offset {physical}"
    return None
