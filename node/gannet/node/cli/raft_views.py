"""Rich tables of Raft status (``RaftStatus`` of ``GetRaftStatus``) for the CLI.

Pure: protobuf in, :class:`rich.table.Table` or verdicts out. Used by ``gannet status``
(:mod:`gannet.node.cli.messages`: this node's role, term, leader, offsets and, on a
leader, each follower's match offset and lag) and ``gannet cluster status``
(:mod:`commands`: one row per member, then the leader's view of its followers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from gannet.node.protocol.gen import admin_pb2


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """What ``cluster status`` learned from one endpoint: a status, or why not."""

    endpoint: str
    status: admin_pb2.RaftStatus | None
    error: str = ""


def node_table(status: admin_pb2.RaftStatus) -> Table:
    """One node's Raft state as item/value rows."""
    table = Table(title=f"Raft node {status.node_id}")
    table.add_column("item")
    table.add_column("value", justify="right")
    leader = status.leader_id or "unknown"
    if status.leader_client_endpoint:
        leader += f" ({status.leader_client_endpoint})"
    rows = (
        ("role", status.role),
        ("term", str(status.term)),
        ("leader", leader),
        ("commit offset", str(status.commit_offset)),
        ("last offset", str(status.last_offset)),
        ("durable offset", str(status.durable_offset)),
        ("uncommitted bytes", str(max(0, status.last_offset - status.commit_offset))),
        ("elections", str(status.elections_total)),
        ("leader changes", str(status.leader_changes_total)),
    )
    for item, value in rows:
        table.add_row(item, value)
    return table


def peers_table(status: admin_pb2.RaftStatus) -> Table:
    """The followers as this node sees them (match/lag are known only on the leader: -1)."""
    table = Table(title=f"peers seen by node {status.node_id} ({status.role})")
    for column in ("node", "peer endpoint", "client endpoint", "match offset", "lag bytes"):
        table.add_column(
            column, justify="right" if "offset" in column or "lag" in column else "left"
        )
    table.add_column("reachable")
    for p in status.peers:
        table.add_row(
            p.node_id,
            p.peer_endpoint,
            p.client_endpoint,
            str(p.match_offset) if p.match_offset >= 0 else "-",
            str(p.lag_bytes) if p.lag_bytes >= 0 else "-",
            "yes" if p.reachable else "[red]no[/]",
        )
    return table


def raft_document(status: admin_pb2.RaftStatus) -> dict[str, Any]:
    """One node's Raft state and its peers for ``-o json|yaml`` (match/lag -1: unknown)."""
    return {
        "node_id": status.node_id,
        "role": status.role,
        "term": status.term,
        "leader_id": status.leader_id or None,
        "leader_client_endpoint": status.leader_client_endpoint or None,
        "commit_offset": status.commit_offset,
        "last_offset": status.last_offset,
        "durable_offset": status.durable_offset,
        "elections": status.elections_total,
        "leader_changes": status.leader_changes_total,
        "peers": [
            {
                "node_id": p.node_id,
                "peer_endpoint": p.peer_endpoint,
                "client_endpoint": p.client_endpoint,
                "match_offset": p.match_offset,
                "lag_bytes": p.lag_bytes,
                "reachable": p.reachable,
            }
            for p in status.peers
        ],
    }


def members_document(members: Sequence[MemberStatus]) -> list[dict[str, Any]]:
    """``cluster status -o json|yaml``: each endpoint asked, its Raft state or its error."""
    return [
        {
            "endpoint": m.endpoint,
            "status": raft_document(m.status) if m.status is not None else None,
            "error": m.error or None,
        }
        for m in members
    ]


def members_table(members: Sequence[MemberStatus]) -> Table:
    """``cluster status``: one row per endpoint asked."""
    count = len(members)
    table = Table(title=f"Raft group ({count} endpoint{'' if count == 1 else 's'})")
    for column in ("endpoint", "node", "role", "term", "leader", "commit", "last", "durable"):
        table.add_column(column, justify="left" if column in ("endpoint", "role") else "right")
    for m in members:
        s = m.status
        if s is None:
            table.add_row(m.endpoint, "-", f"[red]unreachable[/] {m.error}", *["-"] * 5)
            continue
        role = f"[bold green]{s.role}[/]" if s.role == "leader" else s.role
        table.add_row(
            m.endpoint,
            s.node_id,
            role,
            str(s.term),
            s.leader_id or "-",
            str(s.commit_offset),
            str(s.last_offset),
            str(s.durable_offset),
        )
    return table


def agreed_leader(members: Sequence[MemberStatus]) -> admin_pb2.RaftStatus | None:
    """The status of the member that leads in the highest term seen, when every reachable
    member names it as leader; None otherwise (no leader, split view, nothing reachable)."""
    seen = [m.status for m in members if m.status is not None]
    if not seen:
        return None
    top = max(s.term for s in seen)
    leaders = [s for s in seen if s.role == "leader" and s.term == top]
    if len(leaders) != 1:
        return None
    leader = leaders[0]
    if any(s.leader_id != leader.node_id for s in seen):
        return None
    return leader
