"""The peer liveness rule (:mod:`gannet.node.replication.liveness`) with injected times."""

from __future__ import annotations

import pytest

from gannet.node.replication import liveness
from gannet.node.replication.config import ELECTION_TIMEOUT_TICKS, TICK_INTERVAL_S


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_the_bound_is_three_election_timeouts() -> None:
    assert liveness.silence_bound_s(TICK_INTERVAL_S, ELECTION_TIMEOUT_TICKS) == pytest.approx(3.0)
    assert liveness.silence_bound_s(0.05, 10) == pytest.approx(1.5)


def test_reachable_needs_an_open_stream_and_a_recent_answer() -> None:
    assert not liveness.is_reachable(True, None, 10.0, 3.0)  # never heard
    assert liveness.is_reachable(True, 7.0, 10.0, 3.0)
    assert not liveness.is_reachable(True, 6.9, 10.0, 3.0)  # silent too long
    assert not liveness.is_reachable(False, 9.9, 10.0, 3.0)  # stream down


def test_a_peer_turns_unreachable_once_silent_past_the_bound() -> None:
    clock = Clock()
    peers = liveness.PeerLiveness(3.0, clock)
    assert not peers.reachable(2, stream_open=True)
    peers.heard(2)
    clock.now_s += 3.0
    assert peers.reachable(2, stream_open=True)
    assert peers.silent_s(2) == pytest.approx(3.0)
    clock.now_s += 0.01
    assert not peers.reachable(2, stream_open=True)
    peers.heard(2)
    assert peers.reachable(2, stream_open=True)
    peers.forget(2)
    assert not peers.reachable(2, stream_open=True)
    assert peers.silent_s(2) is None


def test_a_stream_stalls_when_an_answer_is_owed_past_the_bound() -> None:
    clock = Clock()
    peers = liveness.PeerLiveness(3.0, clock)
    assert not peers.stalled(2)  # nothing sent: an idle stream never stalls
    clock.now_s += 100
    assert not peers.stalled(2)
    peers.sent(2)
    clock.now_s += 2.0
    peers.sent(2)  # the first unanswered message counts, not the latest
    clock.now_s += 1.5
    assert peers.stalled(2)
    peers.heard(2)  # an answer clears the debt
    assert not peers.stalled(2)
    peers.sent(2)
    clock.now_s += 10
    assert peers.stalled(2)
    peers.restarted(2)  # a new stream owes nothing yet
    assert not peers.stalled(2)


def test_redial_back_off_doubles_and_is_capped_at_a_second() -> None:
    delays = [liveness.redial_backoff_s(n) for n in range(6)]
    assert delays == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    assert liveness.redial_backoff_s(10**6) == pytest.approx(liveness.RECONNECT_BACKOFF_MAX_S)


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        liveness.PeerLiveness(0.0)
