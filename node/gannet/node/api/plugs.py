"""What the v2 servicer offers the handlers plugged into it, and what they offer back.

:class:`~gannet.node.api.messaging.MessagingServicer` serves the producer side itself and hands
Pop consumption to a :class:`PopHandlers` built by a :data:`PopFactory` (the broker plugs in
:func:`gannet.node.api.receiving.factory`), and PullMessage to
:mod:`gannet.node.api.pulling`. Those handlers see the servicer only as a
:class:`ServicerParts`: its store, name lookups, client registry, Raft node and closing event.
Keeping these shapes here, below the servicer and its handlers, lets ``messaging`` import the
handlers without the handlers importing ``messaging`` back.

Used by :mod:`messaging`, :mod:`receiving`, :mod:`pulling` and :mod:`gannet.node.broker`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.api.client_settings import ClientRegistry
from gannet.node.api.lite_topics import LiteSubscriptions
from gannet.node.api.resources import Resources
from gannet.node.domain.committing import Appended
from gannet.node.replication.driver import ReplicationNode
from gannet.node.store.log import records
from gannet.node.store.message_store import MessageStore

ReceivedObserver = Callable[[str, str, Sequence[records.Message | definition_pb2.Message]], None]
"""Told (topic, group, messages) when messages are handed to a consumer (ReceiveMessage,
PullMessage); metrics use it (only ``body`` is read)."""


class ServicerParts(Protocol):
    """The parts of the servicer a plugged-in handler uses (it is the servicer itself)."""

    store: MessageStore
    resources: Resources
    clients: ClientRegistry
    replication: ReplicationNode | None
    lite_subscriptions: LiteSubscriptions
    on_received: ReceivedObserver | None
    closing: asyncio.Event
    """Set by ``begin_shutdown``: long polls end at once instead of after the longest wait."""

    async def commit(self, appended: Appended) -> None:
        """Return once what this node just appended may be answered (the broker's one rule,
        :mod:`gannet.node.domain.committing`); its errors already v2 statuses (ApiError)."""


class PopHandlers(Protocol):
    """What the Pop consumption layer plugs in; same shapes as the servicer methods.

    Built by a :data:`PopFactory` once the servicer exists (it can use the servicer's store,
    ``resources``, ``clients`` and ``identity``). On broker stop, :meth:`begin_shutdown` is
    called first (end long polls now), then — after the server drained — :meth:`close` in a
    worker thread, before the store closes.
    """

    def begin_shutdown(self) -> None: ...

    def close(self) -> None: ...

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


PopFactory = Callable[[ServicerParts], PopHandlers]
