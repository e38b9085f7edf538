"""When a member of a Raft group closes its client ports: it must not hold clients it cannot
serve. The rule holds for the gRPC client port and, when served, the remoting and name-server
ports alike (:mod:`gannet.node.remoting.server`: ``close_ports`` / ``reopen``).

Pure (times are injected, in monotonic seconds); the broker (:mod:`serving`) does the closing
and reopening. The official clients stay where their connection is: the Python and Java clients
dial a route's addresses with gRPC's ``pick_first`` and keep the first one that connects, and a
retryable answer is retried *on the same connection* (:mod:`gannet.node.api.routes`). So a
member cut off from the majority, still reachable by clients, kept them for the whole partition
(20–28 s without a successful send, issue 34) although the majority served. A connection that
ends — and a port that refuses the next one — is what moves them: ``pick_first`` reconnects on
the next call and goes on to the next address.

The rule: the port is **open while this member knows a leader** (it leads, or follows a
leader it heard from within an election timeout — a follower that stops hearing its leader
campaigns and forgets it; a leader that did not hear a majority within an election timeout
steps down, check-quorum), and **closed once no leader has been known for** ``close_after_s``
— longer than the brief gap of an ordinary election, in which the member holds requests until
the new leader is known (:mod:`gannet.node.api.forwarding`). It opens again as soon as a leader
is known. A starting member keeps it open until it has known a leader once: its first election
is no lost leader — but not a *joining* one (``--join``): until it has been added and heard
from the leader it knows none, for as long as the addition and its catching up take (75 s in
a fault run, issue 34), and it can serve nothing meanwhile; a client that reached it (one
address in front of every member: a Service, a DNS name, a proxy) had each call held until
its deadline and answered "no Raft leader is known", on the same connection, again and again.
A joining member's port closes ``close_after_s`` after its start as a leaderless member's
does and opens once it knows a leader. Closing answers the requests held for a leader at once
(retryable), then stops the server; ``/readyz`` says not ready meanwhile, so a Kubernetes
Service stops sending new connections too.

A member that **knows it is removed** (:mod:`gannet.node.replication.removal`: its leader
refused it as not a member, or it knows no leader and its committed configuration no longer
names it) closes the port **at once**: no election will give it a leader, so there is no gap to
wait out (seed 906: a removed follower held its clients about one election timeout, answering
``HA_NOT_AVAILABLE``). It opens again once a leader counts it (a member added again).
"""

from __future__ import annotations

CLOSE_AFTER_S = 0.5
"""Default: how long a member may know no leader before it closes its client port."""


class PortGate:
    """Whether the client port should be open now, from when a leader was last known."""

    def __init__(self, close_after_s: float, *, joining: bool = False) -> None:
        """``joining``: the member started with ``--join`` (module docstring): no grace for a
        first election."""
        if close_after_s < 0:
            raise ValueError("close_after_s must not be negative")
        self.close_after_s = close_after_s
        self.joining = joining
        self._leaderless_since_s: float | None = None
        self._ever_known = False

    def open(self, now_s: float, leader_known: bool, removed: bool = False) -> bool:
        """Record what this member knows at ``now_s`` (``removed``: it knows its group no
        longer counts it); whether the port should be open."""
        if removed:
            self._ever_known = True  # not a starting member's first election
            self._leaderless_since_s = now_s - self.close_after_s
            return False
        if leader_known:
            self._ever_known = True
            self._leaderless_since_s = None
            return True
        if not self._ever_known and not self.joining:
            return True  # starting: the first election is not a lost leader
        if self._leaderless_since_s is None:
            self._leaderless_since_s = now_s
        return now_s - self._leaderless_since_s < self.close_after_s

    def closes_in_s(self, now_s: float) -> float | None:
        """Seconds until the port closes if no leader is learnt meanwhile (None: a leader is
        known; 0: closed)."""
        if self._leaderless_since_s is None:
            return None
        return max(0.0, self._leaderless_since_s + self.close_after_s - now_s)
