"""``RaftCore``: the Raft state machine of one node of a Gannet replication group.

Called by the replication driver (``gannet.node.replication``), by the transcript tests and by
the simulator (``gannet.node.testing.raft_sim``). Pure and single-threaded: inputs are
``step`` (a peer's message), ``tick`` (one unit of time), ``propose`` (bytes to append, leader
only), ``transfer_leadership`` and ``report_durable`` (the commit log is synced up to an offset);
the output is ``ready()`` (see ``ready.py`` for the driver's contract), acknowledged with
``advance``. Between ``ready()`` and ``advance()`` no other input is allowed.

Rules that differ from textbook Raft because the log is the commit log:

* Positions are byte offsets; the term of a byte comes from the leader-epoch list
  (``epochs.EpochLog``). Log matching compares ``(prev_offset, term of the byte before it)``.
* The commit offset is the highest offset *durable* on a majority, the leader's own durable
  offset included (DLedger counted page-cache bytes; that loses acknowledged writes), and it
  only moves to an offset whose byte was written in the current term (Raft §5.4.2). A new
  leader appends a no-op record so that the previous terms' bytes commit without waiting for
  a producer (DLedger left that off by default).
* Followers answer an append once its bytes are durable: ``report_durable`` sends the
  acknowledgement. A follower never truncates below its commit offset (dledger#316).
* PreVote, leader stickiness (a node that hears from a leader ignores disruptive campaigns),
  check-quorum (a leader that cannot hear a majority steps down) and leadership transfer by
  ``TimeoutNow`` with a write fence.

Retention and catch-up below it: the driver tells the core with ``compact_log`` that the bytes
before an offset were deleted (only committed bytes ever are). A follower that needs bytes
before the leader's log start — its probe at the leader's start is refused, or its next offset
falls below it — gets ``ResetLogStart(start_offset, start_term)`` instead of a probe; it
discards its whole log (``Ready.log_reset``), restarts it empty there, counts the bytes before
it as committed and answers like an empty append, after which ordinary streaming follows. A
follower never resets below its own commit offset (it ignores such a message). An
``AppendEntries`` whose ``prev_offset`` lies before the follower's log start is refused with
the hint ``(0, 0)``, which sends the leader's search to its own log start.

The leader sends only bytes the driver has written (``_written_offset``: the end of the
entries of advanced Readies), so the driver can always read what a message names.
"""

from __future__ import annotations

from gannet.node.raft import quorum
from gannet.node.raft.config import Config, InitialState, Status
from gannet.node.raft.epochs import EpochLog
from gannet.node.raft.invariants import invariant
from gannet.node.raft.membership import (
    Membership,
    MembershipEntry,
    MembershipLog,
    change_refusal,
)
from gannet.node.raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendResponse,
    Busy,
    ByteOffset,
    Heartbeat,
    HeartbeatResponse,
    Message,
    NodeId,
    NotLeader,
    PreVoteRequest,
    PreVoteResponse,
    Proposed,
    ResetLogStart,
    Term,
    TimeoutNow,
    TransferStarted,
    VoteRequest,
    VoteResponse,
)
from gannet.node.raft.progress import Progress, ProgressState
from gannet.node.raft.ready import AppendRange, HardState, LogReset, Ready, Role, SoftState


