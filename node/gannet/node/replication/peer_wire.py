"""Core messages (``gannet.node.raft.messages``) to and from ``gannet.raft.v1.RaftMessage``.

Pure functions; called by :mod:`transport`. Field names match one to one; ``group`` lets a node
refuse a stream from another replication group that reached its port by mistake.
"""

from __future__ import annotations

from gannet.node.protocol.gen import peer_pb2
from gannet.node.raft.membership import Membership, MembershipEntry
from gannet.node.raft.messages import (
    AppendEntries,
    AppendResponse,
    ByteOffset,
    Heartbeat,
    HeartbeatResponse,
    Message,
    NodeId,
    PreVoteRequest,
    PreVoteResponse,
    ResetLogStart,
    Term,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)


class PeerWireError(ValueError):
    """A RaftMessage without a body (or of a kind this node does not know)."""


def to_proto(message: Message, group: str) -> peer_pb2.RaftMessage:
    out = peer_pb2.RaftMessage(
        group=group, sender=message.sender, target=message.target, term=message.term
    )
    match message:
        case PreVoteRequest():
            out.pre_vote_request.last_term = message.last_term
            out.pre_vote_request.last_offset = message.last_offset
        case PreVoteResponse():
            out.pre_vote_response.granted = message.granted
        case VoteRequest():
            out.vote_request.last_term = message.last_term
            out.vote_request.last_offset = message.last_offset
            out.vote_request.transfer = message.transfer
        case VoteResponse():
            out.vote_response.granted = message.granted
        case AppendEntries():
            a = out.append_entries
            a.prev_offset = message.prev_offset
            a.prev_term = message.prev_term
            a.end_offset = message.end_offset
            a.entries_term = message.entries_term
            a.leader_commit = message.leader_commit
            a.payload = message.payload
            a.leader_clock_ms = message.leader_clock_ms
        case AppendResponse():
            r = out.append_response
            r.success = message.success
            r.match_offset = message.match_offset
            r.durable_offset = message.durable_offset
            r.rejected_prev_offset = message.rejected_prev_offset
            r.hint_term = message.hint_term
            r.hint_offset = message.hint_offset
        case Heartbeat():
            out.heartbeat.leader_commit = message.leader_commit
            out.heartbeat.leader_clock_ms = message.leader_clock_ms
        case HeartbeatResponse():
            out.heartbeat_response.match_offset = message.match_offset
            out.heartbeat_response.durable_offset = message.durable_offset
        case TimeoutNow():
            out.timeout_now.SetInParent()
        case ResetLogStart():
            out.reset_log_start.start_offset = message.start_offset
            out.reset_log_start.start_term = message.start_term
            out.reset_log_start.leader_commit = message.leader_commit
            if message.membership is not None:
                e = message.membership
                w = out.reset_log_start.membership
                w.start_offset = e.start_offset
                w.end_offset = e.end_offset
                w.voters.extend(sorted(e.membership.voters))
                w.learners.extend(sorted(e.membership.learners))
                w.body = e.membership.body
    return out


def from_proto(m: peer_pb2.RaftMessage) -> Message:
    """The core message of ``m``; raises :class:`PeerWireError` for a message no correct peer
    sends (no body, an AppendEntries whose payload does not fill its range, an end before its
    start), so that hostile bytes never reach the core's invariants (found by tests/fuzz)."""
    message = _decode(m)
    if isinstance(message, AppendEntries):
        if message.end_offset < message.prev_offset:
            raise PeerWireError(
                f"AppendEntries from node {m.sender} ends at {message.end_offset}, "
                f"before its start {message.prev_offset}"
            )
        span = message.end_offset - message.prev_offset
        if message.payload and len(message.payload) != span:
            raise PeerWireError(
                f"AppendEntries from node {m.sender} carries {len(message.payload)} bytes "
                f"for a range of {span}"
            )
    return message


def _decode(m: peer_pb2.RaftMessage) -> Message:
    sender, target, term = NodeId(m.sender), NodeId(m.target), Term(m.term)
    kind = m.WhichOneof("body")
    if kind == "pre_vote_request":
        v = m.pre_vote_request
        return PreVoteRequest(sender, target, term, Term(v.last_term), ByteOffset(v.last_offset))
    if kind == "pre_vote_response":
        return PreVoteResponse(sender, target, term, m.pre_vote_response.granted)
    if kind == "vote_request":
        q = m.vote_request
        return VoteRequest(
            sender, target, term, Term(q.last_term), ByteOffset(q.last_offset), q.transfer
        )
    if kind == "vote_response":
        return VoteResponse(sender, target, term, m.vote_response.granted)
    if kind == "append_entries":
        a = m.append_entries
        return AppendEntries(
            sender,
            target,
            term,
            ByteOffset(a.prev_offset),
            Term(a.prev_term),
            ByteOffset(a.end_offset),
            Term(a.entries_term),
            ByteOffset(a.leader_commit),
            bytes(a.payload),
            a.leader_clock_ms,
        )
    if kind == "append_response":
        r = m.append_response
        return AppendResponse(
            sender,
            target,
            term,
            r.success,
            ByteOffset(r.match_offset),
            ByteOffset(r.durable_offset),
            ByteOffset(r.rejected_prev_offset),
            Term(r.hint_term),
            ByteOffset(r.hint_offset),
        )
    if kind == "heartbeat":
        h = m.heartbeat
        return Heartbeat(sender, target, term, ByteOffset(h.leader_commit), h.leader_clock_ms)
    if kind == "heartbeat_response":
        h = m.heartbeat_response
        return HeartbeatResponse(
            sender, target, term, ByteOffset(h.match_offset), ByteOffset(h.durable_offset)
        )
    if kind == "timeout_now":
        return TimeoutNow(sender, target, term)
    if kind == "reset_log_start":
        z = m.reset_log_start
        membership = None
        if z.HasField("membership"):
            w = z.membership
            voters = frozenset(NodeId(v) for v in w.voters)
            learners = frozenset(NodeId(v) for v in w.learners)
            if voters & learners or w.end_offset < w.start_offset:
                raise PeerWireError(f"ResetLogStart from node {m.sender}: malformed membership")
            membership = MembershipEntry(
                ByteOffset(w.start_offset),
                ByteOffset(w.end_offset),
                Membership(voters, learners, bytes(w.body)),
            )
        return ResetLogStart(
            sender,
            target,
            term,
            ByteOffset(z.start_offset),
            Term(z.start_term),
            ByteOffset(z.leader_commit),
            membership,
        )
    raise PeerWireError(f"RaftMessage from node {m.sender} has no body")


def size_bytes(message: Message) -> int:
    """Rough wire size, for the outbound byte limit (the payload dominates)."""
    return 64 + (len(message.payload) if isinstance(message, AppendEntries) else 0)
