"""In-flight checkpoints and in-memory ack matching (RocketMQ ``PopBufferMergeService``,
``docs/formats/pop.md`` §2).

Two structures, guarded by one lock:

* ``tracked`` — revive key → :class:`Inflight`, every checkpoint this broker created and whose
  revive time has not yet passed (bounded by ``pop_ck_buffer_size_max``). A checkpoint is either
  *buffered* (only in memory; acks just set bits) or *stored* (its CK message was written; acks
  are written as ACK messages and also noted here, so a second ack of the same message is
  refused). Buffered checkpoints whose messages are all acked before they must be stored are
  dropped without ever being written — the whole point of the merge.
* ``offsets`` — lock key ``topic@group@queueId`` → FIFO of pops with their ``nextBeginOffset``
  (bounded by ``pop_ck_offset_queue_size_max`` per key). The head is committed as the consumer
  offset once its checkpoint is stored or all its messages are acked (an empty "mock" pop that
  only skipped filtered messages is done at once). Hence the consumer offset moves past popped
  messages as soon as their CK is durable, and redelivery happens only through revive; a crash
  before that loses only memory, and the messages are popped again from the committed offset.

A buffered checkpoint is stored (with the in-memory ack bits as its ``bm``) when its pop is
older than ``pop_ck_stay_buffer_time_ms`` or its revive time is nearer than
``pop_ck_stay_buffer_timeout_ms``. A checkpoint is buffered at all only when its revive time is
at least ``pop_ck_stay_buffer_timeout_ms + 1500`` away.

Pure state (no IO, explicit ``now_ms``); :mod:`popping` and :mod:`acking` drive it and do the
writes. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from gannet.node.pop import checkpoints
from gannet.node.pop.checkpoints import PopCheckPoint
from gannet.node.pop.config import PopConfig

BUFFER_ENTRY_MARGIN_MS = 1_500


@dataclass(slots=True)
class Inflight:
    """A tracked checkpoint. Invariant: ``acked_bits`` ⊆ ``ck.all_bits``; ``stored`` implies
    the CK message was appended; ``ck`` is None only for a mock pop (offset advance only)."""

    ck: PopCheckPoint | None
    revive_qid: int
    next_begin_offset: int
    stored: bool
    acked_bits: int = 0
    lock_key: str | None = None
    storing: bool = False  # CK appended, not yet durable

    @property
    def all_acked(self) -> bool:
        return self.ck is not None and self.acked_bits == self.ck.all_bits

    @property
    def offset_done(self) -> bool:
        return self.ck is None or self.stored or self.all_acked


@dataclass(frozen=True, slots=True)
class BufferStatistics:
    tracked: int
    buffered: int
    offset_queues: int
    dropped_without_write_total: int


class InflightBuffer:
    def __init__(self, config: PopConfig) -> None:
        self.config = config
        self.lock = threading.RLock()
        self._tracked: dict[str, Inflight] = {}
        self._owners: dict[tuple[str, int, int, int, str], str] = {}
        self._offsets: dict[str, deque[Inflight]] = {}
        self._buffered: dict[str, Inflight] = {}  # in memory only, not fully acked
        self._dirty: set[str] = set()  # lock keys whose offset-queue head may be done
        self.dropped_without_write_total = 0
        self.on_work: Callable[[int], None] | None = None
        """Called (under the lock) with the time new scan work is due: a checkpoint buffered
        (its :meth:`store_due_ms`) or an offset-queue head that may be done (0: at once). The
        broker thread (:mod:`service`) sleeps until then instead of polling."""
        self.tracking_since_ms: int | None = None
        """Time since which every checkpoint this broker makes is tracked: the clock of the
        first pop or ack (:meth:`start_tracking`), or set by :mod:`service` when the broker
        takes over as Raft leader (pops of the former leader are not here)."""

    def start_tracking(self, now_ms: int) -> int:
        """The tracking start, set to ``now_ms`` by the first call (the caller's clock)."""
        with self.lock:
            if self.tracking_since_ms is None:
                self.tracking_since_ms = now_ms
            return self.tracking_since_ms

    # --- pop side ---
    def latest_next_begin(self, lock_key: str) -> int | None:
        with self.lock:
            queue = self._offsets.get(lock_key)
            return queue[-1].next_begin_offset if queue else None

    def has_room(self, lock_key: str) -> bool:
        with self.lock:
            queue = self._offsets.get(lock_key)
            if queue is not None and len(queue) >= self.config.pop_ck_offset_queue_size_max:
                return False
            return len(self._tracked) < self.config.pop_ck_buffer_size_max

    def may_buffer(self, ck: PopCheckPoint, now_ms: int) -> bool:
        margin = self.config.pop_ck_stay_buffer_timeout_ms + BUFFER_ENTRY_MARGIN_MS
        return self.config.buffer_merge_enabled and ck.revive_time_ms - now_ms >= margin

    def add(self, lock_key: str | None, entry: Inflight) -> None:
        """Track a pop; ``lock_key`` None for a checkpoint with no offset role (change
        invisible time, re-put)."""
        with self.lock:
            entry.lock_key = lock_key
            if entry.ck is not None:
                ck = entry.ck
                key = checkpoints.ck_revive_key(ck)
                self._tracked[key] = entry
                self._owners[_position(ck)] = ck.cid
                if not entry.stored:
                    self._buffered[key] = entry
                    self._work_due(self.store_due_ms(ck))
            if lock_key is not None:
                self._offsets.setdefault(lock_key, deque()).append(entry)
                if entry.offset_done:
                    self._dirty.add(lock_key)
                    self._work_due(0)

    def mark_stored(self, entry: Inflight) -> None:
        """The entry's CK message was written."""
        with self.lock:
            entry.stored = True
            entry.storing = False
            self._settled(entry)

    def withdraw(self, entry: Inflight) -> None:
        """Forget a pop whose checkpoint could not be written (:mod:`popping`): the caller
        still holds its queue lock and handed none of its messages out, so it is its queue's
        newest pop and nothing was acked or committed over it."""
        with self.lock:
            if entry.ck is not None:
                key = checkpoints.ck_revive_key(entry.ck)
                if self._tracked.get(key) is entry:
                    del self._tracked[key]
                    self._owners.pop(_position(entry.ck), None)
                if self._buffered.get(key) is entry:
                    del self._buffered[key]
            lock_key = entry.lock_key
            queue = None if lock_key is None else self._offsets.get(lock_key)
            if lock_key is not None and queue is not None:
                kept = [e for e in queue if e is not entry]
                queue.clear()
                queue.extend(kept)
                if not queue:
                    del self._offsets[lock_key]
            entry.storing = False
            entry.lock_key = None

    def mark_acked(self, entry: Inflight, bits: int) -> None:
        assert entry.ck is None or bits & ~entry.ck.all_bits == 0, (
            f"ack bits {bits:#x} name messages the checkpoint does not hold"
        )
        with self.lock:
            entry.acked_bits |= bits
            if entry.all_acked:
                self._settled(entry)

    def _settled(self, entry: Inflight) -> None:
        if entry.ck is not None:
            self._buffered.pop(checkpoints.ck_revive_key(entry.ck), None)
        if entry.lock_key is not None:
            self._dirty.add(entry.lock_key)
            self._work_due(0)

    def _work_due(self, due_ms: int) -> None:
        if self.on_work is not None:
            self.on_work(due_ms)

    def clear_offsets(self, lock_key: str) -> None:
        with self.lock:
            for entry in self._offsets.pop(lock_key, ()):
                entry.lock_key = None

    # --- ack side ---
    def find(self, key: str) -> Inflight | None:
        with self.lock:
            return self._tracked.get(key)

    def owner_of(
        self, topic: str, queue_id: int, start: int, pop_ms: int, broker: str
    ) -> str | None:
        with self.lock:
            return self._owners.get((topic, queue_id, start, pop_ms, broker))

    # --- scan side ---
    def due_for_store(self, now_ms: int) -> list[Inflight]:
        """Buffered checkpoints that must now be written (caller writes, then mark_stored)."""
        out = []
        with self.lock:
            for entry in self._buffered.values():
                ck = entry.ck
                if ck is None or entry.stored or entry.storing or entry.all_acked:
                    continue
                too_old = now_ms - ck.pop_time_ms > self.config.pop_ck_stay_buffer_time_ms
                near = ck.revive_time_ms - now_ms < self.config.pop_ck_stay_buffer_timeout_ms
                if too_old or near:
                    out.append(entry)
        return out

    def store_due_ms(self, ck: PopCheckPoint) -> int:
        """The first ``now_ms`` at which :meth:`due_for_store` returns a buffered ``ck``."""
        too_old_ms = ck.pop_time_ms + self.config.pop_ck_stay_buffer_time_ms + 1
        near_ms = ck.revive_time_ms - self.config.pop_ck_stay_buffer_timeout_ms + 1
        return min(too_old_ms, near_ms)

    def next_due_ms(self) -> int | None:
        """When the scan next has work: 0 when an offset-queue head may be done, else the
        earliest :meth:`store_due_ms` of a buffered checkpoint; None when neither."""
        with self.lock:
            if self._dirty:
                return 0
            due = [
                self.store_due_ms(e.ck)
                for e in self._buffered.values()
                if e.ck is not None and not (e.stored or e.storing or e.all_acked)
            ]
            return min(due, default=None)

    def unstored(self) -> list[Inflight]:
        """Every buffered checkpoint not yet written and not fully acked (for shutdown)."""
        with self.lock:
            return [e for e in self._buffered.values() if not e.storing]

    def committable(self) -> list[tuple[str, int, int]]:
        """``(lock_key, next_begin_offset, count)`` of heads that are done; the caller commits
        the offset, then calls :meth:`release`."""
        out = []
        with self.lock:
            dirty, self._dirty = self._dirty, set()
            for key in dirty:
                queue = self._offsets.get(key)
                if not queue:
                    continue
                count = 0
                for entry in queue:
                    if not entry.offset_done:
                        break
                    count += 1
                if count:
                    out.append((key, queue[count - 1].next_begin_offset, count))
        return out

    def release(self, lock_key: str, count: int) -> None:
        with self.lock:
            queue = self._offsets.get(lock_key)
            if queue is None:
                return
            for _ in range(min(count, len(queue))):
                queue.popleft()
            if not queue:
                del self._offsets[lock_key]

    def expire(self, now_ms: int) -> int:
        """Forget checkpoints past their revive time that are stored or fully acked; fully
        acked buffered ones count as dropped without a write."""
        with self.lock:
            doomed = [
                key
                for key, e in self._tracked.items()
                if e.ck is not None and e.ck.revive_time_ms <= now_ms and (e.stored or e.all_acked)
            ]
            for key in doomed:
                entry = self._tracked.pop(key)
                if entry.ck is not None:
                    self._owners.pop(_position(entry.ck), None)
                    if not entry.stored:
                        self.dropped_without_write_total += 1
            return len(doomed)

    def inflight_messages(self) -> dict[tuple[str, str], int]:
        """Popped, not yet acked messages of tracked checkpoints by (CK topic, group); for
        metrics (one pass under the lock)."""
        counts: dict[tuple[str, str], int] = {}
        with self.lock:
            for entry in self._tracked.values():
                ck = entry.ck
                if ck is not None:
                    key = (ck.topic, ck.cid)
                    unacked = (ck.all_bits & ~entry.acked_bits).bit_count()
                    counts[key] = counts.get(key, 0) + unacked
        return counts

    def statistics(self) -> BufferStatistics:
        with self.lock:
            return BufferStatistics(
                tracked=len(self._tracked),
                buffered=len(self._buffered),
                offset_queues=len(self._offsets),
                dropped_without_write_total=self.dropped_without_write_total,
            )


def _position(ck: PopCheckPoint) -> tuple[str, int, int, int, str]:
    return (ck.topic, ck.queue_id, ck.start_offset, ck.pop_time_ms, ck.broker_name)
