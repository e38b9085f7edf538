"""Persistent timer store for delayed delivery (RocketMQ ``TimerMessageStore``, 1 s precision).

A message with ``TIMER_DELAY_SEC``/``TIMER_DELAY_MS``/``TIMER_DELIVER_MS`` is parked in the
commit log under the timer topic (:mod:`~gannet.node.store.timers.delivery` routes and parks
it). The message store's timer glue reads that topic in commit-log order and calls
:meth:`TimerStore.enqueue`;
its timer thread calls :meth:`TimerStore.due_entries` with the current time, re-puts each
returned message (:func:`restore_message`, or :func:`roll_message` for rolled entries), and
confirms with :meth:`TimerStore.commit_read`. This module never reads the commit log itself.

On-disk formats: :mod:`~gannet.node.store.timers.codecs`; the wheel and timer-log files:
:mod:`~gannet.node.store.timers.wheel`; routing and re-putting messages:
:mod:`~gannet.node.store.timers.delivery`.

Time rules
----------

* Routing (``docs/formats/timers.md`` §4): the delivery time is rounded *down* to the
  precision, and an exact multiple loses one more unit; that rounded value is
  ``TIMER_OUT_MS``. The slot of time ``t`` is due when ``now >= t + precision``, so an entry
  never fires before it was asked to.
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

The read cursor restarts at ``Rc``: entries returned but not committed are returned again, so
delivery is **at least once** (once if nothing crashes); every flushed unit fires at least once.

Enqueue is idempotent by commit offset: units carry strictly increasing commit-log offsets, and
an ``enqueue``/``delete`` whose offset is not above the last one is ignored (it is a replay of
the timer topic after a restart). This also lets :meth:`TimerStore.truncate` cut the log at
the first unit pointing at or past the cut offset.

Deletes: a DELETE marker lands in the slot of its target's fire time. When the slot is read,
its markers are returned first (``deleted=True``, for RocketMQ-style matching by
``realTopic+uniqKey`` in the glue), and entries whose commit offset is a marker's known target
(the reserved field) are not returned. A marker that does not land in its target's slot
(target rolled meanwhile) does not suppress it.

Threading: every public method takes the store's lock (shared by the timer and flush threads).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator

from gannet.node.invariants import invariant
from gannet.node.store import durable
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import CorruptionError, StoreNotWritable
from gannet.node.store.timers.codecs import (
    BLANK_SIZE_BYTES,
    CHECKPOINT_FILE_NAME,
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    UNIT_SIZE_BYTES,
    Slot,
    TimerCheckpoint,
    TimerEntry,
    TimerStatistics,
    TimerUnit,
    UnitFields,
    encode_checkpoint,
    encode_unit,
    floor_to_precision,
    num_delta,
    reserved_field,
    roll_window_ms,
    unit_times,
)
from gannet.node.store.timers.wheel import (
    LogScan,
    ReadBudget,
    SlotRead,
    TimerLog,
    Wheel,
    read_checkpoint,
)

DUE_SLOTS_MAX = 86_400  # default bound on slots stepped over per due_entries call
DUE_UNITS_READ_MAX = 65_536  # default bound on timer-log units read per due_entries call
UNITS_PER_SLOT_MAX = 10_000_000  # bound on one slot's chain walked by pending_units

# --------------------------------------------------------------------------------------------
# The store.
# --------------------------------------------------------------------------------------------


class TimerStore:
    """The timer wheel, timer log and checkpoint of one store directory.

    Lifecycle: ``TimerStore(config)`` → :meth:`load` → :meth:`recover` (or :meth:`open`) →
    enqueue / due_entries / commit_read / flush … → :meth:`close`.
    """

    def __init__(self, config: StoreConfig) -> None:
        invariant(config.timer_precision_ms > 0, "timer_precision_ms must be positive")
        invariant(config.timer_wheel_slots >= 4, "timer_wheel_slots must be at least 4")
        invariant(
            config.timer_log_file_size_bytes >= UNIT_SIZE_BYTES + BLANK_SIZE_BYTES,
            "timer_log_file_size_bytes must hold a unit and a blank",
        )
        self.config = config
        self._precision_ms = config.timer_precision_ms
        self._window_ms = roll_window_ms(config)
        self._lag_max_ms = config.timer_wheel_slots * config.timer_precision_ms
        self._wheel = Wheel(config.timer_wheel_path, config.timer_wheel_slots, self._precision_ms)
        self._log = TimerLog(config.timer_log_dir, config.timer_log_file_size_bytes)
        self._checkpoint_path = config.config_dir / CHECKPOINT_FILE_NAME
        self._lock = threading.RLock()
        self._checkpoint = TimerCheckpoint()
        self._wheel_created = False
        self._state = "new"  # new → loaded → open → closed
        # Invariant: multiple of the precision; every slot before it has been returned.
        self._read_ms: int | None = None
        # Invariant: _committed_ms <= _read_ms <= _committed_ms + _lag_max_ms (None together).
        self._committed_ms: int | None = None
        self._reading: SlotRead | None = None
        self._backlog = 0  # sum of slot.num over slots at or after the read cursor
        self._last_commit_offset = -1  # Invariant: units hold strictly increasing offsets
        self._queue_offset = 0
        self._clock_ms = 0
        self._file_fire_max: dict[int, int] = {}  # sealed file start → newest fire time in it
        self.replayed_tail = range(0)  # log positions recover() replayed: maybe torn (codecs)
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
            invariant(self._state == "new", f"load() on a timer store in state {self._state}")
            self._wheel_created = self._wheel.open()
            self._log.queue.load()
            self._checkpoint = read_checkpoint(self._checkpoint_path) or TimerCheckpoint()
            self._queue_offset = self._checkpoint.last_timer_queue_offset
            self._clock_ms = self._checkpoint.timestamp_ms
            self._state = "loaded"

    def recover(self, *, commit_log_max_offset: int | None = None) -> None:
        """Make wheel and log consistent (module docstring, "recovery rule"), then flush."""
        with self._lock:
            invariant(self._state == "loaded", f"recover() in state {self._state}")
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
            self.replayed_tail = range(cp.last_timer_log_flush_pos, end)
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
        scan = LogScan(self._log, first)
        read_ms = self._read_ms
        chained: dict[int, int] = {}  # fire ms -> its slot's last_pos as the replay left it
        last_offset = self._last_commit_offset
        for pos, fields in scan.fields():  # prev, magic, enqueue, delay, commit, size, ...
            last_offset = max(last_offset, fields[4])
            fire_ms = fields[2] + fields[3]
            if read_ms is not None and fire_ms < read_ms:
                continue  # already read before the crash; its slot may hold a newer time
            if chained.get(fire_ms, -1) >= pos:
                continue  # chained already: the common case, decided without the wheel
            chained[fire_ms] = self._relink(pos, fire_ms, fields[1])
        self._last_commit_offset = last_offset
        return scan.end

    def _relink(self, pos: int, fire_ms: int, magic: int) -> int:
        """Chain the unit at ``pos`` in its slot unless the slot has it; the slot's last_pos."""
        slot = self._wheel.get(fire_ms)
        delta = num_delta(magic)
        if slot is None:
            self._wheel.put(Slot(fire_ms, pos, pos, delta))
            return pos
        if slot.last_pos < pos:
            self._wheel.put(dataclasses.replace(slot, last_pos=pos, num=slot.num + delta))
            return pos
        return slot.last_pos

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
        invariant(commit_offset >= 0 and size > 0, f"bad timer entry {commit_offset}/{size}")
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
            enqueue_field, delay = unit_times(fire_ms, enqueue_ms)
            unit = TimerUnit(
                prev_pos=slot.last_pos if slot is not None else -1,
                magic=magic,
                enqueue_ms=enqueue_field,
                delay_ms=delay,
                commit_offset=commit_offset,
                size=size,
                topic_hash=thash,
                reserved=reserved_field(delete_target, rolled, deliver_ms),
            )
            pos = self._log.append(encode_unit(unit))
            self._link(slot, fire_ms, pos, num_delta(magic))
            self._last_commit_offset = commit_offset
            self._count_append(rolled, delete_target is not None)
            return True

    def _place(self, deliver_ms: int) -> tuple[int, bool]:
        """(slot time, rolled) for a fire time, per the placement rule of the docstring."""
        read_ms = self._read_ms
        invariant(read_ms is not None, "placing a timer entry before the cursor started")
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
        invariant(min(max_entries, slots_max, units_read_max) > 0, "limits must be positive")
        with self._lock:
            self._require_open()
            self._note_time(now_ms)
            if self._read_ms is None:
                self._start_cursor(now_ms)
            out: list[TimerEntry] = []
            budget = ReadBudget(slots_max, units_read_max)
            while len(out) < max_entries and self._step(
                now_ms, max_entries - len(out), out, budget
            ):
                pass
            self._counts["returned"] += len(out)
            return out

    def _step(self, now_ms: int, room: int, out: list[TimerEntry], budget: ReadBudget) -> bool:
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
            reading = self._reading = SlotRead(read_ms, slot.num, slot.last_pos)
        if reading.scan_next >= 0:
            reading.scan(self._log, budget)
            return True
        self._counts["suppressed"] += reading.emit(room, out)
        if reading.done():
            self._advance(reading.slot_num)
        return True

    def _advance(self, slot_num: int) -> None:
        assert self._read_ms is not None
        self._backlog -= slot_num
        self._reading = None
        self._read_ms += self._precision_ms

    def rewind(self) -> None:
        """Move the read cursor back to the committed read time: the entries returned since
        were not handled (their re-put failed, e.g. refused on a member that does not lead)
        and are returned again, as after a restart (at least once)."""
        with self._lock:
            if self._committed_ms is not None:
                self._reading = None
                self._read_ms = self._committed_ms

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

    def complete_through_ms(self) -> int | None:
        """The last time at which no slot is due that was not returned: every slot before the
        read cursor was returned, and the cursor's own slot is due only at ``cursor +
        precision`` (None: the cursor never started). ``is_caught_up(t)`` holds exactly for
        ``t`` up to this time."""
        with self._lock:
            return None if self._read_ms is None else self._read_ms + self._precision_ms - 1

    def handled_through_ms(self) -> int | None:
        """The last time at which no slot is due that was not handled: every slot before the
        committed read time was returned and declared handled (:meth:`commit_read`), and the
        committed slot is due only at ``committed + precision`` (None: the cursor never
        started). Unlike :meth:`complete_through_ms` it does not count slots returned by a
        :meth:`due_entries` whose entries are still being re-put."""
        with self._lock:
            if self._read_ms is None or self._committed_ms is None:
                return None
            return self._committed_ms + self._precision_ms - 1

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
            removed += num_delta(unit.magic)
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

    def pending_units(self) -> list[TimerUnit]:
        """Every entry (not delete markers, nor their known targets) in the slots from the
        committed read time on: what fires again from here, after a restart too. Reads the
        timer log; :class:`~gannet.node.store.timers.pending.PendingTimers` is rebuilt from it
        when the store opens or is truncated (:meth:`pending_unit_fields`)."""
        return [TimerUnit(*fields) for _, fields in self.pending_unit_fields()]

    def pending_unit_fields(self) -> Iterator[tuple[int, UnitFields]]:
        """:meth:`pending_units` as (log position, unit fields), streamed: no object per unit
        and no list of millions. Holds the store's lock until consumed: consume it whole."""
        with self._lock:
            self._require_open()
            if self._committed_ms is None:
                return
            read = self._log.read_fields
            for slot in self._wheel.live_slots(self._committed_ms):
                chain: list[tuple[int, UnitFields]] = []
                pos, markers = slot.last_pos, False
                while pos >= 0 and len(chain) < UNITS_PER_SLOT_MAX:
                    fields = read(pos)  # prev, magic, enqueue, delay, commit, size, hash, rsvd
                    if fields[2] + fields[3] != slot.time_ms:
                        break  # a unit of an older time that shared the index: not this slot's
                    chain.append((pos, fields))
                    markers = markers or bool(fields[1] & MAGIC_DELETE)
                    pos = fields[0]
                chain.reverse()
                if markers:
                    deleted = {f[7] - 1 for _, f in chain if f[1] & MAGIC_DELETE}
                    chain = [c for c in chain if not c[1][1] & MAGIC_DELETE]
                    chain = [c for c in chain if c[1][4] not in deleted]
                yield from chain

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
