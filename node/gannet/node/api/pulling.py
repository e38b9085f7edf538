"""PullMessage over v2: read a queue by queue offset, without Pop bookkeeping.

The v2 proxy does not implement PullMessage; Gannet serves it for readers that track their
own offsets. (The Spark data source ``gannet`` reads the same way in bulk through Admin
PullRecords, :mod:`record_pulling`, which shares :meth:`PullHandler.get`.) Semantics:

* **Request** ``{group, message_queue, offset, batch_size, filter_expression,
  long_polling_timeout}``. ``group`` may be empty (an anonymous reader: pulls never commit
  consumer offsets); a non-empty group must exist (``CONSUMER_GROUP_NOT_FOUND``). The topic
  must exist (``TOPIC_NOT_FOUND``) and be readable (``FORBIDDEN``); ``message_queue.id`` must
  be one of its queues (``BAD_REQUEST``). ``batch_size`` must be >= 1 (``BAD_REQUEST``) and is
  capped at :attr:`PullLimits.batch_messages_max`. The filter is a tag or SQL92 expression as
  for ReceiveMessage (``ILLEGAL_FILTER_EXPRESSION``).
* **Offsets.** ``offset`` must lie in ``[min, max]`` of the queue, else ``ILLEGAL_OFFSET``
  with the valid range in the message (below ``min`` means the messages were cleaned up).
* **Reading** goes through the consume queue, so only messages dispatched up to the commit
  offset (the Raft commit point) are ever returned. One read returns at most ``batch_size``
  messages and stops after :attr:`PullLimits.batch_bytes_max` bytes of records (always at
  least one message). Units whose tag hash cannot match and records whose properties fail an
  SQL92 expression are skipped by the store; a message whose tag really differs (hash
  collision) is dropped here.
* **Long polling.** When ``offset`` is the queue's end, the call waits up to
  ``long_polling_timeout`` (0 when absent; clamped to :attr:`PullLimits.polling_ms_max` and to
  the deadline less :attr:`PullLimits.deadline_margin_ms`) for a message to be dispatched to
  that queue, then reads again. At most :attr:`PullLimits.waiters_max` pulls wait at once
  (beyond: ``TOO_MANY_REQUESTS``). Broker shutdown ends waiting pulls at once.
* **Response stream.** Exactly one ``status`` frame — ``OK`` when messages follow,
  ``MESSAGE_NOT_FOUND`` when none do — then one ``message`` frame per message, then one
  ``next_offset`` frame: the queue offset to pull from next (past filtered-out and removed
  units too, so a reader never re-scans them). An invalid request gets only a ``status`` frame.
* **Messages** are converted exactly as ReceiveMessage converts them
  (:func:`gannet.node.api.receiving.message_pb`), without ``receipt_handle``.

:func:`pull_message` is called by :meth:`ServicerParts.PullMessage`; one
:class:`PullHandler` per servicer, made on first use, listens to the store's dispatch to wake
waiting pulls.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.api import filters, receiving, store_statuses
from gannet.node.api.plugs import ServicerParts
from gannet.node.pop.filtering import MessageFilter
from gannet.node.pop.popping import PoppedMessage
from gannet.node.pop.receipts import ReceiptHandle, TopicFlag
from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.store import errors
from gannet.node.store.log import records
from gannet.node.store.log.records import DispatchInfo
from gannet.node.store.queues.reading import GetResult, GetStatus
from gannet.node.store.tier import deferring

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PullLimits:
    batch_messages_max: int = 1024
    batch_bytes_max: int = 4 * 1024 * 1024
    polling_ms_max: int = 20_000
    deadline_margin_ms: int = 200
    """Kept free of the client's deadline so the answer arrives before it."""
    waiters_max: int = 1024


DEFAULT_LIMITS = PullLimits()

# The conversion wants a popped message; pulled messages have no receipt handle, so this
# placeholder is used and the field cleared afterwards.
_NO_HANDLE = ReceiptHandle(0, 0, 0, 0, TopicFlag.NORMAL, "", 0, 0)


@dataclass(frozen=True, slots=True)
class Pulled:
    """What one pull answers: status, messages, and the offset to pull from next."""

    status: definition_pb2.Status
    messages: list[definition_pb2.Message]
    next_offset: int


