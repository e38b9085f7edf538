"""The timer store's two data files: the wheel (``<root>/timerwheel``, slots kept in memory and
written back page by page) and the timer log (``<root>/timerlog/``, 52-byte units in mapped
files). Formats: :mod:`~gannet.node.store.timers.codecs`.

The wheel's dirty pages reach the file only in :meth:`Wheel.flush`, which the timer store calls
after the timer log's ``fdatasync``, so the wheel on disk never points at a unit that was not
durable. Called by :class:`~gannet.node.store.timers.store.TimerStore` only.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gannet.node.store import durable
from gannet.node.store.errors import CorruptionError
from gannet.node.store.log.mapped_files import OS_PAGE_SIZE_BYTES, MappedFile, MappedFileQueue
from gannet.node.store.timers.codecs import (
    BLANK_SIZE_BYTES,
    EMPTY_SLOT,
    SLOT_SIZE_BYTES,
    SLOT_STRUCT,
    UNIT_SIZE_BYTES,
    Slot,
    TimerCheckpoint,
    TimerEntry,
    TimerUnit,
    UnitFields,
    decode_checkpoint,
    decode_slot,
    decode_unit,
    encode_blank,
    encode_slot,
    entry_of,
    is_blank,
    unit_fields,
)

_SCAN_CHUNK_BYTES = 128 * SLOT_SIZE_BYTES
_ZERO_CHUNK = bytes(_SCAN_CHUNK_BYTES)


class Wheel:
    """The wheel file, held in memory; dirty pages are written back only by :meth:`flush`."""

    def __init__(self, path: Path, slots: int, precision_ms: int) -> None:
        self.path = path
        self.slots_total = 2 * slots
        self.precision_ms = precision_ms
        self.size_bytes = self.slots_total * SLOT_SIZE_BYTES
        self._buf = bytearray()
        self._dirty_pages: set[int] = set()
        self._fd = -1

    def open(self) -> bool:
        """Open (creating when missing) and read the file; True when it was created."""
        created = not self.path.exists()
        if created:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            durable.allocate_file(self.path, self.size_bytes)
        self._fd = os.open(self.path, os.O_RDWR)
        actual = os.fstat(self._fd).st_size
        if actual != self.size_bytes:
            os.close(self._fd)
            self._fd = -1
            raise CorruptionError(
                f"{self.path}: length {actual}, expected {self.size_bytes} for "
                f"{self.slots_total // 2} slots; was the store written with another wheel size?"
            )
        self._buf = bytearray(os.pread(self._fd, self.size_bytes, 0))
        return created

    def _offset(self, time_ms: int) -> int:
        return (time_ms // self.precision_ms) % self.slots_total * SLOT_SIZE_BYTES

    def get(self, time_ms: int) -> Slot | None:
        """The slot of ``time_ms`` if the stored slot is for exactly that time."""
        slot = decode_slot(self._buf, self._offset(time_ms), self.precision_ms)
        return slot if slot is not None and slot.time_ms == time_ms else None

    def put(self, slot: Slot) -> None:
        self._write(self._offset(slot.time_ms), encode_slot(slot, self.precision_ms))

    def clear(self, time_ms: int) -> None:
        self._write(self._offset(time_ms), EMPTY_SLOT)

    def _write(self, offset: int, data: bytes) -> None:
        self._buf[offset : offset + SLOT_SIZE_BYTES] = data
        self._dirty_pages.add(offset // OS_PAGE_SIZE_BYTES)

    def live_slots(self, from_ms: int | None) -> Iterator[Slot]:
        """Every non-empty slot whose time is ``>= from_ms`` (all when None)."""
        from_units = None if from_ms is None else -(-from_ms // self.precision_ms)
        buf = self._buf
        for start in range(0, len(buf), _SCAN_CHUNK_BYTES):
            chunk = buf[start : start + _SCAN_CHUNK_BYTES]  # a copy, compared with memcmp
            if chunk == _ZERO_CHUNK[: len(chunk)]:
                continue  # a run of empty slots, skipped at C speed (most of a wheel)
            for time_units, first, last, num, magic in SLOT_STRUCT.iter_unpack(chunk):
                if time_units == first == last == num == magic == 0:
                    continue  # empty
                if from_units is None or time_units >= from_units:
                    yield Slot(time_units * self.precision_ms, first, last, num, magic)

    def flush(self) -> None:
        """Write the dirty pages back and fdatasync the file."""
        if not self._dirty_pages:
            return
        for page in sorted(self._dirty_pages):
            start = page * OS_PAGE_SIZE_BYTES
            os.pwrite(self._fd, self._buf[start : start + OS_PAGE_SIZE_BYTES], start)
        durable.sync_data(self._fd, str(self.path))
        self._dirty_pages.clear()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class TimerLog:
    """The timer log: 52-byte units in a :class:`MappedFileQueue`."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.queue = MappedFileQueue(directory, file_size)
        self.file_size = file_size
        self.units_end_max = (file_size - BLANK_SIZE_BYTES) // UNIT_SIZE_BYTES * UNIT_SIZE_BYTES

    def append(self, data: bytes) -> int:
        """Append one unit (closing the file with a blank when it does not fit); its offset."""
        f = self.queue.last_file_for_append()
        if f.remaining_bytes < UNIT_SIZE_BYTES + BLANK_SIZE_BYTES:
            f.append(encode_blank(f.remaining_bytes))
            f.wrote_position = f.file_size
            f = self.queue.last_file_for_append()
        return f.file_from_offset + f.append(data)

    def read(self, pos: int) -> TimerUnit:
        """The unit at global ``pos``; :class:`CorruptionError` when there is none."""
        return TimerUnit(*self.read_fields(pos))

    def read_fields(self, pos: int) -> UnitFields:
        """:meth:`read` without building the object (walks over millions of units)."""
        f = self.queue.find_file(pos)
        local = pos - f.file_from_offset if f is not None else -1
        fields = None
        if f is not None and local + UNIT_SIZE_BYTES <= f.file_size:
            fields = unit_fields(f.buffer, local)
        if fields is None or fields[0] >= pos:
            where = f.path if f is not None else self.queue.directory
            raise CorruptionError(f"{where}: no valid timer-log unit at offset {pos}")
        return fields

    def units_end(self, f: MappedFile) -> int:
        return min(f.wrote_position, self.units_end_max)

    def units_backwards(self) -> Iterator[tuple[int, TimerUnit]]:
        """Every unit, newest first (the log must have been recovered)."""
        for f in reversed(self.queue.files):
            for local in range(self.units_end(f) - UNIT_SIZE_BYTES, -1, -UNIT_SIZE_BYTES):
                unit = decode_unit(f.buffer, local)
                if unit is not None:
                    yield f.file_from_offset + local, unit

    def units_backwards_from(self, cut: int) -> Iterator[tuple[int, TimerUnit]]:
        """The units at or after global offset ``cut``, newest first."""
        return itertools.takewhile(lambda item: item[0] >= cut, self.units_backwards())

    def file_units(self, f: MappedFile) -> Iterator[TimerUnit]:
        for local in range(0, self.units_end(f), UNIT_SIZE_BYTES):
            unit = decode_unit(f.buffer, local)
            if unit is not None:
                yield unit

    def file_index_for(self, offset: int) -> int:
        """Index of the file holding ``offset``, clamped to the existing files."""
        files = self.queue.files
        for i in range(len(files) - 1, -1, -1):
            if files[i].file_from_offset <= offset:
                return i
        return 0

    def cut(self, offset: int) -> None:
        """Erase everything from ``offset`` on and make the erasure durable."""
        self.queue.truncate_dirty_files(offset)
        last = self.queue.last_file()
        if last is not None:
            last.sync_all()

    def sync_from(self, offset: int) -> None:
        """fdatasync every file from the one holding ``offset`` on (after a replay, whose bytes
        past the checkpoint may only have been in the crashed process's page cache)."""
        for f in self.queue.files[self.file_index_for(offset) :]:
            f.sync_all()


