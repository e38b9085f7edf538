"""Whether this member knows its group no longer counts it: a removed member lets its clients
go at once instead of holding them for an election timeout (issue 34, seed 906).

Used by :mod:`driver` (``ReplicationNode.leader`` names no leader to a member that knows it is
removed, ``ReplicationNode.knows_removed``), which hears of the leader's refusals from
:mod:`gannet.node.api.forwarding`; the broker's port gate (:mod:`gannet.node.broker.port_gate`)
closes the client port at once for such a member. Pure: no IO, no clock.

A removed follower does not learn its removal from its log: a configuration is in force on
the leader as soon as it is appended, so the leader stops replicating to the member it removes
before the record removing it is sent (:mod:`gannet.node.raft.membership`); the member keeps the
leader it knew until its election timeout, and Raft only has it time out (Ongaro's
dissertation §4.2.2–4.2.3: removed servers "will not receive heartbeats"; pre-vote and leases
keep them from disrupting the group). etcd tells a removed member by refusing its peer traffic
as from a removed member. Here the signal is the leader's refusal of a forwarded client call:
once the removal committed the leader no longer admits the member
(:meth:`PeerTransport.admits_sender`) and refuses its ``Forward`` as *not a member*. The member
takes that as **no leader for me**:

* it is **disowned** by ``(leader, term)``: while its core still follows that leader in that
  term, it names no leader to its clients (requests are held, routes leave it out, ``/readyz``
  says why) and the port gate closes its client port at once, so the official clients' channels
  move to the other addresses;
* it ends when a leader's message (entries, heartbeat, log reset) reaches the core after the
  refusal — a leader replicates only to the members of its configuration, so a member removed
  and then added again (a learner under the same node id) serves as soon as the leader streams
  to it — or when the core follows another leader or term;
* nothing in Raft changes: the core keeps its term, vote, leader and timers (pre-vote, leases
  and check-quorum decide exactly as before); only what the member tells clients changes.

A member that knows no leader and whose committed configuration (not empty: a ``--join`` node
waits for its first) no longer names it — a leader that removed itself and stepped down once the
removal committed — knows it is removed too. A member whose configuration excludes it while it
follows a leader is not: a learner added again catches up through the records of its own
removal and its re-adding, from a leader that streams to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gannet.node.raft.membership import Membership
from gannet.node.raft.messages import NO_NODE, NodeId, Term


@dataclass(frozen=True, slots=True)
class Disowning:
    """The leader, and its term, that refused this member as not a member."""

    leader: NodeId
    term: Term


class Standing:
    """What this member knows about being counted by its group."""

    def __init__(self, node_id: NodeId) -> None:
        self.node_id = node_id
        self.disowning: Disowning | None = None
        self.refusals_total = 0
        """Refusals as not a member taken from the leader this member followed."""

    def leader_refused(self, leader: NodeId, *, followed: NodeId, term: Term) -> bool:
        """``leader`` refused this member as not a member while the core follows ``followed``
        in ``term``; True when that disowns it now (the refusal came from the leader followed,
        and it was not disowned by it already)."""
        if leader == NO_NODE or leader != followed:
            return False  # a former leader's refusal says nothing of the current one
        refusal = Disowning(leader, term)
        if self.disowning == refusal:
            return False
        self.disowning = refusal
        self.refusals_total += 1
        return True

    def heard_from_leader(self) -> None:
        """A leader's message reached the core: that leader counts this member again."""
        self.disowning = None

    def knows_removed(
        self, *, followed: NodeId, term: Term, committed: Membership, settled: bool
    ) -> bool:
        """Whether this member knows its group no longer counts it, while its core follows
        ``followed`` (NO_NODE: none) in ``term`` and ``committed`` is the committed
        configuration (``settled``: it is also the one in force)."""
        if followed != NO_NODE:
            return self.disowning == Disowning(followed, term)
        members = committed.members()
        return settled and bool(members) and self.node_id not in members
