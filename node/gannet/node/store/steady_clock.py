"""The broker's clock for leases and timers: the wall clock, read once, then advanced by the
monotonic clock.

Pop leases (a message invisible until ``pop time + invisible time``), receipt-handle expiry,
revive and the timer wheel compare times the leader stamped with times the leader reads later.
Read from the wall clock, a step of it on the leader (an NTP step, an operator's ``date``, a VM
resumed) moves every lease at once: a step forward by a minute revives every message in flight
as if its lease had run out — a second consumer gets it while the first still holds it (the
fault harness saw exactly that under a +59 s clock strobe, docs/architecture.md). This clock
takes the wall clock when it is anchored (at start and when the member becomes Pop leader,
:meth:`SteadyClock.anchor`) and from then on adds only monotonic time, which a step of the wall
clock does not move (slewing moves both alike). Within a leader's term it never goes back and
ignores steps; across members, and at the anchor, it is the wall clock, so Gannet assumes what
RocketMQ and other lease systems assume: members' wall clocks agree within a bound (acks accept
a handle whose pop time is up to ``CLOCK_MARGIN_MS`` ahead, :mod:`gannet.node.pop.acking`).

Pure apart from the two clock functions, which tests replace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

NS_PER_MS = 1_000_000


class SteadyClock:
    """Milliseconds since the epoch that follow the monotonic clock between anchors."""

    def __init__(
        self,
        wall_ns: Callable[[], int] = time.time_ns,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._wall_ns = wall_ns
        self._monotonic_ns = monotonic_ns
        self._lock = threading.Lock()
        self._anchor_wall_ns = 0
        self._anchor_monotonic_ns = 0
        self.anchor()

    def anchor(self) -> None:
        """Take the wall clock again (a member that becomes leader: its term's clock)."""
        with self._lock:
            self._anchor_monotonic_ns = self._monotonic_ns()
            self._anchor_wall_ns = self._wall_ns()

    def now_ms(self) -> int:
        with self._lock:
            elapsed_ns = self._monotonic_ns() - self._anchor_monotonic_ns
            return (self._anchor_wall_ns + elapsed_ns) // NS_PER_MS

    def offset_ms(self) -> int:
        """How far this clock is ahead of the wall clock now (negative: behind): a wall-clock
        step since the anchor."""
        return self.now_ms() - self._wall_ns() // NS_PER_MS


CLOCK = SteadyClock()
"""The process's clock; :func:`now_ms` reads it."""


def now_ms() -> int:
    return CLOCK.now_ms()