class LogScan:
    """Forward scan of valid units from a file index; ``end`` is where validity stops."""

    def __init__(self, log: TimerLog, first_index: int) -> None:
        self.log = log
        self.first_index = first_index
        files = log.queue.files
        self.end = files[first_index].file_from_offset if files else 0

    def __iter__(self) -> Iterator[tuple[int, TimerUnit]]:
        for pos, fields in self.fields():
            yield pos, TimerUnit(*fields)

    def fields(self) -> Iterator[tuple[int, UnitFields]]:
        """The scan as (position, unit fields): no object per unit (recovery replays every
        unit of the log's last files, millions with a big backlog)."""
        for f in self.log.queue.files[self.first_index :]:
            buf, start, size = f.buffer, f.file_from_offset, f.file_size
            local = 0
            while local + BLANK_SIZE_BYTES <= size and not is_blank(buf, local):
                fields = None
                if local + UNIT_SIZE_BYTES <= size:
                    fields = unit_fields(buf, local)
                pos = start + local
                if fields is None or fields[0] >= pos:
                    self.end = pos
                    return
                yield pos, fields
                local += UNIT_SIZE_BYTES
            self.end = start + size


@dataclass(slots=True)
class SlotRead:
    """Progress through the slot at the read cursor (one slot at a time)."""

    slot_ms: int
    slot_num: int
    scan_next: int  # next chain position to read; -1 once the whole chain is collected
    markers: list[tuple[int, TimerEntry]] = field(default_factory=list)  # newest first
    normals: list[TimerEntry] = field(default_factory=list)  # newest first
    targets: set[int] = field(default_factory=set)
    ready: list[TimerEntry] | None = None  # emit order, built when the scan ends
    emitted: int = 0
    emitted_normals: int = 0

    def done(self) -> bool:
        return self.ready is not None and self.emitted == len(self.ready)

    def scan(self, log: TimerLog, budget: ReadBudget) -> None:
        """Collect the slot's chain, newest unit first, within ``budget``."""
        while self.scan_next >= 0 and budget.units > 0:
            pos = self.scan_next
            unit = log.read(pos)
            budget.units -= 1
            if unit.fire_ms != self.slot_ms:
                raise CorruptionError(
                    f"timer-log unit at {pos} fires at {unit.fire_ms} but is chained in the "
                    f"slot of {self.slot_ms}"
                )
            entry = entry_of(unit)
            if entry.deleted:
                self.markers.append((unit.reserved - 1, entry))
                if unit.reserved > 0:
                    self.targets.add(unit.reserved - 1)
            else:
                self.normals.append(entry)
            self.scan_next = unit.prev_pos

    def emit(self, room: int, out: list[TimerEntry]) -> int:
        """Move up to ``room`` entries to ``out`` (markers first, then entries in enqueue
        order); returns how many entries a marker suppressed when the order was built."""
        suppressed = 0
        if self.ready is None:
            kept = [e for e in reversed(self.normals) if e.commit_offset not in self.targets]
            suppressed = len(self.normals) - len(kept)
            self.ready = [e for _, e in reversed(self.markers)] + kept
            self.markers, self.normals = [], []
        batch = self.ready[self.emitted : self.emitted + room]
        self.emitted += len(batch)
        self.emitted_normals += sum(1 for e in batch if not e.deleted)
        out.extend(batch)
        return suppressed


@dataclass(slots=True)
class ReadBudget:
    """What one ``due_entries`` call may still do: slots entered, log units read."""

    slots: int
    units: int


def read_checkpoint(path: Path) -> TimerCheckpoint | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode_checkpoint(data, str(path))
