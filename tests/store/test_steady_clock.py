"""The lease clock (:mod:`gannet.node.store.steady_clock`), pure: a step of the wall clock does
not move it between anchors; an anchor takes the wall clock again."""

from __future__ import annotations

from gannet.node.store.steady_clock import SteadyClock

MS = 1_000_000


class _Clocks:
    def __init__(self) -> None:
        self.wall_ns = 1_700_000_000_000 * MS
        self.monotonic_ns = 5_000 * MS

    def advance(self, ms: int) -> None:
        self.wall_ns += ms * MS
        self.monotonic_ns += ms * MS


def test_steps_of_the_wall_clock_do_not_move_it_and_an_anchor_takes_them() -> None:
    clocks = _Clocks()
    clock = SteadyClock(lambda: clocks.wall_ns, lambda: clocks.monotonic_ns)
    start = clock.now_ms()
    assert start == 1_700_000_000_000
    clocks.advance(250)
    assert clock.now_ms() == start + 250
    clocks.wall_ns += 59_000 * MS  # a step forward
    assert clock.now_ms() == start + 250
    assert clock.offset_ms() == -59_000
    clocks.wall_ns -= 120_000 * MS  # and back, past where it was
    clocks.advance(10)
    assert clock.now_ms() == start + 260
    clock.anchor()  # a new term: the wall clock as it is now
    assert clock.now_ms() == start + 260 - 61_000
    assert clock.offset_ms() == 0
