"""Peer liveness: a member counts as reachable only while it answers.

Pure (times are injected, in monotonic seconds); used by :mod:`transport`. An open stream
proves nothing on a silent link (packets dropped, no connection closed): gRPC keeps the call
open and TCP retransmits for minutes. So the rule rests on what actually arrived:

* **reachable** — the outbound stream to the peer is open *and* a message from the peer
  (any Raft message: an AppendEntries or heartbeat answer, a vote) arrived within the last
  ``silence_bound_s`` (:data:`SILENCE_ELECTION_TIMEOUTS` election timeouts: 3 s with the
  defaults). This is ``gannet_raft_peer_reachable`` and the ``reachable`` column of
  ``gannet cluster status`` / ``member list``.
* **stalled** — a message was written to the peer's stream and nothing came back from the peer
  for longer than ``silence_bound_s`` since: the stream is torn down and the peer redialed (its
  resolved address marked stale). Every Raft request is answered, so a live peer never stalls;
  a stream only ever carrying answers (a follower's to a dead leader) is redialed once, then
  rests until something is sent again.
* **redial back-off** — :func:`redial_backoff_s`: doubles from ``RECONNECT_BACKOFF_S`` per
  failed dial, capped at ``RECONNECT_BACKOFF_MAX_S`` (1 s), so a healed link is dialed again
  within about a second; back to the start after a dial that connected.
"""

from __future__ import annotations

import time
from collections.abc import Callable

SILENCE_ELECTION_TIMEOUTS = 3
RECONNECT_BACKOFF_S = 0.2
RECONNECT_BACKOFF_MAX_S = 1.0


def silence_bound_s(tick_interval_s: float, election_timeout_ticks: int) -> float:
    """How long a peer may stay silent and still count as reachable."""
    return SILENCE_ELECTION_TIMEOUTS * election_timeout_ticks * tick_interval_s


def is_reachable(
    stream_open: bool, last_heard_s: float | None, now_s: float, bound_s: float
) -> bool:
    return stream_open and last_heard_s is not None and now_s - last_heard_s <= bound_s


def is_stalled(unanswered_since_s: float | None, now_s: float, bound_s: float) -> bool:
    return unanswered_since_s is not None and now_s - unanswered_since_s > bound_s


def redial_backoff_s(failed_dials: int) -> float:
    """The pause before the next dial after ``failed_dials`` failures in a row (0: the
    connection had worked)."""
    return min(RECONNECT_BACKOFF_MAX_S, RECONNECT_BACKOFF_S * float(1 << min(failed_dials, 16)))


class PeerLiveness:
    """When each peer was last heard from and since when it owes an answer."""

    def __init__(self, bound_s: float, clock_s: Callable[[], float] = time.monotonic) -> None:
        if bound_s <= 0:
            raise ValueError("the silence bound must be positive")
        self.bound_s = bound_s
        self._clock_s = clock_s
        self._last_heard_s: dict[int, float] = {}
        self._unanswered_since_s: dict[int, float] = {}

    def heard(self, node_id: int) -> None:
        """A message from ``node_id`` arrived."""
        self._last_heard_s[node_id] = self._clock_s()
        self._unanswered_since_s.pop(node_id, None)

    def sent(self, node_id: int) -> None:
        """A message to ``node_id`` was handed to its stream."""
        self._unanswered_since_s.setdefault(node_id, self._clock_s())

    def restarted(self, node_id: int) -> None:
        """A new stream to ``node_id`` begins: nothing is owed on it yet."""
        self._unanswered_since_s.pop(node_id, None)

    def forget(self, node_id: int) -> None:
        self._last_heard_s.pop(node_id, None)
        self._unanswered_since_s.pop(node_id, None)

    def reachable(self, node_id: int, stream_open: bool) -> bool:
        return is_reachable(
            stream_open, self._last_heard_s.get(node_id), self._clock_s(), self.bound_s
        )

    def stalled(self, node_id: int) -> bool:
        return is_stalled(self._unanswered_since_s.get(node_id), self._clock_s(), self.bound_s)

    def silent_s(self, node_id: int) -> float | None:
        """Seconds since ``node_id`` was last heard from (None: never)."""
        last = self._last_heard_s.get(node_id)
        return None if last is None else self._clock_s() - last
