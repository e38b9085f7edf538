"""Raft's log appending, both sides of ``AppendEntries``: the leader streams byte ranges,
followers append them and acknowledge. (The IO around it is the replication driver,
``gannet.node.replication``.)

Called by ``core.RaftCore`` (dispatch of ``AppendEntries``, ``Heartbeat``, ``ResetLogStart``
and their answers, the leader's tick, proposals) and by ``election`` (a new leader's first
appends). Pure functions over ``node_state.NodeState``; see ``core.py`` for the rules that
differ from textbook Raft because the log is the commit log.

Leader side: per-follower ``Progress`` (probe, then a bounded window of ranges), the commit
offset as the highest offset durable on a majority of voters in the current term, go-back-N
when a range is lost, ``ResetLogStart`` for a follower that needs bytes retention deleted, and
the ``TimeoutNow`` of a leadership transfer once its target holds the whole log.

Follower side: log matching on ``(prev_offset, term of the byte before it)``, truncation of a
divergent suffix (never below the commit offset), and acknowledgements that carry the durable
offset (``report_durable``) so the leader counts only synced bytes.
"""

from __future__ import annotations

from gannet.node.invariants import invariant
from gannet.node.raft import leases, quorum
from gannet.node.raft.config import UnreadablePayload
from gannet.node.raft.membership import MembershipEntry
from gannet.node.raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendResponse,
    ByteOffset,
    Heartbeat,
    HeartbeatResponse,
    NodeId,
    ResetLogStart,
    Term,
    TimeoutNow,
)
from gannet.node.raft.node_state import NodeState
from gannet.node.raft.progress import Progress, ProgressState
from gannet.node.raft.ready import AppendRange, LogReset, Role

# ------------------------------------------------------------------- leader


def new_progress(node: NodeState) -> Progress:
    """A follower's progress as a leader first sees it: probing at this leader's log end."""
    return Progress(
        node.log.last_offset,
        inflight_messages_max=node.config.inflight_messages_max,
        inflight_bytes_max=node.config.inflight_bytes_max,
    )


def tick_leader(node: NodeState) -> None:
    """One tick of a leader: check-quorum, transfer expiry, stalled windows, heartbeats."""
    node.heartbeat_elapsed_ticks += 1
    node.election_elapsed_ticks += 1
    if node.election_elapsed_ticks >= node.config.election_timeout_ticks:
        node.election_elapsed_ticks = 0
        if node.config.check_quorum and not leases.quorum_active(node):
            node.become_follower(node.term, NO_NODE)
            return
    if node.transferee != NO_NODE:
        node.transfer_elapsed_ticks += 1
        if node.transfer_elapsed_ticks >= node.config.election_timeout_ticks:
            node.transferee = NO_NODE
    for pr in node.progress.values():
        if pr.state is ProgressState.REPLICATE and pr.inflight_count() > 0:
            pr.stalled_ticks += 1
            if pr.stalled_ticks >= node.config.election_timeout_ticks:
                pr.become_probe(pr.match_offset)
    if node.heartbeat_elapsed_ticks >= node.config.heartbeat_interval_ticks:
        node.heartbeat_elapsed_ticks = 0
        for target, pr in node.progress.items():
            node.send(Heartbeat(node.id, target, node.term, node.committed_offset))
            if pr.state is ProgressState.PROBE:
                pr.probe_sent = False
                send_append(node, target)


def _heard_from(node: NodeState, m: AppendResponse | HeartbeatResponse) -> Progress | None:
    """The progress of the follower that answered, marked active; None when the answer is
    not for this leader: not leading, a node removed from the configuration, or a match
    beyond this leader's log (no correct follower claims bytes its leader never sent)."""
    if node.role is not Role.LEADER or m.match_offset > node.log.last_offset:
        return None
    pr = node.progress.get(m.sender)
    if pr is not None:
        pr.recent_active = True
    return pr


def on_append_response(node: NodeState, m: AppendResponse) -> None:
    pr = _heard_from(node, m)
    if pr is None:
        return
    if not m.success:
        _on_append_refused(node, m, pr)
        return
    pr.acknowledged(m.match_offset, m.durable_offset)
    if pr.state is ProgressState.PROBE:
        pr.become_replicate()
    maybe_commit(node)
    maybe_send_timeout_now(node)
    send_append(node, m.sender)


def _on_append_refused(node: NodeState, m: AppendResponse, pr: Progress) -> None:
    if pr.state is ProgressState.REPLICATE and m.rejected_prev_offset < pr.match_offset:
        return  # refusal of a message older than the last acknowledgement
    if pr.state is ProgressState.PROBE and m.rejected_prev_offset != pr.next_offset:
        return  # refusal of an older probe
    invariant(m.hint_offset <= m.rejected_prev_offset, "hint beyond the refused offset")
    if m.rejected_prev_offset <= node.log.start_offset:
        # Refused at our log start: the follower needs bytes retention deleted.
        pr.become_probe(node.log.start_offset)
        pr.reset_pending = True
        send_append(node, m.sender)
        return
    candidate = min(m.hint_offset, node.log.end_for_term(m.hint_term))
    candidate = max(candidate, node.log.start_offset)
    invariant(
        candidate < m.rejected_prev_offset or m.rejected_prev_offset == node.log.start_offset,
        "divergence search must move backwards",
    )
    pr.become_probe(ByteOffset(candidate))
    send_append(node, m.sender)


