"""Reads by commit-log offset: from the local file, or from the tier below the local start.

The one owner of that choice. Every read of records by physical offset in the store goes
through :class:`RecordReads` — messages by offset (ids, Pop, transactions, timers), the queue
reads of pull and Pop (:mod:`gannet.node.store.queues.reading`, consume queue → commit log),
queries by key and time (the index and consume queues stay local, the records they point at
may be in the tier) and ``gannet store get``.

The rule (:func:`where`): an offset at or above the first local file's start is read locally
(a file both local and offloaded — the hot copy the planner keeps — is read from disk); below
it, from the tier when the manifest holds it; otherwise it is gone (expired or never kept). A
local read that finds nothing below the local start (a file deleted since the choice) asks the
tier too. :meth:`RecordReads.min_offset` is the lowest readable offset: the tier's start when
the tier reaches up to the local files, so consume queues keep their units for offloaded
records (recovery and cleanup correct queue minimums with it).

A topic may bound how long its records are served from the tier (the topic attribute
``gannet.tier.remote.retention.s``, ``docs/tiered-storage.md`` §6): ``topic_retention_s(topic)``
gives it, and a record read from the tier whose store time is older (``0``: any record) is
answered as removed, exactly as a record the tier no longer holds (:func:`served_from_tier`).
Local reads are never affected: a file still on disk serves the topic as without a tier. A read
of fewer bytes than one whole record (the 4-byte size probe) is not judged.

Tier reads run in the calling thread (never on the event loop: the protocol layers call the
store through worker threads) and take no store lock: a reader blocked on a slow bucket holds
nothing the append path or a read at the head needs. :class:`~errors.TierUnavailable` (the
bucket is down or busy) propagates to the caller, who answers it as retryable.
"""

from __future__ import annotations

import enum
import struct
import time
from collections.abc import Callable

from gannet.node.store.log import layout
from gannet.node.store.log.commitlog import CommitLog, decode_stored
from gannet.node.store.log.records import Message
from gannet.node.store.tier import manifests, reading

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


class Where(enum.Enum):
    LOCAL = "local"
    TIER = "tier"
    GONE = "gone"


def where(offset: int, local_min_offset: int, manifest: manifests.Manifest | None) -> Where:
    """Which store holds commit-log ``offset`` (module docstring)."""
    if offset >= local_min_offset:
        return Where.LOCAL
    if manifest is not None and manifest.locate(offset) is not None:
        return Where.TIER
    return Where.GONE


def readable_min_offset(local_min_offset: int, manifest: manifests.Manifest | None) -> int:
    """The lowest readable offset: the tier's start when the tier reaches the local files."""
    if manifest is None or manifest.start_offset is None or manifest.end_offset is None:
        return local_min_offset
    if manifest.end_offset < local_min_offset:  # a gap: the tier is not contiguous with disk
        return local_min_offset
    return min(manifest.start_offset, local_min_offset)


TopicRetention = Callable[[str], int | None]
"""A topic's tier retention in seconds (None: the tier's own retention only)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _no_topic_retention(_: str) -> int | None:
    return None


def served_from_tier(
    topic: str, store_timestamp_ms: int, retention_of: TopicRetention, now_ms: int
) -> bool:
    """Whether a record of ``topic`` stored at ``store_timestamp_ms`` may be served from the tier
    at ``now_ms``: always without a topic retention, else while younger than it."""
    retention_s = retention_of(topic)
    return retention_s is None or now_ms - store_timestamp_ms < retention_s * 1000


def _first_record(data: bytes) -> tuple[str, int] | None:
    """Topic and store time of the whole record at the start of ``data`` (None: not one)."""
    span, _, _ = layout.walk(data, 0, len(data), check_crc=False)
    if span is None:
        return None
    topic = data[span.topic_at : span.topic_at + span.topic_length].decode(errors="replace")
    return topic, span.store_timestamp_ms


class RecordReads:
    """Reads of the commit log by physical offset, local or tiered (module docstring)."""

    def __init__(
        self,
        commitlog: CommitLog,
        tier: reading.TierReader | None = None,
        *,
        topic_retention_s: TopicRetention = _no_topic_retention,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.commitlog = commitlog
        self.tier = tier
        self.topic_retention_s = topic_retention_s
        self._clock_ms = clock_ms
        self.read: Callable[[int, int], bytes | None] = (
            commitlog.read if tier is None else self._read_either
        )
        """Raw bytes of ``size`` at ``offset``, or None when stored in neither place."""

    def min_offset(self) -> int:
        local = self.commitlog.min_offset()
        if self.tier is None:
            return local
        return readable_min_offset(local, self.tier.manifest())

    def where(self, offset: int) -> Where:
        manifest = self.tier.manifest() if self.tier is not None else None
        return where(offset, self.commitlog.min_offset(), manifest)

    def _tier_holds(self, offset: int) -> reading.TierReader | None:
        tier = self.tier
        if tier is None or offset >= self.commitlog.min_offset():
            return None
        return tier if tier.manifest().locate(offset) is not None else None

    def _read_either(self, offset: int, size: int) -> bytes | None:
        data = self.commitlog.read(offset, size)
        if data is not None:
            return data
        tier = self._tier_holds(offset)
        if tier is None:
            return None
        try:
            data = tier.read(offset, size)
        except reading.OffsetNotInTier:  # expired meanwhile, or a range past the file's end
            return None
        first = _first_record(data)
        if first is not None and not self._served(*first):
            return None  # the topic's tier retention: removed (a bulk run falls back per record)
        return data

    def _served(self, topic: str, store_timestamp_ms: int) -> bool:
        return served_from_tier(topic, store_timestamp_ms, self.topic_retention_s, self._clock_ms())

    def record_size_at(self, offset: int) -> int:
        """TOTALSIZE of the record at ``offset`` (−1 when stored in neither place)."""
        size = self.commitlog.record_size_at(offset)
        if size >= 0:
            return size
        data = self._read_either(offset, _INT.size) if self.tier is not None else None
        return -1 if data is None else int(_INT.unpack(data)[0])

    def read_message(self, offset: int) -> Message | None:
        """The decoded record at ``offset`` (``lookMessageByOffset``), None if absent."""
        msg = self.commitlog.read_message(offset)
        if msg is not None:
            return msg
        tier = self._tier_holds(offset)
        if tier is None:
            return None
        try:
            data = tier.read_record(offset)
        except reading.OffsetNotInTier:
            return None
        msg = decode_stored(data, offset)
        return msg if self._served(msg.topic, msg.store_timestamp_ms) else None

    def store_timestamp_at(self, offset: int, size: int) -> int:
        """Store time of the record of ``size`` at ``offset``, −1 when absent (time search)."""
        stamp = self.commitlog.store_timestamp_at(offset, size)
        if stamp >= 0 or self._tier_holds(offset) is None:
            return stamp
        data = self._read_either(offset, size)
        if data is None or len(data) < layout.SYSFLAG_POSITION + _INT.size:
            return -1
        (sys_flag,) = _INT.unpack_from(data, layout.SYSFLAG_POSITION)
        at = layout.store_timestamp_position(sys_flag)
        if at + _LONG.size > len(data):
            return -1
        return int(_LONG.unpack_from(data, at)[0])
