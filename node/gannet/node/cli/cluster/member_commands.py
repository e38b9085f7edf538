"""``gannet cluster member list|add|remove``: change a Raft group's members through its log.

Registered on ``gannet cluster`` by :mod:`commands`; the broker side is
:mod:`membership_changes`. Each command asks ``--endpoint`` (any member; default
``GANNET_ENDPOINT`` or 127.0.0.1:8081): a follower forwards ``add`` and ``remove`` to the
leader, and ``list`` reads the leader's view of match and lag. A broker from before admin
forwarding answers a change with the leader's client endpoint instead; the command then asks
it there (once). ``list`` prints one row per member (id, peer and client address, voter or
learner, the leader's match offset and lag in bytes, reachable), ``-o json|yaml`` for
scripts. ``add N=HOST:PEERPORT/CLIENTPORT`` adds N as a
learner, waits until it caught up and promotes it (``--learner-only`` stops after the first
step); the new broker runs with ``gannet broker run --node-id N --join``. ``remove N`` removes
N (the leader too: it hands over once its removal committed).

Exit codes scripts can rely on: 0 done (also when nothing had to change: both are idempotent);
2 wrong usage or an argument the broker calls invalid; 4 no broker or no leader reachable, or
the outcome is unknown (list the members to see it); 5 refused now (another change in flight,
a member lagging, too few voters reachable) — the message says why and what to do.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click
import grpc
from rich.markup import escape
from rich.table import Table

from gannet.node.cli import calls, exits, options, output
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.replication.config import ReplicationConfigError, parse_peer

LIST_TIMEOUT_S = 10.0
CHANGE_GRACE_S = 15.0
"""Added to the broker-side timeout for the call's own deadline."""
LEADER_PREFIX = "not the leader; the leader is node "

Call = Callable[[admin_pb2_grpc.AdminStub], Any]


def leader_named(details: str) -> str | None:
    """The leader's client endpoint in a follower's refusal (None: not such a refusal)."""
    if not details.startswith(LEADER_PREFIX):
        return None
    _, _, endpoint = details.partition(" at ")
    return endpoint.strip() or None


def call_leader(endpoint: str, call: Call) -> Any:
    """Run ``call`` on ``endpoint``, following a follower's pointer to the leader once."""
    for attempt in range(2):
        with calls.channel(endpoint) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            try:
                return call(stub)
            except grpc.RpcError as exc:
                code, details = exc.code(), exc.details() or ""
                leader = leader_named(details)
                if code == grpc.StatusCode.FAILED_PRECONDITION and leader and attempt == 0:
                    output.err_console.print(f"asking the leader at {escape(leader)}")
                    endpoint = leader
                    continue
                _failed(endpoint, exc)
    raise AssertionError("unreachable")  # pragma: no cover


def _failed(endpoint: str, exc: grpc.RpcError) -> None:
    code, details = exc.code(), escape(exc.details() or "")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        exits.fail(f"[red]invalid[/]: {details}", exits.EXIT_USAGE)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        exits.fail(f"[red]refused[/]: {details}", exits.EXIT_REFUSED)
    if code == grpc.StatusCode.UNAVAILABLE and details and "failed to connect" not in details:
        exits.fail(f"[red]unavailable[/]: {details}", exits.EXIT_UNREACHABLE)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        exits.fail(
            f"[red]no answer from {endpoint} in time[/]: the change may still complete; "
            "run `gannet cluster member list` to see",
            exits.EXIT_UNREACHABLE,
        )
    calls.rpc_failed(endpoint, exc)


def members_document(reply: Any) -> dict[str, Any]:
    """``ListMembersResponse`` or ``MemberChangeResponse`` as plain data (``-o json|yaml``)."""
    head: dict[str, Any] = {}
    if isinstance(reply, admin_pb2.ListMembersResponse):
        head = {"leader_id": reply.leader_id, "change_in_flight": reply.change_in_flight}
    return {
        **head,
        "config_offset": reply.config_offset,
        "members": [
            {
                "node_id": m.node_id,
                "peer_endpoint": m.peer_endpoint,
                "client_endpoint": m.client_endpoint,
                "role": "voter" if m.voter else "learner",
                "leader": m.leader,
                "match_offset": m.match_offset,
                "lag_bytes": m.lag_bytes,
                "reachable": m.reachable,
            }
            for m in reply.members
        ],
    }


