"""``NodeState``: what one Raft node knows, and the edits every part of the core shares.

The base class of ``core.RaftCore``; the functions of ``election``, ``appending`` and
``leases`` take it as their first argument. Pure like the rest of the package: no IO, no clock,
no randomness of its own (election jitter comes from ``Config.random_ticks``).

The edits that several parts make live here, so that each invariant is checked where the state
changes, TigerBeetle-style (a broken one raises ``InvariantViolation`` and stops the node):

* ``become_follower``: terms never decrease;
* ``grant_vote``: at most one vote per term;
* ``set_committed``: the commit offset never decreases and never passes the log end;
* ``append`` / ``truncate``: entries follow the log end with non-decreasing terms, and no
  committed byte is ever cut;

``check_invariants`` re-checks the whole set (plus the leader's per-follower order
``match_offset <= next_offset <= log.last_offset``) whenever a ``Ready`` is handed out.
"""

from __future__ import annotations

from gannet.node.invariants import invariant
from gannet.node.raft.config import Config, InitialState
from gannet.node.raft.epochs import EpochLog
from gannet.node.raft.membership import MembershipLog
from gannet.node.raft.messages import NO_NODE, ByteOffset, Message, NodeId, Term
from gannet.node.raft.progress import Progress
from gannet.node.raft.ready import AppendRange, HardState, LogReset, Ready, Role, SoftState


