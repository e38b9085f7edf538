"""Persistent timer store for delayed delivery (RocketMQ ``TimerMessageStore``, 1 s precision).

A message with ``TIMER_DELAY_SEC``/``TIMER_DELAY_MS``/``TIMER_DELIVER_MS`` is parked in the
commit log under :data:`TIMER_TOPIC` (:func:`route_for_timer`, :func:`park_message`). The message
store's timer glue reads that topic in commit-log order and calls :meth:`TimerStore.enqueue`;
its timer thread calls :meth:`TimerStore.due_entries` with the current time, re-puts each
returned message (:func:`restore_message`, or :func:`roll_message` for rolled entries), and then
confirms with :meth:`TimerStore.commit_read`. This module never reads the commit log itself.

On-disk formats (all integers big-endian; store-format.md §11.2)
-----------------------------------------------------------------

``<root>/timerwheel`` — ``2 × timer_wheel_slots`` slots of 32 bytes (file size
``2 × slots × 32``; 38,707,200 bytes with RocketMQ's 604,800 slots)::

    off size field
      0    8  long  fire time / precision (the slot's time in precision units)
      8    8  long  firstPos  timer-log offset of the slot's oldest unit
     16    8  long  lastPos   timer-log offset of the slot's newest unit (head of the chain)
     24    4  int   num       units in the slot; a delete marker counts -1 (as RocketMQ)
     28    4  int   magic     0 (RocketMQ carries it through unchanged)

  The slot of time ``t`` (ms) is at index ``(t // precision) mod (2 × slots)``. A slot is valid
  for ``t`` only if its stored time equals ``t // precision``; 32 zero bytes are an empty slot.

``<root>/timerlog/<20-digit start offset>`` — files of ``timer_log_file_size_bytes`` (100 MiB in
RocketMQ) holding 52-byte units appended back to back from the file start::

    off size field
      0    4  int   size = 52
      4    8  long  prevPos: previous unit of the same slot, -1 for the first
     12    4  int   magic: bits DEFAULT 1 (always set), ROLL 2, DELETE 4
     16    8  long  enqueue ("current write") time, ms
     24    4  int   delay = fire time - enqueue time, ms (so fire time = field@16 + field@24)
     28    8  long  commit-log offset of the parked message
     36    4  int   commit-log record size
     40    4  int   real-topic hash (Java ``String.hashCode``, for metrics)
     44    8  long  reserved: 0 in RocketMQ; Gannet writes (target commit offset + 1) into a
                    DELETE marker whose target is known, 0 when it is not

  A unit is appended only while ``52 + 16 <= bytes left in the file``; otherwise the 16-byte
  blank ``[int bytes left, long 0, int 0xCBD43194 (-875286124)]`` closes the file and the unit
  goes to the next one. Hence a file holds ``(file size - 16) // 52`` units.

  Units carry no checksum. A unit torn by a crash is still recognised: files are zero-filled
  and written once, units start at multiples of 4, so a tear leaves zeros from a 4-byte
  boundary on (or before it); a tear at or before offset 36 zeroes the record size, which a
  real unit never has, and a tear at 40 or 44 loses only the metrics hash and the reserved
  field (a DELETE marker then forgets its target and suppresses nothing).

``<root>/config/timercheck`` — 4096 bytes, longs: lastReadTimeMs @0, lastTimerLogFlushPos @8,
lastTimerQueueOffset @16, masterTimerQueueOffset @24, dataVersion stateVersion @32,
timestamp @40, counter @48; the rest zero.

Time rules
----------

* Routing (§11.1): the delivery time is rounded *down* to the precision, and an exact multiple
  loses one more unit; that rounded value is ``TIMER_OUT_MS``. The slot of time ``t`` is due
  when ``now >= t + precision``, so an entry never fires before it was asked to.
* The read cursor ``R`` is the time of the next slot to read; every slot before it has been
  returned. Units are placed only in ``[R, R + roll window)``: a fire time before ``R`` goes to
  ``R`` (to ``R + precision`` while slot ``R`` is half read, so a slot being read never grows);
  a fire time at or past ``R + W`` gets the ROLL bit and is returned with ``rolled=True`` so
  that the glue parks the message again: it goes to ``R + W/2`` when it lies less than ``W/3``
  past the window (RocketMQ's rule: once re-parked it is well inside the next window instead of
  right at its start, where it would already be due), else to the window's last slot.
* Roll window ``W = min(2 days, (slots // 2) × precision)`` — RocketMQ's 2 days for its 7-day
  wheel, 30 min for the 3,600-slot test wheel.
* The cursor may run at most ``slots × precision`` ahead of the committed read time ``Rc``
  (the value the checkpoint stores). Live slots therefore always lie in ``[Rc, Rc + 1.5 ×
  slots × precision)``, narrower than the wheel's ``2 × slots``, so no live slot is ever
  overwritten by another time with the same index, not even after a restart re-reads from
  ``Rc``.

Durability and recovery rule
----------------------------

:meth:`TimerStore.flush` syncs in this order: timer log (``fdatasync``), then the dirty pages
of the wheel (kept in memory and written with ``pwrite`` only here, so the wheel on disk never
points at a log unit that was not durable before it), then the checkpoint (atomic replace)
naming the log's flushed position and ``Rc``. So the checkpoint never claims more than what
is durable, and the wheel on disk may be ahead of the checkpoint but never ahead of the log.

:meth:`TimerStore.recover` (same path after a clean or an unclean shutdown):

1. Replay the timer log from the file before the one holding the checkpoint's flush position
   (from the first file if the wheel file had to be created) up to the first unit that is not
   valid; cut the log there (zeroing the tail). A cut below the checkpoint's flush position is
   :class:`CorruptionError`.
2. Re-link every replayed unit whose fire time is ``>= Rc``: a slot whose ``lastPos`` is at or
   past the unit already chains it; otherwise the unit becomes the slot's new ``lastPos``
   (its ``prevPos`` already points at the slot's previous unit, because units of one slot are
   linked in log order).
3. Drop entries pointing at commit-log offsets ``>= commit_log_max_offset`` when given
   (:meth:`TimerStore.truncate`), then flush everything.

The read cursor restarts at ``Rc``: entries returned but not committed are returned again.
Delivery is therefore **at least once**, and exactly once when the glue commits what it
re-put and nothing crashes in between. Every unit that was flushed fires at least once.

Enqueue is idempotent by commit offset: units carry strictly increasing commit-log offsets, and
an ``enqueue``/``delete`` whose offset is not above the last one is ignored (it is a replay of
the timer topic after a restart). This also lets :meth:`TimerStore.truncate` cut the log at
the first unit pointing at or past the cut offset.

Deletes: a DELETE marker lands in the slot of its target's fire time. When the slot is read,
its markers are returned first (``deleted=True``, for RocketMQ-style matching by
``realTopic+uniqKey`` in the glue), and entries whose commit offset is a marker's known target
(the reserved field) are not returned. A marker that does not land in its target's slot
(target rolled meanwhile) does not suppress it.

Threading: every public method takes the store's lock; callers may share one instance between
the timer thread and the flush thread.
"""