class RaftCore:
    """One node's Raft state.

    Invariant: ``committed_offset <= log.last_offset`` and it never decreases.
    Invariant: ``durable_offset <= _written_offset <= log.last_offset``.
    Invariant: ``_matched_offset`` (a follower's log equals the leader's up to it, this term)
    is ``<= log.last_offset``; it resets when the term changes.
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
        self._written_offset = state.last_offset
        self._matched_offset = ByteOffset(0)
        self._acked_durable_offset = ByteOffset(0)  # last durable offset told to the leader
        self._election_elapsed_ticks = 0
        self._last_active: frozenset[NodeId] = frozenset()
        self._heartbeat_elapsed_ticks = 0
        self._election_timeout_ticks = self._randomized_timeout()
        self._votes: dict[NodeId, bool] = {}
        self._progress: dict[NodeId, Progress] = {}
        self._transferee = NO_NODE
        self._transfer_elapsed_ticks = 0
        self._timeout_now_sent = False
        # Pending output, handed out by ready() and cleared by advance().
        self._entries: list[AppendRange] = []
        self._truncate_to: ByteOffset | None = None
        self._log_reset: LogReset | None = None
        self._messages: list[Message] = []
        self._persisted_hard_state = HardState(self.term, self.vote)
        self._reported_committed = self.committed_offset
        self._reported_soft = self._soft_state()
        # Entries a crash cut off are dropped above; the first Ready persists that (a stale
        # entry must not come back once the log grows past it again with other bytes).
        self._reported_memberships = state.memberships or self.members.entries()
        self._outstanding: Ready | None = None

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

    # ----------------------------------------------------------------- inputs

    def tick(self) -> None:
        """One unit of time: heartbeats, election timeouts, check-quorum, transfer expiry."""
        self._check_no_outstanding()
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self._election_elapsed_ticks += 1
            if self._election_elapsed_ticks >= self._election_timeout_ticks:
                if self.may_campaign():
                    self.campaign()
                else:
                    # A learner does not campaign, but its lease on the leader ends: it must
                    # vote for a candidate of a configuration that already made it a voter.
                    self._election_elapsed_ticks = self._election_timeout_ticks

    def campaign(self) -> None:
        """Start an election now (as if the election timer fired)."""
        self._check_no_outstanding()
        if self.role is Role.LEADER or not self.may_campaign():
            return
        if self.config.pre_vote:
            self._start_pre_vote()
        else:
            self._start_election(transfer=False)

    def propose(self, payload: bytes) -> Proposed | NotLeader | Busy:
        """Append ``payload`` (whole encoded records, one or a batch) at ``log.last_offset``.

        The driver encodes records for the offset it reads from ``log.last_offset`` just
        before (physical offsets live inside RocketMQ records); nothing else can append in
        between because the core is single-threaded. The producer is answered when a Ready's
        ``committed_offset`` reaches ``Proposed.end_offset``.
        """
        self._check_no_outstanding()
        invariant(len(payload) > 0, "empty proposal")
        if self.role is not Role.LEADER:
            return NotLeader(self.leader_id)
        if self._transferee != NO_NODE:
            return Busy("leadership transfer in progress")
        uncommitted_bytes = self.log.last_offset - self.committed_offset + len(payload)
        if uncommitted_bytes > self.config.uncommitted_bytes_max:
            return Busy("uncommitted_bytes_max reached")
        start = self.log.last_offset
        end = ByteOffset(start + len(payload))
        self._append(AppendRange(start, end, self.term, payload))
        return Proposed(start, end, self.term)

    def membership_refusal(self, membership: Membership) -> NotLeader | Busy | None:
        """Why ``propose_membership`` would refuse ``membership`` now (None: it would not)."""
        if self.role is not Role.LEADER:
            return NotLeader(self.leader_id)
        if self._transferee != NO_NODE:
            return Busy("leadership transfer in progress")
        if self.log.term_at(self.committed_offset) != self.term:
            return Busy("the new leader has not committed an entry of its term yet; retry")
        latest = self.members.latest()
        if latest.end_offset > self.committed_offset:
            return Busy("another membership change is in flight (its entry is not committed)")
        refusal = change_refusal(latest.membership, membership)
        return None if refusal is None else Busy(refusal)

    def propose_membership(
        self,
        payload: bytes,
        membership: Membership,
        record: tuple[ByteOffset, ByteOffset] | None = None,
    ) -> Proposed | NotLeader | Busy:
        """Append ``payload`` whose configuration record (``record``, absolute offsets; None:
        the whole payload) makes ``membership`` the group's configuration; it is in force at
        once (see ``membership.py`` for the rules). Refused as ``membership_refusal`` says:
        a change in flight, no commit of this leader's term yet, more than one voter changed."""
        self._check_no_outstanding()
        invariant(len(payload) > 0, "empty proposal")
        refusal = self.membership_refusal(membership)
        if refusal is not None:
            return refusal
        start = self.log.last_offset
        end = ByteOffset(start + len(payload))
        begin, finish = record if record is not None else (start, end)
        invariant(start <= begin < finish <= end, "the configuration record lies in the payload")
        self._append(AppendRange(start, end, self.term, payload))
        self.members.append(MembershipEntry(begin, finish, membership))
        self._sync_progress()
        return Proposed(start, end, self.term)

    def transfer_leadership(self, target: NodeId) -> TransferStarted | NotLeader | Busy:
        """Hand leadership to ``target``: writes are fenced (``Busy``) until it campaigns or
        an election timeout passes; ``TimeoutNow`` goes out once ``target`` has our log."""
        self._check_no_outstanding()
        if self.role is not Role.LEADER:
            return NotLeader(self.leader_id)
        if target not in self._progress or not self.members.current.is_voter(target):
            return Busy(f"node {target} is not a voting follower of this group")
        self._transferee = target
        self._transfer_elapsed_ticks = 0
        self._timeout_now_sent = False
        self._maybe_send_timeout_now()
        self._send_append(target)
        return TransferStarted(target)

    def report_durable(self, offset: ByteOffset) -> None:
        """The commit log is synced up to ``offset``. Offsets past the written end (a write
        cut by a later truncation) are clamped; going backwards is ignored."""
        self._check_no_outstanding()
        offset = ByteOffset(min(offset, self._written_offset))
        if offset <= self.durable_offset:
            return
        self.durable_offset = offset
        if self.role is Role.LEADER:
            self._maybe_commit()
        elif (
            self.role is Role.FOLLOWER
            and self.leader_id != NO_NODE
            and self._follower_durable() > self._acked_durable_offset
        ):
            self._send_append_ack(self.leader_id)

    def compact_log(self, start_offset: ByteOffset) -> None:
        """Retention deleted the local bytes before ``start_offset`` (all committed): the log
        starts there now. Followers that still need older bytes are reset to it."""
        self._check_no_outstanding()
        start = ByteOffset(min(start_offset, self.log.last_offset))
        if start <= self.log.start_offset:
            return
        self.log.compact(start)
        self.members.compact(start)
        for node, pr in self._progress.items():
            if pr.next_offset < start:
                pr.become_probe(start)
                pr.reset_pending = True
                self._send_append(node)

    def step(self, message: Message) -> None:
        """Take one message from a peer (any order, duplicates and stale terms allowed)."""
        self._check_no_outstanding()
        invariant(message.target == self.id, f"message for {message.target} given to {self.id}")
        if message.sender == self.id or message.sender <= NO_NODE:
            return
        if message.term > self.term:
            if not self._accept_higher_term(message):
                return
        elif message.term < self.term:
            self._answer_stale(message)
            return
        self._dispatch(message)

    # ----------------------------------------------------------------- output

    def has_ready(self) -> bool:
        """Whether ``ready()`` would return something to do."""
        return not self._build_ready().is_empty()

    def ready(self) -> Ready:
        """The pending work, in the order of ``ready.py``; call ``advance`` when done."""
        invariant(self._outstanding is None, "ready() twice without advance()")
        self._check_invariants()
        ready = self._build_ready()
        self._outstanding = ready
        return ready

    def advance(self, ready: Ready) -> None:
        """The driver executed ``ready``: its entries are written (not necessarily synced)."""
        invariant(ready is self._outstanding, "advance() with a Ready not from ready()")
        self._outstanding = None
        if ready.hard_state is not None:
            self._persisted_hard_state = ready.hard_state
        if ready.committed_offset is not None:
            self._reported_committed = ready.committed_offset
        if ready.soft_state is not None:
            self._reported_soft = ready.soft_state
        if ready.truncate_to is not None:
            self._truncate_to = None
        if ready.memberships is not None:
            self._reported_memberships = ready.memberships
        if ready.log_reset is not None and ready.log_reset == self._log_reset:
            self._log_reset = None
        if ready.entries:
            invariant(ready.entries[-1].end_offset == self.log.last_offset, "entries vs log")
            self._written_offset = ready.entries[-1].end_offset
        del self._entries[: len(ready.entries)]
        del self._messages[: len(ready.messages)]
        if self.role is Role.LEADER:
            self._broadcast_appends()

    def status(self) -> Status:
        """A snapshot for ``gannet status``: role, term, offsets, and followers' progress."""
        rows = tuple(
            (node, pr.state.value, pr.next_offset, pr.match_offset, pr.durable_offset)
            for node, pr in sorted(self._progress.items())
        )
        return Status(
            self.id,
            self.role,
            self.term,
            self.vote,
            self.leader_id,
            self.log.last_offset,
            self.log.last_term,
            self.durable_offset,
            self.committed_offset,
            rows,
            self.members.latest(),
            self.members.latest().end_offset <= self.committed_offset,
        )

    # ------------------------------------------------------------- elections

    def _start_pre_vote(self) -> None:
        self.role = Role.PRE_CANDIDATE
        self.leader_id = NO_NODE
        self._reset_election_timer()
        self._votes = {self.id: self.is_voter()}
        if self._tally() is True:
            self._start_election(transfer=False)
            return
        for node in self.others:
            self._send(
                PreVoteRequest(
                    self.id, node, Term(self.term + 1), self.log.last_term, self.log.last_offset
                )
            )

    def _start_election(self, *, transfer: bool) -> None:
        self.role = Role.CANDIDATE
        self.leader_id = NO_NODE
        self.term = Term(self.term + 1)
        self.vote = self.id
        self._matched_offset = ByteOffset(0)
        self._acked_durable_offset = ByteOffset(0)
        self._reset_election_timer()
        self._votes = {self.id: self.is_voter()}
        if self._tally() is True:
            self._become_leader()
            return
        for node in self.others:
            self._send(
                VoteRequest(
                    self.id, node, self.term, self.log.last_term, self.log.last_offset, transfer
                )
            )

    def _tally(self) -> bool | None:
        """True when a majority granted, False when a majority refused, else None."""
        voters = self.members.current.voters
        needed = quorum.majority(len(voters))
        granted = sum(1 for n, v in self._votes.items() if v and n in voters)
        refused = sum(1 for n, v in self._votes.items() if not v and n in voters)
        if granted >= needed:
            return True
        if refused >= needed:
            return False
        return None

    def _log_up_to_date(self, last_term: Term, last_offset: ByteOffset) -> bool:
        return (last_term, last_offset) >= (self.log.last_term, self.log.last_offset)

    def follows_live_leader(self) -> bool:
        """A follower that heard from its leader within an election timeout (check-quorum on):
        a lone message from another member that would move its term is suspect then."""
        return self.role is not Role.LEADER and self._in_lease()

    def _in_lease(self) -> bool:
        """A node that heard from a live leader within an election timeout ignores
        campaigns (the leader stickiness PreVote relies on)."""
        if not self.config.check_quorum:
            return False
        if self.role is Role.LEADER:
            return True
        return (
            self.leader_id != NO_NODE
            and self._election_elapsed_ticks < self.config.election_timeout_ticks
        )

    def _become_follower(self, term: Term, leader: NodeId) -> None:
        if term != self.term:
            invariant(term > self.term, "terms never go backwards")
            self.term = term
            self.vote = NO_NODE
            self._matched_offset = ByteOffset(0)
            self._acked_durable_offset = ByteOffset(0)
        self.role = Role.FOLLOWER
        self.leader_id = leader
        self._progress = {}
        self._votes = {}
        self._transferee = NO_NODE
        self._reset_election_timer()

    def _become_leader(self) -> None:
        invariant(self.role is Role.CANDIDATE, f"{self.role.value} cannot become leader")
        self.role = Role.LEADER
        self.leader_id = self.id
        self._heartbeat_elapsed_ticks = 0
        self._election_elapsed_ticks = 0
        self._transferee = NO_NODE
        self._progress = {
            node: Progress(
                self.log.last_offset,
                inflight_messages_max=self.config.inflight_messages_max,
                inflight_bytes_max=self.config.inflight_bytes_max,
            )
            for node in self.others
        }
        start = self.log.last_offset
        payload = self.config.noop_payload(start, self.term)
        invariant(len(payload) > 0, "the no-op record must not be empty")
        end = ByteOffset(start + len(payload))
        self._append(AppendRange(start, end, self.term, payload, noop=True))
        for node in self.others:
            self._send_append(node)

    def _reset_election_timer(self) -> None:
        self._election_elapsed_ticks = 0
        self._election_timeout_ticks = self._randomized_timeout()

    def _randomized_timeout(self) -> int:
        base = self.config.election_timeout_ticks
        jitter = self.config.random_ticks(base)
        invariant(0 <= jitter < base, "random_ticks(n) must return a value in [0, n)")
        return base + jitter

    # ----------------------------------------------------------- dispatching

    def _accept_higher_term(self, message: Message) -> bool:
        """Handle a message from a later term; False means drop it."""
        if isinstance(message, PreVoteRequest):
            return True
        if isinstance(message, PreVoteResponse) and message.granted:
            return True
        if isinstance(message, VoteRequest) and not message.transfer and self._in_lease():
            return False
        leader = message.sender if isinstance(message, AppendEntries | Heartbeat) else NO_NODE
        self._become_follower(message.term, leader)
        return True

    def _answer_stale(self, message: Message) -> None:
        """Tell a node from an older term about ours, so a deposed leader steps down."""
        if isinstance(message, AppendEntries | Heartbeat):
            self._send(
                HeartbeatResponse(self.id, message.sender, self.term, ByteOffset(0), ByteOffset(0))
            )
        elif isinstance(message, PreVoteRequest):
            self._send(PreVoteResponse(self.id, message.sender, self.term, False))

    def _dispatch(self, message: Message) -> None:
        match message:
            case PreVoteRequest():
                self._on_pre_vote_request(message)
            case PreVoteResponse():
                self._on_pre_vote_response(message)
            case VoteRequest():
                self._on_vote_request(message)
            case VoteResponse():
                self._on_vote_response(message)
            case AppendEntries():
                self._on_append(message)
            case Heartbeat():
                self._on_heartbeat(message)
            case AppendResponse():
                self._on_append_response(message)
            case HeartbeatResponse():
                self._on_heartbeat_response(message)
            case TimeoutNow():
                self._on_timeout_now(message)
            case ResetLogStart():
                self._on_reset_log_start(message)

    def _on_pre_vote_request(self, m: PreVoteRequest) -> None:
        granted = (
            m.term > self.term
            and not self._in_lease()
            and self._log_up_to_date(m.last_term, m.last_offset)
        )
        self._send(PreVoteResponse(self.id, m.sender, m.term if granted else self.term, granted))

    def _on_pre_vote_response(self, m: PreVoteResponse) -> None:
        if self.role is not Role.PRE_CANDIDATE:
            return
        if m.granted and m.term != self.term + 1:
            return
        self._votes[m.sender] = m.granted
        outcome = self._tally()
        if outcome is True:
            self._start_election(transfer=False)
        elif outcome is False:
            self._become_follower(self.term, NO_NODE)

    def _on_vote_request(self, m: VoteRequest) -> None:
        granted = (
            self.role in (Role.FOLLOWER, Role.PRE_CANDIDATE)
            and self.vote in (NO_NODE, m.sender)
            and self._log_up_to_date(m.last_term, m.last_offset)
        )
        if granted:
            if self.role is Role.PRE_CANDIDATE:
                self._become_follower(self.term, NO_NODE)
            self.vote = m.sender
            self._reset_election_timer()
        self._send(VoteResponse(self.id, m.sender, self.term, granted))

    def _on_vote_response(self, m: VoteResponse) -> None:
        if self.role is not Role.CANDIDATE:
            return
        self._votes[m.sender] = m.granted
        outcome = self._tally()
        if outcome is True:
            self._become_leader()
        elif outcome is False:
            self._become_follower(self.term, NO_NODE)

    def _on_timeout_now(self, m: TimeoutNow) -> None:
        if self.role is Role.LEADER or not self.may_campaign():
            return
        self._start_election(transfer=True)

    # ------------------------------------------------------------- follower

    def _on_append(self, m: AppendEntries) -> None:
        invariant(self.role is not Role.LEADER, f"two leaders in term {self.term}")
        if self.role is not Role.FOLLOWER or self.leader_id != m.sender:
            self._become_follower(self.term, m.sender)
        self._reset_election_timer()
        if not self.log.matches(m.prev_offset, m.prev_term):
            if m.prev_offset < self.log.start_offset:
                hint_term, hint_offset = Term(0), ByteOffset(0)  # search down to its start
            else:
                hint_term, hint_offset = self.log.divergence_hint(m.prev_offset, m.prev_term)
            self._send(
                AppendResponse(
                    self.id,
                    m.sender,
                    self.term,
                    False,
                    rejected_prev_offset=m.prev_offset,
                    hint_term=hint_term,
                    hint_offset=hint_offset,
                )
            )
            return
        invariant(
            not m.payload or len(m.payload) == m.end_offset - m.prev_offset,
            "payload length differs from the range",
        )
        conflict = self.log.first_conflict(m.prev_offset, m.end_offset, m.entries_term)
        if conflict is not None:
            self._truncate(conflict)
        appended = m.end_offset > self.log.last_offset
        if appended:
            start = self.log.last_offset
            payload = m.payload[start - m.prev_offset :] if m.payload else b""
            self._append(AppendRange(start, m.end_offset, m.entries_term, payload))
            if payload and self.config.memberships_in is not None:
                for entry in self.config.memberships_in(start, payload):
                    self.members.append(entry)
        self._matched_offset = ByteOffset(max(self._matched_offset, m.end_offset))
        self._follower_commit(m.leader_commit)
        if not appended:
            self._send_append_ack(m.sender)

    def _on_reset_log_start(self, m: ResetLogStart) -> None:
        invariant(self.role is not Role.LEADER, f"two leaders in term {self.term}")
        if self.role is not Role.FOLLOWER or self.leader_id != m.sender:
            self._become_follower(self.term, m.sender)
        self._reset_election_timer()
        start = m.start_offset
        holds = (
            self.log.start_offset <= start <= self.log.last_offset
            and self.log.term_at(start) == m.start_term
        )
        if not holds:
            if start < self.committed_offset:
                return  # never discard committed bytes (see the module docstring)
            self.log.reset(start, m.start_term)
            if m.membership is not None:
                self.members.reset(m.membership)
            else:
                self.members.truncate(start)
            self._entries = []
            self._truncate_to = None
            self._log_reset = LogReset(start, m.start_term)
            self._written_offset = start
            self.durable_offset = start
            self._acked_durable_offset = ByteOffset(0)
            self._matched_offset = start
            self.committed_offset = ByteOffset(max(self.committed_offset, start))
        self._matched_offset = ByteOffset(max(self._matched_offset, start))
        self._follower_commit(m.leader_commit)
        self._send_append_ack(m.sender)

    def _on_heartbeat(self, m: Heartbeat) -> None:
        if self.role is not Role.FOLLOWER or self.leader_id != m.sender:
            self._become_follower(self.term, m.sender)
        self._reset_election_timer()
        self._follower_commit(m.leader_commit)
        self._send(
            HeartbeatResponse(
                self.id, m.sender, self.term, self._matched_offset, self._follower_durable()
            )
        )

    def _follower_commit(self, leader_commit: ByteOffset) -> None:
        """Only the prefix known to match the leader can be declared committed here."""
        offset = min(leader_commit, self._matched_offset)
        if offset > self.committed_offset:
            self.committed_offset = ByteOffset(offset)

    def _follower_durable(self) -> ByteOffset:
        return ByteOffset(min(self.durable_offset, self._matched_offset))

    def _send_append_ack(self, leader: NodeId) -> None:
        self._acked_durable_offset = self._follower_durable()
        self._send(
            AppendResponse(
                self.id,
                leader,
                self.term,
                True,
                match_offset=self._matched_offset,
                durable_offset=self._follower_durable(),
            )
        )

    # --------------------------------------------------------------- leader

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed_ticks += 1
        self._election_elapsed_ticks += 1
        if self._election_elapsed_ticks >= self.config.election_timeout_ticks:
            self._election_elapsed_ticks = 0
            if self.config.check_quorum and not self._quorum_active():
                self._become_follower(self.term, NO_NODE)
                return
        if self._transferee != NO_NODE:
            self._transfer_elapsed_ticks += 1
            if self._transfer_elapsed_ticks >= self.config.election_timeout_ticks:
                self._transferee = NO_NODE
        for pr in self._progress.values():
            if pr.state is ProgressState.REPLICATE and pr.inflight_count() > 0:
                pr.stalled_ticks += 1
                if pr.stalled_ticks >= self.config.election_timeout_ticks:
                    pr.become_probe(pr.match_offset)
        if self._heartbeat_elapsed_ticks >= self.config.heartbeat_interval_ticks:
            self._heartbeat_elapsed_ticks = 0
            for node, pr in self._progress.items():
                self._send(Heartbeat(self.id, node, self.term, self.committed_offset))
                if pr.state is ProgressState.PROBE:
                    pr.probe_sent = False
                    self._send_append(node)

    def responsive_followers(self) -> frozenset[NodeId]:
        """Followers this leader heard from in the current or the previous check-quorum round
        (at most two election timeouts ago); empty unless leading."""
        if self.role is not Role.LEADER:
            return frozenset()
        now = {node for node, pr in self._progress.items() if pr.recent_active}
        return frozenset(now | (self._last_active & set(self._progress)))

    def _quorum_active(self) -> bool:
        voters = self.members.current.voters
        active = int(self.id in voters) + sum(
            1 for n, pr in self._progress.items() if pr.recent_active and n in voters
        )
        self._last_active = frozenset(n for n, pr in self._progress.items() if pr.recent_active)
        for pr in self._progress.values():
            pr.recent_active = False
        return active >= quorum.majority(len(voters))

    def _on_append_response(self, m: AppendResponse) -> None:
        if self.role is not Role.LEADER:
            return
        pr = self._progress.get(m.sender)
        if pr is None:
            return  # a node removed from the configuration
        pr.recent_active = True
        if not m.success:
            self._on_append_refused(m, pr)
            return
        pr.acknowledged(m.match_offset, m.durable_offset)
        if pr.state is ProgressState.PROBE:
            pr.become_replicate()
        self._maybe_commit()
        self._maybe_send_timeout_now()
        self._send_append(m.sender)

    def _on_append_refused(self, m: AppendResponse, pr: Progress) -> None:
        if pr.state is ProgressState.REPLICATE and m.rejected_prev_offset < pr.match_offset:
            return  # refusal of a message older than the last acknowledgement
        if pr.state is ProgressState.PROBE and m.rejected_prev_offset != pr.next_offset:
            return  # refusal of an older probe
        invariant(m.hint_offset <= m.rejected_prev_offset, "hint beyond the refused offset")
        if m.rejected_prev_offset <= self.log.start_offset:
            # Refused at our log start: the follower needs bytes retention deleted.
            pr.become_probe(self.log.start_offset)
            pr.reset_pending = True
            self._send_append(m.sender)
            return
        candidate = min(m.hint_offset, self.log.end_for_term(m.hint_term))
        candidate = max(candidate, self.log.start_offset)
        invariant(
            candidate < m.rejected_prev_offset or m.rejected_prev_offset == self.log.start_offset,
            "divergence search must move backwards",
        )
        pr.become_probe(ByteOffset(candidate))
        self._send_append(m.sender)

    def _on_heartbeat_response(self, m: HeartbeatResponse) -> None:
        if self.role is not Role.LEADER:
            return
        pr = self._progress.get(m.sender)
        if pr is None:
            return  # a node removed from the configuration
        pr.recent_active = True
        if m.match_offset > 0:
            pr.acknowledged(m.match_offset, m.durable_offset)
            self._maybe_commit()
        stalled = pr.stalled_ticks >= 2 * self.config.heartbeat_interval_ticks
        restarted = m.match_offset == 0 < pr.match_offset and pr.inflight_count() == 0
        if pr.state is ProgressState.REPLICATE and m.match_offset < pr.next_offset and stalled:
            # Nothing acknowledged for two heartbeats while the follower is behind what was
            # sent: a range was lost. Go back to where it matches (go-back-N).
            pr.become_probe(pr.match_offset)
        elif pr.state is ProgressState.REPLICATE and restarted:
            # The follower restarted in this term (it matched nothing since): with nothing new
            # to send it would never learn the commit, so probe where it matched before.
            pr.become_probe(pr.match_offset)
        self._send_append(m.sender)

    def _maybe_commit(self) -> None:
        voters = self.members.current.voters
        durable = [pr.durable_offset for n, pr in self._progress.items() if n in voters]
        if self.id in voters:
            durable.append(self.durable_offset)
        if not durable:
            return
        offset = quorum.quorum_offset(durable)
        if offset <= self.committed_offset or offset < self.log.start_offset:
            return
        # Raft §5.4.2: count replicas only for bytes of the current term.
        if self.log.term_at(offset) != self.term:
            return
        self.committed_offset = offset
        self._maybe_step_down_removed()

    def _maybe_step_down_removed(self) -> None:
        """A leader that is no longer a voter leads until the entry removing it commits, then
        hands over to the most caught-up voter (``TimeoutNow``) and steps down."""
        latest = self.members.latest()
        if self.is_voter() or latest.end_offset > self.committed_offset:
            return
        best = max(
            (n for n in self._progress if n in latest.membership.voters),
            key=lambda n: (self._progress[n].match_offset, -n),
            default=NO_NODE,
        )
        if best != NO_NODE and self._progress[best].match_offset == self.log.last_offset:
            self._send(TimeoutNow(self.id, best, self.term))
        self._become_follower(self.term, NO_NODE)

    def _maybe_send_timeout_now(self) -> None:
        node = self._transferee
        if node == NO_NODE or self._timeout_now_sent:
            return
        pr = self._progress.get(node)
        if pr is None:
            self._transferee = NO_NODE  # removed from the configuration meanwhile
            return
        if pr.match_offset == self.log.last_offset:
            self._send(TimeoutNow(self.id, node, self.term))
            self._timeout_now_sent = True

    def _broadcast_appends(self) -> None:
        for node in self.others:
            self._send_append(node)

    def _send_append(self, node: NodeId) -> None:
        """Send what the window allows to ``node``: one probe, or ranges in REPLICATE."""
        pr = self._progress.get(node)
        if pr is None:
            return
        if pr.state is ProgressState.REPLICATE and pr.next_offset < self.log.start_offset:
            # An answer from before a restart or a reset matched bytes we no longer hold.
            pr.become_probe(self.log.start_offset)
            pr.reset_pending = True
        if pr.state is ProgressState.PROBE:
            if not pr.probe_sent:
                if pr.reset_pending or pr.next_offset < self.log.start_offset:
                    self._send(
                        ResetLogStart(
                            self.id,
                            node,
                            self.term,
                            self.log.start_offset,
                            self.log.start_term,
                            self.committed_offset,
                            self.members.at(self.log.start_offset),
                        )
                    )
                else:
                    self._send(self._append_message(node, pr.next_offset))
                pr.probe_sent = True
            return
        for _ in range(self.config.inflight_messages_max):
            if pr.window_full() or pr.next_offset >= self._written_offset:
                return
            message = self._append_message(node, pr.next_offset)
            pr.sent(message.end_offset, message.end_offset - message.prev_offset)
            self._send(message)

    def _append_message(self, node: NodeId, prev: ByteOffset) -> AppendEntries:
        prev = ByteOffset(min(prev, self.log.last_offset))
        end = prev
        entries_term = self.term
        if prev < self._written_offset:
            cap = min(
                self._written_offset,
                self.log.end_of_byte_epoch(prev),
                prev + self.config.append_bytes_max,
            )
            end = ByteOffset(cap)
            if self.config.record_end is not None:
                end = self.config.record_end(prev, end)
                invariant(prev < end <= self._written_offset, "record_end out of range")
            entries_term = self.log.term_at(ByteOffset(prev + 1))
        return AppendEntries(
            self.id,
            node,
            self.term,
            prev,
            self.log.term_at(prev),
            end,
            entries_term,
            self.committed_offset,
        )

    # ------------------------------------------------------------ log edits

    def _append(self, entry: AppendRange) -> None:
        self.log.append(entry.start_offset, entry.end_offset, entry.term)
        self._entries.append(entry)

    def _truncate(self, offset: ByteOffset) -> None:
        invariant(offset >= self.committed_offset, "truncating committed bytes")
        self.log.truncate(offset)
        self.members.truncate(offset)
        kept: list[AppendRange] = []
        for entry in self._entries:
            if entry.end_offset <= offset:
                kept.append(entry)
            elif entry.start_offset < offset:
                cut = offset - entry.start_offset
                payload = entry.payload[:cut] if entry.payload else b""
                kept.append(AppendRange(entry.start_offset, offset, entry.term, payload))
        self._entries = kept
        if offset < self._written_offset:
            self._truncate_to = ByteOffset(
                offset if self._truncate_to is None else min(offset, self._truncate_to)
            )
            self._written_offset = offset
        self.durable_offset = ByteOffset(min(self.durable_offset, offset))
        self._matched_offset = ByteOffset(min(self._matched_offset, offset))
        self._acked_durable_offset = ByteOffset(min(self._acked_durable_offset, offset))

    def _sync_progress(self) -> None:
        """The leader's followers are the members of the configuration in force."""
        members = set(self.others)
        for node in [n for n in self._progress if n not in members]:
            del self._progress[node]
        for node in members - set(self._progress):
            self._progress[node] = Progress(
                self.log.last_offset,
                inflight_messages_max=self.config.inflight_messages_max,
                inflight_bytes_max=self.config.inflight_bytes_max,
            )
            self._send_append(node)

    # --------------------------------------------------------------- plumbing

    def _send(self, message: Message) -> None:
        self._messages.append(message)

    def _soft_state(self) -> SoftState:
        return SoftState(self.role, self.leader_id, self.term)

    def _build_ready(self) -> Ready:
        hard = HardState(self.term, self.vote)
        soft = self._soft_state()
        entries = self.members.entries()
        return Ready(
            hard_state=None if hard == self._persisted_hard_state else hard,
            truncate_to=self._truncate_to,
            entries=tuple(self._entries),
            messages=tuple(self._messages),
            committed_offset=(
                None if self.committed_offset == self._reported_committed else self.committed_offset
            ),
            soft_state=None if soft == self._reported_soft else soft,
            log_reset=self._log_reset,
            memberships=None if entries == self._reported_memberships else entries,
        )

    def _check_no_outstanding(self) -> None:
        invariant(self._outstanding is None, "input between ready() and advance()")

    def _check_invariants(self) -> None:
        """The class invariants, checked when a Ready is handed out (cheap comparisons)."""
        invariant(self.committed_offset <= self.log.last_offset, "commit beyond the log end")
        invariant(self.committed_offset >= self._reported_committed, "commit went backwards")
        invariant(self.durable_offset <= self._written_offset, "durable beyond written")
        invariant(self._written_offset <= self.log.last_offset, "written beyond the log end")
        invariant(self._matched_offset <= self.log.last_offset, "matched beyond the log end")
        invariant(self.role is not Role.LEADER or self.leader_id == self.id, "leader names another")
        invariant(self.role is Role.LEADER or not self._progress, "progress outside leadership")