class NodeState:
    """One node's Raft state: persistent (term, vote, log), volatile, and pending output.

    Invariant: ``committed_offset <= log.last_offset`` and it never decreases.
    Invariant: ``durable_offset <= written_offset <= log.last_offset``.
    Invariant: ``matched_offset`` (a follower's log equals the leader's up to it, this term)
    is ``<= log.last_offset``; it resets when the term changes.
    Invariant: ``term`` never decreases, and ``vote`` changes at most once per term.
    Invariant: at most one ``Ready`` is outstanding (``ready()`` … ``advance()``).
    """

    def __init__(self, config: Config, initial: InitialState | None = None) -> None:
        state = initial or InitialState()
        self.config = config
        self.id = config.node_id
        self.members = (
            MembershipLog(state.memberships)
            if state.memberships
            else MembershipLog.bootstrap(config.voters)
        )
        self.members.truncate(state.last_offset)  # entries a crash cut off the log end
        self.term = state.hard_state.term
        self.vote = state.hard_state.vote
        self.role = Role.FOLLOWER
        self.leader_id = NO_NODE
        self.log = EpochLog(
            state.epochs,
            last_offset=state.last_offset,
            start_offset=state.start_offset,
            start_term=state.start_term,
        )
        invariant(state.committed_offset <= state.last_offset, "commit beyond the log end")
        self.committed_offset = state.committed_offset
        self.durable_offset = state.last_offset
        self.written_offset = state.last_offset
        """The end of the entries of advanced Readies: the driver has written up to here."""
        self.matched_offset = ByteOffset(0)
        self.acked_durable_offset = ByteOffset(0)
        """The last durable offset this follower told its leader."""
        self.refused_payload: str | None = None
        """Why this follower last refused an ``AppendEntries`` whose payload ``memberships_in``
        could not read (``config.UnreadablePayload``); the driver logs it and clears it."""
        self.election_elapsed_ticks = 0
        self.election_timeout_ticks = self.randomized_timeout()
        self.heartbeat_elapsed_ticks = 0
        self.last_active: frozenset[NodeId] = frozenset()
        """Followers heard from in the previous check-quorum round (``leases``)."""
        self.votes: dict[NodeId, bool] = {}
        self.progress: dict[NodeId, Progress] = {}
        self.transferee = NO_NODE
        self.transfer_elapsed_ticks = 0
        self.timeout_now_sent = False
        # Pending output, handed out by ready() and cleared by advance().
        self.pending_entries: list[AppendRange] = []
        self.pending_truncate_to: ByteOffset | None = None
        self.pending_log_reset: LogReset | None = None
        self.pending_messages: list[Message] = []
        self.persisted_hard_state = HardState(self.term, self.vote)
        self.reported_committed = self.committed_offset
        self.reported_soft = self.soft_state()
        # Entries a crash cut off are dropped above; the first Ready persists that (a stale
        # entry must not come back once the log grows past it again with other bytes).
        self.reported_memberships = state.memberships or self.members.entries()
        self.outstanding: Ready | None = None

    # ------------------------------------------------------------- membership

    @property
    def others(self) -> tuple[NodeId, ...]:
        """Every other member (voters and learners) of the configuration in force."""
        return tuple(sorted(n for n in self.members.current.members() if n != self.id))

    def is_voter(self) -> bool:
        """Whether this node votes in its latest configuration."""
        return self.members.current.is_voter(self.id)

    def may_campaign(self) -> bool:
        """A voter of its latest configuration campaigns; so does a node that an entry not
        known to be committed removed from the voters (it may hold entries the remaining voters
        lack, and be needed to commit its own removal), though its own vote does not count
        (Ongaro's dissertation §4.2.2). A joining node or a learner never campaigns."""
        if self.is_voter():
            return True
        entries = self.members.entries()
        return (
            len(entries) >= 2
            and entries[-1].end_offset > self.committed_offset
            and entries[-2].membership.is_voter(self.id)
        )

    # ----------------------------------------------------------- term, vote, role

    def become_follower(self, term: Term, leader: NodeId) -> None:
        """Follow ``leader`` (NO_NODE: unknown) in ``term``, which is this term or a later one."""
        if term != self.term:
            invariant(term > self.term, f"terms never go backwards ({self.term} -> {term})")
            self.term = term
            self.vote = NO_NODE
            self.matched_offset = ByteOffset(0)
            self.acked_durable_offset = ByteOffset(0)
        self.role = Role.FOLLOWER
        self.leader_id = leader
        self.progress = {}
        self.votes = {}
        self.transferee = NO_NODE
        self.reset_election_timer()

    def grant_vote(self, candidate: NodeId) -> None:
        """Vote for ``candidate`` in this term: a node votes at most once per term."""
        invariant(candidate != NO_NODE, "a vote for nobody")
        invariant(
            self.vote in (NO_NODE, candidate),
            f"second vote in term {self.term}: {self.vote}, then {candidate}",
        )
        self.vote = candidate

    def reset_election_timer(self) -> None:
        self.election_elapsed_ticks = 0
        self.election_timeout_ticks = self.randomized_timeout()

    def randomized_timeout(self) -> int:
        base = self.config.election_timeout_ticks
        jitter = self.config.random_ticks(base)
        invariant(0 <= jitter < base, "random_ticks(n) must return a value in [0, n)")
        return base + jitter

    def soft_state(self) -> SoftState:
        return SoftState(self.role, self.leader_id, self.term)

    # --------------------------------------------------------------- the log

    def set_committed(self, offset: ByteOffset) -> None:
        """Move the commit offset forward to ``offset`` (within the log)."""
        invariant(offset >= self.committed_offset, f"commit {self.committed_offset} -> {offset}")
        invariant(offset <= self.log.last_offset, f"commit {offset} beyond the log end")
        self.committed_offset = offset

    def append(self, entry: AppendRange) -> None:
        invariant(entry.start_offset == self.log.last_offset, "append away from the log end")
        invariant(entry.term >= self.log.last_term, "entry terms never decrease along the log")
        self.log.append(entry.start_offset, entry.end_offset, entry.term)
        self.pending_entries.append(entry)

    def truncate(self, offset: ByteOffset) -> None:
        """Cut the log at ``offset``: never below the commit offset."""
        invariant(offset >= self.committed_offset, "truncating committed bytes")
        self.log.truncate(offset)
        self.members.truncate(offset)
        kept: list[AppendRange] = []
        for entry in self.pending_entries:
            if entry.end_offset <= offset:
                kept.append(entry)
            elif entry.start_offset < offset:
                cut = offset - entry.start_offset
                payload = entry.payload[:cut] if entry.payload else b""
                kept.append(AppendRange(entry.start_offset, offset, entry.term, payload))
        self.pending_entries = kept
        if offset < self.written_offset:
            self.pending_truncate_to = ByteOffset(
                offset
                if self.pending_truncate_to is None
                else min(offset, self.pending_truncate_to)
            )
            self.written_offset = offset
        self.durable_offset = ByteOffset(min(self.durable_offset, offset))
        self.matched_offset = ByteOffset(min(self.matched_offset, offset))
        self.acked_durable_offset = ByteOffset(min(self.acked_durable_offset, offset))

    def send(self, message: Message) -> None:
        self.pending_messages.append(message)

    # ------------------------------------------------------------- invariants

    def check_no_outstanding(self) -> None:
        invariant(self.outstanding is None, "input between ready() and advance()")

    def check_invariants(self) -> None:
        """The class invariants, checked when a Ready is handed out (cheap comparisons)."""
        persisted = self.persisted_hard_state
        invariant(self.term >= persisted.term, f"term {persisted.term} went back to {self.term}")
        invariant(
            self.term != persisted.term or persisted.vote in (NO_NODE, self.vote),
            f"vote of term {self.term} changed from {persisted.vote} to {self.vote}",
        )
        invariant(self.committed_offset <= self.log.last_offset, "commit beyond the log end")
        # What the driver was told to apply (reported_committed) never passes the commit.
        invariant(self.committed_offset >= self.reported_committed, "commit went backwards")
        invariant(self.durable_offset <= self.written_offset, "durable beyond written")
        invariant(self.written_offset <= self.log.last_offset, "written beyond the log end")
        invariant(self.matched_offset <= self.log.last_offset, "matched beyond the log end")
        invariant(self.role is not Role.LEADER or self.leader_id == self.id, "leader names another")
        invariant(self.role is Role.LEADER or not self.progress, "progress outside leadership")
        for node, pr in self.progress.items():
            invariant(
                pr.match_offset <= pr.next_offset <= self.log.last_offset,
                f"node {node}: match {pr.match_offset}, next {pr.next_offset}, "
                f"log end {self.log.last_offset} out of order",
            )
            invariant(pr.durable_offset <= pr.match_offset, f"node {node}: durable beyond match")
        invariant(self.log.last_term >= self.log.start_term, "entry terms decrease along the log")
