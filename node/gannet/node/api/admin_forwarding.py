"""Admin writes sent to any member of a Raft group are served by its leader.

Only the leader writes the log, so only it can apply a topic, group, offset or membership
change. Refusing such a call on a follower made every client find the leader first; instead,
:class:`ForwardingAdminServicer` sends the write to the leader over the peer port with the
caller's deadline and metadata, the way the v2 writes are (:mod:`forwarding`: held while no
leader is known, routed again when the leader changes or refuses, never forwarded twice). The
leader serves it with the admin servicer behind this one (fan-out to other broker groups
included, :mod:`cluster_admin`) and its answer, or its refusal with the same gRPC status and
message, comes back unchanged.

Forwarded (:data:`FORWARDED`): ``CreateTopic``, ``UpdateTopic``, ``DeleteTopic``,
``CreateGroup``, ``UpdateGroup``, ``DeleteGroup``, ``ResetOffset`` (a dry run is a read and
stays here), ``SetReviveQueueCount`` (Pop, and so its revive queues, are served by the
leader), ``AddMember``, ``RemoveMember`` and ``TransferLeadership`` (the last one is not routed
again when the leader changes: that is what it does; its leader answers once it is done).

Kept on the member called, on purpose:

- ``Cleanup``: its policy and the files it deletes are this member's own (each member has its
  own disk and retention pass); sending it to the leader would clean the wrong disk;
- ``SetClusterSeeds``: each member polls the other broker groups itself, with its own seeds;
- every read (list, describe, status, query, pull): each member has the applied configuration.

Forwarding failures become gRPC statuses a client can act on (:func:`status_of`): no leader in
time → ``UNAVAILABLE`` (retry), forwarded but not answered in time → ``DEADLINE_EXCEEDED``
(it may or may not have taken effect), too many forwarded calls → ``RESOURCE_EXHAUSTED``.

Authorization is unchanged: the member the client called authenticates and authorizes the call
at its gate (:mod:`wire`) before anything is forwarded, with the client's own signature; the
leader takes forwarded requests only from members (:mod:`gannet.node.replication.peer_auth`).
Writes that fan out to other groups carry the client's signature headers there, as before.

Created by :mod:`gannet.node.broker.serving` around the cluster admin servicer.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.message import Message as ProtoMessage
from rocketmq.grpc_protocol import Code

from gannet.node.api.forwarding import ForwardedService, Forwarder, Refused
from gannet.node.protocol import statuses
from gannet.node.protocol.gen import admin_pb2
from gannet.node.protocol.statuses import ApiError

ADMIN_SERVICE = "gannet.admin.v1.Admin"
FORWARDED = frozenset(
    {
        "CreateTopic",
        "UpdateTopic",
        "DeleteTopic",
        "CreateGroup",
        "UpdateGroup",
        "DeleteGroup",
        "ResetOffset",
        "SetReviveQueueCount",
        "AddMember",
        "RemoveMember",
        "TransferLeadership",
    }
)
"""The admin writes only the leader serves: a follower forwards them."""
LOCAL_WRITES = frozenset({"Cleanup", "SetClusterSeeds"})
"""Admin writes of the member called itself (module docstring): never forwarded."""
CHANGES_LEADER = frozenset({"TransferLeadership"})
"""Forwarded calls that a leader change must not route again (they cause it)."""

_GRPC_CODES = {
    Code.HA_NOT_AVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Code.PROXY_TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    Code.TOO_MANY_REQUESTS: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def _types(method: str) -> tuple[type[ProtoMessage], type[ProtoMessage]]:
    """The request and response classes of an admin method (from the service descriptor)."""
    described = admin_pb2.DESCRIPTOR.services_by_name["Admin"].methods_by_name[method]
    request: type[ProtoMessage] = getattr(admin_pb2, described.input_type.name)
    response: type[ProtoMessage] = getattr(admin_pb2, described.output_type.name)
    return request, response


REQUESTS = {method: _types(method) for method in sorted(FORWARDED)}


def is_write(method: str, request: Any) -> bool:
    """Whether ``request`` of ``method`` must be served by the leader (pure)."""
    if method not in FORWARDED:
        return False
    return not (method == "ResetOffset" and request.dry_run)


def status_of(error: ApiError) -> grpc.StatusCode:
    """The gRPC status of a forwarding failure (a v2 code of :mod:`forwarding`)."""
    return _GRPC_CODES.get(error.code, grpc.StatusCode.UNAVAILABLE)


class ForwardingAdminServicer:
    """The Admin servicer of a replicated member: ``inner`` for every RPC, the writes
    (:func:`is_write`) served by the leader. With ``forwarder`` None (a group of one) it is
    ``inner`` itself."""

    def __init__(self, inner: Any, forwarder: Forwarder | None) -> None:
        self._inner = inner
        self._forwarder = forwarder
        if forwarder is not None:
            forwarder.register(ADMIN_SERVICE, admin_service(inner))

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        forwarder = self._forwarder
        if forwarder is None or name not in FORWARDED:
            return found
        response_type = REQUESTS[name][1]

        async def routed(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if not is_write(name, request):
                return await found(request, context)

            async def local() -> Any:
                return await found(request, context)

            try:
                return await forwarder.unary(
                    name,
                    request,
                    context,
                    local,
                    response_type,
                    service=ADMIN_SERVICE,
                    follows_leader=name not in CHANGES_LEADER,
                )
            except Refused as refused:
                await statuses.abort(context, refused.code, refused.details)
            except ApiError as error:
                await statuses.abort(context, status_of(error), error.message)

        return routed


def admin_service(servicer: Any) -> ForwardedService:
    """What the leader serves forwarded admin writes with: ``servicer`` (which must not
    forward again), refusals sent back as gRPC statuses."""
    return ForwardedService(servicer, REQUESTS, refusals_in_band=True)
