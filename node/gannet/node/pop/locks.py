"""Per ``topic@group@queueId`` non-blocking locks (RocketMQ ``QueueLockManager``).

A pop that finds a queue locked skips it instead of waiting (it counts the queue's backlog as
``restNum``). Locks unused for ``lock_idle_ms_max`` are removed by :meth:`QueueLocks.sweep`;
the table is bounded by ``locks_max`` (a full table makes ``try_lock`` fail, i.e. "busy").

Called by :mod:`popping` and :mod:`ordering`. Thread-safe; time is passed in.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

LOCK_IDLE_MS_MAX = 60_000
LOCKS_MAX = 1_000_000


def lock_key(topic: str, group: str, queue_id: int) -> str:
    return f"{topic}@{group}@{queue_id}"


class QueueLocks:
    def __init__(self, *, locks_max: int = LOCKS_MAX) -> None:
        self._guard = threading.Lock()
        self._held: set[str] = set()
        self._last_used_ms: dict[str, int] = {}
        self._locks_max = locks_max

    def try_lock(self, key: str, now_ms: int) -> bool:
        with self._guard:
            if key in self._held:
                return False
            if key not in self._last_used_ms and len(self._last_used_ms) >= self._locks_max:
                return False
            self._held.add(key)
            self._last_used_ms[key] = now_ms
            return True

    def unlock(self, key: str) -> None:
        with self._guard:
            self._held.discard(key)

    @contextmanager
    def holding(self, key: str, now_ms: int) -> Iterator[bool]:
        """``with locks.holding(k, now) as got:`` — ``got`` False when the key was busy."""
        got = self.try_lock(key, now_ms)
        try:
            yield got
        finally:
            if got:
                self.unlock(key)

    def sweep(self, now_ms: int) -> int:
        with self._guard:
            idle = [
                k
                for k, t in self._last_used_ms.items()
                if k not in self._held and now_ms - t > LOCK_IDLE_MS_MAX
            ]
            for k in idle:
                del self._last_used_ms[k]
            return len(idle)