from __future__ import annotations

import dataclasses
import itertools
import mmap
import os
import re
import struct
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gannet.node.store import durable, hashing
from gannet.node.store import properties as props
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import CorruptionError, MessageIllegal, StoreNotWritable
from gannet.node.store.log import records
from gannet.node.store.log.mapped_files import OS_PAGE_SIZE_BYTES, MappedFile, MappedFileQueue

TIMER_TOPIC = "rmq_sys_wheel_timer"
CHECKPOINT_FILE_NAME = "timercheck"

SLOT_SIZE_BYTES = 32
UNIT_SIZE_BYTES = 52
BLANK_SIZE_BYTES = 16
CHECKPOINT_SIZE_BYTES = 4096
BLANK_MAGIC = -875286124  # 0xCBD43194 as a signed int
MAGIC_DEFAULT = 1
MAGIC_ROLL = 2
MAGIC_DELETE = 4
ROLL_WINDOW_MS_MAX = 2 * 86_400_000  # timerRollWindowSlot: 2 days
DUE_SLOTS_MAX = 86_400  # default bound on slots stepped over per due_entries call
DUE_UNITS_READ_MAX = 65_536  # default bound on timer-log units read per due_entries call

_SLOT = struct.Struct(">qqqii")
_UNIT = struct.Struct(">iqiqiqiiq")
_BLANK = struct.Struct(">iqi")
_CHECKPOINT = struct.Struct(">qqqqqqq")
_INT = struct.Struct(">i")
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_LONG_TEXT = re.compile(r"[+-]?[0-9]{1,19}")
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,10}")
_EMPTY_SLOT = bytes(SLOT_SIZE_BYTES)

_Buffer = bytes | bytearray | memoryview | mmap.mmap


def _invariant(condition: bool, message: str) -> None:
    """Raise on a broken invariant (a programming error); not stripped by ``python -O``."""
    if not condition:
        raise AssertionError(message)


def floor_to_precision(time_ms: int, precision_ms: int) -> int:
    return time_ms - time_ms % precision_ms