def on_heartbeat_response(node: NodeState, m: HeartbeatResponse) -> None:
    pr = _heard_from(node, m)
    if pr is None:
        return
    if m.match_offset > 0:
        pr.acknowledged(m.match_offset, m.durable_offset)
        maybe_commit(node)
    stalled = pr.stalled_ticks >= 2 * node.config.heartbeat_interval_ticks
    restarted = m.match_offset == 0 < pr.match_offset and pr.inflight_count() == 0
    if pr.state is ProgressState.REPLICATE and m.match_offset < pr.next_offset and stalled:
        # Nothing acknowledged for two heartbeats while the follower is behind what was
        # sent: a range was lost. Go back to where it matches (go-back-N).
        pr.become_probe(pr.match_offset)
    elif pr.state is ProgressState.REPLICATE and restarted:
        # The follower restarted in this term (it matched nothing since): with nothing new
        # to send it would never learn the commit, so probe where it matched before.
        pr.become_probe(pr.match_offset)
    send_append(node, m.sender)


def maybe_commit(node: NodeState) -> None:
    """Commit the highest offset durable on a majority of voters, if its byte is of this term."""
    voters = node.members.current.voters
    durable = [pr.durable_offset for n, pr in node.progress.items() if n in voters]
    if node.id in voters:
        durable.append(node.durable_offset)
    if not durable:
        return
    offset = quorum.quorum_offset(durable)
    if offset <= node.committed_offset or offset < node.log.start_offset:
        return
    # Raft §5.4.2: count replicas only for bytes of the current term.
    if node.log.term_at(offset) != node.term:
        return
    node.set_committed(offset)
    _maybe_step_down_removed(node)


def _maybe_step_down_removed(node: NodeState) -> None:
    """A leader that is no longer a voter leads until the entry removing it commits, then
    hands over to the most caught-up voter (``TimeoutNow``) and steps down."""
    latest = node.members.latest()
    if node.is_voter() or latest.end_offset > node.committed_offset:
        return
    best = max(
        (n for n in node.progress if n in latest.membership.voters),
        key=lambda n: (node.progress[n].match_offset, -n),
        default=NO_NODE,
    )
    if best != NO_NODE and node.progress[best].match_offset == node.log.last_offset:
        node.send(TimeoutNow(node.id, best, node.term))
    node.become_follower(node.term, NO_NODE)


def maybe_send_timeout_now(node: NodeState) -> None:
    """Leadership transfer: tell the target to campaign once it holds this leader's log."""
    target = node.transferee
    if target == NO_NODE or node.timeout_now_sent:
        return
    pr = node.progress.get(target)
    if pr is None:
        node.transferee = NO_NODE  # removed from the configuration meanwhile
        return
    if pr.match_offset == node.log.last_offset:
        node.send(TimeoutNow(node.id, target, node.term))
        node.timeout_now_sent = True


def broadcast_appends(node: NodeState) -> None:
    for target in node.others:
        send_append(node, target)


def send_append(node: NodeState, target: NodeId) -> None:
    """Send what the window allows to ``target``: one probe, or ranges in REPLICATE."""
    pr = node.progress.get(target)
    if pr is None:
        return
    if pr.state is ProgressState.REPLICATE and pr.next_offset < node.log.start_offset:
        # An answer from before a restart or a reset matched bytes we no longer hold.
        pr.become_probe(node.log.start_offset)
        pr.reset_pending = True
    if pr.state is ProgressState.PROBE:
        if not pr.probe_sent:
            if pr.reset_pending or pr.next_offset < node.log.start_offset:
                node.send(
                    ResetLogStart(
                        node.id,
                        target,
                        node.term,
                        node.log.start_offset,
                        node.log.start_term,
                        node.committed_offset,
                        node.members.at(node.log.start_offset),
                    )
                )
            else:
                node.send(_append_message(node, target, pr.next_offset))
            pr.probe_sent = True
        return
    for _ in range(node.config.inflight_messages_max):
        if pr.window_full() or pr.next_offset >= node.written_offset:
            return
        message = _append_message(node, target, pr.next_offset)
        pr.sent(message.end_offset, message.end_offset - message.prev_offset)
        node.send(message)


def _append_message(node: NodeState, target: NodeId, prev: ByteOffset) -> AppendEntries:
    """The ``AppendEntries`` after ``prev``: written bytes of one epoch, at most
    ``append_bytes_max``, ending on a record boundary (empty: a probe at the written end)."""
    prev = ByteOffset(min(prev, node.log.last_offset))
    end = prev
    entries_term = node.term
    if prev < node.written_offset:
        cap = min(
            node.written_offset,
            node.log.end_of_byte_epoch(prev),
            prev + node.config.append_bytes_max,
        )
        end = ByteOffset(cap)
        if node.config.record_end is not None:
            end = node.config.record_end(prev, end)
            invariant(prev < end <= node.written_offset, "record_end out of range")
        entries_term = node.log.term_at(ByteOffset(prev + 1))
    return AppendEntries(
        node.id,
        target,
        node.term,
        prev,
        node.log.term_at(prev),
        end,
        entries_term,
        node.committed_offset,
    )


