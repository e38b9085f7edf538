"""What ``gannet status`` and ``gannet topic describe`` add for a cluster of several broker
groups: the groups table (name, members, leader, age of the answering member's view of it,
topics, last poll error) from ``GetClusterView``, and a topic's queues in every group (each
group's ``DescribeTopic``, asked of its members in turn, leader first).

Called by :mod:`admin` and :mod:`messages`, which pass their own channel opener
(signed and TLS as the options say).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import grpc

from gannet.node.cli import output
from gannet.node.cli.output import Column
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

CALL_TIMEOUT_S = 5.0
GROUP_COLUMNS = (
    Column("broker_name", "group"),
    Column("members", "members (leader first)"),
    Column("leader", "leader"),
    Column("age_s", "view age s", numeric=True),
    Column("topics", "topics", numeric=True),
    Column("last_error", "last poll error"),
)


Opener = Callable[[str], AbstractContextManager[grpc.Channel]]


def cluster_view(channel: Opener, endpoint: str) -> admin_pb2.ClusterView | None:
    """The member's view of the cluster's groups; None when it cannot say (a broker without
    the RPC, or the call failed: the caller has already reached it for its main answer)."""
    with channel(endpoint) as opened:
        stub = admin_pb2_grpc.AdminStub(opened)  # type: ignore[no-untyped-call]
        try:
            reply: admin_pb2.ClusterView = stub.GetClusterView(
                admin_pb2.GetClusterViewRequest(), timeout=CALL_TIMEOUT_S
            )
        except grpc.RpcError:
            return None
    return reply


def group_rows(view: admin_pb2.ClusterView) -> list[dict[str, Any]]:
    return [
        {
            "broker_name": s.group.broker_name + (" (this)" if s.local else ""),
            "members": ", ".join(s.group.member_endpoints),
            "leader": s.group.leader_endpoint or "(none known)",
            "age_s": round(s.age_seconds, 1),
            "topics": s.topic_count,
            "last_error": s.last_error or "",
        }
        for s in view.groups
    ]


def groups_table(view: admin_pb2.ClusterView) -> Any:
    return output.table(
        f"broker groups: {len(view.groups)} (views refreshed every "
        f"{view.poll_interval_seconds:g} s)",
        GROUP_COLUMNS,
        group_rows(view),
    )


def describe_in_groups(
    channel: Opener, view: admin_pb2.ClusterView, name: str
) -> list[tuple[str, admin_pb2.DescribeTopicResponse | None, str]]:
    """``(group, DescribeTopic answer or None, why not)`` for every group but the local one."""
    found = []
    for state in view.groups:
        if state.local:
            continue
        group = state.group
        reply, why = None, "no member known"
        for endpoint in dict.fromkeys([group.leader_endpoint, *group.member_endpoints]):
            if not endpoint:
                continue
            with channel(endpoint) as opened:
                stub = admin_pb2_grpc.AdminStub(opened)  # type: ignore[no-untyped-call]
                try:
                    reply = stub.DescribeTopic(
                        admin_pb2.DescribeTopicRequest(name=name), timeout=CALL_TIMEOUT_S
                    )
                    break
                except grpc.RpcError as exc:
                    why = f"{endpoint}: {exc.code().name} {exc.details() or ''}".strip()
                    if exc.code() == grpc.StatusCode.NOT_FOUND:
                        break
        found.append((group.broker_name, reply, "" if reply is not None else why))
    return found
