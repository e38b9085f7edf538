"""Adding and removing members on the leader: the rules behind ``gannet cluster member``.

Called by :mod:`gannet.node.api.admin_raft` (the ``ListMembers``, ``AddMember`` and
``RemoveMember`` admin RPCs) on the node that leads; it drives
:meth:`ReplicationNode.change_membership`, which appends one configuration record at a time
(:mod:`gannet.node.raft.membership` explains why one voter at a time is safe).

* **add** ``N=HOST:PEERPORT/CLIENTPORT``: N joins as a *learner* (replicated to, never counted),
  then — unless ``learner_only`` — once its match offset is within :data:`CAUGHT_UP_BYTES` of
  the leader's log end and it answers, it is promoted to voter by a second record. Idempotent:
  adding a member again with the same addresses appends nothing (a learner is promoted).
* **remove** N: refused when the voters left would not have a reachable majority (the leader
  counts the followers it heard from within the last two election timeouts) — the group would
  stop committing. Removing the leader is allowed: it keeps leading until the record removing
  it commits, then hands over to the most caught-up voter and steps down (the call returns once
  the removal committed). Removing a node that is not a member appends nothing.
* One change at a time: while a configuration record is not committed, or a learner waits to
  be promoted, every other change is refused with what to do.

Refusals raise :class:`MembershipRefused` (the API answers FAILED_PRECONDITION), bad arguments
:class:`MembershipInvalid` (INVALID_ARGUMENT); both say why and what to do.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gannet.node.raft import quorum
from gannet.node.raft.messages import NodeId
from gannet.node.replication.config import PeerSpec
from gannet.node.replication.driver import ReplicationNode
from gannet.node.replication.errors import ReplicationBusy
from gannet.node.replication.members import Member

ADD_TIMEOUT_S = 60.0
REMOVE_TIMEOUT_S = 30.0
CAUGHT_UP_BYTES = 1 << 20
"""A learner this close to the leader's log end (and answering) is promoted."""
POLL_INTERVAL_S = 0.1


class MembershipRefused(Exception):
    """The change is refused now (FAILED_PRECONDITION); the message says what to do."""


class MembershipInvalid(ValueError):
    """The request names something impossible (INVALID_ARGUMENT)."""


@dataclass(frozen=True, slots=True)
class MemberView:
    """One row of ``gannet cluster member list``."""

    spec: PeerSpec
    voter: bool
    match_offset: int
    lag_bytes: int
    reachable: bool
    leader: bool


@dataclass(frozen=True, slots=True)
class MembersView:
    members: tuple[MemberView, ...]
    config_offset: int
    change_in_flight: bool
    leader_id: int


def view(node: ReplicationNode) -> MembersView:
    """The configuration in force with the leader's view of every member (-1: unknown)."""
    core = node.core
    if core is None:
        raise MembershipRefused("replication is not started")
    status = core.status()
    progress = {row[0]: row[3] for row in status.progress}
    heard = core.responsive_followers()
    leading = core.role.value == "leader"
    rows = []
    for node_id, member in sorted(node.member_table.members.items()):
        me = node_id == node.config.node_id
        if leading:
            match = core.durable_offset if me else progress.get(NodeId(node_id), -1)
            lag = max(0, core.committed_offset - match) if match >= 0 else -1
            # heard within the last check-quorum rounds, and its stream is open now
            reachable = me or (NodeId(node_id) in heard and node.transport.reachable(node_id))
        else:
            match, lag, reachable = -1, -1, False
        rows.append(
            MemberView(member.spec, member.voter, match, lag, reachable, node_id == core.leader_id)
        )
    latest = core.members.latest()
    in_flight = latest.end_offset > core.committed_offset or bool(core.members.current.learners)
    return MembersView(tuple(rows), latest.start_offset, in_flight, int(core.leader_id))


def _in_flight_refusal(node: ReplicationNode, subject: str) -> str | None:
    core = node.core
    assert core is not None
    latest = core.members.latest()
    if latest.end_offset > core.committed_offset:
        return (
            f"another membership change is in flight (the configuration at offset "
            f"{latest.start_offset} is not committed yet); wait for it to finish, then {subject}"
        )
    learners = sorted(core.members.current.learners)
    if learners:
        return (
            f"node {learners[0]} is a learner waiting to be promoted; finish that change first "
            f"(`gannet cluster member add` it again to promote it, or remove it), then {subject}"
        )
    return None


