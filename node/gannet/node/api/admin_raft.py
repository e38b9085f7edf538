"""Admin RPCs of the Raft layer: ``GetRaftStatus`` and ``TransferLeadership``.

:class:`RaftAdmin` answers them for :class:`~gannet.node.api.admin.AdminServicer` (which only
delegates) and builds the ``RaftStatus`` message the metrics collector exports. A broker
without replication answers as a group of one: role ``leader``, term 0, commit offset = the
store's commit offset, no peers; a transfer there is ``FAILED_PRECONDITION``.

Admin writes (topics, groups, offset resets) of a replicated broker go through
:meth:`RaftAdmin.before_write` / :meth:`RaftAdmin.after_write`: a follower refuses them with
``FAILED_PRECONDITION`` naming the leader (they are not forwarded: the CLI and the operator
retry against the named endpoint); the leader answers once the change's record is committed
and applied (:mod:`gannet.node.replication.config_log`), ``UNAVAILABLE`` when that is not
known (leadership lost, time-out: the change may or may not survive).
Created by :mod:`gannet.node.broker.serving`.
"""

from __future__ import annotations

import contextlib
from typing import NoReturn

import grpc

from gannet.node.api import statuses
from gannet.node.api.gen import admin_pb2
from gannet.node.api.routes import BrokerIdentity
from gannet.node.replication.driver import (
    CommitUncertain,
    NotLeaderError,
    ReplicationBusy,
    ReplicationError,
    ReplicationNode,
)
from gannet.node.store.message_store import MessageStore

SINGLE_NODE_ID = "1"


class RaftAdmin:
    """Raft status and leadership transfer of one broker (replicated or not)."""

    def __init__(
        self, store: MessageStore, identity: BrokerIdentity, replication: ReplicationNode | None
    ) -> None:
        self.store = store
        self.identity = identity
        self.replication = replication

    def status(self) -> admin_pb2.RaftStatus:
        node = self.replication
        if node is None or node.core is None:
            stats = self.store.statistics()
            return admin_pb2.RaftStatus(
                node_id=SINGLE_NODE_ID,
                role="leader",
                term=0,
                leader_id=SINGLE_NODE_ID,
                leader_client_endpoint=f"{self.identity.host}:{self.identity.port}",
                commit_offset=stats.commit_offset,
                last_offset=stats.max_offset,
                durable_offset=stats.flushed_offset,
            )
        s = node.status()
        return admin_pb2.RaftStatus(
            node_id=str(s.node_id),
            role=s.role,
            term=s.term,
            leader_id=str(s.leader_id) if s.leader_id else "",
            leader_client_endpoint=s.leader_client_endpoint,
            commit_offset=s.commit_offset,
            last_offset=s.last_offset,
            durable_offset=s.durable_offset,
            peers=[
                admin_pb2.RaftPeer(
                    node_id=str(p.node_id),
                    peer_endpoint=p.peer_endpoint,
                    client_endpoint=p.client_endpoint,
                    match_offset=p.match_offset,
                    lag_bytes=p.lag_bytes,
                    reachable=p.reachable,
                )
                for p in s.peers
            ],
            elections_total=s.elections_total,
            leader_changes_total=s.leader_changes_total,
        )

    async def before_write(self, context: grpc.aio.ServicerContext) -> None:
        """Refuse an admin write unless this node leads (no-op for a group of one)."""
        node = self.replication
        if node is None:
            return
        if node.is_leader() and not node.is_serving_leader():
            # just elected: it serves once the previous terms are applied (milliseconds)
            with contextlib.suppress(TimeoutError):
                await node.wait_until(node.is_serving_leader, node.config.commit_timeout_s)
        try:
            node.check_leader()
        except ReplicationError as exc:
            await _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{exc}; send admin writes to the leader",
            )

    async def after_write(self, context: grpc.aio.ServicerContext) -> None:
        """Answer an admin write only once its config records are committed and applied."""
        node = self.replication
        if node is None:
            return
        try:
            await node.commit_pending()
        except NotLeaderError as exc:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, f"{exc}; the change may be lost")
        except (CommitUncertain, ReplicationError) as exc:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))

    async def get_raft_status(
        self, request: admin_pb2.GetRaftStatusRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.RaftStatus:
        return self.status()

    async def transfer_leadership(
        self, request: admin_pb2.TransferLeadershipRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.TransferLeadershipResponse:
        node = self.replication
        if node is None:
            await _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                "this broker is not replicated (a group of one): there is no one to hand over to",
            )
        target: int | None = None
        if request.target_node_id:
            if not request.target_node_id.isdigit():
                await _abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"target_node_id {request.target_node_id!r} is not a node id (a number)",
                )
            target = int(request.target_node_id)
            if target not in {p.node_id for p in node.config.peers}:
                await _abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"node {target} is not a member of this group",
                )
        if request.timeout_ms < 0:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "timeout_ms must be >= 0")
        timeout_s = request.timeout_ms / 1000 if request.timeout_ms else None
        try:
            leader = await node.transfer_leadership(target, timeout_s)
        except NotLeaderError as exc:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except ReplicationBusy as exc:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
        except ReplicationError as exc:
            await _abort(context, grpc.StatusCode.INTERNAL, str(exc))
        term = node.core.term if node.core is not None else 0
        return admin_pb2.TransferLeadershipResponse(leader_id=str(leader), term=term)

    async def list_members(
        self, request: admin_pb2.ListMembersRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListMembersResponse:
        await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "ListMembers is not implemented yet")

    async def add_member(
        self, request: admin_pb2.AddMemberRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.MemberChangeResponse:
        await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "AddMember is not implemented yet")

    async def remove_member(
        self, request: admin_pb2.RemoveMemberRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.MemberChangeResponse:
        await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "RemoveMember is not implemented yet")


async def _abort(
    context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str
) -> NoReturn:
    await context.abort(code, statuses.bounded(message))
    raise AssertionError("context.abort returned")
