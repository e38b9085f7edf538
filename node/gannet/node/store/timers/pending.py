"""Delayed messages not delivered yet, per real topic (no IO): the timer figures an operator's
drain waits for.

:class:`~gannet.node.store.timers.delivery.TimerService` keeps one :class:`PendingTimers` and
tells it, in order, what happens to each parked message (its topic is the parked message's
``REAL_TOPIC``, its due time ``TIMER_OUT_MS`` plus the wheel's precision):

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

Nothing here is persisted. The figures are rebuilt from what the timer store still holds
(:meth:`PendingTimers.rebuilt`, every entry from the committed read time on: those are exactly
the entries that fire again after a restart) whenever the store is opened or truncated; parked
messages of the timer topic the wheel has not taken yet are counted when it takes them, and
:meth:`TimerService.pending_of` takes them first. So a figure never reads 0 while a message of
the topic waits in the wheel, after a restart too.

``last_due_ms`` is the latest due time added since the topic's count was last 0: entries fire
in due order, so the latest one is the last to go, and the figure is never earlier than the
truth (a duplicate fired twice after a crash may keep it later, never earlier).

The readers (:meth:`PendingTimers.of`, :meth:`PendingTimers.all`) and :meth:`delivered` take
the store's dispatched offset and forget the delivered copies dispatch has passed.

Threading: one lock; the timer thread writes, admin threads read.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

IN_TRANSIT_MAX = 1_000_000
"""Rolled copies remembered until they enter the wheel (one fire batch each; a bound only)."""

DISPATCHING_MAX = 100_000
"""Delivered copies remembered until dispatch passes them; past this bound the timer service
waits for dispatch before it delivers more (:attr:`PendingTimers.dispatching_full`)."""


@dataclass(frozen=True, slots=True)
class TopicTimers:
    """One real topic's delayed messages still in the wheel (or rolling over to it)."""

    messages: int
    last_due_ms: int


class PendingTimers:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # topic -> [messages in the wheel or delivered but not dispatched, last due ms]
        self._topics: dict[str, list[int]] = {}
        self._in_transit: dict[int, str] = {}  # commit offset of a rolled copy -> topic
        # (end offset, topic) of delivered copies dispatch has not passed, in commit-log order
        self._dispatching: deque[tuple[int, str]] = deque()

    def rebuilt(self, entries: list[tuple[str, int]]) -> None:
        """Start over from ``(topic, due ms)`` of every entry the wheel still holds (the store
        is opened, or truncated with dispatch reset: copies delivered before are dispatched
        again from the log, or gone with the truncated part)."""
        with self._lock:
            self._topics.clear()
            self._in_transit.clear()
            self._dispatching.clear()
            for topic, due_ms in entries:
                self._add(topic, due_ms)

    def added(self, topic: str, due_ms: int, commit_offset: int) -> None:
        with self._lock:
            if self._in_transit.pop(commit_offset, None) is None:
                self._add(topic, due_ms)

    def _add(self, topic: str, due_ms: int) -> None:
        row = self._topics.setdefault(topic, [0, 0])
        row[0] += 1
        row[1] = max(row[1], due_ms)

    def delivered(self, topic: str, end_offset: int, dispatched_offset: int) -> None:
        """The copy of a message of ``topic`` was appended, ending at ``end_offset``: counted
        until ``dispatched_offset`` (given here and to the readers) reaches it."""
        with self._lock:
            self._forget_dispatched(dispatched_offset)
            if topic not in self._topics:
                return
            if end_offset <= dispatched_offset:
                self._remove(topic)
            else:
                self._dispatching.append((end_offset, topic))

    def dropped(self, topic: str) -> None:
        """A message of ``topic`` came due but was no longer stored: not counted any more."""
        with self._lock:
            self._remove(topic)

    @property
    def dispatching_full(self) -> bool:
        return len(self._dispatching) >= DISPATCHING_MAX

    def _remove(self, topic: str) -> None:
        row = self._topics.get(topic)
        if row is None:
            return
        row[0] -= 1
        if row[0] <= 0:
            del self._topics[topic]

    def _forget_dispatched(self, dispatched_offset: int) -> None:
        waiting = self._dispatching
        while waiting and waiting[0][0] <= dispatched_offset:
            self._remove(waiting.popleft()[1])

    def rolled(self, topic: str, copy_offset: int) -> None:
        with self._lock:
            if len(self._in_transit) >= IN_TRANSIT_MAX:
                # Forget the oldest: its copy is then counted again when it enters the wheel
                # (too many, never too few).
                self._in_transit.pop(next(iter(self._in_transit)))
            self._in_transit[copy_offset] = topic

    def of(self, topic: str, dispatched_offset: int) -> TopicTimers:
        with self._lock:
            self._forget_dispatched(dispatched_offset)
            row = self._topics.get(topic)
            return TopicTimers(row[0], row[1]) if row is not None else TopicTimers(0, 0)

    def all(self, dispatched_offset: int) -> dict[str, TopicTimers]:
        with self._lock:
            self._forget_dispatched(dispatched_offset)
            return {t: TopicTimers(n, due) for t, (n, due) in self._topics.items()}