def members_table(reply: Any) -> Table:
    table = Table(title=f"configuration at offset {reply.config_offset}")
    for name in ("id", "peer", "client", "role", "match offset", "lag bytes", "reachable"):
        table.add_column(name)
    for m in reply.members:
        role = ("voter" if m.voter else "learner") + (" (leader)" if m.leader else "")
        table.add_row(
            m.node_id,
            m.peer_endpoint or "-",
            m.client_endpoint,
            role,
            f"{m.match_offset:,}" if m.match_offset >= 0 else "?",
            f"{m.lag_bytes:,}" if m.lag_bytes >= 0 else "?",
            "yes" if m.reachable else ("?" if m.match_offset < 0 else "no"),
        )
    return table


@click.group("member")
def member() -> None:
    """List, add and remove the members of a replicated group (through its Raft log)."""


@member.command("list")
@output.output_option
@options.endpoint_option
def member_list(endpoint: str) -> None:
    """Every member: addresses, voter or learner, and the leader's match, lag, reachability."""

    def ask(stub: admin_pb2_grpc.AdminStub) -> Any:
        return stub.ListMembers(admin_pb2.ListMembersRequest(), timeout=LIST_TIMEOUT_S)

    reply = call_leader(endpoint, ask)
    leader = next((m for m in reply.members if m.leader), None)
    if leader is not None and leader.client_endpoint != endpoint:
        # a follower does not know match, lag and reachability: the leader does
        reply = call_leader(leader.client_endpoint, ask)
    renderables: list[Any] = [members_table(reply)]
    if reply.change_in_flight:
        renderables.append("[yellow]a membership change is in flight[/]")
    output.emit(members_document(reply), *renderables)


@member.command("add")
@click.argument("spec", metavar="N=HOST:PEERPORT/CLIENTPORT")
@click.option("--learner-only", is_flag=True, help="Add as a learner and return (no promotion).")
@click.option(
    "--timeout-s",
    type=click.IntRange(1, 3600),
    default=60,
    show_default=True,
    help="How long the leader waits for the new member to catch up before refusing.",
)
@output.output_option
@options.endpoint_option
def member_add(spec: str, learner_only: bool, timeout_s: int, endpoint: str) -> None:
    """Add member N (started with `gannet broker run --node-id N --join`): as a learner, then,
    once it caught up, as a voter."""
    try:
        peer = parse_peer(spec)
    except ReplicationConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="N=HOST:PEERPORT/CLIENTPORT") from None
    request = admin_pb2.AddMemberRequest(
        node_id=str(peer.node_id),
        peer_endpoint=peer.peer_endpoint,
        client_endpoint=peer.client_endpoint,
        learner_only=learner_only,
        timeout_ms=timeout_s * 1000,
    )
    reply = call_leader(
        endpoint,
        lambda stub: stub.AddMember(request, timeout=timeout_s + CHANGE_GRACE_S),
    )
    _print_change(reply, f"node {peer.node_id} is a {'learner' if learner_only else 'member'}")


@member.command("remove")
@click.argument("node_id", type=click.IntRange(1))
@click.option("--timeout-s", type=click.IntRange(1, 3600), default=30, show_default=True)
@output.output_option
@options.endpoint_option
def member_remove(node_id: int, timeout_s: int, endpoint: str) -> None:
    """Remove member N (refused when too few voters would remain reachable)."""
    request = admin_pb2.RemoveMemberRequest(node_id=str(node_id), timeout_ms=timeout_s * 1000)
    reply = call_leader(
        endpoint,
        lambda stub: stub.RemoveMember(request, timeout=timeout_s + CHANGE_GRACE_S),
    )
    _print_change(reply, f"node {node_id} is not a member")


def _print_change(reply: Any, done: str) -> None:
    output.emit(members_document(reply), members_table(reply), done)
    sys.stdout.flush()
