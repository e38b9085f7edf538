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

The leader sends only bytes the driver has written (``written_offset``: the end of the
entries of advanced Readies), so the driver can always read what a message names.

``RaftCore`` holds the inputs, the output and the dispatch of messages; the work is done by
``election`` (PreVote, votes, becoming leader), ``appending`` (appends, acknowledgements,
commit, transfer) and ``leases`` (check-quorum, leader stickiness), all functions over the
state of ``node_state.NodeState``, which also holds the invariants.
"""

from __future__ import annotations

from gannet.node.invariants import invariant
from gannet.node.raft import appending, election, leases
from gannet.node.raft.config import Status
from gannet.node.raft.membership import Membership, MembershipEntry, change_refusal
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
    TimeoutNow,
    TransferStarted,
    VoteRequest,
    VoteResponse,
)
from gannet.node.raft.node_state import NodeState
from gannet.node.raft.ready import AppendRange, HardState, Ready, Role


class RaftCore(NodeState):
    """One node's Raft state machine: the driver's inputs and its ``Ready`` output.

    The state and its invariants are ``NodeState``'s; see the module docstring for the rules.
    """

    # ----------------------------------------------------------------- inputs

    def tick(self) -> None:
        """One unit of time: heartbeats, election timeouts, check-quorum, transfer expiry."""
        self.check_no_outstanding()
        if self.role is Role.LEADER:
            appending.tick_leader(self)
        else:
            election.tick_election_timer(self)

    def campaign(self) -> None:
        """Start an election now (as if the election timer fired)."""
        self.check_no_outstanding()
        election.campaign(self)

    def propose(self, payload: bytes) -> Proposed | NotLeader | Busy:
        """Append ``payload`` (whole encoded records, one or a batch) at ``log.last_offset``.

        The driver encodes records for the offset it reads from ``log.last_offset`` just
        before (physical offsets live inside RocketMQ records); nothing else can append in
        between because the core is single-threaded. The producer is answered when a Ready's
        ``committed_offset`` reaches ``Proposed.end_offset``.
        """
        self.check_no_outstanding()
        invariant(len(payload) > 0, "empty proposal")
        if self.role is not Role.LEADER:
            return NotLeader(self.leader_id)
        if self.transferee != NO_NODE:
            return Busy("leadership transfer in progress")
        uncommitted_bytes = self.log.last_offset - self.committed_offset + len(payload)
        if uncommitted_bytes > self.config.uncommitted_bytes_max:
            return Busy("uncommitted_bytes_max reached")
        start = self.log.last_offset
        end = ByteOffset(start + len(payload))
        self.append(AppendRange(start, end, self.term, payload))
        return Proposed(start, end, self.term)

    def membership_refusal(self, membership: Membership) -> NotLeader | Busy | None:
        """Why ``propose_membership`` would refuse ``membership`` now (None: it would not)."""
        if self.role is not Role.LEADER:
            return NotLeader(self.leader_id)
        if self.transferee != NO_NODE:
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
        self.check_no_outstanding()
        invariant(len(payload) > 0, "empty proposal")
        refusal = self.membership_refusal(membership)
        if refusal is not None:
            return refusal
        start = self.log.last_offset
        end = ByteOffset(start + len(payload))
        begin, finish = record if record is not None else (start, end)
        invariant(start <= begin < finish <= end, "the configuration record lies in the payload")
        self.append(AppendRange(start, end, self.term, payload))
        self.members.append(MembershipEntry(begin, finish, membership))
        appending.sync_progress(self)
        return Proposed(start, end, self.term)

    def transfer_leadership(self, target: NodeId) -> TransferStarted | NotLeader | Busy:
        """Hand leadership to ``target``: writes are fenced (``Busy``) until it campaigns or
        an election timeout passes; ``TimeoutNow`` goes out once ``target`` has our log."""
        self.check_no_outstanding()
        if self.role is not Role.LEADER:
            return NotLeader(self.leader_id)
        if target not in self.progress or not self.members.current.is_voter(target):
            return Busy(f"node {target} is not a voting follower of this group")
        self.transferee = target
        self.transfer_elapsed_ticks = 0
        self.timeout_now_sent = False
        appending.maybe_send_timeout_now(self)
        appending.send_append(self, target)
        return TransferStarted(target)

    def report_durable(self, offset: ByteOffset) -> None:
        """The commit log is synced up to ``offset``. Offsets past the written end (a write
        cut by a later truncation) are clamped; going backwards is ignored."""
        self.check_no_outstanding()
        offset = ByteOffset(min(offset, self.written_offset))
        if offset <= self.durable_offset:
            return
        self.durable_offset = offset
        if self.role is Role.LEADER:
            appending.maybe_commit(self)
        elif (
            self.role is Role.FOLLOWER
            and self.leader_id != NO_NODE
            and appending.follower_durable(self) > self.acked_durable_offset
        ):
            appending.send_append_ack(self, self.leader_id)

    def compact_log(self, start_offset: ByteOffset) -> None:
        """Retention deleted the local bytes before ``start_offset`` (all committed): the log
        starts there now. Followers that still need older bytes are reset to it."""
        self.check_no_outstanding()
        start = ByteOffset(min(start_offset, self.log.last_offset))
        if start <= self.log.start_offset:
            return
        self.log.compact(start)
        self.members.compact(start)
        for target, pr in self.progress.items():
            if pr.next_offset < start:
                pr.become_probe(start)
                pr.reset_pending = True
                appending.send_append(self, target)

    def step(self, message: Message) -> None:
        """Take one message from a peer (any order, duplicates and stale terms allowed)."""
        self.check_no_outstanding()
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

    # ----------------------------------------------------------------- queries

    def responsive_followers(self) -> frozenset[NodeId]:
        """Followers this leader heard from in the current or the previous check-quorum round
        (at most two election timeouts ago); empty unless leading."""
        return leases.responsive_followers(self)

    def follows_live_leader(self) -> bool:
        """A follower that heard from its leader within an election timeout (check-quorum on):
        a lone message from another member that would move its term is suspect then."""
        return leases.follows_live_leader(self)

    def status(self) -> Status:
        """A snapshot for ``gannet status``: role, term, offsets, and followers' progress."""
        rows = tuple(
            (node, pr.state.value, pr.next_offset, pr.match_offset, pr.durable_offset)
            for node, pr in sorted(self.progress.items())
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

    # ----------------------------------------------------------------- output

    def has_ready(self) -> bool:
        """Whether ``ready()`` would return something to do."""
        return not self._build_ready().is_empty()

    def ready(self) -> Ready:
        """The pending work, in the order of ``ready.py``; call ``advance`` when done."""
        invariant(self.outstanding is None, "ready() twice without advance()")
        self.check_invariants()
        ready = self._build_ready()
        self.outstanding = ready
        return ready

    def advance(self, ready: Ready) -> None:
        """The driver executed ``ready``: its entries are written (not necessarily synced)."""
        invariant(ready is self.outstanding, "advance() with a Ready not from ready()")
        self.outstanding = None
        if ready.hard_state is not None:
            self.persisted_hard_state = ready.hard_state
        if ready.committed_offset is not None:
            self.reported_committed = ready.committed_offset
        if ready.soft_state is not None:
            self.reported_soft = ready.soft_state
        if ready.truncate_to is not None:
            self.pending_truncate_to = None
        if ready.memberships is not None:
            self.reported_memberships = ready.memberships
        if ready.log_reset is not None and ready.log_reset == self.pending_log_reset:
            self.pending_log_reset = None
        if ready.entries:
            invariant(ready.entries[-1].end_offset == self.log.last_offset, "entries vs log")
            self.written_offset = ready.entries[-1].end_offset
        del self.pending_entries[: len(ready.entries)]
        del self.pending_messages[: len(ready.messages)]
        if self.role is Role.LEADER:
            appending.broadcast_appends(self)

    def _build_ready(self) -> Ready:
        hard = HardState(self.term, self.vote)
        soft = self.soft_state()
        entries = self.members.entries()
        return Ready(
            hard_state=None if hard == self.persisted_hard_state else hard,
            truncate_to=self.pending_truncate_to,
            entries=tuple(self.pending_entries),
            messages=tuple(self.pending_messages),
            committed_offset=(
                None if self.committed_offset == self.reported_committed else self.committed_offset
            ),
            soft_state=None if soft == self.reported_soft else soft,
            log_reset=self.pending_log_reset,
            memberships=None if entries == self.reported_memberships else entries,
        )

    # ------------------------------------------------------------ dispatching

    def _accept_higher_term(self, message: Message) -> bool:
        """Handle a message from a later term; False means drop it."""
        if isinstance(message, PreVoteRequest):
            return True
        if isinstance(message, PreVoteResponse) and message.granted:
            return True
        if isinstance(message, VoteRequest) and not message.transfer and leases.in_lease(self):
            return False
        leader = message.sender if isinstance(message, AppendEntries | Heartbeat) else NO_NODE
        self.become_follower(message.term, leader)
        return True

    def _answer_stale(self, message: Message) -> None:
        """Tell a node from an older term about ours, so a deposed leader steps down."""
        if isinstance(message, AppendEntries | Heartbeat):
            self.send(
                HeartbeatResponse(self.id, message.sender, self.term, ByteOffset(0), ByteOffset(0))
            )
        elif isinstance(message, PreVoteRequest):
            self.send(PreVoteResponse(self.id, message.sender, self.term, False))

    def _dispatch(self, message: Message) -> None:
        match message:
            case PreVoteRequest():
                election.on_pre_vote_request(self, message)
            case PreVoteResponse():
                election.on_pre_vote_response(self, message)
            case VoteRequest():
                election.on_vote_request(self, message)
            case VoteResponse():
                election.on_vote_response(self, message)
            case TimeoutNow():
                election.on_timeout_now(self, message)
            case AppendEntries():
                appending.on_append(self, message)
            case Heartbeat():
                appending.on_heartbeat(self, message)
            case ResetLogStart():
                appending.on_reset_log_start(self, message)
            case AppendResponse():
                appending.on_append_response(self, message)
            case HeartbeatResponse():
                appending.on_heartbeat_response(self, message)
