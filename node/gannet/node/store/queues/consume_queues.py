"""Consume queues: per-(topic, queue) position indexes over the commit log (``ConsumeQueue``).

One queue, its files and their 20-byte units: :class:`ConsumeQueue` writes, reads, recovers,
cuts and searches them. Called by the dispatcher (:meth:`ConsumeQueue.put` and
:meth:`ConsumeQueue.put_units` for every dispatched record) and by the read paths (pull, Pop,
queries by offset and by time) on one queue; recovery, truncation, cleanup and the pipeline's
rebuild job reach every queue through
:class:`~gannet.node.store.queues.consume_queue_store.ConsumeQueueStore`, which keeps them.
Byte-compatible with RocketMQ 5 (``docs/formats/queues.md`` §1).

Format. A queue lives in ``<root>/consumequeue/<topic>/<queueId>/`` as a sequence of
fixed-size files of ``StoreConfig.consume_queue_units_per_file`` units (300,000 by default).
Every unit is 20 bytes, big-endian::

    off  size  field
      0     8  commitLogOffset   long, global commit-log offset of the record
      8     4  size              int, TOTALSIZE of the record
     12     8  tagsCode          long, Java hash of TAGS (or a delivery time, or an ext address)

A file is named by the 20-digit decimal *logical byte offset* of its first unit, i.e.
``queueOffset × 20`` (with 100 units per file the second file is ``00000000000000002000``).
The queue offset of a unit is ``(file start + position) / 20``. A queue whose first file is
created for a non-zero queue offset fills the units before it with *pre-blank* units
``(0, 2147483647, 0)``; they are valid to the recovery scan but are never a message.

Deliberate deviations from the Java code, each where RocketMQ's behaviour is a latent bug:
pre-blank units never set ``max_physic_offset`` and never become the min offset; recovery sets
the min offset to the first real unit of the first file (RocketMQ leaves it at 0 until
``correctMinOffset``); a duplicate put for queue offset 0 is dropped like any other duplicate;
``correct_min_offset`` searches every file, not only the first.

Threading: one writer (the dispatch thread, or recovery/cleanup while dispatch is paused);
readers may run concurrently and see a unit only after its 20 bytes are in place. A read that
races with the deletion of its file returns nothing.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gannet.node.invariants import InvariantViolation
from gannet.node.store.config import StoreConfig
from gannet.node.store.log.mapped_files import MappedFile, MappedFileQueue

_log = logging.getLogger(__name__)

CQ_UNIT_SIZE_BYTES = 20
PRE_BLANK_SIZE = 2_147_483_647  # Integer.MAX_VALUE
_UNIT = struct.Struct(">qiq")
_UNIT_HEAD = struct.Struct(">qi")
PRE_BLANK_UNIT = _UNIT.pack(0, PRE_BLANK_SIZE, 0)


class Boundary(enum.Enum):
    """Which end of a run of equal store times a time search returns (``BoundaryType``)."""

    LOWER = "lower"
    UPPER = "upper"


@dataclass(frozen=True, slots=True)
class CqUnit:
    """One consume-queue entry, with the queue offset it sits at."""

    queue_offset: int
    commit_offset: int
    size: int
    tags_code: int


StoreTimeOf = Callable[[int, int], int]
"""``(commit_offset, size) -> store timestamp in ms``, or -1 when the record cannot be read."""


def is_pre_blank(commit_offset: int, size: int) -> bool:
    return commit_offset == 0 and size == PRE_BLANK_SIZE


def _java_div(dividend: int, divisor: int) -> int:
    """Integer division truncating toward zero (Java ``/``)."""
    quotient = abs(dividend) // divisor
    return quotient if dividend >= 0 else -quotient


class ConsumeQueue:
    """The consume queue of one (topic, queue id).

    Invariant: units in ``[min_logic_offset, written end)`` are real entries in commit-log
    order; bytes past each file's write position are zero.
    """

    def __init__(self, topic: str, queue_id: int, config: StoreConfig) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory: Path = config.consume_queue_dir / topic / str(queue_id)
        self._file_size = config.consume_queue_units_per_file * CQ_UNIT_SIZE_BYTES
        self._units_per_file = config.consume_queue_units_per_file
        self._mfq = MappedFileQueue(self.directory, self._file_size)
        # Commit-log end (offset + size) of the last unit written; -1 when unknown.
        self.max_physic_offset = -1
        # Logical byte offset of the first unit a reader may see.
        self._min_logic_offset = 0
        # Store times of files' first/last units, filled lazily by the time search.
        self._start_time_ms: dict[int, int] = {}
        self._stop_time_ms: dict[int, int] = {}

    # --- lifecycle ---
    def load(self) -> None:
        self._mfq.load()

    def recover(self) -> None:
        """Find the end of valid units and cut everything after it
        (``docs/formats/queues.md`` §1.5)."""
        files = self._mfq.files
        self._forget_times()
        if not files:
            return
        index = max(0, len(files) - 3)
        process_offset = files[index].file_from_offset
        while True:
            f = files[index]
            valid_bytes = self._scan_valid(f, self._file_size, None)
            process_offset = f.file_from_offset + valid_bytes
            if valid_bytes < self._file_size or index == len(files) - 1:
                break
            index += 1
        self._mfq.truncate_dirty_files(process_offset)
        self._min_logic_offset = max(self._min_logic_offset, self._first_real_unit_offset())

    def flush(self, least_pages: int) -> None:
        self._mfq.flush(least_pages)

    def close(self) -> None:
        self._mfq.close()

    def destroy(self) -> None:
        """Delete every file and the queue's directory."""
        self._mfq.destroy()
        self._forget_times()
        self.max_physic_offset = -1
        self._min_logic_offset = 0
        remove_empty_dir(self.directory)

    # --- dispatch ---
    def put(self, commit_offset: int, size: int, tags_code: int, queue_offset: int) -> None:
        """Append the unit of one dispatched record (``docs/formats/queues.md`` §1.2–§1.3);
        idempotent for rebuilt entries."""
        if commit_offset + size <= self.max_physic_offset:
            return
        if not (min(commit_offset, queue_offset) >= 0 < size):
            raise InvariantViolation(
                f"{self.topic}-{self.queue_id}: unit (commit offset {commit_offset}, size {size}, "
                f"queue offset {queue_offset}) cannot point at a record"
            )
        expect = queue_offset * CQ_UNIT_SIZE_BYTES
        files = self._mfq.files
        if files:
            f = files[-1]
            current = f.file_from_offset + f.wrote_position
            if expect != current:
                if expect < current:
                    return  # already written: a duplicate dispatch
                _log.warning(
                    "[BUG] logic queue order maybe wrong: %s-%d expects %d, queue ends at %d",
                    self.topic,
                    self.queue_id,
                    expect,
                    current,
                )
            if f.wrote_position >= self._file_size:
                f = self._mfq.create_file(f.file_from_offset + self._file_size)
        else:
            f = self._create_first_file(expect)
        position = f.wrote_position
        _UNIT.pack_into(f.buffer, position, commit_offset, size, tags_code)
        f.wrote_position = position + CQ_UNIT_SIZE_BYTES
        self.max_physic_offset = commit_offset + size

    def put_units(
        self, units: bytes, first_queue_offset: int, first_end: int, last_end: int
    ) -> bool:
        """Append packed units (those :meth:`put` would write, in order, for records with
        consecutive queue offsets from ``first_queue_offset``; ``first_end`` and ``last_end`` the
        commit-log ends of the first and last record) with one copy. False, writing nothing,
        unless it is that plain case: the queue ends just before them, holds nothing at or past
        ``first_end`` and its last file has room; the caller then puts them one by one."""
        if not (
            len(units) % CQ_UNIT_SIZE_BYTES == 0 and first_queue_offset >= 0 < first_end <= last_end
        ):
            raise InvariantViolation(
                f"{self.topic}-{self.queue_id}: {len(units)} bytes of units from queue offset "
                f"{first_queue_offset}, commit-log ends {first_end}..{last_end}, are no run of "
                "units"
            )
        files = self._mfq.files
        if not files or first_end <= self.max_physic_offset:
            return False
        f = files[-1]
        position = f.wrote_position
        end = position + len(units)
        if first_queue_offset * CQ_UNIT_SIZE_BYTES != f.file_from_offset + position:
            return False
        if end > self._file_size:
            return False
        f.buffer[position:end] = units
        f.wrote_position = end
        self.max_physic_offset = last_end
        return True

    def _create_first_file(self, expect: int) -> MappedFile:
        in_file = expect % self._file_size
        f = self._mfq.create_file(expect - in_file)
        if expect != 0:
            self._min_logic_offset = expect
            if in_file:
                f.append(PRE_BLANK_UNIT * (in_file // CQ_UNIT_SIZE_BYTES))
        return f

    # --- offsets ---
    @property
    def min_logic_offset(self) -> int:
        """Logical byte offset of the first readable unit (``minLogicOffset``)."""
        return self._min_logic_offset

    def min_offset_in_queue(self) -> int:
        return self._min_logic_offset // CQ_UNIT_SIZE_BYTES

    def max_offset_in_queue(self) -> int:
        """The next queue offset to be written (pre-blank units count)."""
        return self._mfq.max_offset() // CQ_UNIT_SIZE_BYTES

    def roll_next_file(self, queue_offset: int) -> int:
        """First queue offset of the file after the one holding ``queue_offset``."""
        return queue_offset + self._units_per_file - queue_offset % self._units_per_file

    def get_last_offset(self) -> int:
        """Commit-log end (offset + size) of the last unit, or -1."""
        end = self._mfq.max_offset()
        if end < CQ_UNIT_SIZE_BYTES:
            return -1
        head = self._read_head(end - CQ_UNIT_SIZE_BYTES)
        if head is None:
            return -1
        commit_offset, size = head
        if commit_offset < 0 or size <= 0 or is_pre_blank(commit_offset, size):
            return -1
        return commit_offset + size

    def first_offset_at_or_after(self, commit_offset: int) -> int:
        """The first readable queue offset whose unit points at or past ``commit_offset``
        (``max_offset_in_queue()`` when none does): units below it go when the commit log's
        minimum offset moves to ``commit_offset`` (cleanup's loss count)."""
        lo = self.min_offset_in_queue()
        hi = self.max_offset_in_queue()
        if lo >= hi:
            return hi
        return max(lo, self._lower_bound(lo, hi, commit_offset))

    @property
    def files(self) -> list[MappedFile]:
        return self._mfq.files

    # --- reading ---
    def get_unit(self, queue_offset: int) -> CqUnit | None:
        """The unit at ``queue_offset`` if it is readable (``[min, max)``), else None."""
        units = self.read_units(queue_offset, 1)
        return units[0] if units else None

    def read_units(self, start_queue_offset: int, max_count: int) -> list[CqUnit]:
        """Up to ``max_count`` units from ``start_queue_offset``, stopping at the written end."""
        raw = self.read_unit_bytes(start_queue_offset, max_count)
        return [
            CqUnit(start_queue_offset + i, offset, size, code)
            for i, (offset, size, code) in enumerate(_UNIT.iter_unpack(raw))
        ]

    def read_unit_bytes(self, start_queue_offset: int, max_count: int) -> bytes:
        """The units :meth:`read_units` returns, as stored: 20 bytes each (``>qiq``: commit
        offset, size, tags code), concatenated; for bulk readers that want no object per unit."""
        if start_queue_offset < self.min_offset_in_queue() or max_count <= 0:
            return b""
        parts: list[bytes] = []
        got = 0
        logical = start_queue_offset * CQ_UNIT_SIZE_BYTES
        try:
            while got < max_count:
                f = self._mfq.find_file(logical)
                if f is None:
                    break
                position = logical - f.file_from_offset
                end = min(f.wrote_position, position + (max_count - got) * CQ_UNIT_SIZE_BYTES)
                if end <= position:
                    break
                parts.append(f.buffer[position:end])
                got += (end - position) // CQ_UNIT_SIZE_BYTES
                logical = f.file_from_offset + end
                if end < self._file_size:
                    break
        except ValueError:  # the file was unmapped by a concurrent delete
            pass
        return b"".join(parts)

    def _read_head(self, logical: int) -> tuple[int, int] | None:
        f = self._mfq.find_file(logical)
        if f is None:
            return None
        position = logical - f.file_from_offset
        if position + CQ_UNIT_SIZE_BYTES > f.wrote_position:
            return None
        try:
            offset, size = _UNIT_HEAD.unpack_from(f.buffer, position)
        except ValueError:
            return None
        return offset, size

    def _search_key(self, unit_index: int) -> int:
        """Commit offset of the unit at global ``unit_index``; pre-blank or missing → -1."""
        head = self._read_head(unit_index * CQ_UNIT_SIZE_BYTES)
        if head is None or is_pre_blank(*head):
            return -1
        return head[0]

    def _lower_bound(self, lo_unit: int, hi_unit: int, min_commit_offset: int) -> int:
        """First unit in ``[lo_unit, hi_unit)`` whose commit offset is >= the bound."""
        while lo_unit < hi_unit:
            mid = (lo_unit + hi_unit) // 2
            if self._search_key(mid) < min_commit_offset:
                lo_unit = mid + 1
            else:
                hi_unit = mid
        return lo_unit

    def _first_real_unit_offset(self) -> int:
        """Logical offset of the first unit that is not pre-blank (file start if none)."""
        first = self._mfq.first_file()
        if first is None:
            return 0
        lo = first.file_from_offset // CQ_UNIT_SIZE_BYTES
        hi = first.end_offset // CQ_UNIT_SIZE_BYTES
        return self._lower_bound(lo, hi, 0) * CQ_UNIT_SIZE_BYTES

    # --- recovery and truncation ---
    def _scan_valid(self, f: MappedFile, limit: int, phy_offset: int | None) -> int:
        """Bytes of valid units from the file start; tracks ``max_physic_offset``.

        Valid: offset >= 0 and size > 0, and (when ``phy_offset`` is given) offset < it.
        """
        buf = f.buffer
        position = 0
        while position < limit:
            offset, size = _UNIT_HEAD.unpack_from(buf, position)
            if offset < 0 or size <= 0 or (phy_offset is not None and offset >= phy_offset):
                break
            if not is_pre_blank(offset, size):
                self.max_physic_offset = offset + size
            position += CQ_UNIT_SIZE_BYTES
        return position

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Remove every unit pointing at or past commit-log ``phy_offset``
        (``docs/formats/queues.md`` §1.5).

        Files whose first unit is cut are deleted; the file holding the cut keeps its head and
        its tail is zeroed so that no cut unit can be found again.

        ``max_physic_offset`` becomes the end of the last real unit kept, or -1 when none is
        (RocketMQ leaves it at ``phy_offset``). It must not claim more: :meth:`put` drops every
        record below it as already built, and recovery re-dispatches records below the cut
        that the queue does not hold — e.g. a crash after dispatch created a queue's first file
        but before it wrote the unit leaves an empty file, and every record of that queue would
        otherwise be missing from it for good.
        """
        self.max_physic_offset = -1
        self._forget_times()
        doomed: list[MappedFile] = []
        cut: int | None = None
        for f in reversed(self._mfq.files):
            if f.wrote_position >= CQ_UNIT_SIZE_BYTES:
                offset, size = _UNIT_HEAD.unpack_from(f.buffer, 0)
                if offset < phy_offset or is_pre_blank(offset, size):
                    cut = f.file_from_offset + self._scan_valid(f, f.wrote_position, phy_offset)
                    break
            doomed.append(f)  # empty, or its first unit is cut
        self._mfq.delete_files(doomed)
        if cut is not None:
            self._mfq.truncate_dirty_files(cut)
        self._min_logic_offset = min(self._min_logic_offset, self._mfq.max_offset())

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Move the min offset to the first unit at or past ``min_commitlog_offset``
        (``docs/formats/queues.md`` §1.5)."""
        end = self._mfq.max_offset()
        first = self._mfq.first_file()
        if first is None or self._min_logic_offset >= end:
            return
        last_unit = end // CQ_UNIT_SIZE_BYTES - 1
        if self._search_key(last_unit) < min_commitlog_offset:
            self._min_logic_offset = end  # no valid entry; point at the next slot
            return
        start = self._min_logic_offset
        intact = start >= first.file_from_offset
        if not intact:
            start = first.file_from_offset
        start_unit = start // CQ_UNIT_SIZE_BYTES
        if intact and self._search_key(start_unit) >= min_commitlog_offset:
            return
        found = self._lower_bound(start_unit, last_unit + 1, min_commitlog_offset)
        self._min_logic_offset = found * CQ_UNIT_SIZE_BYTES

    def delete_expired_file(self, min_commitlog_offset: int) -> int:
        """Delete leading files whose last unit points before the commit-log min
        (``docs/formats/queues.md`` §1.5)."""
        files = self._mfq.files
        doomed: list[MappedFile] = []
        for f in files[:-1]:
            offset, _size = _UNIT_HEAD.unpack_from(f.buffer, self._file_size - CQ_UNIT_SIZE_BYTES)
            if offset >= min_commitlog_offset:
                break
            doomed.append(f)
        if doomed:
            self._forget_times()
            self._mfq.delete_files(doomed)
        self.correct_min_offset(min_commitlog_offset)
        return len(doomed)

    # --- search by time ---
    def get_offset_in_queue_by_time(
        self,
        timestamp_ms: int,
        boundary: Boundary,
        store_time_of: StoreTimeOf,
        commitlog_min_offset: int,
    ) -> int:
        """Queue offset of the first (LOWER) or last (UPPER) unit stored at ``timestamp_ms``.

        ``docs/formats/queues.md`` §1.6: choose a file by its first/last store times,
        binary-search inside it, and clamp the result into
        ``[min_offset_in_queue, max_offset_in_queue]``. RocketMQ's default boundary is LOWER.
        """
        f = self._file_by_time(timestamp_ms, boundary, store_time_of)
        result = 0
        if f is not None:
            search = _TimeSearch(self, f, timestamp_ms, boundary, store_time_of)
            result = search.run(commitlog_min_offset)
        result = max(result, self.min_offset_in_queue())
        return min(result, self.max_offset_in_queue())

    def _file_by_time(
        self, timestamp_ms: int, boundary: Boundary, store_time_of: StoreTimeOf
    ) -> MappedFile | None:
        """``getConsumeQueueMappedFileByTime``: LOWER scans oldest first, UPPER newest first."""
        files = list(self._mfq.files)
        if not files:
            return None
        if boundary is Boundary.LOWER:
            last_unit = self._file_size - CQ_UNIT_SIZE_BYTES
            for f in files[:-1]:
                stop_ms = self._unit_time(f, last_unit, self._stop_time_ms, store_time_of)
                if stop_ms >= timestamp_ms:
                    return f
            return files[-1]
        for f in reversed(files):
            if self._unit_time(f, 0, self._start_time_ms, store_time_of) <= timestamp_ms:
                return f
        return None

    @staticmethod
    def _unit_time(
        f: MappedFile, position: int, cache: dict[int, int], store_time_of: StoreTimeOf
    ) -> int:
        """Store time of the unit at ``position`` of ``f``; positive values are cached."""
        cached = cache.get(f.file_from_offset)
        if cached is not None:
            return cached
        try:
            offset, size = _UNIT_HEAD.unpack_from(f.buffer, position)
        except ValueError:
            return -1
        store_ms = -1 if is_pre_blank(offset, size) else store_time_of(offset, size)
        if store_ms > 0:
            cache[f.file_from_offset] = store_ms
        return store_ms

    def _forget_times(self) -> None:
        self._start_time_ms.clear()
        self._stop_time_ms.clear()


class _TimeSearch:
    """The binary search inside one consume-queue file (``binarySearchInQueueByTime``,
    ``docs/formats/queues.md`` §1.6)."""

    def __init__(
        self,
        cq: ConsumeQueue,
        f: MappedFile,
        timestamp_ms: int,
        boundary: Boundary,
        store_time_of: StoreTimeOf,
    ) -> None:
        self.f = f
        self.buf = f.buffer
        self.timestamp_ms = timestamp_ms
        self.boundary = boundary
        self.store_time_of = store_time_of
        self.low = max(0, cq.min_logic_offset - f.file_from_offset)

    def head(self, position: int) -> tuple[int, int]:
        offset, size = _UNIT_HEAD.unpack_from(self.buf, position)
        return offset, size

    def time_at(self, position: int) -> int:
        offset, size = self.head(position)
        return -1 if is_pre_blank(offset, size) else self.store_time_of(offset, size)

    def to_queue_offset(self, position: int) -> int:
        return _java_div(self.f.file_from_offset + position, CQ_UNIT_SIZE_BYTES)

    def run(self, commitlog_min_offset: int) -> int:
        lower = self.boundary is Boundary.LOWER
        written = self.f.wrote_position
        if written < CQ_UNIT_SIZE_BYTES:
            return self.to_queue_offset(0)
        ceiling = written - CQ_UNIT_SIZE_BYTES
        floor = self.low
        if floor > ceiling:
            return self.to_queue_offset(floor)
        if self.time_at(ceiling) < self.timestamp_ms:
            return self.to_queue_offset(ceiling + CQ_UNIT_SIZE_BYTES if lower else ceiling)
        if self.time_at(floor) > self.timestamp_ms:
            return self.to_queue_offset(0) if lower else 0
        found = self.bisect(floor, ceiling, commitlog_min_offset)
        if found is None:
            return 0
        target, left, right = found
        if target >= 0:
            return self.to_queue_offset(self.widen(target, floor, ceiling))
        return self.to_queue_offset(right if lower else left)

    def bisect(self, low: int, high: int, commitlog_min_offset: int) -> tuple[int, int, int] | None:
        """(exact match, last unit before, first unit after) positions; None on a failed lookup."""
        left = right = -1
        while high >= low:
            mid = (low + high) // (2 * CQ_UNIT_SIZE_BYTES) * CQ_UNIT_SIZE_BYTES
            offset, size = self.head(mid)
            if offset < commitlog_min_offset or is_pre_blank(offset, size):
                low = mid + CQ_UNIT_SIZE_BYTES
                left = mid
                continue
            store_ms = self.store_time_of(offset, size)
            if store_ms < 0:
                _log.warning("no store timestamp for commit log offset %d", offset)
                return None
            if store_ms == self.timestamp_ms:
                return mid, left, right
            if store_ms > self.timestamp_ms:
                high = mid - CQ_UNIT_SIZE_BYTES
                right = mid
            else:
                low = mid + CQ_UNIT_SIZE_BYTES
                left = mid
        return -1, left, right

    def widen(self, target: int, floor: int, ceiling: int) -> int:
        """Walk from an exact match to the first (LOWER) or last (UPPER) equal store time."""
        step = -CQ_UNIT_SIZE_BYTES if self.boundary is Boundary.LOWER else CQ_UNIT_SIZE_BYTES
        position = target
        while floor <= position + step <= ceiling:
            if self.time_at(position + step) != self.timestamp_ms:
                break
            position += step
        return position


def remove_empty_dir(path: Path) -> None:
    """Remove a queue's or a topic's directory if it is empty (also used by
    :class:`~gannet.node.store.queues.consume_queue_store.ConsumeQueueStore`)."""
    with contextlib.suppress(OSError):  # missing, or still holds files that are not ours
        os.rmdir(path)
