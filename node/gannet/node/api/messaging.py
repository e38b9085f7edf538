"""The ``apache.rocketmq.v2.MessagingService`` servicer (grpc.aio), producer side.

Served here: QueryRoute, Heartbeat, SendMessage (normal, FIFO, delayed, batches; answered once
the bytes are durable per the flush mode), QueryAssignment, Telemetry (settings replies),
NotifyClientTermination, GetOffset / QueryOffset / UpdateOffset. Pop consumption
(ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue) is
delegated to a :class:`PopHandlers` when one is given, and answered ``UNSUPPORTED`` with a
message saying Pop is not served yet otherwise (``UNSUPPORTED`` rather than
``NOT_IMPLEMENTED``: the Python client maps both to its Unsupported error but logs the latter as
an unrecognized code). Everything else answers ``UNSUPPORTED`` in its ``status``.

Unknown topics are ``TOPIC_NOT_FOUND`` unless the broker runs with ``auto_create_topics``; then
QueryRoute or SendMessage creates them as MIXED topics (every message type) of
:data:`AUTO_CREATED_QUEUE_NUMS` queues, since a route query cannot tell which type a producer
will send.

Every unary reply carries a non-zero status (the Python client rejects a missing one); errors
are :class:`~gannet.node.api.statuses.ApiError` turned into the reply's status, and any other
exception is logged and answered ``INTERNAL_SERVER_ERROR`` — never a gRPC error, except on the
Telemetry stream, where bad settings give gRPC ``INVALID_ARGUMENT`` as the proxy does.

Created by :mod:`gannet.node.broker.serving` inside the server's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import client_settings, routes, sending, statuses
from gannet.node.api.statuses import ApiError
from gannet.node.store import errors, querying, validation
from gannet.node.store.message_store import MessageStore
from gannet.node.store.topic_configs import MessageType, TopicConfig

log = logging.getLogger(__name__)

CLIENT_ID_HEADER = "x-mq-client-id"
AUTO_CREATED_QUEUE_NUMS = 8
Response = TypeVar("Response")
T = TypeVar("T")


class PopHandlers(Protocol):
    """What the Pop consumption layer plugs in; same shapes as the servicer methods."""

    def ReceiveMessage(  # noqa: N802 — gRPC method names
        self, request: service_pb2.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[service_pb2.ReceiveMessageResponse]: ...

    async def AckMessage(  # noqa: N802
        self, request: service_pb2.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.AckMessageResponse: ...

    async def ChangeInvisibleDuration(  # noqa: N802
        self,
        request: service_pb2.ChangeInvisibleDurationRequest,
        context: grpc.aio.ServicerContext,
    ) -> service_pb2.ChangeInvisibleDurationResponse: ...

    async def ForwardMessageToDeadLetterQueue(  # noqa: N802
        self,
        request: service_pb2.ForwardMessageToDeadLetterQueueRequest,
        context: grpc.aio.ServicerContext,
    ) -> service_pb2.ForwardMessageToDeadLetterQueueResponse: ...


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_HEADER:
            return str(value)
    return ""


def peer_host_of(context: grpc.aio.ServicerContext) -> str:
    """``127.0.0.1`` of ``ipv4:127.0.0.1:5555``; ``::1`` of ``ipv6:[::1]:5555``."""
    peer = str(context.peer() or "")
    _, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0]
    return host.strip("[]")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessagingServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    """One per broker; ``store`` is open and its services run."""

    def __init__(
        self,
        store: MessageStore,
        identity: routes.BrokerIdentity,
        *,
        pop: PopHandlers | None = None,
        limits: sending.SendLimits = sending.DEFAULT_LIMITS,
        auto_create_topics: bool = False,
    ) -> None:
        self.store = store
        self.auto_create_topics = auto_create_topics
        self.identity = identity
        self.pop = pop
        self.limits = limits
        self.clients = client_settings.ClientRegistry()
        self.selector = sending.QueueSelector()
        self._waiters = store.durable_waiters(asyncio.get_running_loop())
        self._flush_timeout_s = store.config.sync_flush_timeout_ms / 1000
        self._closing = asyncio.Event()

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
            return make(status=statuses.from_store_error(exc).status())
        except Exception as exc:
            log.exception("%s failed", what)
            return make(status=ApiError(statuses.INTERNAL_SERVER_ERROR, f"{what}: {exc}").status())

    def _lookup_topic(self, name: str) -> TopicConfig | None:
        """The topic's config; created as MIXED when auto-creation is on (name checked first)."""
        config = self.store.topic_configs.get(name)
        if config is None and self.auto_create_topics:
            config = TopicConfig(
                name,
                read_queue_nums=AUTO_CREATED_QUEUE_NUMS,
                write_queue_nums=AUTO_CREATED_QUEUE_NUMS,
            ).with_message_type(MessageType.MIXED)
            self.store.topic_configs.put(config)
            log.info("auto-created topic %s", name)
        return config

    def _topic(self, name: str) -> TopicConfig:
        sending.check_topic_name(name)
        config = self._lookup_topic(name)
        if config is None:
            raise ApiError(statuses.TOPIC_NOT_FOUND, sending.topic_not_found_message(name))
        return config

    def _group(self, name: str) -> None:
        try:
            validation.validate_group(name, allow_system=False)
        except errors.MessageIllegal as exc:
            raise ApiError(statuses.ILLEGAL_CONSUMER_GROUP, str(exc)) from None
        if name not in self.store.group_configs:
            raise ApiError(
                statuses.CONSUMER_GROUP_NOT_FOUND,
                f"consumer group {name!r} does not exist; create it with "
                f"`gannet group create {name}`",
            )

    def _queue(self, queue: definition_pb2.MessageQueue) -> tuple[TopicConfig, int]:
        config = self._topic(str(queue.topic.name))
        queue_count = max(config.read_queue_nums, config.write_queue_nums)
        if not 0 <= queue.id < queue_count:
            raise ApiError(
                statuses.BAD_REQUEST,
                f"message_queue.id {queue.id} is not a queue of topic {config.topic_name!r} "
                f"(0..{queue_count - 1})",
            )
        return config, int(queue.id)

    # ------------------------------------------------------------------ routes
    async def QueryRoute(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.QueryRouteResponse:
            config = self._topic(str(request.topic.name))
            endpoints = routes.usable_endpoints(request.endpoints, self.identity)
            queues = routes.message_queues(
                config, self.identity, endpoints, str(request.topic.resource_namespace)
            )
            return service_pb2.QueryRouteResponse(status=statuses.ok(), message_queues=queues)

        return await self._answer(service_pb2.QueryRouteResponse, work, "QueryRoute")

    async def QueryAssignment(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.QueryAssignmentResponse:
            config = self._topic(str(request.topic.name))
            self._group(str(request.group.name))
            endpoints = routes.usable_endpoints(request.endpoints, self.identity)
            found = routes.assignments(
                config, self.identity, endpoints, str(request.topic.resource_namespace)
            )
            if not found:
                raise ApiError(
                    statuses.FORBIDDEN, f"topic {config.topic_name!r} has no readable queue"
                )
            return service_pb2.QueryAssignmentResponse(status=statuses.ok(), assignments=found)

        return await self._answer(service_pb2.QueryAssignmentResponse, work, "QueryAssignment")

    # ------------------------------------------------------------------ clients
    async def Heartbeat(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.HeartbeatResponse:
            group = str(request.group.name)
            if group:
                try:
                    validation.validate_group(group, allow_system=False)
                except errors.MessageIllegal as exc:
                    raise ApiError(statuses.ILLEGAL_CONSUMER_GROUP, str(exc)) from None
            client_id = client_id_of(context)
            if client_id:
                self.clients.touch(client_id, int(request.client_type), group)
            return service_pb2.HeartbeatResponse(status=statuses.ok())

        return await self._answer(service_pb2.HeartbeatResponse, work, "Heartbeat")

    async def NotifyClientTermination(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        self.clients.forget(client_id_of(context))
        return service_pb2.NotifyClientTerminationResponse(status=statuses.ok())

    async def Telemetry(self, request_iterator, context):  # type: ignore[no-untyped-def]  # noqa: N802
        client_id = client_id_of(context)
        async for command in self._until_closing(request_iterator):
            if command.WhichOneof("command") != "settings":
                continue  # replies to server commands we never send
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
            yield service_pb2.TelemetryCommand(status=statuses.ok(), settings=reply)

    async def _until_closing(self, commands: AsyncIterator[T]) -> AsyncIterator[T]:
        """The stream's commands until the client ends it or the broker shuts down."""
        closing = asyncio.ensure_future(self._closing.wait())
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
        self._closing.set()

    # ------------------------------------------------------------------ sending
    async def SendMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.SendMessageResponse:
            return await self._send(request, peer_host_of(context))

        return await self._answer(service_pb2.SendMessageResponse, work, "SendMessage")

    async def _send(
        self, request: service_pb2.SendMessageRequest, peer_host: str
    ) -> service_pb2.SendMessageResponse:
        prepared = sending.prepare(
            request,
            self._lookup_topic,
            peer_host=peer_host,
            now_ms=_now_ms(),
            limits=self.limits,
        )
        queue_id = self.selector.select(prepared.topic.write_queue_nums, prepared.message_group)
        messages = list(prepared.messages)
        for message in messages:
            message.queue_id = queue_id
        results, durable_at = self.store.put_messages_nowait(messages)
        if durable_at is not None:
            await self._wait_durable(durable_at)
        entries = [
            service_pb2.SendResultEntry(
                status=statuses.ok(),
                message_id=message_id,
                transaction_id=message_id,
                offset=result.queue_offset,
            )
            for message_id, result in zip(prepared.message_ids, results, strict=True)
        ]
        return service_pb2.SendMessageResponse(status=statuses.ok(), entries=entries)

    async def _wait_durable(self, offset: int) -> None:
        try:
            await asyncio.wait_for(self._waiters.wait(offset), self._flush_timeout_s)
        except TimeoutError:
            raise ApiError(
                statuses.MASTER_PERSISTENCE_TIMEOUT,
                f"written but not flushed within {self._flush_timeout_s:.1f} s; the message may "
                "or may not survive a crash",
            ) from None

    # ------------------------------------------------------------------ offsets
    async def GetOffset(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.GetOffsetResponse:
            config, queue_id = self._queue(request.message_queue)
            group = str(request.group.name)
            self._group(group)
            offset = self.store.consumer_offsets.query(group, config.topic_name, queue_id)
            if offset < 0:
                raise ApiError(
                    statuses.OFFSET_NOT_FOUND,
                    f"group {group!r} has no offset for {config.topic_name}/{queue_id}",
                )
            return service_pb2.GetOffsetResponse(status=statuses.ok(), offset=offset)

        return await self._answer(service_pb2.GetOffsetResponse, work, "GetOffset")

    async def UpdateOffset(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.UpdateOffsetResponse:
            config, queue_id = self._queue(request.message_queue)
            group = str(request.group.name)
            self._group(group)
            top = self.store.max_offset_in_queue(config.topic_name, queue_id)
            if not 0 <= request.offset <= top:
                raise ApiError(
                    statuses.ILLEGAL_OFFSET,
                    f"offset {request.offset} is outside {config.topic_name}/{queue_id} (0..{top})",
                )
            self.store.consumer_offsets.commit(group, config.topic_name, queue_id, request.offset)
            return service_pb2.UpdateOffsetResponse(status=statuses.ok())

        return await self._answer(service_pb2.UpdateOffsetResponse, work, "UpdateOffset")

    async def QueryOffset(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        async def work() -> service_pb2.QueryOffsetResponse:
            config, queue_id = self._queue(request.message_queue)
            topic = config.topic_name
            policy = request.query_offset_policy
            if policy == definition_pb2.BEGINNING:
                offset = self.store.min_offset_in_queue(topic, queue_id)
            elif policy == definition_pb2.END:
                offset = self.store.max_offset_in_queue(topic, queue_id)
            else:
                ts = request.timestamp
                at_ms = int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000
                offset = querying.offset_by_time(self.store, topic, queue_id, at_ms)
            return service_pb2.QueryOffsetResponse(status=statuses.ok(), offset=offset)

        return await self._answer(service_pb2.QueryOffsetResponse, work, "QueryOffset")

    # ------------------------------------------------------------------ Pop (delegated)
    async def ReceiveMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        if self.pop is not None:
            async for response in self.pop.ReceiveMessage(request, context):
                yield response
            return
        yield service_pb2.ReceiveMessageResponse(
            status=ApiError(statuses.UNSUPPORTED, statuses.POP_NOT_SERVED).status()
        )

    async def AckMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        if self.pop is not None:
            return await self.pop.AckMessage(request, context)
        return _not_served(service_pb2.AckMessageResponse)

    async def ChangeInvisibleDuration(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        if self.pop is not None:
            return await self.pop.ChangeInvisibleDuration(request, context)
        return _not_served(service_pb2.ChangeInvisibleDurationResponse)

    async def ForwardMessageToDeadLetterQueue(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        if self.pop is not None:
            return await self.pop.ForwardMessageToDeadLetterQueue(request, context)
        return _not_served(service_pb2.ForwardMessageToDeadLetterQueueResponse)

    # ------------------------------------------------------------------ not served
    async def PullMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        yield service_pb2.PullMessageResponse(
            status=_unsupported("PullMessage (pull consumers)").status()
        )

    async def EndTransaction(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return service_pb2.EndTransactionResponse(
            status=_unsupported("EndTransaction (transactional messages)").status()
        )

    async def RecallMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return service_pb2.RecallMessageResponse(status=_unsupported("RecallMessage").status())

    async def SyncLiteSubscription(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return service_pb2.SyncLiteSubscriptionResponse(
            status=_unsupported("SyncLiteSubscription (lite consumers)").status()
        )


def _unsupported(what: str) -> ApiError:
    return ApiError(statuses.UNSUPPORTED, f"{what} is not supported by this broker")


def _not_served(make: Callable[..., Response]) -> Response:
    return make(status=ApiError(statuses.UNSUPPORTED, statuses.POP_NOT_SERVED).status())
