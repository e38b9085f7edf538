"""Delayed messages not delivered yet, per real-topic hash (no IO): the timer figures an
operator's drain waits for.

:class:`~gannet.node.store.timers.delivery.TimerService` keeps one :class:`PendingTimers` and
tells it, in order, what happens to each parked message. A message is counted under the
**topic hash** its timer-log unit carries (Java ``String.hashCode`` of its ``REAL_TOPIC``,
:func:`~gannet.node.store.timers.codecs.topic_hash`), not under the topic's name, and its due
time is its wheel slot's end:

* :meth:`PendingTimers.added` — the message entered the wheel (``TimerStore.enqueue`` took it);
* :meth:`PendingTimers.delivered` — its entry came due and the restored copy was appended to the
  commit log, ending at ``end_offset``. It stays counted until dispatch has passed that offset
  (its consume-queue entry written): from there on it is an ordinary message, counted by
  consumer lag. Counting it until then is what lets a reader that asks for these figures
  first and for consumer lag second never see the message in neither (an operator's drain);
* :meth:`PendingTimers.dropped` — its entry came due but the parked message was no longer
  stored (its file cleaned up): it is gone at once;
* :meth:`PendingTimers.rolled` — its entry lay beyond the wheel's window and was parked again
  at commit-log offset ``copy_offset``: it stays counted, and when that copy enters the wheel
  (:meth:`added` with that offset) it is not counted twice.

Why by hash: the figures are rebuilt whenever the store is opened or truncated
(:meth:`PendingTimers.rebuilt`, from every entry the wheel still holds from the committed read
time on: exactly the entries that fire again after a restart), and the timer-log unit already
holds the hash and the slot time. Keyed by hash, that rebuild reads 52-byte units only, not the
parked messages (1 KiB each, a million of them in a big backlog); see
:mod:`~gannet.node.store.timers.delivery` for the few it still reads.

Hash collisions: two topics can share a hash (``"Aa"`` and ``"BB"`` do). Their messages are then
counted under one key and :meth:`PendingTimers.of` reports the sum for **both** topics: too many
for each, never too few. A drain of one of them waits until the other's delayed messages are
delivered too; it never deletes a broker group while a message of a drained topic waits. That is
the trade: an exact split after a restart would need every parked message read again, which is
what this layout avoids, and a conservative figure is safe where an exact one is merely nicer.

Nothing here is persisted; parked messages of the timer topic the wheel has not taken yet are
counted when it takes them, and :meth:`TimerService.pending_of` takes them first. So a figure
never reads 0 while a message of the topic waits in the wheel, after a restart too.

``last_due_ms`` is the latest due time added since the key's count was last 0: entries fire
in due order, so the latest one is the last to go, and the figure is never earlier than the
truth (a duplicate fired twice after a crash may keep it later, never earlier).

The readers (:meth:`PendingTimers.of`, :meth:`PendingTimers.all`) and :meth:`delivered` take
the store's dispatched offset and forget the delivered copies dispatch has passed.

Threading: one lock; the timer thread writes, admin threads read.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from gannet.node.store.timers.codecs import topic_hash

IN_TRANSIT_MAX = 1_000_000
"""Rolled copies remembered until they enter the wheel (one fire batch each; a bound only)."""

DISPATCHING_MAX = 100_000
"""Delivered copies remembered until dispatch passes them; past this bound the timer service
waits for dispatch before it delivers more (:attr:`PendingTimers.dispatching_full`)."""


@dataclass(frozen=True, slots=True)
class TopicTimers:
    """One real topic's delayed messages still in the wheel (or rolling over to it); with a
    topic that shares its hash, the two topics' messages together (module docstring)."""

    messages: int
    last_due_ms: int


class PendingTimers:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # topic hash -> [messages in the wheel or delivered but not dispatched, last due ms]
        self._rows: dict[int, list[int]] = {}
        self._in_transit: dict[int, int] = {}  # commit offset of a rolled copy -> topic hash
        # (end offset, topic hash) of delivered copies dispatch has not passed, in log order
        self._dispatching: deque[tuple[int, int]] = deque()

    def rebuilt(self, entries: Iterable[tuple[int, int]]) -> None:
        """Start over from ``(topic hash, due ms)`` of every entry the wheel still holds (the
        store is opened, or truncated with dispatch reset: copies delivered before are
        dispatched again from the log, or gone with the truncated part)."""
        rows: dict[int, list[int]] = {}
        for thash, due_ms in entries:
            row = rows.get(thash)
            if row is None:
                rows[thash] = [1, due_ms]
            else:
                row[0] += 1
                row[1] = max(row[1], due_ms)
        with self._lock:
            self._rows = rows
            self._in_transit.clear()
            self._dispatching.clear()

    def added(self, thash: int, due_ms: int, commit_offset: int) -> None:
        with self._lock:
            if self._in_transit.pop(commit_offset, None) is None:
                row = self._rows.setdefault(thash, [0, 0])
                row[0] += 1
                row[1] = max(row[1], due_ms)

    def delivered(self, thash: int, end_offset: int, dispatched_offset: int) -> None:
        """The copy of a message counted under ``thash`` was appended, ending at
        ``end_offset``: counted until ``dispatched_offset`` (given here and to the readers)
        reaches it."""
        with self._lock:
            self._forget_dispatched(dispatched_offset)
            if thash not in self._rows:
                return
            if end_offset <= dispatched_offset:
                self._remove(thash)
            else:
                self._dispatching.append((end_offset, thash))

    def dropped(self, thash: int) -> None:
        """A message counted under ``thash`` came due but was no longer stored: not counted
        any more."""
        with self._lock:
            self._remove(thash)

    @property
    def dispatching_full(self) -> bool:
        return len(self._dispatching) >= DISPATCHING_MAX

    def _remove(self, thash: int) -> None:
        row = self._rows.get(thash)
        if row is None:
            return
        row[0] -= 1
        if row[0] <= 0:
            del self._rows[thash]

    def _forget_dispatched(self, dispatched_offset: int) -> None:
        waiting = self._dispatching
        while waiting and waiting[0][0] <= dispatched_offset:
            self._remove(waiting.popleft()[1])

    def rolled(self, thash: int, copy_offset: int) -> None:
        with self._lock:
            if len(self._in_transit) >= IN_TRANSIT_MAX:
                # Forget the oldest: its copy is then counted again when it enters the wheel
                # (too many, never too few).
                self._in_transit.pop(next(iter(self._in_transit)))
            self._in_transit[copy_offset] = thash

    def of(self, topic: str, dispatched_offset: int) -> TopicTimers:
        """The figures of ``topic`` (of every topic with its hash)."""
        with self._lock:
            self._forget_dispatched(dispatched_offset)
            row = self._rows.get(topic_hash(topic))
            return TopicTimers(row[0], row[1]) if row is not None else TopicTimers(0, 0)

    def all(self, dispatched_offset: int) -> dict[int, TopicTimers]:
        """Every key's figures, by topic hash."""
        with self._lock:
            self._forget_dispatched(dispatched_offset)
            return {h: TopicTimers(n, due) for h, (n, due) in self._rows.items()}