class _Arrivals:
    """Wakes asyncio waiters of a (topic, queue id) when the store dispatches a message to it.

    The store calls :meth:`on_dispatch` on its dispatch thread; waiters live on the server's
    event loop. Invariant: ``_count`` equals the number of futures in ``_waiting``.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, waiters_max: int) -> None:
        self._loop = loop
        self._waiters_max = waiters_max
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, int], list[asyncio.Future[None]]] = {}
        self._count = 0

    def register(self, topic: str, queue_id: int) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self._loop.create_future()
        with self._lock:
            if self._count >= self._waiters_max:
                raise ApiError(
                    statuses.TOO_MANY_REQUESTS,
                    f"{self._count} pulls are waiting; at most {self._waiters_max}",
                )
            self._waiting.setdefault((topic, queue_id), []).append(future)
            self._count += 1
        return future

    def forget(self, topic: str, queue_id: int, future: asyncio.Future[None]) -> None:
        with self._lock:
            waiting = self._waiting.get((topic, queue_id))
            if waiting is not None and future in waiting:
                waiting.remove(future)
                self._count -= 1
                if not waiting:
                    del self._waiting[(topic, queue_id)]

    def waiting(self) -> int:
        """How many pulls wait now."""
        return self._count

    def on_dispatch(self, infos: Sequence[DispatchInfo]) -> None:
        """One dispatched batch: wake the waiters of every (topic, queue id) it reached."""
        waiting = self._waiting
        if not waiting:  # unlocked peek: the common case is nobody waiting
            return
        keys = {(info.topic, info.queue_id) for info in infos}
        if not any(key in waiting for key in keys):
            return
        with self._lock:
            woken = [f for key in keys for f in self._waiting.pop(key, ())]
            self._count -= len(woken)
        for future in woken:
            self._loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class PullHandler:
    """Serves PullMessage for one servicer (see the module docstring)."""

    def __init__(self, servicer: ServicerParts, limits: PullLimits = DEFAULT_LIMITS) -> None:
        # Not the servicer itself: :data:`_handlers` is keyed weakly by it, so the handler
        # must not keep it alive. The servicer sets ``closing`` in ``begin_shutdown``;
        # waiting on it lets the server's drain end at once instead of after the longest poll.
        self.store = servicer.store
        self.resources = servicer.resources
        self._closing = servicer.closing
        self.limits = limits
        self._arrivals = _Arrivals(asyncio.get_running_loop(), limits.waiters_max)
        servicer.store.add_arrival_listener(self._arrivals.on_dispatch)

    def waiting(self) -> int:
        """How many pulls wait in a long poll now."""
        return self._arrivals.waiting()

    async def pull(
        self, request: service_pb2.PullMessageRequest, context: grpc.aio.ServicerContext
    ) -> Pulled:
        if request.group.name:
            self.resources.group(str(request.group.name))
        config, queue_id = self.resources.queue(request.message_queue)
        if not config.readable:
            raise ApiError(statuses.FORBIDDEN, f"topic {config.topic_name!r} is not readable")
        if request.batch_size <= 0:
            raise ApiError(statuses.BAD_REQUEST, f"batch_size {request.batch_size} is not >= 1")
        tag_filter = filters.filter_of(request.filter_expression)
        topic, offset = config.topic_name, int(request.offset)
        wait_ms = self.polling_ms(request, context.time_remaining())
        wanted = min(int(request.batch_size), self.limits.batch_messages_max)
        got = await self.get(topic, queue_id, offset, wanted, tag_filter, wait_ms)
        namespace = str(request.message_queue.topic.resource_namespace)
        return self._answer(got, tag_filter, namespace)

    async def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        wanted: int,
        tag_filter: MessageFilter,
        wait_ms: int,
        records_bytes_max: int = 0,
    ) -> GetResult:
        """Read up to ``wanted`` messages at ``offset``, waiting up to ``wait_ms`` at the end
        of the queue (shared by PullMessage and :mod:`record_pulling`). With
        ``records_bytes_max`` (and no filter) the records are read in bulk into
        ``GetResult.records`` (:func:`~gannet.node.store.queues.reading.read_queue_records`)."""
        deadline = time.monotonic() + wait_ms / 1000
        read = functools.partial(
            self._read, topic, queue_id, offset, wanted, tag_filter, records_bytes_max
        )
        got = await deferring.call(read)
        while got.status is GetStatus.OFFSET_OVERFLOW_ONE and time.monotonic() < deadline:
            arrived = self._arrivals.register(topic, queue_id)
            try:
                got = await deferring.call(read)  # again: a message may have come meanwhile
                left_s = deadline - time.monotonic()
                if got.status is not GetStatus.OFFSET_OVERFLOW_ONE or left_s <= 0:
                    break
                if not await self._wait(arrived, left_s):
                    break
            finally:
                self._arrivals.forget(topic, queue_id, arrived)
            got = await deferring.call(read)
        return got

    def polling_ms(self, request: service_pb2.PullMessageRequest, remaining_s: float | None) -> int:
        timeout = request.long_polling_timeout
        wanted = int(timeout.seconds) * 1000 + int(timeout.nanos) // 1_000_000
        wanted = min(max(wanted, 0), self.limits.polling_ms_max)
        if remaining_s is not None:
            usable = int(remaining_s * 1000) - self.limits.deadline_margin_ms
            wanted = min(wanted, max(usable, 0))
        return wanted

    def _read(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        wanted: int,
        tag_filter: MessageFilter,
        records_bytes_max: int = 0,
    ) -> GetResult:
        store = self.store
        if records_bytes_max:
            got = store.get_records(topic, queue_id, offset, wanted, records_bytes_max)
        else:
            got = store.get_messages(
                topic, queue_id, offset, wanted, tag_filter.unit_test, tag_filter.record_test
            )
        empty = (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE)
        if (
            offset < 0
            or got.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY)
            or (got.status in empty and offset != 0)
        ):
            raise ApiError(
                Code.ILLEGAL_OFFSET,
                f"offset {offset} is outside {topic}/{queue_id}, which holds "
                f"{got.min_offset}..{got.max_offset} (min inclusive, max exclusive)",
            )
        if got.status in empty:
            got.status = GetStatus.OFFSET_OVERFLOW_ONE  # an empty queue: offset 0 is its end
            got.next_begin_offset = offset
        return got

    async def _wait(self, arrived: asyncio.Future[None], timeout_s: float) -> bool:
        """True when a message arrived; False on timeout or broker shutdown."""
        closing: asyncio.Future[object] = asyncio.ensure_future(self._closing.wait())
        waited: set[asyncio.Future[object]] = {arrived, closing}  # type: ignore[arg-type]
        try:
            done, _ = await asyncio.wait(
                waited, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            return arrived in done
        finally:
            closing.cancel()

    def _answer(self, got: GetResult, tag_filter: MessageFilter, namespace: str) -> Pulled:
        now_ms = time.time_ns() // 1_000_000
        messages: list[definition_pb2.Message] = []
        size_bytes = 0
        next_offset = got.next_begin_offset
        for stored in got.messages:
            if messages and size_bytes + len(stored.data) > self.limits.batch_bytes_max:
                next_offset = stored.queue_offset
                break
            size_bytes += len(stored.data)
            msg = records.decode(stored.data)
            if not tag_filter.matches_message(msg):
                continue  # a tag-hash collision: not really wanted
            pb = receiving.message_pb(PoppedMessage(msg, _NO_HANDLE), namespace, now_ms)
            pb.system_properties.ClearField("receipt_handle")
            messages.append(pb)
        if messages:
            status = statuses.ok()
        else:
            status = definition_pb2.Status(
                code=statuses.MESSAGE_NOT_FOUND, message=_empty_reason(got.status)
            )
        return Pulled(status, messages, next_offset)


def _empty_reason(status: GetStatus) -> str:
    if status is GetStatus.OFFSET_OVERFLOW_ONE:
        return "no new message"
    if status is GetStatus.MESSAGE_WAS_REMOVING:
        return "messages at this offset were removed; continue at next_offset"
    return "no matched message"


_handlers: weakref.WeakKeyDictionary[ServicerParts, PullHandler] = weakref.WeakKeyDictionary()


def handler_of(servicer: ServicerParts) -> PullHandler:
    """The servicer's PullHandler, made (and hooked to the store) on first use."""
    handler = _handlers.get(servicer)
    if handler is None:
        handler = _handlers[servicer] = PullHandler(servicer)
    return handler


def waiting_pulls(servicer: ServicerParts) -> int:
    """How many pulls of ``servicer`` wait in a long poll now (any thread)."""
    handler = _handlers.get(servicer)
    return 0 if handler is None else handler.waiting()


async def pull_message(
    servicer: ServicerParts,
    request: service_pb2.PullMessageRequest,
    context: grpc.aio.ServicerContext,
) -> AsyncIterator[service_pb2.PullMessageResponse]:
    """The PullMessage response stream (see the module docstring)."""
    try:
        pulled = await handler_of(servicer).pull(request, context)
    except Exception as exc:
        yield service_pb2.PullMessageResponse(status=api_error(exc).status())
        return
    yield service_pb2.PullMessageResponse(status=pulled.status)
    for message in pulled.messages:
        yield service_pb2.PullMessageResponse(message=message)
    yield service_pb2.PullMessageResponse(next_offset=pulled.next_offset)


def api_error(exc: Exception) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, errors.StoreError):
        return store_statuses.from_store_error(exc)
    log.exception("PullMessage failed")
    return ApiError(statuses.INTERNAL_SERVER_ERROR, f"PullMessage: {exc}")