def _busy(exc: ReplicationBusy, subject: str) -> MembershipRefused:
    return MembershipRefused(f"{exc}; then {subject}")


async def add(
    node: ReplicationNode, spec: PeerSpec, *, learner_only: bool, timeout_s: float | None
) -> MembersView:
    """Add ``spec`` as a learner, then (unless ``learner_only``) promote it once caught up."""
    wait_s = timeout_s or ADD_TIMEOUT_S
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    table = node.member_table.members
    for other_id, other in table.items():
        if other_id != spec.node_id and other.spec.peer_endpoint == spec.peer_endpoint:
            raise MembershipInvalid(
                f"node {other_id} already uses peer address {spec.peer_endpoint}; "
                "give the new member its own address"
            )
    current = table.get(spec.node_id)
    if current is not None and current.spec != spec:
        raise MembershipInvalid(
            f"node {spec.node_id} is already a member as {current.spec}; a node whose address "
            "or disk changed must be removed first and come back under a new node id"
        )
    subject = f"add node {spec.node_id} again"
    if current is None:
        refusal = _in_flight_refusal(node, subject)
        if refusal is not None:
            raise MembershipRefused(refusal)
        learners = [*table.values(), Member(spec, False)]
        await _change(node, learners, subject, deadline - loop.time())
    elif current.voter:
        return view(node)
    if learner_only:
        return view(node)
    await _wait_caught_up(node, spec.node_id, deadline)
    table = node.member_table.members
    promoted = [Member(m.spec, m.voter or n == spec.node_id) for n, m in table.items()]
    await _change(node, promoted, subject, deadline - loop.time())
    return view(node)


async def remove(node: ReplicationNode, node_id: int, *, timeout_s: float | None) -> MembersView:
    """Remove ``node_id`` (the leader included) unless that would stop the group committing."""
    wait_s = timeout_s or REMOVE_TIMEOUT_S
    table = node.member_table.members
    target = table.get(node_id)
    if target is None:
        return view(node)
    subject = f"remove node {node_id} again"
    refusal = _in_flight_refusal(node, subject)
    learners = node.core.members.current.learners if node.core is not None else frozenset()
    if refusal is not None and not (not target.voter and NodeId(node_id) in learners):
        raise MembershipRefused(refusal)  # (dropping the waiting learner itself is allowed)
    remaining = [m for n, m in table.items() if n != node_id]
    voters = [m.spec.node_id for m in remaining if m.voter]
    if target.voter:
        if not voters:
            raise MembershipRefused(
                f"node {node_id} is the last voter; a group needs one (add another member first)"
            )
        rows = {r.spec.node_id: r for r in view(node).members}
        reachable = [n for n in voters if rows[n].reachable]
        if len(reachable) < quorum.majority(len(voters)):
            raise MembershipRefused(
                f"removing node {node_id} would leave {len(reachable)} of {len(voters)} voters "
                f"reachable (a majority is {quorum.majority(len(voters))}); bring a member "
                "back first"
            )
    await _change(node, remaining, subject, wait_s)
    return view(node)


async def _change(
    node: ReplicationNode, new_members: list[Member], subject: str, timeout_s: float
) -> None:
    try:
        await node.change_membership(new_members, max(timeout_s, 1.0))
    except ReplicationBusy as exc:
        raise _busy(exc, subject) from exc


async def _wait_caught_up(node: ReplicationNode, node_id: int, deadline: float) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        row = next((r for r in view(node).members if r.spec.node_id == node_id), None)
        if row is None:
            raise MembershipRefused(f"node {node_id} was removed while it caught up")
        if row.reachable and 0 <= row.lag_bytes <= CAUGHT_UP_BYTES:
            return
        if loop.time() >= deadline:
            behind = f"{row.lag_bytes:,} bytes behind" if row.lag_bytes >= 0 else "not answering"
            raise MembershipRefused(
                f"node {node_id} is {behind} after {loop.time() - started:.0f} s; not promoted "
                f"(still a learner): check that it runs with --join and reaches the leader's "
                f"peer port, then add it again"
            )
        await asyncio.sleep(POLL_INTERVAL_S)
