"""Elections: PreVote, RequestVote, becoming leader, and ``TimeoutNow`` campaigns.

Called by ``core.RaftCore`` (its ``tick`` and ``campaign`` inputs and the dispatch of vote
messages). Pure functions over ``node_state.NodeState``.

* A node whose election timer fires first asks for pre-votes at ``term + 1`` without moving
  its term (``Config.pre_vote``); only with a majority of pre-votes does it campaign for real.
* A vote goes to a candidate whose log is at least as up to date, ``(last_term,
  last_offset)``, once per term (``NodeState.grant_vote``). A node in a lease on a live leader
  (``leases``) refuses pre-votes and ignores campaigns, unless the leader asked for one by
  ``TimeoutNow`` (leadership transfer: the request carries ``transfer``).
* A new leader appends a no-op record (``Config.noop_payload``) so that the previous terms'
  bytes commit without waiting for a producer, and starts replicating (``appending``).
* A node removed from the voters by an entry not yet known committed may still campaign (it
  may be needed to commit its removal) but its own vote does not count.
"""

from __future__ import annotations

from gannet.node.invariants import invariant
from gannet.node.raft import appending, leases, quorum
from gannet.node.raft.messages import (
    NO_NODE,
    ByteOffset,
    PreVoteRequest,
    PreVoteResponse,
    Term,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from gannet.node.raft.node_state import NodeState
from gannet.node.raft.ready import AppendRange, Role


def tick_election_timer(node: NodeState) -> None:
    """One tick of a follower or candidate: campaign once the election timer fires."""
    node.election_elapsed_ticks += 1
    if node.election_elapsed_ticks < node.election_timeout_ticks:
        return
    if node.may_campaign():
        campaign(node)
    else:
        # A learner does not campaign, but its lease on the leader ends: it must vote for a
        # candidate of a configuration that already made it a voter.
        node.election_elapsed_ticks = node.election_timeout_ticks


def campaign(node: NodeState) -> None:
    """Start an election now (pre-vote first when configured); a leader does not."""
    if node.role is Role.LEADER or not node.may_campaign():
        return
    if node.config.pre_vote:
        _start_pre_vote(node)
    else:
        _start_election(node, transfer=False)


def _start_pre_vote(node: NodeState) -> None:
    node.role = Role.PRE_CANDIDATE
    node.leader_id = NO_NODE
    node.reset_election_timer()
    node.votes = {node.id: node.is_voter()}
    if _tally(node) is True:
        _start_election(node, transfer=False)
        return
    for target in node.others:
        node.send(
            PreVoteRequest(
                node.id, target, Term(node.term + 1), node.log.last_term, node.log.last_offset
            )
        )


def _start_election(node: NodeState, *, transfer: bool) -> None:
    node.role = Role.CANDIDATE
    node.leader_id = NO_NODE
    node.term = Term(node.term + 1)
    node.vote = NO_NODE
    node.grant_vote(node.id)
    node.matched_offset = ByteOffset(0)
    node.acked_durable_offset = ByteOffset(0)
    node.reset_election_timer()
    node.votes = {node.id: node.is_voter()}
    if _tally(node) is True:
        _become_leader(node)
        return
    for target in node.others:
        node.send(
            VoteRequest(
                node.id, target, node.term, node.log.last_term, node.log.last_offset, transfer
            )
        )


def _tally(node: NodeState) -> bool | None:
    """True when a majority granted, False when a majority refused, else None."""
    voters = node.members.current.voters
    needed = quorum.majority(len(voters))
    granted = sum(1 for n, v in node.votes.items() if v and n in voters)
    refused = sum(1 for n, v in node.votes.items() if not v and n in voters)
    if granted >= needed:
        return True
    if refused >= needed:
        return False
    return None


def _log_up_to_date(node: NodeState, last_term: Term, last_offset: ByteOffset) -> bool:
    return (last_term, last_offset) >= (node.log.last_term, node.log.last_offset)


def _become_leader(node: NodeState) -> None:
    invariant(node.role is Role.CANDIDATE, f"{node.role.value} cannot become leader")
    invariant(node.vote == node.id, f"leader of term {node.term} voted for {node.vote}")
    node.role = Role.LEADER
    node.leader_id = node.id
    node.heartbeat_elapsed_ticks = 0
    node.election_elapsed_ticks = 0
    node.transferee = NO_NODE
    node.progress = {target: appending.new_progress(node) for target in node.others}
    start = node.log.last_offset
    payload = node.config.noop_payload(start, node.term)
    invariant(len(payload) > 0, "the no-op record must not be empty")
    end = ByteOffset(start + len(payload))
    node.append(AppendRange(start, end, node.term, payload, noop=True))
    for target in node.others:
        appending.send_append(node, target)


def on_pre_vote_request(node: NodeState, m: PreVoteRequest) -> None:
    granted = (
        m.term > node.term
        and not leases.in_lease(node)
        and _log_up_to_date(node, m.last_term, m.last_offset)
    )
    node.send(PreVoteResponse(node.id, m.sender, m.term if granted else node.term, granted))


def on_pre_vote_response(node: NodeState, m: PreVoteResponse) -> None:
    if node.role is not Role.PRE_CANDIDATE:
        return
    if m.granted and m.term != node.term + 1:
        return
    node.votes[m.sender] = m.granted
    outcome = _tally(node)
    if outcome is True:
        _start_election(node, transfer=False)
    elif outcome is False:
        node.become_follower(node.term, NO_NODE)


def on_vote_request(node: NodeState, m: VoteRequest) -> None:
    granted = (
        node.role in (Role.FOLLOWER, Role.PRE_CANDIDATE)
        and node.vote in (NO_NODE, m.sender)
        and _log_up_to_date(node, m.last_term, m.last_offset)
    )
    if granted:
        if node.role is Role.PRE_CANDIDATE:
            node.become_follower(node.term, NO_NODE)
        node.grant_vote(m.sender)
        node.reset_election_timer()
    node.send(VoteResponse(node.id, m.sender, node.term, granted))


def on_vote_response(node: NodeState, m: VoteResponse) -> None:
    if node.role is not Role.CANDIDATE:
        return
    node.votes[m.sender] = m.granted
    outcome = _tally(node)
    if outcome is True:
        _become_leader(node)
    elif outcome is False:
        node.become_follower(node.term, NO_NODE)


def on_timeout_now(node: NodeState, m: TimeoutNow) -> None:
    """The leader hands over: campaign at once, past every lease (``m`` is from this term)."""
    invariant(m.term == node.term, "TimeoutNow of another term")
    if node.role is Role.LEADER or not node.may_campaign():
        return
    _start_election(node, transfer=True)
