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
    # A filter may skip units, so scan up to maxFilterMessageSize of queue; without one
    # exactly max_count units are wanted (pre-blank and removed units are rare).
    filtered = tag_filter is not None or record_filter is not None
    units_max = max(16000, max_count * 20) // 20 if filtered else max_count
    return _scan(
        cq, commitlog, offset, units_max, max_count, READ_BYTES_MAX, tag_filter, record_filter
    )


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

    Same statuses, units and bounds (the same loop, :func:`_scan`): records that follow each
    other in the commit log (a batch sent to one queue) are copied as one slice of the mapped
    file. A run whose bytes are not all stored any more is read record by record, as
    :func:`read_queue` does.
    """
    max_count = max(1, min(max_count, READ_COUNT_MAX))
    bytes_max = max(1, min(bytes_max, READ_BYTES_MAX))
    cq, early = _locate(queues, topic, queue_id, offset)
    if early is not None:
        return early
    assert cq is not None
    return _scan(cq, commitlog, offset, max_count, max_count, bytes_max, None, None, bulk=True)


_UNIT = struct.Struct(">qiq")


def _scan(
    cq: ConsumeQueue,
    commitlog: StoredBytes,
    offset: int,
    units_max: int,
    max_count: int,
    bytes_max: int,
    tag_filter: Callable[[CqUnit], bool] | None,
    record_filter: Callable[[bytes], bool] | None,
    *,
    bulk: bool = False,
) -> GetResult:
    """The one loop over a queue's units from ``offset`` (inside the queue), for both reads.

    The units (at most ``units_max``) are read as one byte string and unpacked without an
    object per unit (a :class:`CqUnit` is made only for ``tag_filter``). A unit that is a
    pre-blank or lies below the commit log's start is removed; one ``tag_filter`` refuses is
    skipped. Per record (``bulk`` False): each record is read at once — gone: removed;
    refused by ``record_filter``: skipped — and the scan stops once ``max_count`` messages or
    ``bytes_max`` bytes are taken. ``bulk``: a record that would pass ``bytes_max`` ends the
    scan before it (unless it is the first), and the records are read afterwards, each run of
    records back to back in the commit log as one slice (a run that is not all there: record
    by record, gone ones removed)."""
    lo, hi = cq.min_offset_in_queue(), cq.max_offset_in_queue()
    raw = cq.read_unit_bytes(offset, min(units_max, hi - offset))
    if not raw:
        return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), lo, hi)
    commit_min = commitlog.min_offset()
    messages: list[StoredMessage] = []
    runs: list[tuple[int, int, int, int]] = []  # bulk: first, past unit index; commit offsets
    next_begin = offset + len(raw) // _UNIT.size  # unless the scan stops early
    removed = count = size_total = 0
    first = last = -1  # bulk: the open run of records back to back, as unit indexes
    run_start = run_end = 0
    for i, (commit_offset, size, tags_code) in enumerate(_UNIT.iter_unpack(raw)):
        if size == PRE_BLANK_SIZE or commit_offset < commit_min:
            removed += 1
            continue
        if bulk:
            if count and size_total + size > bytes_max:
                next_begin = offset + i  # this one is left for the next read
                break
            if first < 0 or commit_offset != run_end or last != i - 1:
                if first >= 0:
                    runs.append((first, last + 1, run_start, run_end))
                first, run_start = i, commit_offset
            run_end = commit_offset + size
            last = i
            count += 1
            size_total += size
            continue
        if tag_filter is not None and not tag_filter(
            CqUnit(offset + i, commit_offset, size, tags_code)
        ):
            continue
        data = commitlog.read(commit_offset, size)
        if data is None:
            removed += 1
            continue
        if record_filter is not None and not record_filter(data):
            continue
        messages.append(StoredMessage(offset + i, commit_offset, data, tags_code))
        size_total += size
        if len(messages) >= max_count or size_total >= bytes_max:
            next_begin = offset + i + 1
            break
    if first >= 0:
        runs.append((first, last + 1, run_start, run_end))
    if not bulk:
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, next_begin, lo, hi, messages)
        if messages:
            result.status = GetStatus.FOUND
        elif removed:
            result.status = GetStatus.MESSAGE_WAS_REMOVING
        return result
    parts: list[bytes] = []
    count = 0
    for first, past, at, end in runs:
        data = commitlog.read(at, end - at)
        if data is not None:
            parts.append(data)
            count += past - first
            continue
        for i in range(first, past):  # as per record: missing = removed
            commit_offset, size, _ = _UNIT.unpack_from(raw, i * _UNIT.size)
            one = commitlog.read(commit_offset, size)
            if one is None:
                removed += 1
            else:
                parts.append(one)
                count += 1
    status = GetStatus.FOUND
    if not count:
        status = GetStatus.MESSAGE_WAS_REMOVING if removed else GetStatus.NO_MATCHED_MESSAGE
    return GetResult(status, next_begin, lo, hi, records=b"".join(parts), records_count=count)
