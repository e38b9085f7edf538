"""Lanes: several connections per ordered pair of members, copies of what liveness needs on each.

Pure; used by :mod:`transport`. A member's messages to another travel on one gRPC stream, so
on one TCP connection; when the link loses packets at random, that connection stalls for
seconds at a time while TCP retransmits with exponential back-off (30 % loss both ways, one
connection carrying 10 small messages a second: gaps of 7-15 s within a minute), and a stalled
connection delays everything behind it. A follower that hears no heartbeat for an election
timeout campaigns, and a leader that hears no answer for one steps down (check-quorum): random
loss alone deposed the leader five or six times a minute (issue 34).

So each peer gets :data:`LANES` streams, each on a connection of its own, and a message goes
on the lanes of :func:`lanes_for`:

* lane 0 carries every message, in order (AppendEntries must arrive in order: a range whose
  start is past the follower's end is refused and the leader probes back);
* the other lanes carry a copy of the kinds in :data:`COPIED_KINDS` only: what keeps a leader
  in place and an election moving. The first copy to arrive counts; Raft takes a duplicate as
  it takes a resent message (an answer moves nothing backwards, a vote is granted once per
  term).

A follower then hears its leader, and a leader its followers, unless every lane stalls at once.
The data path (AppendEntries, ResetLogStart and their answers, AppendResponse) stays on lane 0,
except an ``AppendEntries`` that *resends* bytes (:class:`AppendResends`: its range starts
before the end of what was already sent to that peer): the leader resends when nothing was
acknowledged for two heartbeats (go-back-N) and then probes once a heartbeat, which is what a
stalled lane 0 leads to, and a resend on lane 0 alone waited behind the stall (issue 34: a
quarter of a send's time at 30 % loss was its commit). It goes on every lane; the follower takes
the first copy, and a later one as any resent range (a range it holds is acknowledged, nothing
truncated: same leader, same term, same bytes; one past its end is refused and at most makes the
leader probe again). Without loss the leader resends nothing, so this costs nothing there.
Otherwise lane 0 only: copying every answer cost throughput and commit latency without loss
(issue 34, docs/architecture.md), and the leader's commit still moves while lane 0 stalls in the
followers' direction, on the matched and durable offsets each HeartbeatResponse carries.

On the receiving side :class:`LaneCopies` lets one copy of a message through: a copy equal to
one from the same sender taken less than half a tick before is dropped. Raft would take it (a
heartbeat restarts a timer already restarted, an answer moves nothing), but each copy of a
heartbeat was answered, on every lane: lanes² answers to one heartbeat, stepped by the leader
in a burst each tick. Without loss that burst was the cost of more lanes (commit latency p99
4.2-4.8 ms → 5.7-6.0 ms with five lanes, docs/architecture.md). A copy that arrives later than
that (its lane stalled) is taken as before: one extra answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gannet.node.raft.messages import (
    AppendEntries,
    Heartbeat,
    HeartbeatResponse,
    Message,
    PreVoteRequest,
    PreVoteResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

LANES = 5
"""Streams (and connections) per peer: each lane more makes "every lane stalled at once" rarer
(at 30 % loss both ways, with three a follower missed every heartbeat for an election timeout
about twice a minute, and once in twenty minutes the leader heard no follower for a
check-quorum round; docs/architecture.md)."""

COPIED_KINDS: tuple[type[Message], ...] = (
    Heartbeat,
    HeartbeatResponse,
    PreVoteRequest,
    PreVoteResponse,
    VoteRequest,
    VoteResponse,
    TimeoutNow,
)
"""The kinds copied to every lane; every other kind goes on lane 0 only. Each is here because:

* ``Heartbeat``: a follower restarts its election timer on it (``appending.on_heartbeat``) and
  its leader lease rests on it (``leases.in_lease``), and the leader sends one to every
  follower each heartbeat interval whatever else it sends, so followers need no copy of the
  appends to keep their leader;
* ``HeartbeatResponse``: the leader's check-quorum counts a follower as heard from
  (``Progress.recent_active``) on its answers, and every heartbeat is answered by one, so this
  is the answer that keeps the leader in place (``AppendResponse`` counts too, but the
  heartbeats' answers suffice: an election timeout spans several heartbeat intervals); it is
  also how a member of a later term tells a deposed leader (``RaftCore._answer_stale``);
* ``PreVoteRequest``, ``PreVoteResponse``, ``VoteRequest``, ``VoteResponse``: an election
  that needs a majority of answers within an election timeout, or the candidates time out
  and campaign again with a higher term;
* ``TimeoutNow``: a leadership transfer; the writes are fenced until its target campaigns or
  an election timeout passes.

Not here: ``AppendEntries`` and ``ResetLogStart`` (log bytes, order matters), and
``AppendResponse`` (acknowledges or refuses data; it travels with the appends on lane 0).
"""


def lanes_for(message: Message, lanes: int = LANES, *, resend: bool = False) -> range:
    """The lanes ``message`` is written to: every lane for a kind of :data:`COPIED_KINDS` and
    for a ``resend`` (:class:`AppendResends`), lane 0 only for the others."""
    if resend or isinstance(message, COPIED_KINDS):
        return range(lanes)
    return range(1)


RESEND_COPY_BYTES_MAX = 64 * 1024
"""A resend with more payload than this stays on lane 0: its copies would hold the heartbeats
queued behind them on the other lanes (a far-behind follower is streamed 1 MiB ranges)."""


class AppendResends:
    """Per peer, the end of the ``AppendEntries`` ranges sent to it so far: a range that starts
    before it resends bytes (go-back-N or a probe after a stall) and goes on every lane, unless
    it carries more than :data:`RESEND_COPY_BYTES_MAX`."""

    def __init__(self) -> None:
        self._sent_end: dict[int, int] = {}

    def resend(self, message: Message) -> bool:
        """Whether ``message`` (about to be sent) resends bytes; notes the end it sends."""
        if not isinstance(message, AppendEntries):
            return False
        sent_end = self._sent_end.get(message.target)
        self._sent_end[message.target] = max(sent_end or 0, message.end_offset)
        resent = sent_end is not None and message.prev_offset < sent_end
        return resent and message.end_offset - message.prev_offset <= RESEND_COPY_BYTES_MAX

    def forget(self, node_id: int) -> None:
        self._sent_end.pop(node_id, None)


COPIES_REMEMBERED_MAX = 1024
"""Senders × kinds :class:`LaneCopies` remembers; past it, it starts afresh (a copy let through
costs an answer, nothing else)."""


class LaneCopies:
    """Receiving side: whether a message is a lane copy of one taken just before (equal, same
    sender, within ``window_s`` of the first): only kinds of :data:`COPIED_KINDS`. The clock is
    injected (monotonic seconds)."""

    def __init__(self, window_s: float, clock_s: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError(f"the copy window is {window_s} s; it must be positive")
        self.window_s = window_s
        self._clock_s = clock_s
        self._taken: dict[tuple[int, type[Message]], tuple[Message, float]] = {}

    def is_copy(self, message: Message) -> bool:
        """True: drop ``message``, an equal one was taken within the window. False: take it
        (and it is the one later copies compare with)."""
        if not isinstance(message, COPIED_KINDS):
            return False
        now_s = self._clock_s()
        key = (message.sender, type(message))
        taken = self._taken.get(key)
        if taken is not None and taken[0] == message and now_s - taken[1] < self.window_s:
            return True
        if len(self._taken) >= COPIES_REMEMBERED_MAX and key not in self._taken:
            self._taken.clear()
        self._taken[key] = (message, now_s)
        return False