def roll_window_ms(config: StoreConfig) -> int:
    """``W = min(2 days, (slots // 2) × precision)``; see the module docstring."""
    half_wheel = (config.timer_wheel_slots // 2) * config.timer_precision_ms
    return floor_to_precision(min(ROLL_WINDOW_MS_MAX, half_wheel), config.timer_precision_ms)


def topic_hash(topic: str | None) -> int:
    """Real-topic hash stored in a timer-log unit (Java ``String.hashCode``; none → 0)."""
    return hashing.java_string_hash(topic) if topic else 0


# --------------------------------------------------------------------------------------------
# Routing (§11.1) and message transformation: pure.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimerRouting:
    """Where a delayed message goes: ``deliver_ms`` is the rounded fire time (TIMER_OUT_MS)."""

    deliver_ms: int
    requested_ms: int  # the delivery time asked for, before rounding


def round_deliver_ms(deliver_ms: int, precision_ms: int) -> int:
    """Round down to the precision; an exact multiple loses one more precision unit."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return floor_to_precision(deliver_ms, precision_ms)


def _parse_long(properties: Mapping[str, str], key: str) -> int:
    text = properties[key]
    value = int(text) if _LONG_TEXT.fullmatch(text) else None
    if value is None or not _LONG_MIN <= value <= _LONG_MAX:
        raise MessageIllegal(f"property {key}={text!r} is not a valid integer (Java long)")
    return value


def _requested_deliver_ms(properties: Mapping[str, str], now_ms: int) -> int | None:
    if props.TIMER_DELAY_SEC in properties:
        return now_ms + _parse_long(properties, props.TIMER_DELAY_SEC) * 1000
    if props.TIMER_DELAY_MS in properties:
        return now_ms + _parse_long(properties, props.TIMER_DELAY_MS)
    if props.TIMER_DELIVER_MS in properties:
        return _parse_long(properties, props.TIMER_DELIVER_MS)
    return None


def _has_delay_level(properties: Mapping[str, str]) -> bool:
    level = properties.get(props.DELAY_TIME_LEVEL)
    return level is not None and _INT_TEXT.fullmatch(level) is not None and int(level) > 0


def route_for_timer(
    properties: Mapping[str, str], now_ms: int, config: StoreConfig
) -> TimerRouting | None:
    """Decide whether a message goes to the timer (§11.1, ``HookUtils.handleScheduleMessage``).

    Returns None when the message is stored directly: no timer property, ``TIMER_OUT_MS``
    already set (already routed), a legacy ``DELAY`` level set (the schedule path of §11.3
    takes it), or a delivery time that has come (``<= now``). Precedence ``TIMER_DELAY_SEC``,
    then ``TIMER_DELAY_MS``, then ``TIMER_DELIVER_MS``. Raises :class:`MessageIllegal` for an
    unparsable value or a delay beyond ``timer_max_delay_s``. The caller checks that the topic
    is not already :data:`TIMER_TOPIC`.
    """
    if props.TIMER_OUT_MS in properties or _has_delay_level(properties):
        return None
    requested = _requested_deliver_ms(properties, now_ms)
    if requested is None or requested <= now_ms:
        return None
    if requested - now_ms > config.timer_max_delay_s * 1000:
        raise MessageIllegal(
            f"delivery time {requested} is {requested - now_ms} ms away; the limit "
            f"(timerMaxDelaySec) is {config.timer_max_delay_s} s"
        )
    return TimerRouting(round_deliver_ms(requested, config.timer_precision_ms), requested)


def park_message(msg: records.Message, routing: TimerRouting) -> records.Message:
    """A copy moved to :data:`TIMER_TOPIC` queue 0 with TIMER_OUT_MS, REAL_TOPIC, REAL_QID."""
    parked = msg.copy()
    parked.properties[props.TIMER_OUT_MS] = str(routing.deliver_ms)
    parked.properties[props.REAL_TOPIC] = msg.topic
    parked.properties[props.REAL_QUEUE_ID] = str(msg.queue_id)
    parked.topic = TIMER_TOPIC
    parked.queue_id = 0
    return parked


def restore_message(msg: records.Message, enqueue_ms: int, dequeue_ms: int) -> records.Message:
    """A fired copy back in its real topic/queue (REAL_TOPIC/REAL_QID removed).

    TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS are added; TIMER_DELIVER_MS/TIMER_OUT_MS stay.
    """
    real_topic = msg.properties.get(props.REAL_TOPIC)
    real_qid = msg.properties.get(props.REAL_QUEUE_ID)
    if not real_topic:
        raise MessageIllegal(
            f"timer message at commit offset {msg.physical_offset} has no {props.REAL_TOPIC}"
        )
    if real_qid is None or _INT_TEXT.fullmatch(real_qid) is None:
        raise MessageIllegal(
            f"timer message at commit offset {msg.physical_offset} has {props.REAL_QUEUE_ID}="
            f"{real_qid!r}, not an integer"
        )
    restored = msg.copy()
    restored.topic = real_topic
    restored.queue_id = int(real_qid)
    del restored.properties[props.REAL_TOPIC]
    del restored.properties[props.REAL_QUEUE_ID]
    restored.properties[props.TIMER_ENQUEUE_MS] = str(enqueue_ms)
    restored.properties[props.TIMER_DEQUEUE_MS] = str(dequeue_ms)
    return restored


def roll_message(msg: records.Message) -> records.Message:
    """A rolled copy: stays in the timer topic, ``TIMER_ROLL_TIMES`` + 1."""
    rolled = msg.copy()
    text = msg.properties.get(props.TIMER_ROLL_TIMES, "0")
    times = int(text) if _INT_TEXT.fullmatch(text) else 0
    rolled.properties[props.TIMER_ROLL_TIMES] = str(times + 1)
    return rolled


# --------------------------------------------------------------------------------------------
# Byte codecs: pure.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Slot:
    """One wheel slot; ``time_ms`` is the slot's fire time in ms (stored divided)."""

    time_ms: int
    first_pos: int
    last_pos: int
    num: int
    magic: int = 0


def encode_slot(slot: Slot, precision_ms: int) -> bytes:
    return _SLOT.pack(
        slot.time_ms // precision_ms, slot.first_pos, slot.last_pos, slot.num, slot.magic
    )


def decode_slot(buf: _Buffer, offset: int, precision_ms: int) -> Slot | None:
    """The slot at ``offset``; None for an empty (all-zero) slot."""
    if buf[offset : offset + SLOT_SIZE_BYTES] == _EMPTY_SLOT:
        return None
    time_units, first, last, num, magic = _SLOT.unpack_from(buf, offset)
    return Slot(time_units * precision_ms, first, last, num, magic)


@dataclass(frozen=True, slots=True)
class TimerUnit:
    """One 52-byte timer-log unit (the ``size = 52`` field is implied)."""

    prev_pos: int
    magic: int
    enqueue_ms: int
    delay_ms: int
    commit_offset: int
    size: int
    topic_hash: int
    reserved: int = 0

    @property
    def fire_ms(self) -> int:
        return self.enqueue_ms + self.delay_ms


def encode_unit(unit: TimerUnit) -> bytes:
    return _UNIT.pack(
        UNIT_SIZE_BYTES,
        unit.prev_pos,
        unit.magic,
        unit.enqueue_ms,
        unit.delay_ms,
        unit.commit_offset,
        unit.size,
        unit.topic_hash,
        unit.reserved,
    )


def decode_unit(buf: _Buffer, offset: int) -> TimerUnit | None:
    """The unit at ``offset``, or None when the bytes are not a plausible unit."""
    size, prev, magic, enqueue, delay, commit, rec_size, thash, reserved = _UNIT.unpack_from(
        buf, offset
    )
    plausible = (
        size == UNIT_SIZE_BYTES
        and magic & MAGIC_DEFAULT
        and magic & ~0xF == 0
        and prev >= -1
        and commit >= 0
        and rec_size > 0
    )
    if not plausible:
        return None
    return TimerUnit(prev, magic, enqueue, delay, commit, rec_size, thash, reserved)


def encode_blank(remaining_bytes: int) -> bytes:
    return _BLANK.pack(remaining_bytes, 0, BLANK_MAGIC)


def is_blank(buf: _Buffer, offset: int) -> bool:
    """True when a blank (end-of-file marker) starts at ``offset``."""
    magic: int = _INT.unpack_from(buf, offset + 12)[0]
    return magic == BLANK_MAGIC


@dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    """The content of ``config/timercheck``."""

    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    timestamp_ms: int = 0
    counter: int = 0


def encode_checkpoint(cp: TimerCheckpoint) -> bytes:
    head = _CHECKPOINT.pack(*dataclasses.astuple(cp))
    return head + bytes(CHECKPOINT_SIZE_BYTES - len(head))


def decode_checkpoint(data: bytes, what: str) -> TimerCheckpoint:
    if len(data) < _CHECKPOINT.size:
        raise CorruptionError(f"{what}: {len(data)} bytes, a timer checkpoint has 56 or more")
    return TimerCheckpoint(*_CHECKPOINT.unpack_from(data, 0))


# --------------------------------------------------------------------------------------------
# Entries handed to the caller.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimerEntry:
    """A timer-log unit as returned by :meth:`TimerStore.due_entries`.

    ``deliver_ms`` is the slot time the unit was placed at (for a rolled entry a slot inside
    the roll window, not the message's TIMER_OUT_MS). A rolled entry — a delete marker too — is
    parked again by the glue (:func:`roll_message`) rather than delivered.
    """

    commit_offset: int
    size: int
    deliver_ms: int
    enqueue_ms: int
    topic_hash: int
    rolled: bool
    deleted: bool


def _entry(unit: TimerUnit) -> TimerEntry:
    return TimerEntry(
        commit_offset=unit.commit_offset,
        size=unit.size,
        deliver_ms=unit.fire_ms,
        enqueue_ms=unit.enqueue_ms,
        topic_hash=unit.topic_hash,
        rolled=bool(unit.magic & MAGIC_ROLL),
        deleted=bool(unit.magic & MAGIC_DELETE),
    )


def _num_delta(magic: int) -> int:
    return -1 if magic & MAGIC_DELETE else 1


def _unit_times(fire_ms: int, enqueue_ms: int) -> tuple[int, int]:
    """(enqueue field, delay field); the enqueue time is clamped so the delay fits an int."""
    delay = min(max(fire_ms - enqueue_ms, _INT_MIN), _INT_MAX)
    return fire_ms - delay, delay


@dataclass(frozen=True, slots=True)
class TimerStatistics:
    """A snapshot for metrics and the admin API."""

    read_time_ms: int | None
    committed_read_time_ms: int | None
    backlog_count: int
    roll_window_ms: int
    log_min_offset: int
    log_max_offset: int
    log_flushed_offset: int
    last_commit_offset: int
    enqueued_total: int
    rolled_total: int
    delete_markers_total: int
    returned_total: int
    suppressed_total: int


# --------------------------------------------------------------------------------------------
# IO: the wheel file and the timer log.
# --------------------------------------------------------------------------------------------


_SCAN_CHUNK_BYTES = 128 * SLOT_SIZE_BYTES
_ZERO_CHUNK = bytes(_SCAN_CHUNK_BYTES)


class _Wheel:
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
        self._write(self._offset(time_ms), _EMPTY_SLOT)

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
            for time_units, first, last, num, magic in _SLOT.iter_unpack(chunk):
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


class _TimerLog:
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
        f = self.queue.find_file(pos)
        local = pos - f.file_from_offset if f is not None else -1
        unit = None
        if f is not None and local + UNIT_SIZE_BYTES <= f.file_size:
            unit = decode_unit(f.buffer, local)
        if unit is None or unit.prev_pos >= pos:
            where = f.path if f is not None else self.queue.directory
            raise CorruptionError(f"{where}: no valid timer-log unit at offset {pos}")
        return unit

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


class _LogScan:
    """Forward scan of valid units from a file index; ``end`` is where validity stops."""

    def __init__(self, log: _TimerLog, first_index: int) -> None:
        self.log = log
        self.first_index = first_index
        files = log.queue.files
        self.end = files[first_index].file_from_offset if files else 0

    def __iter__(self) -> Iterator[tuple[int, TimerUnit]]:
        for f in self.log.queue.files[self.first_index :]:
            local = 0
            while local + BLANK_SIZE_BYTES <= f.file_size and not is_blank(f.buffer, local):
                unit = None
                if local + UNIT_SIZE_BYTES <= f.file_size:
                    unit = decode_unit(f.buffer, local)
                pos = f.file_from_offset + local
                if unit is None or unit.prev_pos >= pos:
                    self.end = pos
                    return
                yield pos, unit
                local += UNIT_SIZE_BYTES
            self.end = f.file_from_offset + f.file_size


def _read_checkpoint(path: Path) -> TimerCheckpoint | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode_checkpoint(data, str(path))


# --------------------------------------------------------------------------------------------
# The store.
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _SlotRead:
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


@dataclass(slots=True)
class _Budget:
    slots: int
    units: int


class TimerStore:
    """The timer wheel, timer log and checkpoint of one store directory.

    Lifecycle: ``TimerStore(config)`` → :meth:`load` → :meth:`recover` (or :meth:`open`) →
    enqueue / due_entries / commit_read / flush … → :meth:`close`.
    """

    def __init__(self, config: StoreConfig) -> None:
        _invariant(config.timer_precision_ms > 0, "timer_precision_ms must be positive")
        _invariant(config.timer_wheel_slots >= 4, "timer_wheel_slots must be at least 4")
        _invariant(
            config.timer_log_file_size_bytes >= UNIT_SIZE_BYTES + BLANK_SIZE_BYTES,
            "timer_log_file_size_bytes must hold a unit and a blank",
        )
        self.config = config
        self._precision_ms = config.timer_precision_ms
        self._window_ms = roll_window_ms(config)
        self._lag_max_ms = config.timer_wheel_slots * config.timer_precision_ms
        self._wheel = _Wheel(config.timer_wheel_path, config.timer_wheel_slots, self._precision_ms)
        self._log = _TimerLog(config.timer_log_dir, config.timer_log_file_size_bytes)
        self._checkpoint_path = config.config_dir / CHECKPOINT_FILE_NAME
        self._lock = threading.RLock()
        self._checkpoint = TimerCheckpoint()
        self._wheel_created = False
        self._state = "new"  # new → loaded → open → closed
        # Invariant: multiple of the precision; every slot before it has been returned.
        self._read_ms: int | None = None
        # Invariant: _committed_ms <= _read_ms <= _committed_ms + _lag_max_ms (None together).
        self._committed_ms: int | None = None
        self._reading: _SlotRead | None = None
        self._backlog = 0  # sum of slot.num over slots at or after the read cursor
        self._last_commit_offset = -1  # Invariant: units hold strictly increasing offsets
        self._queue_offset = 0
        self._clock_ms = 0
        self._file_fire_max: dict[int, int] = {}  # sealed file start → newest fire time in it
        self._counts = {"enqueued": 0, "rolled": 0, "markers": 0, "returned": 0, "suppressed": 0}

    @classmethod
    def open(cls, config: StoreConfig, *, commit_log_max_offset: int | None = None) -> TimerStore:
        store = cls(config)
        store.load()
        store.recover(commit_log_max_offset=commit_log_max_offset)
        return store

    # --- lifecycle ---
    def load(self) -> None:
        """Open the wheel (creating it), the timer-log files and read the checkpoint."""
        with self._lock:
            _invariant(self._state == "new", f"load() on a timer store in state {self._state}")
            self._wheel_created = self._wheel.open()
            self._log.queue.load()
            self._checkpoint = _read_checkpoint(self._checkpoint_path) or TimerCheckpoint()
            self._queue_offset = self._checkpoint.last_timer_queue_offset
            self._clock_ms = self._checkpoint.timestamp_ms
            self._state = "loaded"

    def recover(self, *, commit_log_max_offset: int | None = None) -> None:
        """Make wheel and log consistent (module docstring, "recovery rule"), then flush."""
        with self._lock:
            _invariant(self._state == "loaded", f"recover() in state {self._state}")
            cp = self._checkpoint
            start_ms = cp.last_read_time_ms if cp.last_read_time_ms > 0 else None
            self._read_ms = self._committed_ms = start_ms
            end = self._replay_log()
            if end < cp.last_timer_log_flush_pos:
                raise CorruptionError(
                    f"{self._log.queue.directory}: valid timer-log units end at {end}, but the "
                    f"checkpoint says {cp.last_timer_log_flush_pos} bytes were flushed"
                )
            self._log.cut(end)
            self._log.sync_from(cp.last_timer_log_flush_pos)
            if self._read_ms is None:
                self._read_ms = self._committed_ms = self._earliest_slot_ms()
            self._state = "open"
            if commit_log_max_offset is not None:
                self._truncate_locked(commit_log_max_offset)
            self._backlog = self._count_backlog()
            self._flush_locked()

    def close(self) -> None:
        """Flush and release the files. Idempotent."""
        with self._lock:
            if self._state == "open":
                self._flush_locked()
            if self._state in ("loaded", "open"):
                self._wheel.close()
                self._log.queue.close()
            self._state = "closed"

    def _require_open(self) -> None:
        if self._state != "open":
            raise StoreNotWritable(f"the timer store is {self._state}, not open")

    def _replay_log(self) -> int:
        files = self._log.queue.files
        if not files:
            return 0
        if self._wheel_created:
            first = 0
        else:
            first = max(0, self._log.file_index_for(self._checkpoint.last_timer_log_flush_pos) - 1)
        scan = _LogScan(self._log, first)
        for pos, unit in scan:
            self._relink(pos, unit)
            self._last_commit_offset = max(self._last_commit_offset, unit.commit_offset)
        return scan.end

    def _relink(self, pos: int, unit: TimerUnit) -> None:
        fire_ms = unit.fire_ms
        if self._read_ms is not None and fire_ms < self._read_ms:
            return  # already read before the crash; its slot may hold a newer time
        slot = self._wheel.get(fire_ms)
        delta = _num_delta(unit.magic)
        if slot is None:
            self._wheel.put(Slot(fire_ms, pos, pos, delta))
        elif slot.last_pos < pos:
            self._wheel.put(dataclasses.replace(slot, last_pos=pos, num=slot.num + delta))

    def _earliest_slot_ms(self) -> int | None:
        times = [slot.time_ms for slot in self._wheel.live_slots(None)]
        return min(times) if times else None

    def _count_backlog(self) -> int:
        if self._read_ms is None:
            return 0
        return sum(slot.num for slot in self._wheel.live_slots(self._read_ms))

    # --- writing ---
    def enqueue(
        self, commit_offset: int, size: int, deliver_ms: int, enqueue_ms: int, topic_hash: int
    ) -> bool:
        """Append a unit for the parked message at ``commit_offset`` and link it in its slot.

        ``deliver_ms`` is the message's TIMER_OUT_MS (rounded down to the precision here if it
        is not). Returns False, doing nothing, when ``commit_offset`` is not above the last
        enqueued one (a replay).
        """
        return self._append(commit_offset, size, deliver_ms, enqueue_ms, topic_hash, None)

    def delete(
        self,
        commit_offset: int,
        size: int,
        deliver_ms: int,
        enqueue_ms: int,
        topic_hash: int,
        *,
        target_commit_offset: int | None = None,
    ) -> bool:
        """Append a DELETE marker (the marker message at ``commit_offset``) in the slot of
        ``deliver_ms``, the target's TIMER_OUT_MS. With ``target_commit_offset`` the target
        entry is not returned when that slot is read."""
        target = -1 if target_commit_offset is None else target_commit_offset
        return self._append(commit_offset, size, deliver_ms, enqueue_ms, topic_hash, target)

    def _append(
        self,
        commit_offset: int,
        size: int,
        deliver_ms: int,
        enqueue_ms: int,
        thash: int,
        delete_target: int | None,
    ) -> bool:
        _invariant(commit_offset >= 0 and size > 0, f"bad timer entry {commit_offset}/{size}")
        with self._lock:
            self._require_open()
            if commit_offset <= self._last_commit_offset:
                return False
            self._note_time(enqueue_ms)
            if self._read_ms is None:
                self._start_cursor(enqueue_ms)
            fire_ms, rolled = self._place(deliver_ms)
            magic = MAGIC_DEFAULT | (MAGIC_ROLL if rolled else 0)
            if delete_target is not None:
                magic |= MAGIC_DELETE
            slot = self._wheel.get(fire_ms)
            enqueue_field, delay = _unit_times(fire_ms, enqueue_ms)
            unit = TimerUnit(
                prev_pos=slot.last_pos if slot is not None else -1,
                magic=magic,
                enqueue_ms=enqueue_field,
                delay_ms=delay,
                commit_offset=commit_offset,
                size=size,
                topic_hash=thash,
                reserved=delete_target + 1 if delete_target is not None else 0,
            )
            pos = self._log.append(encode_unit(unit))
            self._link(slot, fire_ms, pos, _num_delta(magic))
            self._last_commit_offset = commit_offset
            self._count_append(rolled, delete_target is not None)
            return True

    def _place(self, deliver_ms: int) -> tuple[int, bool]:
        """(slot time, rolled) for a fire time, per the placement rule of the docstring."""
        read_ms = self._read_ms
        _invariant(read_ms is not None, "placing a timer entry before the cursor started")
        assert read_ms is not None  # for the type checker; checked just above
        fire_ms = floor_to_precision(deliver_ms, self._precision_ms)
        earliest = read_ms + (self._precision_ms if self._reading is not None else 0)
        window_end = read_ms + self._window_ms
        if fire_ms < earliest:
            return earliest, False
        if fire_ms < window_end:
            return fire_ms, False
        if fire_ms - window_end < self._window_ms // 3:
            half = floor_to_precision(self._window_ms // 2, self._precision_ms)
            return max(read_ms + half, earliest), True
        return window_end - self._precision_ms, True

    def _link(self, slot: Slot | None, fire_ms: int, pos: int, delta: int) -> None:
        if slot is None:
            self._wheel.put(Slot(fire_ms, pos, pos, delta))
        else:
            self._wheel.put(dataclasses.replace(slot, last_pos=pos, num=slot.num + delta))
        self._backlog += delta
        # Track the newest fire time of files created in this session (their first unit is at
        # local offset 0); files opened by load() are scanned when cleanup considers them.
        start = pos - pos % self._log.file_size
        if start in self._file_fire_max:
            self._file_fire_max[start] = max(self._file_fire_max[start], fire_ms)
        elif pos == start:
            self._file_fire_max[start] = fire_ms

    def _count_append(self, rolled: bool, marker: bool) -> None:
        self._counts["enqueued"] += 1
        self._counts["rolled"] += int(rolled)
        self._counts["markers"] += int(marker)

    def _note_time(self, time_ms: int) -> None:
        self._clock_ms = max(self._clock_ms, time_ms)

    def _start_cursor(self, time_ms: int) -> None:
        self._read_ms = self._committed_ms = floor_to_precision(time_ms, self._precision_ms)

    def set_timer_queue_offset(self, queue_offset: int) -> None:
        """Record how far the glue has enqueued the timer topic (persisted at the next flush,
        after the log is synced, so it never claims unflushed entries)."""
        with self._lock:
            self._queue_offset = queue_offset

    # --- reading ---
    def due_entries(
        self,
        now_ms: int,
        max_entries: int,
        *,
        slots_max: int = DUE_SLOTS_MAX,
        units_read_max: int = DUE_UNITS_READ_MAX,
    ) -> list[TimerEntry]:
        """Entries whose slot is due at ``now_ms`` (slot time + precision <= now), oldest slot
        first; within a slot delete markers first, then entries in enqueue order.

        Work per call is bounded: at most ``max_entries`` entries, ``slots_max`` slots entered
        and ``units_read_max`` log units read. The cursor also stops ``slots × precision``
        ahead of the committed read time. An empty result therefore does not mean that nothing
        is due; :meth:`is_caught_up` tells.
        """
        _invariant(min(max_entries, slots_max, units_read_max) > 0, "limits must be positive")
        with self._lock:
            self._require_open()
            self._note_time(now_ms)
            if self._read_ms is None:
                self._start_cursor(now_ms)
            out: list[TimerEntry] = []
            budget = _Budget(slots_max, units_read_max)
            while len(out) < max_entries and self._step(
                now_ms, max_entries - len(out), out, budget
            ):
                pass
            self._counts["returned"] += len(out)
            return out

    def _step(self, now_ms: int, room: int, out: list[TimerEntry], budget: _Budget) -> bool:
        """One unit of progress; False when no more progress is possible in this call."""
        read_ms, committed_ms = self._read_ms, self._committed_ms
        assert read_ms is not None  # started by the caller
        assert committed_ms is not None
        if read_ms + self._precision_ms > now_ms or budget.units <= 0:
            return False
        reading = self._reading
        if reading is None:
            if read_ms - committed_ms >= self._lag_max_ms or budget.slots <= 0:
                return False
            budget.slots -= 1
            slot = self._wheel.get(read_ms)
            if slot is None:
                self._advance(0)
                return True
            reading = self._reading = _SlotRead(read_ms, slot.num, slot.last_pos)
        if reading.scan_next >= 0:
            self._scan(reading, budget)
            return True
        self._emit(reading, room, out)
        if reading.done():
            self._advance(reading.slot_num)
        return True

    def _scan(self, reading: _SlotRead, budget: _Budget) -> None:
        while reading.scan_next >= 0 and budget.units > 0:
            pos = reading.scan_next
            unit = self._log.read(pos)
            budget.units -= 1
            if unit.fire_ms != reading.slot_ms:
                raise CorruptionError(
                    f"timer-log unit at {pos} fires at {unit.fire_ms} but is chained in the "
                    f"slot of {reading.slot_ms}"
                )
            entry = _entry(unit)
            if entry.deleted:
                reading.markers.append((unit.reserved - 1, entry))
                if unit.reserved > 0:
                    reading.targets.add(unit.reserved - 1)
            else:
                reading.normals.append(entry)
            reading.scan_next = unit.prev_pos

    def _emit(self, reading: _SlotRead, room: int, out: list[TimerEntry]) -> None:
        if reading.ready is None:
            kept = [e for e in reversed(reading.normals) if e.commit_offset not in reading.targets]
            self._counts["suppressed"] += len(reading.normals) - len(kept)
            reading.ready = [e for _, e in reversed(reading.markers)] + kept
            reading.markers, reading.normals = [], []
        batch = reading.ready[reading.emitted : reading.emitted + room]
        reading.emitted += len(batch)
        reading.emitted_normals += sum(1 for e in batch if not e.deleted)
        out.extend(batch)

    def _advance(self, slot_num: int) -> None:
        assert self._read_ms is not None
        self._backlog -= slot_num
        self._reading = None
        self._read_ms += self._precision_ms

    def commit_read(self, time_ms: int) -> None:
        """Declare every returned entry of the slots before ``time_ms`` handled (re-put
        durably). Persisted by the next :meth:`flush`; clamped to the read cursor."""
        with self._lock:
            if self._read_ms is None or self._committed_ms is None:
                return
            target = min(floor_to_precision(time_ms, self._precision_ms), self._read_ms)
            self._committed_ms = max(self._committed_ms, target)

    def is_caught_up(self, now_ms: int) -> bool:
        """True when no slot is due at ``now_ms`` any more."""
        with self._lock:
            return self._read_ms is None or self._read_ms + self._precision_ms > now_ms

    @property
    def read_time_ms(self) -> int | None:
        """The read cursor: the next slot to read; every slot before it has been returned."""
        return self._read_ms

    @property
    def committed_read_time_ms(self) -> int | None:
        return self._committed_ms

    @property
    def timer_queue_offset(self) -> int:
        return self._queue_offset

    @property
    def last_commit_offset(self) -> int:
        """Highest commit offset enqueued (-1 when none); lower offsets are ignored."""
        return self._last_commit_offset

    @property
    def roll_window_ms(self) -> int:
        return self._window_ms

    # --- durability ---
    def flush(self) -> None:
        """fdatasync the log, write back and sync the wheel, then write the checkpoint."""
        with self._lock:
            self._require_open()
            self._flush_locked()

    def _flush_locked(self) -> None:
        flushed = self._log.queue.flush()
        self._wheel.flush()
        self._write_checkpoint(flushed)

    def _write_checkpoint(self, flush_pos: int) -> None:
        """Replace the checkpoint atomically; skipped when no persisted field would change."""
        old = self._checkpoint
        if (
            self._state == "open"
            and old.counter > 0
            and (old.last_read_time_ms, old.last_timer_log_flush_pos, old.last_timer_queue_offset)
            == (self._committed_ms or 0, flush_pos, self._queue_offset)
        ):
            return
        cp = TimerCheckpoint(
            last_read_time_ms=self._committed_ms or 0,
            last_timer_log_flush_pos=flush_pos,
            last_timer_queue_offset=self._queue_offset,
            master_timer_queue_offset=self._queue_offset,
            state_version=0,
            timestamp_ms=self._clock_ms,
            counter=self._checkpoint.counter + 1,
        )
        durable.write_file_atomically(
            self._checkpoint_path, encode_checkpoint(cp), keep_backup=False
        )
        self._checkpoint = cp

    # --- truncation and cleanup ---
    def truncate(self, commit_offset: int) -> None:
        """Drop every entry pointing at a commit-log offset ``>= commit_offset`` (the commit log
        was cut). Durable on return. Entries already returned from the slot at the cursor may
        be returned again when that slot is affected."""
        with self._lock:
            self._require_open()
            self._truncate_locked(commit_offset)

    def _truncate_locked(self, commit_offset: int) -> None:
        cut, kept_offset = self._find_cut(commit_offset)
        if cut is None:
            return
        # The checkpoint first, so that a crash from here on replays from at most the cut.
        self._write_checkpoint(min(self._checkpoint.last_timer_log_flush_pos, cut))
        fire_times = {unit.fire_ms for _, unit in self._log.units_backwards_from(cut)}
        for fire_ms in fire_times:
            self._unlink_tail(fire_ms, cut)
        if self._reading is not None and self._reading.slot_ms in fire_times:
            self._reading = None
        self._wheel.flush()
        self._log.cut(cut)
        self._file_fire_max = {
            k: v for k, v in self._file_fire_max.items() if k + self._log.file_size <= cut
        }
        self._last_commit_offset = (
            kept_offset if kept_offset >= 0 else min(self._last_commit_offset, commit_offset - 1)
        )
        self._backlog = self._count_backlog()
        self._flush_locked()

    def _find_cut(self, commit_offset: int) -> tuple[int | None, int]:
        """(first log position to drop or None, commit offset of the newest kept unit or -1)."""
        cut: int | None = None
        for pos, unit in self._log.units_backwards():
            if unit.commit_offset < commit_offset:
                return cut, unit.commit_offset
            cut = pos
        return cut, -1

    def _unlink_tail(self, fire_ms: int, cut: int) -> None:
        """Point the slot of ``fire_ms`` at its newest unit below ``cut`` (or empty it)."""
        slot = self._wheel.get(fire_ms)
        if slot is None or slot.last_pos < cut:
            return
        pos, removed = slot.last_pos, 0
        while pos >= cut:
            unit = self._log.read(pos)
            removed += _num_delta(unit.magic)
            pos = unit.prev_pos
        if pos < 0:
            self._wheel.clear(fire_ms)
        else:
            self._wheel.put(dataclasses.replace(slot, last_pos=pos, num=slot.num - removed))

    def clean_expired_files(self, files_max: int = 1) -> int:
        """Delete up to ``files_max`` oldest timer-log files whose units all fired before the
        committed read time and are flushed; never the newest file. Returns the count."""
        with self._lock:
            self._require_open()
            deleted = 0
            while deleted < files_max and self._oldest_file_expired():
                f = self._log.queue.files[0]
                self._file_fire_max.pop(f.file_from_offset, None)
                self._log.queue.delete_files([f])
                deleted += 1
            return deleted

    def _oldest_file_expired(self) -> bool:
        files = self._log.queue.files
        if len(files) < 2 or self._committed_ms is None:
            return False
        f = files[0]
        if f.file_from_offset + f.file_size > self._log.queue.flushed_offset():
            return False
        fire_max = self._file_fire_max.get(f.file_from_offset)
        if fire_max is None:
            fire_max = max((u.fire_ms for u in self._log.file_units(f)), default=-1)
            self._file_fire_max[f.file_from_offset] = fire_max
        return fire_max < self._committed_ms

    # --- metrics ---
    def backlog_count(self) -> int:
        """Entries enqueued and not yet returned (delete markers count -1, as ``num``)."""
        with self._lock:
            returned = self._reading.emitted_normals if self._reading is not None else 0
            return max(0, self._backlog - returned)

    def statistics(self) -> TimerStatistics:
        with self._lock:
            q = self._log.queue
            return TimerStatistics(
                read_time_ms=self._read_ms,
                committed_read_time_ms=self._committed_ms,
                backlog_count=self.backlog_count(),
                roll_window_ms=self._window_ms,
                log_min_offset=q.min_offset(),
                log_max_offset=q.max_offset(),
                log_flushed_offset=q.flushed_offset(),
                last_commit_offset=self._last_commit_offset,
                enqueued_total=self._counts["enqueued"],
                rolled_total=self._counts["rolled"],
                delete_markers_total=self._counts["markers"],
                returned_total=self._counts["returned"],
                suppressed_total=self._counts["suppressed"],
            )