def sync_progress(node: NodeState) -> None:
    """The leader's followers are the members of the configuration in force."""
    members = set(node.others)
    for gone in [n for n in node.progress if n not in members]:
        del node.progress[gone]
    for target in members - set(node.progress):
        node.progress[target] = new_progress(node)
        send_append(node, target)


# ----------------------------------------------------------------- follower


def _follow(node: NodeState, leader: NodeId) -> None:
    """A message from ``leader`` of this term: follow it and restart the election timer."""
    if node.role is not Role.FOLLOWER or node.leader_id != leader:
        node.become_follower(node.term, leader)
    node.reset_election_timer()


def on_append(node: NodeState, m: AppendEntries) -> None:
    invariant(node.role is not Role.LEADER, f"two leaders in term {node.term}")
    _follow(node, m.sender)
    if not node.log.matches(m.prev_offset, m.prev_term):
        if m.prev_offset < node.log.start_offset:
            hint_term, hint_offset = Term(0), ByteOffset(0)  # search down to its start
        else:
            hint_term, hint_offset = node.log.divergence_hint(m.prev_offset, m.prev_term)
        node.send(
            AppendResponse(
                node.id,
                m.sender,
                node.term,
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
    conflict = node.log.first_conflict(m.prev_offset, m.end_offset, m.entries_term)
    if conflict is not None:
        node.truncate(conflict)
    appended = m.end_offset > node.log.last_offset
    if appended:
        start = node.log.last_offset
        payload = m.payload[start - m.prev_offset :] if m.payload else b""
        memberships = _memberships_in(node, start, payload)
        if memberships is None:
            return  # neither the range nor its configuration records; the leader resends
        node.append(AppendRange(start, m.end_offset, m.entries_term, payload))
        for entry in memberships:
            node.members.append(entry)
    node.matched_offset = ByteOffset(max(node.matched_offset, m.end_offset))
    _follower_commit(node, m.leader_commit)
    if not appended:
        send_append_ack(node, m.sender)


def _memberships_in(
    node: NodeState, start: ByteOffset, payload: bytes
) -> tuple[MembershipEntry, ...] | None:
    """The configuration records of ``payload`` (appended at ``start``), read before it is
    appended so that a range never enters the log without its configuration entries; None
    when they cannot be read (``refused_payload`` says why)."""
    if not payload or node.config.memberships_in is None:
        return ()
    try:
        return node.config.memberships_in(start, payload)
    except UnreadablePayload as exc:
        node.refused_payload = (
            f"AppendEntries [{start}, {start + len(payload)}) refused, nothing of it appended: "
            f"{exc}"
        )
        return None


def on_reset_log_start(node: NodeState, m: ResetLogStart) -> None:
    invariant(node.role is not Role.LEADER, f"two leaders in term {node.term}")
    _follow(node, m.sender)
    start = m.start_offset
    holds = (
        node.log.start_offset <= start <= node.log.last_offset
        and node.log.term_at(start) == m.start_term
    )
    if not holds:
        if start < node.committed_offset:
            return  # never discard committed bytes (see core.py's docstring)
        node.log.reset(start, m.start_term)
        if m.membership is not None:
            node.members.reset(m.membership)
        else:
            node.members.truncate(start)
        node.pending_entries = []
        node.pending_truncate_to = None
        node.pending_log_reset = LogReset(start, m.start_term)
        node.written_offset = start
        node.durable_offset = start
        node.acked_durable_offset = ByteOffset(0)
        node.matched_offset = start
        node.set_committed(ByteOffset(max(node.committed_offset, start)))
    node.matched_offset = ByteOffset(max(node.matched_offset, start))
    _follower_commit(node, m.leader_commit)
    send_append_ack(node, m.sender)


def on_heartbeat(node: NodeState, m: Heartbeat) -> None:
    _follow(node, m.sender)
    _follower_commit(node, m.leader_commit)
    node.send(
        HeartbeatResponse(node.id, m.sender, node.term, node.matched_offset, follower_durable(node))
    )


def _follower_commit(node: NodeState, leader_commit: ByteOffset) -> None:
    """Only the prefix known to match the leader can be declared committed here."""
    offset = min(leader_commit, node.matched_offset)
    if offset > node.committed_offset:
        node.set_committed(ByteOffset(offset))


def follower_durable(node: NodeState) -> ByteOffset:
    """What a follower may report durable: synced bytes that match its leader in this term."""
    return ByteOffset(min(node.durable_offset, node.matched_offset))


def send_append_ack(node: NodeState, leader: NodeId) -> None:
    node.acked_durable_offset = follower_durable(node)
    node.send(
        AppendResponse(
            node.id,
            leader,
            node.term,
            True,
            match_offset=node.matched_offset,
            durable_offset=follower_durable(node),
        )
    )
