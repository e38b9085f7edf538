"""The broker's clock for leases and timers: the wall clock, read once, then advanced by the
monotonic clock; at a new term, carried over from the former leader.

Pop leases (a message invisible until ``pop time + invisible time``), receipt-handle expiry,
revive and the timer wheel compare times the leader stamped with times the leader reads later.
Read from the wall clock, a step of it on the leader (an NTP step, an operator's ``date``, a VM
resumed) moves every lease at once: a step forward by a minute revives every message in flight
as if its lease had run out — a second consumer gets it while the first still holds it (the
fault harness saw exactly that under a +59 s clock strobe, docs/architecture.md). This clock
takes the wall clock at start and from then on adds only monotonic time, which a step of the
wall clock does not move (slewing moves both alike). Within a leader's term it never goes back
and ignores steps.

Across terms the leases a new leader inherits were stamped by the former leader's clock, so the
new leader must not run ahead of it: a member elected while its wall clock stood 24 s fast
judged a FIFO lease 8 s from its end as over and handed the message out again (fault seed 1210).
So followers *observe* the leader's clock: every heartbeat and append carries the leader's
:func:`now_ms` when sent (:meth:`SteadyClock.observe`), and a follower keeps the freshest as
"the leader's clock now is at least this much" (the stamp plus the monotonic time since it
arrived: a message is never received before it was sent). At its election (:meth:`anchor`) a
member takes its wall clock, but never more than :data:`AHEAD_OF_FORMER_LEADER_MAX_MS` ahead of
that lower bound: inherited leases end at most that much early whatever this member's wall
clock says. Behind it is allowed (a lease then lasts longer, and a clock that was fast comes
back to the wall clock at the next election). A member that never heard a leader since it
started (a whole group restarted) takes its wall clock: members' wall clocks are then assumed
to agree within a bound, as RocketMQ and other lease systems assume (acks accept a handle whose
pop time is up to ``CLOCK_MARGIN_MS`` ahead, :mod:`gannet.node.pop.acking`).

Pure apart from the two clock functions, which tests replace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

NS_PER_MS = 1_000_000

AHEAD_OF_FORMER_LEADER_MAX_MS = 250
"""How far a new term's clock may start ahead of the former leader's clock as last heard (its
stamp plus the monotonic time since): room for the wall clocks' ordinary disagreement and the
stamp's age in flight, far below any lease (the fault checker's own margin is 500 ms)."""


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
        self._leader_term = -1
        self._leader_base_ns: int | None = None
        """The leader's clock minus this process's monotonic clock, at most (freshest stamp)."""
        self.anchor()
        self._leader_base_ns = None  # the start is no term: no leader heard yet

    def anchor(self, term: int = -1) -> int:
        """This member's clock for ``term``, which it now leads: its wall clock, but at most
        :data:`AHEAD_OF_FORMER_LEADER_MAX_MS` ahead of the last leader it heard (as it stands
        now). Returns how far the result is behind the wall clock, in ms (0: the wall clock)."""
        with self._lock:
            monotonic_ns = self._monotonic_ns()
            wall_ns = self._wall_ns()
            start_ns = wall_ns
            if self._leader_base_ns is not None:
                ceiling_ns = (
                    self._leader_base_ns + monotonic_ns + AHEAD_OF_FORMER_LEADER_MAX_MS * NS_PER_MS
                )
                start_ns = min(wall_ns, ceiling_ns)
            self._anchor_monotonic_ns = monotonic_ns
            self._anchor_wall_ns = start_ns
            # Our own term's clock is now the one the next leader must not outrun.
            self._leader_term = max(self._leader_term, term)
            self._leader_base_ns = start_ns - monotonic_ns
            return (wall_ns - start_ns) // NS_PER_MS

    def observe(self, term: int, leader_ms: int) -> None:
        """A message from the leader of ``term`` stamped ``leader_ms`` by its clock arrived now.
        A stamp of an older term than one already heard is ignored (a deposed leader's)."""
        assert leader_ms > 0, leader_ms
        with self._lock:
            if term < self._leader_term:
                return
            base_ns = leader_ms * NS_PER_MS - self._monotonic_ns()
            if term > self._leader_term or self._leader_base_ns is None:
                self._leader_term = term
                self._leader_base_ns = base_ns
            else:
                self._leader_base_ns = max(self._leader_base_ns, base_ns)

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
