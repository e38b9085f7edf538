"""Admin RPCs of the Raft layer: ``GetRaftStatus``, ``TransferLeadership`` and membership
(``ListMembers``, ``AddMember``, ``RemoveMember``; the rules are in
:mod:`gannet.node.replication.membership_changes`).

:class:`RaftAdmin` answers them for :class:`~gannet.node.api.admin.AdminServicer` (which only
delegates) and builds the ``RaftStatus`` message the metrics collector exports. A broker
without replication answers as a group of one: role ``leader``, term 0, commit offset = the
store's commit offset, no peers; a transfer there is ``FAILED_PRECONDITION``.

Admin writes (topics, groups, offset resets) of a replicated broker go through
:meth:`RaftAdmin.before_write` / :meth:`RaftAdmin.after_write`: the leader answers once the
change's record is committed and applied (:mod:`gannet.node.replication.config_log`),
``UNAVAILABLE`` when that is not known (leadership lost, time-out: the change may or may not
survive). Membership changes and leadership transfers are done by the leader only. A member
that does not lead raises :class:`~gannet.node.api.forwarding.NotLeading` before doing
anything: these RPCs reach this class through :mod:`admin_forwarding`, whose forwarder then
sends the call to the leader (or holds it while no leader is known), so no client has to find
the leader. Created by :mod:`gannet.node.broker.serving`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Coroutine
from typing import Any

import grpc

from gannet.node.api.forwarding import NotLeading
from gannet.node.api.routes import BrokerIdentity
from gannet.node.protocol.gen import admin_pb2
from gannet.node.protocol.statuses import abort as _abort
from gannet.node.replication import membership_changes as changes
from gannet.node.replication.config import ReplicationConfigError, parse_peer
from gannet.node.replication.driver import ReplicationNode
from gannet.node.replication.errors import (
    CommitUncertain,
    NotLeaderError,
    ReplicationBusy,
    ReplicationError,
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
        """Raise :class:`NotLeading` unless this node leads and serves (no-op for a group of
        one): nothing is written, and the forwarder routes the write to the leader."""
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
            raise NotLeading(str(exc)) from None

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
            if target not in node.member_table.members:
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
            raise NotLeading(str(exc)) from None
        except ReplicationBusy as exc:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
        except ReplicationError as exc:
            await _abort(context, grpc.StatusCode.INTERNAL, str(exc))
        term = node.core.term if node.core is not None else 0
        return admin_pb2.TransferLeadershipResponse(leader_id=str(leader), term=term)

    # ------------------------------------------------------------------ membership
    async def list_members(
        self, request: admin_pb2.ListMembersRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListMembersResponse:
        node = self.replication
        if node is None or node.core is None:
            endpoint = f"{self.identity.host}:{self.identity.port}"
            me = admin_pb2.Member(
                node_id=SINGLE_NODE_ID,
                client_endpoint=endpoint,
                voter=True,
                match_offset=self.store.statistics().max_offset,
                lag_bytes=0,
                reachable=True,
                leader=True,
            )
            return admin_pb2.ListMembersResponse(members=[me], leader_id=SINGLE_NODE_ID)
        seen = changes.view(node)
        return admin_pb2.ListMembersResponse(
            members=_members_pb(seen),
            config_offset=seen.config_offset,
            change_in_flight=seen.change_in_flight,
            leader_id=str(seen.leader_id) if seen.leader_id else "",
        )

    async def add_member(
        self, request: admin_pb2.AddMemberRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.MemberChangeResponse:
        node = await self._membership_leader(context)
        text = f"{request.node_id}={request.peer_endpoint}/{_port(request.client_endpoint)}"
        if not request.node_id.isdigit() or int(request.node_id) <= 0:
            await _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"node_id {request.node_id!r} is not a node id (a positive number)",
            )
        try:
            spec = parse_peer(text)
        except ReplicationConfigError:
            await _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"member {request.node_id}={request.peer_endpoint}/{request.client_endpoint} "
                "is not N=HOST:PEERPORT/CLIENTPORT (peer_endpoint and client_endpoint are "
                "host:port on the same host)",
            )
        if _host(request.client_endpoint) != _host(request.peer_endpoint):
            await _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"peer_endpoint {request.peer_endpoint} and client_endpoint "
                f"{request.client_endpoint} name different hosts; a member has one host",
            )
        if request.timeout_ms < 0:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "timeout_ms must be >= 0")
        seen = await self._membership_call(
            context,
            changes.add(
                node,
                spec,
                learner_only=request.learner_only,
                timeout_s=request.timeout_ms / 1000,
            ),
        )
        return admin_pb2.MemberChangeResponse(
            members=_members_pb(seen), config_offset=seen.config_offset
        )

    async def remove_member(
        self, request: admin_pb2.RemoveMemberRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.MemberChangeResponse:
        node = await self._membership_leader(context)
        if not request.node_id.isdigit():
            await _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"node_id {request.node_id!r} is not a node id (a number)",
            )
        if request.timeout_ms < 0:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "timeout_ms must be >= 0")
        seen = await self._membership_call(
            context,
            changes.remove(node, int(request.node_id), timeout_s=request.timeout_ms / 1000),
        )
        return admin_pb2.MemberChangeResponse(
            members=_members_pb(seen), config_offset=seen.config_offset
        )

    async def _membership_leader(self, context: grpc.aio.ServicerContext) -> ReplicationNode:
        """The replication node if it leads and serves; raises :class:`NotLeading` otherwise
        (the forwarder sends the call to the leader)."""
        node = self.replication
        if node is None:
            await _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                "this broker is not replicated (a group of one): start it with --node-id and "
                "--peers to change members",
            )
        if node.is_leader() and not node.is_serving_leader():
            with contextlib.suppress(TimeoutError):
                await node.wait_until(node.is_serving_leader, node.config.commit_timeout_s)
        if not node.is_serving_leader():
            leader = node.leader()
            where = "no leader is known" if leader is None else f"node {leader.node_id} leads"
            raise NotLeading(f"node {node.config.node_id} does not lead ({where})")
        return node

    async def _membership_call(
        self, context: grpc.aio.ServicerContext, call: Coroutine[Any, Any, changes.MembersView]
    ) -> changes.MembersView:
        try:
            return await call
        except changes.MembershipInvalid as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except changes.MembershipRefused as exc:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except NotLeaderError as exc:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"not the leader: {exc}")
        except CommitUncertain as exc:
            await _abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"{exc}; run `gannet cluster member list` to see whether the change took effect",
            )
        except ReplicationError as exc:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))


def _members_pb(seen: changes.MembersView) -> list[admin_pb2.Member]:
    return [
        admin_pb2.Member(
            node_id=str(m.spec.node_id),
            peer_endpoint=m.spec.peer_endpoint,
            client_endpoint=m.spec.client_endpoint,
            voter=m.voter,
            match_offset=m.match_offset,
            lag_bytes=m.lag_bytes,
            reachable=m.reachable,
            leader=m.leader,
        )
        for m in seen.members
    ]


def _host(endpoint: str) -> str:
    return endpoint.rpartition(":")[0].strip("[]")


def _port(endpoint: str) -> str:
    return endpoint.rpartition(":")[2]
