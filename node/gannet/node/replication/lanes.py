"""Lanes: several connections per ordered pair of members, the small messages on each.

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
* the other lanes carry a copy of every message that holds no log bytes and whose order does
  not matter: heartbeats and their answers, append answers, (pre-)votes and their answers,
  TimeoutNow. The first copy to arrive counts; Raft takes a duplicate as it takes a resent
  message (an answer moves nothing backwards, a vote is granted once per term).

A follower then hears its leader, and a leader its followers, unless every lane stalls at
once; the leader's commit still moves on lane 0's appends, but the answers come back on the
first lane that delivers.
"""

from __future__ import annotations

from gannet.node.raft.messages import AppendEntries, Message, ResetLogStart

LANES = 3
"""Streams (and connections) per peer."""


def lanes_for(message: Message, lanes: int = LANES) -> range:
    """The lanes ``message`` is written to: every lane for a message without log bytes whose
    order does not matter, lane 0 only for AppendEntries and ResetLogStart."""
    if isinstance(message, AppendEntries | ResetLogStart):
        return range(1)
    return range(lanes)
