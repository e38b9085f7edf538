"""Reading a queue by queue offset (``DefaultMessageStore.getMessage``), with RocketMQ's status
rules, so that pull, Pop and the CLI share one definition of "what is there".

Statuses: no consume queue → NO_MATCHED_LOGIC_QUEUE; empty queue → NO_MESSAGE_IN_QUEUE;
offset < min → OFFSET_TOO_SMALL (next = min); offset == max → OFFSET_OVERFLOW_ONE; offset > max
→ OFFSET_OVERFLOW_BADLY (next = max); otherwise units are scanned — at most
``max(16000, max_count × 20)`` bytes of consume queue, at most ``max_count`` messages and
``READ_BYTES_MAX`` bytes of messages. A unit is skipped when ``tag_filter`` refuses it (no
commit-log read) or when ``record_filter`` refuses the record's bytes (RocketMQ's
``isMatchedByConsumeQueue`` / ``isMatchedByCommitLog``); all filtered out →
NO_MATCHED_MESSAGE; units whose
commit-log bytes are gone (cleaned) → MESSAGE_WAS_REMOVING; the file holding the offset is gone
→ OFFSET_FOUND_NULL (next = start of the next file).

:func:`read_queue_records` reads the same way without filters, in bulk (Admin PullRecords): the
records back to back in one byte string, records that follow each other in the commit log
copied as one slice.

Pure with respect to the store's state: no writes. Called by :class:`MessageStore`.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gannet.node.store.queues.consume_queue_store import ConsumeQueueStore
from gannet.node.store.queues.consume_queues import ConsumeQueue, CqUnit


class StoredBytes(Protocol):
    """Commit-log bytes by physical offset (``tier.routing.RecordReads``: a local file or the
    tier; a plain ``CommitLog`` reads local files only)."""

    def read(self, offset: int, size: int) -> bytes | None: ...

    def min_offset(self) -> int: ...


READ_COUNT_MAX = 1024
READ_BYTES_MAX = 4 * 1024 * 1024
PRE_BLANK_SIZE = 0x7FFFFFFF


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One record read through a consume queue: its raw bytes and where it lives."""

    queue_offset: int
    commit_offset: int
    data: bytes
    tags_code: int


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    records: bytes = b""
    """With :func:`read_queue_records`: the records of ``records_count`` messages, back to back."""
    records_count: int = 0


def _locate(
    queues: ConsumeQueueStore, topic: str, queue_id: int, offset: int
) -> tuple[ConsumeQueue | None, GetResult | None]:
    """The queue to read, or the result when ``offset`` is not inside it (the status rules)."""
    cq = queues.get(topic, queue_id)
    if cq is None:
        return None, GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    lo, hi = cq.min_offset_in_queue(), cq.max_offset_in_queue()
    if hi == 0:
        return cq, GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
    if offset < lo:
        return cq, GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
    if offset == hi:
        return cq, GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
    if offset > hi:
        return cq, GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
    return cq, None


def read_queue(
    queues: ConsumeQueueStore,
    commitlog: StoredBytes,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    tag_filter: Callable[[CqUnit], bool] | None,
    record_filter: Callable[[bytes], bool] | None = None,
) -> GetResult:
    max_count = max(1, min(max_count, READ_COUNT_MAX))
    cq, early = _locate(queues, topic, queue_id, offset)
    if early is not None:
        return early
    assert cq is not None
    lo, hi = cq.min_offset_in_queue(), cq.max_offset_in_queue()
    # A filter may skip units, so scan up to maxFilterMessageSize of queue; without one
    # exactly max_count units are wanted (pre-blank and removed units are rare).
    filtered = tag_filter is not None or record_filter is not None
    scan_units_max = max(16000, max_count * 20) // 20 if filtered else max_count
    units = cq.read_units(offset, min(scan_units_max, hi - offset))
    if not units:
        return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), lo, hi)
    result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, lo, hi)
    commit_min = commitlog.min_offset()
    removed = 0
    size_total = 0
    for unit in units:
        result.next_begin_offset = unit.queue_offset + 1
        if unit.size == PRE_BLANK_SIZE or unit.commit_offset < commit_min:
            removed += 1
            continue
        if tag_filter is not None and not tag_filter(unit):
            continue
        data = commitlog.read(unit.commit_offset, unit.size)
        if data is None:
            removed += 1
            continue
        if record_filter is not None and not record_filter(data):
            continue
        result.messages.append(
            StoredMessage(unit.queue_offset, unit.commit_offset, data, unit.tags_code)
        )
        size_total += unit.size
        if len(result.messages) >= max_count or size_total >= READ_BYTES_MAX:
            break
    if result.messages:
        result.status = GetStatus.FOUND
    elif removed:
        result.status = GetStatus.MESSAGE_WAS_REMOVING
    return result


_UNIT = struct.Struct(">qiq")


def read_queue_records(
    queues: ConsumeQueueStore,
    commitlog: StoredBytes,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    bytes_max: int,
) -> GetResult:
    """What :func:`read_queue` reads without filters, in bulk: the records themselves, back to
    back in ``records`` (``messages`` stays empty), at most ``bytes_max`` of them (at least one
    record when any is there) and :data:`READ_BYTES_MAX`.

    Same statuses, units and bounds: the consume queue's units are read as one byte string and
    unpacked without an object per unit, and records that follow each other in the commit log
    (a batch sent to one queue) are copied as one slice of the mapped file. A run whose bytes
    are not all stored any more is read record by record, as :func:`read_queue` does.
    """
    max_count = max(1, min(max_count, READ_COUNT_MAX))
    bytes_max = max(1, min(bytes_max, READ_BYTES_MAX))
    cq, early = _locate(queues, topic, queue_id, offset)
    if early is not None:
        return early
    assert cq is not None
    lo, hi = cq.min_offset_in_queue(), cq.max_offset_in_queue()
    raw = cq.read_unit_bytes(offset, min(max_count, hi - offset))
    if not raw:
        return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), lo, hi)
    units = list(_UNIT.iter_unpack(raw))
    commit_min = commitlog.min_offset()
    runs: list[tuple[int, int]] = []  # [first, past) indexes into units, contiguous records
    first = last = -1
    run_end = removed = count = size_total = taken = 0
    for i, (commit_offset, size, _) in enumerate(units):
        if size == PRE_BLANK_SIZE or commit_offset < commit_min:
            removed += 1
            taken = i + 1
            continue
        if count and size_total + size > bytes_max:
            break
        if first < 0 or commit_offset != run_end or last != i - 1:
            if first >= 0:
                runs.append((first, last + 1))
            first = i
        run_end = commit_offset + size
        last = i
        count += 1
        size_total += size
        taken = i + 1
    if first >= 0:
        runs.append((first, last + 1))
    parts: list[bytes] = []
    count = 0
    for first, past in runs:
        at = units[first][0]
        data = commitlog.read(at, units[past - 1][0] + units[past - 1][1] - at)
        if data is not None:
            parts.append(data)
            count += past - first
            continue
        for commit_offset, size, _ in units[first:past]:  # as read_queue: missing = removed
            one = commitlog.read(commit_offset, size)
            if one is None:
                removed += 1
            else:
                parts.append(one)
                count += 1
    status = GetStatus.FOUND
    if not count:
        status = GetStatus.MESSAGE_WAS_REMOVING if removed else GetStatus.NO_MATCHED_MESSAGE
    return GetResult(status, offset + taken, lo, hi, records=b"".join(parts), records_count=count)
