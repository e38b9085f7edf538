"""Checking commit-log records where they are read back: field by field with dispatch info
(:func:`check_record`, RocketMQ ``checkMessageAndReturnSize``), or structure only
(:func:`check_structure`, recovery's fast path). The layout and its one walk are :mod:`layout`'s.

Every length must stay inside the readable region and add up to TOTALSIZE, so that a torn write
never passes; the body CRC and, when present, the whole-record CRC are verified on request.
Pure: no IO. Called by the commit log (recovery scans, reads), dispatch, verification,
replication (membership records) and the pipeline.
"""

from __future__ import annotations

from typing import NamedTuple

from gannet.node.store import properties as props
from gannet.node.store.hashing import tags_code
from gannet.node.store.log import layout
from gannet.node.store.log.layout import BLANK, LONG, MAGIC_BLANK, MAGIC_V1, MAGIC_V2, Buffer
from gannet.node.store.log.records import DispatchInfo
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
    span, size, error = layout.walk(buf, pos, limit, check_crc=check_crc)
    if span is None:
        return CheckResult(size == 0, size, error=error)
    try:
        return _dispatch_info(buf, span, delivery_time_of_level)
    except ValueError as exc:  # a topic that is not UTF-8
        return CheckResult(False, size, error=f"undecodable record: {exc}")


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


def _topic(buf: Buffer, topic_at: int, topic_length: int) -> str:
    """The TOPIC of a walked record, decoded once per distinct topic."""
    raw_topic = bytes(buf[topic_at : topic_at + topic_length])
    topic = _TOPICS.get(raw_topic)
    if topic is None:
        topic = raw_topic.decode("utf-8")
        if len(_TOPICS) < _TOPICS_CACHE_MAX:
            _TOPICS[raw_topic] = topic
    return topic


def _dispatch_info(
    buf: Buffer, span: layout.RecordSpan, resolver: DelayResolver | None
) -> CheckResult:
    (total, _, _, queue_id, _, queue_offset, physical_offset, sys_flag, _, _, _, store_ts, _, _,
     _, prepared, _, _, topic_at, topic_len, props_at, props_len) = span  # fmt: skip
    topic = _topic(buf, topic_at, topic_len)
    prop_map: dict[str, str] = {}
    if props_len:
        raw = bytes(buf[props_at : props_at + props_len])
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
    span, size, error = layout.walk(buf, pos, limit, check_crc=check_crc)
    if span is None:
        return None, size, error
    (_, _, _, queue_id, _, queue_offset, physical_offset, sys_flag, _, _, _, store_ts, _, _, _,
     _, _, _, topic_at, topic_len, _, _) = span  # fmt: skip
    try:
        topic = _topic(buf, topic_at, topic_len)
    except ValueError as exc:  # a topic that is not UTF-8
        return None, size, f"undecodable record: {exc}"
    head = RecordHead(size, topic, queue_id, queue_offset, physical_offset, sys_flag, store_ts)
    return head, size, ""


def misplaced_start(data: bytes, offset: int, file_size: int) -> str | None:
    """Why ``data`` cannot be the bytes that start at ``offset``, a record boundary of the log
    it is written to (None: it may be; too few bytes to tell pass).

    A message record names its own position (PHYSICALOFFSET); a BLANK closes the file holding
    ``offset``. Bytes that start elsewhere (inside a record, or at a record written for another
    position) mean that this log's end is not the writer's: Raft's log matching was broken."""
    if len(data) < BLANK.size:
        return None
    size, magic = BLANK.unpack_from(data, 0)
    if magic == MAGIC_BLANK:
        if offset % file_size + size != file_size:
            return f"a BLANK of {size} bytes at {offset} does not close its file"
        return None
    if magic not in (MAGIC_V1, MAGIC_V2):
        return f"magic {magic:#x} at {offset} starts no record (bytes from inside one?)"
    if len(data) < layout.PHYSICAL_OFFSET_POSITION + LONG.size:
        return None
    (physical,) = LONG.unpack_from(data, layout.PHYSICAL_OFFSET_POSITION)
    if physical != offset:
        return f"the record written at {offset} was made for offset {physical}"
    return None
