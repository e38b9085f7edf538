"""The timer store's on-disk codecs and time arithmetic (RocketMQ ``TimerMessageStore``
files): wheel slots, timer-log units, blanks and the ``timercheck`` checkpoint. Pure.

Used by the wheel and timer-log files (:mod:`~gannet.node.store.timers.wheel`), the timer store
(:mod:`~gannet.node.store.timers.store`), offline verification and the tests.

On-disk formats (all integers big-endian; ``docs/formats/timers.md``)
---------------------------------------------------------------------

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
                    DELETE marker whose target is known, and the parked message's
                    TIMER_OUT_MS into a ROLL unit that is not a DELETE marker (its slot is
                    where it rolls, not when it is due); 0 when not known

  A unit is appended only while ``52 + 16 <= bytes left in the file``; otherwise the 16-byte
  blank ``[int bytes left, long 0, int 0xCBD43194 (-875286124)]`` closes the file and the unit
  goes to the next one. Hence a file holds ``(file size - 16) // 52`` units.

  Units carry no checksum. A unit torn by a crash is still recognised: files are zero-filled
  and written once, units start at multiples of 4, so a tear leaves zeros from a 4-byte
  boundary on (or before it); a tear at or before offset 36 zeroes the record size, which a
  real unit never has, and a tear at 40, 44 or 48 loses only the metrics hash (zeroed) and
  all or the low half of the reserved field (a DELETE marker then forgets its target and
  suppresses nothing; a ROLL unit's due time is not to be trusted, see :func:`roll_due_ms`).

``<root>/config/timercheck`` — 4096 bytes, longs: lastReadTimeMs @0, lastTimerLogFlushPos @8,
lastTimerQueueOffset @16, masterTimerQueueOffset @24, dataVersion stateVersion @32,
timestamp @40, counter @48; the rest zero.
"""

from __future__ import annotations

import dataclasses
import mmap
import struct
from dataclasses import dataclass

from gannet.node.store import hashing
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import CorruptionError

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

SLOT_STRUCT = struct.Struct(">qqqii")
_UNIT = struct.Struct(">iqiqiqiiq")
_BLANK = struct.Struct(">iqi")
_CHECKPOINT = struct.Struct(">qqqqqqq")
_INT = struct.Struct(">i")
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
EMPTY_SLOT = bytes(SLOT_SIZE_BYTES)

_Buffer = bytes | bytearray | memoryview | mmap.mmap


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
    return SLOT_STRUCT.pack(
        slot.time_ms // precision_ms, slot.first_pos, slot.last_pos, slot.num, slot.magic
    )


def decode_slot(buf: _Buffer, offset: int, precision_ms: int) -> Slot | None:
    """The slot at ``offset``; None for an empty (all-zero) slot."""
    if buf[offset : offset + SLOT_SIZE_BYTES] == EMPTY_SLOT:
        return None
    time_units, first, last, num, magic = SLOT_STRUCT.unpack_from(buf, offset)
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


UnitFields = tuple[int, int, int, int, int, int, int, int]
"""A unit's fields in :class:`TimerUnit` order, without the object (hot loops over millions)."""


def unit_fields(buf: _Buffer, offset: int) -> UnitFields | None:
    """The fields of the unit at ``offset``, or None when the bytes are not a plausible unit."""
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
    return prev, magic, enqueue, delay, commit, rec_size, thash, reserved


def decode_unit(buf: _Buffer, offset: int) -> TimerUnit | None:
    """The unit at ``offset``, or None when the bytes are not a plausible unit."""
    fields = unit_fields(buf, offset)
    return TimerUnit(*fields) if fields is not None else None


def reserved_field(delete_target: int | None, rolled: bool, deliver_ms: int) -> int:
    """The reserved field of a new unit: a DELETE marker's target + 1, a ROLL unit's
    TIMER_OUT_MS (``deliver_ms``), else 0."""
    if delete_target is not None:
        return delete_target + 1
    return deliver_ms if rolled and deliver_ms > 0 else 0


def roll_due_ms(unit: TimerUnit) -> int | None:
    """The TIMER_OUT_MS a ROLL unit records (Gannet writes it), or None: not a ROLL unit, a
    DELETE marker, or a unit written without it (by RocketMQ or an older Gannet). Only trust
    it for units that were durable before a crash (a tear may have zeroed its low half)."""
    if unit.magic & (MAGIC_ROLL | MAGIC_DELETE) != MAGIC_ROLL or unit.reserved <= 0:
        return None
    return unit.reserved


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


def entry_of(unit: TimerUnit) -> TimerEntry:
    return TimerEntry(
        commit_offset=unit.commit_offset,
        size=unit.size,
        deliver_ms=unit.fire_ms,
        enqueue_ms=unit.enqueue_ms,
        topic_hash=unit.topic_hash,
        rolled=bool(unit.magic & MAGIC_ROLL),
        deleted=bool(unit.magic & MAGIC_DELETE),
    )


def num_delta(magic: int) -> int:
    return -1 if magic & MAGIC_DELETE else 1


def unit_times(fire_ms: int, enqueue_ms: int) -> tuple[int, int]:
    """(enqueue field, delay field); the enqueue time is clamped so the delay fits an int."""
    delay = min(max(fire_ms - enqueue_ms, INT_MIN), INT_MAX)
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
