"""When the Pop broker thread next wakes: a deadline that other threads may only move earlier.

The thread (:meth:`gannet.node.pop.service.PopBroker.start`) runs a pass, then
:meth:`WakeSchedule.sleep` until the earliest time it knows of work (a long-poll expiry, a
buffered checkpoint's store time, the next revive pass). Threads that create earlier work
(a waiter registered, a checkpoint buffered or acked) call :meth:`WakeSchedule.request`, which
wakes the sleeper only when the new time is earlier than the one it sleeps until; a request
made during a pass is kept for the next sleep. So an idle broker wakes once per revive interval,
not every scan interval, and a deadline is met at its millisecond, not at the next poll (the
service keeps passes a scan interval apart, so under load it is at most that late).

Times are the caller's clock in ms (``clock_ms``); tests pass a virtual clock with a ``wait``
that ends only when woken, and :meth:`WakeSchedule.poke` the sleeper when they move the clock.
Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

NEVER_MS = 2**63

Wait = Callable[[threading.Event, float], bool]
"""Waits for the event at most ``timeout_s``; False on timeout (``threading.Event.wait``)."""


class WakeSchedule:
    def __init__(
        self, clock_ms: Callable[[], int], sleep_max_ms: int, wait: Wait | None = None
    ) -> None:
        """``sleep_max_ms`` bounds one wait, so that a wall clock set back cannot stall the
        thread for longer."""
        self._clock_ms = clock_ms
        self._wait = wait or threading.Event.wait
        self._sleep_max_s = sleep_max_ms / 1000
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._wake_at_ms = NEVER_MS
        self._sleeping = False

    @property
    def wake_at_ms(self) -> int:
        """The time the thread sleeps until (or was asked to wake at during a pass)."""
        with self._lock:
            return self._wake_at_ms

    def request(self, due_ms: int) -> None:
        """Wake the thread no later than ``due_ms`` (0: now)."""
        with self._lock:
            if due_ms < self._wake_at_ms:
                self._wake_at_ms = due_ms
                if self._sleeping:
                    self._event.set()

    def poke(self) -> None:
        """Wake the sleeper to read the clock again (a virtual clock moved)."""
        with self._lock:
            if self._sleeping:
                self._event.set()

    def begin_pass(self) -> None:
        """Called by the thread before it reads the state its next wake time comes from."""
        with self._lock:
            self._wake_at_ms = NEVER_MS

    def sleep(self, next_ms: int, stop: threading.Event) -> None:
        """Sleep until ``next_ms``, an earlier :meth:`request`, or ``stop`` (which the stopper
        follows with ``request(0)``)."""
        with self._lock:
            self._wake_at_ms = min(self._wake_at_ms, next_ms)
            self._sleeping = True
        try:
            while not stop.is_set():
                with self._lock:
                    self._event.clear()
                    wake_at_ms = self._wake_at_ms
                wait_ms = wake_at_ms - self._clock_ms()
                if wait_ms <= 0:
                    return
                if not self._wait(self._event, min(wait_ms / 1000, self._sleep_max_s)):
                    return  # due (or the bound passed): the pass finds out which
        finally:
            with self._lock:
                self._sleeping = False
