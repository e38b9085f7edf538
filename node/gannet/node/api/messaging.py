"""The ``apache.rocketmq.v2.MessagingService`` servicer (grpc.aio), producer side.

Served here: QueryRoute, Heartbeat, SendMessage (normal, FIFO, delayed, batches; answered once
the bytes are durable per the flush mode), QueryAssignment, Telemetry (settings replies),
NotifyClientTermination, GetOffset / QueryOffset / UpdateOffset, and transactional messages
(half messages, EndTransaction, orphan checks pushed on producers' Telemetry streams:
:mod:`transactions`; through the Raft log on a replicated group). Pop consumption
(ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue) is
delegated to a :class:`~plugs.PopHandlers` (the broker plugs in :mod:`receiving` by default), and
answered ``UNSUPPORTED`` with a message saying Pop is not served yet when there is none
(``UNSUPPORTED`` rather than ``NOT_IMPLEMENTED``: the Python client maps both to its Unsupported
error but logs the latter as an unrecognized code). Everything else answers ``UNSUPPORTED`` in
its ``status``.

On a Raft group, what only the leader may do (sends, Pop and its acks, invisibility changes,
DLQ forwarding, offset updates, EndTransaction) is served by any member: a follower forwards it
to the leader, or holds it while no leader is known (:mod:`forwarding`); everything else is
answered locally, except a route or assignment query for a topic or group the follower does not
know: that one is asked of the leader, which may have committed it already.

Names are checked and looked up by :class:`~gannet.node.api.resources.Resources` (unknown
topics are ``TOPIC_NOT_FOUND`` unless the broker auto-creates them); the offset RPCs live in
:mod:`offsets`.

Every unary reply carries a non-zero status (the Python client rejects a missing one); errors
are :class:`~gannet.node.protocol.statuses.ApiError` turned into the reply's status, and any other
exception is logged and answered ``INTERNAL_SERVER_ERROR`` — never a gRPC error, except on the
Telemetry stream, where bad settings give gRPC ``INVALID_ARGUMENT`` as the proxy does.

Created by :mod:`gannet.node.broker.serving` inside the server's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import (
    broker_groups,
    client_settings,
    cluster_admin,
    dedup,
    external_routes,
    forwarding,
    lite_topics,
    offsets,
    priorities,
    pulling,
    routes,
    sending,
    store_statuses,
    transactions,
)
from gannet.node.api.plugs import PopFactory, PopHandlers, ReceivedObserver
from gannet.node.api.resources import Resources
from gannet.node.domain.committing import NOTHING_TO_FLUSH, Appended, Committer, PersistenceTimeout
from gannet.node.domain.sending import Sender, SentObserver
from gannet.node.protocol import statuses
from gannet.node.protocol.headers import client_id_of
from gannet.node.protocol.statuses import ApiError
from gannet.node.replication.driver import ReplicationNode
from gannet.node.replication.errors import ReplicationError
from gannet.node.store import errors, steady_clock
from gannet.node.store import properties as props
from gannet.node.store.configs.topics import MessageType
from gannet.node.store.message_store import MessageStore
from gannet.node.transactions import records as tr
from gannet.node.transactions.service import TransactionLimits

log = logging.getLogger(__name__)

Response = TypeVar("Response")
UNKNOWN_HERE = frozenset({statuses.TOPIC_NOT_FOUND, statuses.CONSUMER_GROUP_NOT_FOUND})
"""Refusals a follower checks with its leader before answering them (``_here_or_leader``)."""
LEADER_CHECK_MAX_S = 2.0
"""How long a follower waits for its leader's answer about a topic or group it does not know;
past it (the leader cut off, an election), it answers what it knows."""
T = TypeVar("T")


def peer_host_of(context: grpc.aio.ServicerContext) -> str:
    """``127.0.0.1`` of ``ipv4:127.0.0.1:5555``; ``::1`` of ``ipv6:[::1]:5555``."""
    peer = str(context.peer() or "")
    _, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0]
    return host.strip("[]")


def _now_ms() -> int:
    return steady_clock.now_ms()


class MessagingServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    """One per broker; ``store`` is open and its services run."""

    def __init__(
        self,
        store: MessageStore,
        identity: routes.BrokerIdentity,
        *,
        pop: PopFactory | None = None,
        limits: sending.SendLimits = sending.DEFAULT_LIMITS,
        auto_create_topics: bool = False,
        auto_create_groups: bool = False,
        on_sent: SentObserver | None = None,
        on_received: ReceivedObserver | None = None,
        replication: ReplicationNode | None = None,
        dedup_window_s: float = dedup.WINDOW_S,
        dedup_entries_max: int = dedup.ENTRIES_MAX,
        tls_port: bool = False,
        transaction_limits: TransactionLimits | None = None,
        external_book: Callable[[], external_routes.AddressBook] | None = None,
    ) -> None:
        self.store = store
        self.external_book = external_book
        """The members' external addresses (:mod:`external_routes`); None: no client is outside."""
        self.tls_port = tls_port
        """The client port is TLS: routes publish one address (:func:`routes.member_endpoints`)."""
        self.replication = replication
        self.on_received = on_received
        self.resources = Resources(
            store,
            auto_create_topics=auto_create_topics,
            auto_create_groups=auto_create_groups,
            config_writes_here=(lambda: True) if replication is None else replication.is_leader,
        )
        self.identity = identity
        self.limits = limits
        self.clients = client_settings.ClientRegistry()
        self.selector = sending.QueueSelector()
        self.committer = Committer(store, replication)
        """The one rule for when a write may be answered (:mod:`gannet.node.domain.committing`)."""
        self.sender = Sender(store, replication, self.committer, on_sent)
        """Leader check, append and commit of every send (:mod:`gannet.node.domain.sending`)."""
        self.closing = asyncio.Event()
        self.forwarder = (
            forwarding.Forwarder(
                replication,
                # A hedged send reaches the leader twice: only when sends are deduplicated
                # (the members of a group run with the same settings).
                hedge_after_s=forwarding.HEDGE_AFTER_S if dedup_window_s > 0 else None,
            )
            if replication is not None
            else None
        )
        """Followers forward leader-only requests (:mod:`forwarding`); None: single node."""
        if self.forwarder is not None:
            self.forwarder.register(forwarding.V2_SERVICE, forwarding.v2_service(self))
        self.dedup = dedup.SendDeduplicator(
            store, window_s=dedup_window_s, entries_max=dedup_entries_max
        )
        """Retried sends answered with the original receipt (:mod:`dedup`)."""
        self.lite_subscriptions = lite_topics.LiteSubscriptions()
        """Lite topics each lite consumer subscribed (:mod:`lite_topics`)."""
        self.pop: PopHandlers | None = pop(self) if pop is not None else None
        self.groups: cluster_admin.BrokerGroups | None = None
        """The other broker groups of the cluster (set by the broker; :mod:`cluster_admin`)."""
        self.transactions: transactions.TransactionHandler | None = transactions.TransactionHandler(
            store,
            lambda name: self.resources.topic(name).topic_name,
            self.committer.commit,
            lambda: replication is None or replication.is_serving_leader(),
            transaction_limits,
        )

    # ------------------------------------------------------------------ helpers
    async def _answer(
        self,
        make: Callable[..., Response],
        work: Callable[[], Awaitable[Response]],
        what: str,
    ) -> Response:
        """Run ``work``; on failure answer ``make(status=...)`` instead."""
        try:
            return await work()
        except ApiError as exc:
            return make(status=exc.status())
        except errors.StoreError as exc:
            return make(status=store_statuses.from_store_error(exc).status())
        except Exception as exc:
            log.exception("%s failed", what)
            return make(status=ApiError(statuses.INTERNAL_SERVER_ERROR, f"{what}: {exc}").status())

    # ------------------------------------------------------------------ routes
    async def QueryRoute(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.QueryRouteResponse:
            queues = self._cluster_route(request.topic, request.endpoints, context)
            return service_pb2.QueryRouteResponse(status=statuses.ok(), message_queues=queues)

        return await self._here_or_leader(
            "QueryRoute", request, context, service_pb2.QueryRouteResponse, work
        )

    async def QueryAssignment(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.QueryAssignmentResponse:
            queues = self._cluster_route(request.topic, request.endpoints, context)
            self.resources.group(str(request.group.name))
            found = broker_groups.readable_assignments(queues)
            if not found:
                raise ApiError(
                    statuses.FORBIDDEN, f"topic {request.topic.name!r} has no readable queue"
                )
            return service_pb2.QueryAssignmentResponse(status=statuses.ok(), assignments=found)

        return await self._here_or_leader(
            "QueryAssignment", request, context, service_pb2.QueryAssignmentResponse, work
        )

    async def _here_or_leader(
        self,
        method: str,
        request: object,
        context: grpc.aio.ServicerContext,
        make: Callable[..., Response],
        work: Callable[[], Awaitable[Response]],
    ) -> Response:
        """Answer ``work`` here; a topic (or group) this follower does not know is asked of the
        leader (:mod:`forwarding`): it may be committed there and not yet applied here (a topic
        created on the leader and queried on a follower at once: the official Python client
        failed its first sends with "failed to fetch topic route", issue 34). Not when no leader
        is known or this request was itself forwarded, and not for longer than
        :data:`LEADER_CHECK_MAX_S`: then the local answer stands."""
        forwarder = self.forwarder

        async def routed() -> Response:
            try:
                return await work()
            except ApiError as exc:
                if forwarder is None or exc.code not in UNKNOWN_HERE:
                    raise
                if getattr(context, "forwarded", False) or not self._follows_a_leader():
                    raise
                unknown = exc
            asked = forwarder.unary(method, request, context, work, make)  # type: ignore[arg-type]
            try:
                return await asyncio.wait_for(asked, LEADER_CHECK_MAX_S)
            except (TimeoutError, ApiError):  # the leader did not answer: the local answer
                raise unknown from None

        return await self._answer(make, routed, method)

    def _follows_a_leader(self) -> bool:
        """This member knows a leader other than itself (a follower that may lag it)."""
        replication = self.replication
        if replication is None:
            return False
        leader = replication.leader()
        return leader is not None and leader.node_id != replication.config.node_id

    def _cluster_route(
        self,
        topic: definition_pb2.Resource,
        requested: definition_pb2.Endpoints,
        context: grpc.aio.ServicerContext,
    ) -> list[definition_pb2.MessageQueue]:
        """This group's queues of ``topic`` and, in a cluster of broker groups, every other
        group's (:mod:`cluster_admin`); a topic only other groups define: theirs. A client
        that dialed an external address gets external addresses (:mod:`external_routes`)."""
        book = self.external_book() if self.external_book is not None else None
        if book is None or not book.dialed_outside(requested):
            return self._internal_route(topic, requested, context)
        # A client outside: the route as for a client that named nothing, then translated.
        queues = self._internal_route(topic, definition_pb2.Endpoints(), context)
        return external_routes.translate_queues(queues, book)

    def _internal_route(
        self,
        topic: definition_pb2.Resource,
        requested: definition_pb2.Endpoints,
        context: grpc.aio.ServicerContext,
    ) -> list[definition_pb2.MessageQueue]:
        namespace = str(topic.resource_namespace)
        try:
            config = self.resources.topic(str(topic.name))
        except ApiError as exc:
            groups = self.groups
            remote = groups.remote_queues(str(topic.name), namespace) if groups else []
            if exc.code != statuses.TOPIC_NOT_FOUND or not remote:
                raise
            return routes.dialable(remote, context.invocation_metadata(), tls=self.tls_port)
        endpoints = self._route_endpoints(requested, context)
        queues = routes.message_queues(config, self.identity, endpoints, namespace)
        if self.groups is None:
            return queues
        merged = self.groups.route(queues, config.topic_name, namespace)
        return routes.dialable(merged, context.invocation_metadata(), tls=self.tls_port)

    # ------------------------------------------------------------------ clients
    async def Heartbeat(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.HeartbeatResponse:
            group = str(request.group.name)
            if group:
                sending.check_group_name(group)
            client_id = client_id_of(context)
            if client_id:
                self.clients.touch(client_id, int(request.client_type), group)
            return service_pb2.HeartbeatResponse(status=statuses.ok())

        return await self._answer(service_pb2.HeartbeatResponse, work, "Heartbeat")

    async def NotifyClientTermination(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        self.clients.forget(client_id_of(context))
        self.lite_subscriptions.forget(client_id_of(context))
        return service_pb2.NotifyClientTerminationResponse(status=statuses.ok())

    async def Telemetry(self, request_iterator, context):  # type: ignore[no-untyped-def]  # noqa: N802
        client_id = client_id_of(context)
        handler = self.transactions if client_id else None
        outbox = handler.open_stream(client_id) if handler is not None else None
        try:
            async for command in self._telemetry(request_iterator, context, client_id, outbox):
                yield command
        finally:
            if handler is not None and outbox is not None:
                handler.close_stream(client_id, outbox)

    async def _telemetry(
        self,
        request_iterator: AsyncIterator[service_pb2.TelemetryCommand],
        context: grpc.aio.ServicerContext,
        client_id: str,
        outbox: asyncio.Queue[transactions.Outgoing] | None,
    ) -> AsyncIterator[service_pb2.TelemetryCommand]:
        merged = transactions.with_outbox(request_iterator, outbox)
        async for command in self._until_closing(merged):
            if isinstance(command, transactions.Outgoing):
                yield command.command  # a transaction check for this producer
                continue
            if command.WhichOneof("command") != "settings":
                continue  # replies to server commands (transaction checks answer by RPC)
            try:
                reply = client_settings.reply_settings(
                    command.settings,
                    self.store.group_configs,
                    body_size_max_bytes=self.limits.body_size_max_bytes,
                )
            except ApiError as exc:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{statuses.code_name(exc.code)}: {exc.message}",
                )
                return
            if client_id:
                self.clients.record_settings(client_id, reply)
                if self.transactions is not None:
                    self.transactions.publishing(client_id, reply)
            yield service_pb2.TelemetryCommand(status=statuses.ok(), settings=reply)

    async def _until_closing(self, commands: AsyncIterator[T]) -> AsyncIterator[T]:
        """The stream's commands until the client ends it or the broker shuts down."""
        closing = asyncio.ensure_future(self.closing.wait())
        iterator = aiter(commands)
        try:
            while True:
                following = asyncio.ensure_future(anext(iterator, None))
                await asyncio.wait({following, closing}, return_when=asyncio.FIRST_COMPLETED)
                if not following.done():
                    following.cancel()
                    return
                command = following.result()
                if command is None:
                    return
                yield command
        finally:
            closing.cancel()

    def begin_shutdown(self) -> None:
        """End the long-lived streams so that the server's drain does not wait for them."""
        self.closing.set()
        if self.pop is not None:
            self.pop.begin_shutdown()
        if self.transactions is not None:
            self.transactions.begin_shutdown()

    # ------------------------------------------------------------------ sending
    async def SendMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.SendMessageResponse:
            metadata = context.invocation_metadata()
            queue_id = sending.requested_queue_id(metadata)
            group = sending.requested_producer_group(metadata)
            offsets = sending.wants_commit_offsets(metadata)
            return await self._send(request, peer_host_of(context), queue_id, group, offsets)

        return await self._leader_only(
            "SendMessage", request, context, service_pb2.SendMessageResponse, work
        )

    async def _leader_only(
        self,
        method: str,
        request: object,
        context: grpc.aio.ServicerContext,
        make: Callable[..., Response],
        work: Callable[[], Awaitable[Response]],
    ) -> Response:
        """Run ``work`` here, or at the leader when this node does not lead (:mod:`forwarding`);
        errors become the reply's status (:meth:`_answer`)."""
        forwarder = self.forwarder
        if forwarder is None:
            return await self._answer(make, work, method)

        async def routed() -> Response:
            return await forwarder.unary(method, request, context, work, make)  # type: ignore[arg-type]

        return await self._answer(make, routed, method)

    async def _send(
        self,
        request: service_pb2.SendMessageRequest,
        peer_host: str,
        queue_id: int | None = None,
        producer_group: str | None = None,
        commit_offsets: bool = False,
    ) -> service_pb2.SendMessageResponse:
        """``commit_offsets``: answer each message's commit-log offset as its transaction id
        (:data:`~gannet.node.api.sending.COMMIT_OFFSETS_HEADER`)."""
        self._check_leader()
        prepared = sending.prepare(
            request,
            self.resources.lookup_topic,
            peer_host=peer_host,
            now_ms=_now_ms(),
            limits=self.limits,
            queue_id=queue_id,
        )
        if prepared.transactional:
            if producer_group is not None:  # a remoting producer's: its check-back goes there
                for message in prepared.messages:
                    message.properties[props.PRODUCER_GROUP] = producer_group
            if self.transactions is not None:
                return await self.transactions.send_once(
                    prepared.topic.topic_name,
                    prepared.message_ids,
                    lambda: self._append(prepared),
                )
            return await self._append(prepared)
        return await self.dedup.send_once(
            prepared.topic.topic_name,
            list(prepared.message_ids),
            lambda: self._append(prepared, commit_offsets),
            born_ms=prepared.messages[0].born_timestamp_ms,
        )

    async def _append(
        self, prepared: sending.PreparedSend, commit_offsets: bool = False
    ) -> service_pb2.SendMessageResponse:
        """Append a prepared send, wait until it is durable (or committed), answer it."""
        queue_id = self.selector.select(prepared.topic.write_queue_nums, prepared.message_group)
        if prepared.queue_id is not None:
            queue_id = prepared.queue_id  # chosen by a remoting client (gannet.node.remoting)
        elif prepared.priority is not None:
            queue_id = priorities.queue_of(prepared.priority, prepared.topic.write_queue_nums)
        messages = list(prepared.messages)
        for message in messages:
            message.queue_id = queue_id
        if prepared.transactional:
            if self.transactions is None:
                raise _unsupported("transactional messages")
            messages = self.transactions.to_half(messages)
        # The leader is checked again there, with no await before the append: the check in
        # _send may be stale by now (fault seeds 107, 108; gannet.node.domain.sending).
        try:
            results = await self.sender.send(prepared.topic.topic_name, messages)
        except (ReplicationError, PersistenceTimeout) as exc:
            raise routes.commit_refusal(exc) from None
        transaction_ids = list(prepared.message_ids)
        if prepared.transactional and self.transactions is not None:
            transaction_ids = self.transactions.sent(
                prepared.topic.topic_name, prepared.message_ids, results
            )
        elif commit_offsets:
            transaction_ids = [tr.transaction_id_of(r.wrote_offset) for r in results]
        # One Status for the whole answer, each entry added in place: building entries apart
        # and passing them in copies every entry once more (PROFILE.md, issue 19).
        ok = statuses.ok()
        response = service_pb2.SendMessageResponse(status=ok)
        add = response.entries.add
        for message_id, transaction_id, result in zip(
            prepared.message_ids, transaction_ids, results, strict=True
        ):
            add(
                status=ok,
                message_id=message_id,
                transaction_id=transaction_id,
                offset=result.queue_offset,
            )
        return response

    # ------------------------------------------------------------------ replication
    def _route_endpoints(
        self, requested: definition_pb2.Endpoints, context: grpc.aio.ServicerContext
    ) -> definition_pb2.Endpoints:
        if self.replication is None:
            return routes.usable_endpoints(requested, self.identity)
        single = not routes.dials_address_lists(context.invocation_metadata())
        return routes.member_endpoints(
            self.replication, requested, tls=self.tls_port, single=single
        )

    def _check_leader(self) -> None:
        if self.replication is not None:
            try:
                self.replication.check_leader()
            except ReplicationError as exc:
                raise routes.replication_refusal(exc) from None

    def _leader_refusal(self) -> definition_pb2.Status | None:
        """Pop writes checkpoints, so only the leader serves it."""
        try:
            self._check_leader()
        except ApiError as exc:
            return exc.status()
        return None

    async def commit(self, appended: Appended) -> None:
        """:meth:`Committer.commit`, its domain errors as v2 statuses: the one mapping of the
        commit rule's errors in this protocol layer (:func:`routes.commit_refusal`)."""
        try:
            await self.committer.commit(appended)
        except (ReplicationError, PersistenceTimeout) as exc:
            raise routes.commit_refusal(exc) from None

    # ------------------------------------------------------------------ offsets
    async def GetOffset(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.GetOffsetResponse:
            return offsets.get_offset(self.resources, request)

        return await self._answer(service_pb2.GetOffsetResponse, work, "GetOffset")

    async def UpdateOffset(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.UpdateOffsetResponse:
            self._check_leader()  # offsets change through the log: only the leader writes
            try:
                reply = offsets.update_offset(self.resources, request)
            except ApiError as error:
                if error.code != statuses.ILLEGAL_OFFSET:
                    raise
                # On a Raft group dispatch follows the commit point: a message whose send was
                # just answered may not be in its consume queue yet. Judge the offset again
                # once everything committed before now is dispatched.
                await asyncio.to_thread(self.store.dispatch_caught_up)
                reply = offsets.update_offset(self.resources, request)
            await self.commit(NOTHING_TO_FLUSH)  # its offset.commit record (Raft group)
            return reply

        return await self._leader_only(
            "UpdateOffset", request, context, service_pb2.UpdateOffsetResponse, work
        )

    async def QueryOffset(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.QueryOffsetResponse:
            return offsets.query_offset(self.resources, request)

        return await self._answer(service_pb2.QueryOffsetResponse, work, "QueryOffset")

    # ------------------------------------------------------------------ Pop (delegated)
    async def ReceiveMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        forwarder = self.forwarder
        if forwarder is None:
            async for response in self._receive_here(request, context):
                yield response
            return
        try:
            async for response in forwarder.stream(
                "ReceiveMessage",
                request,
                context,
                lambda: self._receive_here(request, context),
                service_pb2.ReceiveMessageResponse,
            ):
                yield response
        except ApiError as exc:
            yield service_pb2.ReceiveMessageResponse(status=exc.status())

    async def _receive_here(
        self, request: service_pb2.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[service_pb2.ReceiveMessageResponse]:
        if (refused := self._leader_refusal()) is not None:
            yield service_pb2.ReceiveMessageResponse(status=refused)
            return
        if self.groups is not None and (
            wrong := self.groups.misdirected_queue(request.message_queue.broker.name)
        ):
            yield service_pb2.ReceiveMessageResponse(status=wrong.status())
            return
        if self.pop is not None:
            async for response in self.pop.ReceiveMessage(request, context):
                yield response
            return
        yield service_pb2.ReceiveMessageResponse(
            status=ApiError(statuses.UNSUPPORTED, statuses.POP_NOT_SERVED).status()
        )

    async def _pop_write(
        self,
        method: str,
        request: object,
        context: grpc.aio.ServicerContext,
        make: Callable[..., Response],
    ) -> Response:
        """Ack, invisibility change, DLQ: Pop writes checkpoints, so only the leader serves
        them; followers forward them."""

        async def work() -> Response:
            if (refused := self._leader_refusal()) is not None:
                return make(status=refused)
            if self.groups is not None and (
                wrong := self.groups.misdirected_handles(_handles(request))
            ):
                return make(status=wrong.status())
            if self.pop is None:
                return _not_served(make)
            handler: Callable[..., Awaitable[Response]] = getattr(self.pop, method)
            return await handler(request, context)

        return await self._leader_only(method, request, context, make, work)

    async def AckMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return await self._pop_write("AckMessage", request, context, service_pb2.AckMessageResponse)

    async def ChangeInvisibleDuration(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return await self._pop_write(
            "ChangeInvisibleDuration", request, context, service_pb2.ChangeInvisibleDurationResponse
        )

    async def ForwardMessageToDeadLetterQueue(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return await self._pop_write(
            "ForwardMessageToDeadLetterQueue",
            request,
            context,
            service_pb2.ForwardMessageToDeadLetterQueueResponse,
        )

    # ------------------------------------------------------------------ not served
    async def PullMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        observer = self.on_received
        async for response in pulling.pull_message(self, request, context):
            if observer is not None and response.HasField("message"):
                topic = str(request.message_queue.topic.name)
                observer(topic, str(request.group.name), [response.message])
            yield response

    async def EndTransaction(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.EndTransactionResponse:
            self._check_leader()  # resolutions go through the log: only the leader writes
            if self.transactions is None:
                raise _unsupported("EndTransaction")
            await self.transactions.end(request)
            return service_pb2.EndTransactionResponse(status=statuses.ok())

        return await self._leader_only(
            "EndTransaction", request, context, service_pb2.EndTransactionResponse, work
        )

    async def RecallMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return service_pb2.RecallMessageResponse(status=_unsupported("RecallMessage").status())

    async def SyncLiteSubscription(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        client_id = client_id_of(context)

        async def work() -> service_pb2.SyncLiteSubscriptionResponse:
            self._check_leader()  # Pop runs on the leader: it keeps the subscriptions
            topic = self.resources.topic(str(request.topic.name))
            if MessageType.LITE not in topic.accepted_message_types:
                raise ApiError(
                    statuses.BAD_REQUEST,
                    f"topic {topic.topic_name!r} is not a LITE topic; create it with type lite",
                )
            group = self.resources.group(str(request.group.name))
            if not client_id:
                raise ApiError(statuses.CLIENT_ID_REQUIRED, "x-mq-client-id header is missing")
            self.lite_subscriptions.sync(
                group,
                topic.topic_name,
                client_id,
                int(request.action),
                lite_topics.request_names(request),
            )
            return service_pb2.SyncLiteSubscriptionResponse(status=statuses.ok())

        return await self._leader_only(
            "SyncLiteSubscription",
            request,
            context,
            service_pb2.SyncLiteSubscriptionResponse,
            work,
        )


def _unsupported(what: str) -> ApiError:
    return ApiError(statuses.UNSUPPORTED, f"{what} is not supported by this broker")


def _not_served(make: Callable[..., Response]) -> Response:
    return make(status=ApiError(statuses.UNSUPPORTED, statuses.POP_NOT_SERVED).status())


def _handles(request: object) -> Iterator[str]:
    """The receipt handles of an Ack, ChangeInvisibleDuration or DLQ request (lazily: with
    one broker group nobody reads them)."""
    entries = getattr(request, "entries", None)
    if entries is not None:
        for e in entries:
            yield str(e.receipt_handle)
        return
    yield str(getattr(request, "receipt_handle", ""))
