"""Pop consumption over v2: ReceiveMessage, AckMessage, ChangeInvisibleDuration and
ForwardMessageToDeadLetterQueue served by :class:`~gannet.node.pop.service.PopBroker`.

The rules are the v2 proxy's (``docs/protocol.md`` §7):

* **ReceiveMessage** — the group must exist and the topic be readable; the polling time is the
  request's ``long_polling_timeout`` (else half the remaining deadline), clamped to
  [``polling_ms_min``, ``polling_ms_max``] (5 s – 20 s) and cut to the remaining deadline less
  :attr:`ReceiveLimits.deadline_margin_ms`; when less than the minimum remains the answer is
  ``ILLEGAL_POLLING_TIME``. The invisible time must be in [10 s, 12 h]
  (``ILLEGAL_INVISIBLE_TIME``) unless ``auto_renew``, which uses 60 s. The filter is a tag
  or SQL92 expression (:mod:`gannet.node.pop.filtering`; ``ILLEGAL_FILTER_EXPRESSION`` with
  the reason, for SQL92 with the line and column of the error).
  ``batch_size`` is capped at 32. All queues of the topic are popped (queue id -1); orderly
  groups pop orderly. A popped message that does not really match (a tag-hash collision, or a
  retry-topic message, which the store scan does not filter) is acked silently, as the proxy
  does. The stream is ``status`` (``OK``, ``MESSAGE_NOT_FOUND``
  when nothing came, ``TOO_MANY_REQUESTS`` when too many pops wait), one frame per message,
  then ``delivery_timestamp``; an invalid request gets a single ``status`` frame.
* **AckMessage** — one entry status per request entry; the top-level status is the entries'
  single code, or ``MULTIPLE_RESULTS`` when they differ.
* **ChangeInvisibleDuration** — the duration must be in [0, 12 h]; answers the new handle.
* **ForwardMessageToDeadLetterQueue** — moves the message to ``%DLQ%<group>`` and acks it.

Decision: a group's first pop starts at each queue's *minimum* offset (``ConsumeInitMode.MIN``,
the store's ``InitMode.MIN``), not ``MAX`` as the proxy asks: RocketMQ's broker starts at 0
anyway while a queue's first message is in memory (``initPopOffsetByCheckMsgInMem``), and a
store without that distinction would otherwise hide every message sent before the group's
first receive.

``auto_renew`` receives (push consumers) get the 60 s invisible time and the broker renews it
until the client acks, nacks or goes away (:mod:`renewing`): a renewal task on the event loop
changes the invisible time shortly before it runs out, and Ack / ChangeInvisibleDuration /
ForwardMessageToDeadLetterQueue with the handle the client holds use the newest one.

Pops and acks run on the event loop when they cannot wait (:meth:`PopBroker.now_or_none`:
no other thread holds a Pop lock they take, no SYNC_FLUSH wait), else in worker threads
(:func:`asyncio.to_thread`; acks batched, :mod:`ack_batching`). :meth:`begin_shutdown`
ends waiting long polls at once (they answer ``MESSAGE_NOT_FOUND``).

:func:`pop_broker_of` finds the PopBroker serving a store (registered by :func:`factory` while
it runs), for the admin API's revive-queue RPCs (:mod:`gannet.node.api.admin`).

Plugged into :class:`~gannet.node.api.messaging.MessagingServicer` by
:mod:`gannet.node.broker.serving` through :func:`factory`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import Code, Encoding, definition_pb2, service_pb2

from gannet.node.api import ack_batching, priorities, sending, store_statuses
from gannet.node.api.filters import filter_of, pop_error
from gannet.node.api.plugs import PopFactory, ServicerParts
from gannet.node.api.renewing import Renewal, RenewalLimits, RenewalTable
from gannet.node.api.shutdown_gate import ShutdownGate
from gannet.node.domain.committing import NOTHING_TO_FLUSH, pop_flush_wait
from gannet.node.pop import errors as pop_errors
from gannet.node.pop import receipts
from gannet.node.pop.config import PopConfig
from gannet.node.pop.filtering import LiteFilter, MessageFilter
from gannet.node.pop.popping import InitMode, PoppedMessage, PopResult
from gannet.node.pop.receipts import ReceiptHandle
from gannet.node.pop.service import PopBroker
from gannet.node.protocol import statuses
from gannet.node.protocol.headers import client_id_of
from gannet.node.protocol.statuses import ApiError
from gannet.node.store import errors, msgids, steady_clock, validation
from gannet.node.store import properties as props
from gannet.node.store.configs.topics import MessageType
from gannet.node.store.log import records
from gannet.node.store.message_store import MessageStore
from gannet.node.store.tier import deferring

log = logging.getLogger(__name__)

Response = TypeVar("Response")
T = TypeVar("T")

BATCH_MESSAGES_MAX = 32  # ProxyUtils.MAX_MSG_NUMS_FOR_POP_REQUEST


@dataclass(frozen=True, slots=True)
class ReceiveLimits:
    """The proxy's consumer limits (``ProxyConfig``), in ms."""

    polling_ms_min: int = 5_000  # grpcClientConsumerMinLongPollingTimeoutMillis
    polling_ms_max: int = 20_000  # grpcClientConsumerMaxLongPollingTimeoutMillis
    deadline_margin_ms: int = 200
    """Kept free of the client's deadline so the answer arrives before it."""
    receive_invisible_ms_min: int = 10_000  # minInvisibleTimeMillsForRecv
    invisible_ms_max: int = 12 * 3_600_000  # maxInvisibleTimeMills
    auto_renew_invisible_ms: int = 60_000  # defaultInvisibleTimeMills
    init_mode: InitMode = InitMode.MIN


DEFAULT_LIMITS = ReceiveLimits()


def factory(
    limits: ReceiveLimits = DEFAULT_LIMITS,
    config: PopConfig | None = None,
    renewal: RenewalLimits | None = None,
) -> PopFactory:
    """A pop factory for :class:`~gannet.node.broker.serving.Broker`: a started PopBroker on
    the servicer's store, served by :class:`PopHandler`."""

    def make(servicer: ServicerParts) -> PopHandler:
        pop_config = config or PopConfig()
        if servicer.replication is not None:
            # A checkpoint kept in the leader's memory is lost with its leadership: the next
            # leader would hand the message out again (even after an ack answered OK, whose
            # ACK record then matches no checkpoint). Every pop writes its checkpoint, and
            # ReceiveMessage answers once it and the offset commit are committed.
            pop_config = dataclasses.replace(pop_config, buffer_merge_enabled=False)
        pop = PopBroker(servicer.store, pop_config, wait_durable=pop_flush_wait(servicer.store))
        if servicer.replication is not None:  # only the Raft leader revives (pop/service.py)
            pop.set_leading(servicer.replication.is_serving_leader())
            servicer.replication.role_listeners.append(pop.set_leading)
        pop.start()
        with _serving_lock:
            _serving[servicer.store] = pop
        return PopHandler(servicer, pop, limits, renewal)

    return make


_serving: weakref.WeakKeyDictionary[MessageStore, PopBroker] = weakref.WeakKeyDictionary()
_serving_lock = threading.Lock()


def pop_broker_of(store: MessageStore) -> PopBroker | None:
    """The running PopBroker of ``store`` (None when Pop is not served or has closed)."""
    with _serving_lock:
        return _serving.get(store)


def _now_ms() -> int:
    return steady_clock.now_ms()


def _ms(duration: object) -> int:
    seconds = int(getattr(duration, "seconds", 0))
    nanos = int(getattr(duration, "nanos", 0))
    return seconds * 1000 + nanos // 1_000_000


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _api_error(exc: Exception, what: str) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, pop_errors.PopError):
        return pop_error(exc)
    if isinstance(exc, errors.StoreError):
        return store_statuses.from_store_error(exc)
    log.exception("%s failed", what)
    return ApiError(statuses.INTERNAL_SERVER_ERROR, f"{what}: {exc}")


def parse_handle(text: str) -> ReceiptHandle:
    if not text.strip():
        raise ApiError(Code.INVALID_RECEIPT_HANDLE, "receipt_handle is blank")
    try:
        return receipts.parse(text)
    except pop_errors.PopError as exc:
        raise pop_error(exc) from None


# ---------------------------------------------------------------------- messages
_HIDDEN_PROPERTIES = validation.RESERVED_PROPERTY_KEYS | {
    sending.TRACE_CONTEXT,
    props.LITE_TOPIC,
    props.PRIORITY,
}


_MD5 = int(definition_pb2.MD5)
_GZIP = int(Encoding.GZIP)
_IDENTITY = int(Encoding.IDENTITY)
_TRANSACTION = int(definition_pb2.TRANSACTION)
_DELAY = int(definition_pb2.DELAY)
_FIFO = int(definition_pb2.FIFO)
_LITE = int(definition_pb2.LITE)
_PRIORITY = int(definition_pb2.PRIORITY)
_NORMAL = int(definition_pb2.NORMAL)
_DELAY_KEYS = (props.DELAY_TIME_LEVEL, props.TIMER_DELIVER_MS, props.TIMER_DELAY_SEC)
_TYPE_KEYS = frozenset((props.TRANSACTION_PREPARED, *_DELAY_KEYS, props.SHARDING_KEY,
                        props.LITE_TOPIC, props.PRIORITY))  # fmt: skip
_OPTIONAL_KEYS = _TYPE_KEYS | frozenset((
    props.KEYS, props.TAGS, props.SHARDING_KEY, props.TIMER_DELIVER_MS, props.TIMER_DELAY_SEC,
    sending.TRACE_CONTEXT, props.LITE_TOPIC, props.PRIORITY, props.DLQ_ORIGIN_TOPIC,
    props.DLQ_ORIGIN_MESSAGE_ID,
))  # fmt: skip
"""Properties that set a system property of their own: a message with none of them (the common
case) skips their checks."""


def message_pb(
    popped: PoppedMessage,
    namespace: str,
    now_ms: int,
    out: definition_pb2.Message | None = None,
) -> definition_pb2.Message:
    """A popped message as a v2 ``Message`` with the system properties clients need; filled
    into ``out`` (an empty message, e.g. a response's field) when given."""
    msg = popped.message
    p = msg.properties
    store_host, store_port = msg.store_host
    message_id = p.get(props.UNIQ_KEY) or msgids.create_offset_msg_id(
        store_host, store_port, msg.physical_offset
    )
    # Filled in place: nested messages passed to constructors are copied once more; field by
    # field is also cheaper than keyword construction with upb (PROFILE.md, issue 38).
    if out is None:
        out = definition_pb2.Message()
    body = msg.body
    out.body = body
    out.topic.name = msg.topic
    if namespace:
        out.topic.resource_namespace = namespace
    sp = out.system_properties
    sp.message_id = message_id
    digest = sp.body_digest
    digest.type = _MD5
    digest.checksum = hashlib.md5(body).hexdigest().upper()
    sp.body_encoding = _GZIP if msg.sys_flag & records.SYSFLAG_COMPRESSED else _IDENTITY
    ms = msg.born_timestamp_ms
    stamp = sp.born_timestamp
    stamp.seconds = ms // 1000
    stamp.nanos = (ms % 1000) * 1_000_000
    sp.born_host = p.get(props.BORN_HOST) or msg.born_host[0]
    ms = msg.store_timestamp_ms
    stamp = sp.store_timestamp
    stamp.seconds = ms // 1000
    stamp.nanos = (ms % 1000) * 1_000_000
    sp.store_host = f"{store_host}:{store_port}"
    sp.receipt_handle = popped.receipt_handle
    sp.queue_id = msg.queue_id
    sp.queue_offset = msg.queue_offset
    sp.delivery_attempt = popped.delivery_attempt
    if p.keys().isdisjoint(_OPTIONAL_KEYS):
        sp.message_type = _NORMAL
    else:
        sp.message_type = _message_type(p)
        _optional_properties(sp, p, now_ms)
    user = out.user_properties
    for k, v in p.items():
        if k not in _HIDDEN_PROPERTIES and not k.startswith(props.TRANSIENT_PREFIX):
            user[k] = v
    return out


def _optional_properties(
    sp: definition_pb2.SystemProperties, p: dict[str, str], now_ms: int
) -> None:
    if props.KEYS in p:
        sp.keys.extend(props.split_keys(p[props.KEYS]))
    tag = p.get(props.TAGS)
    if tag is not None:
        sp.tag = tag
    if props.SHARDING_KEY in p:
        sp.message_group = p[props.SHARDING_KEY]
    deliver_ms = p.get(props.TIMER_DELIVER_MS)
    if deliver_ms is not None and deliver_ms.isdigit():
        _set_ms(sp.delivery_timestamp, int(deliver_ms))
    elif p.get(props.TIMER_DELAY_SEC, "").isdigit():
        _set_ms(sp.delivery_timestamp, now_ms + int(p[props.TIMER_DELAY_SEC]) * 1000)
    if sending.TRACE_CONTEXT in p:
        sp.trace_context = p[sending.TRACE_CONTEXT]
    if props.LITE_TOPIC in p:
        sp.lite_topic = p[props.LITE_TOPIC]
    priority = priorities.of(p)
    if priority is not None:
        sp.priority = priority
    if props.DLQ_ORIGIN_TOPIC in p or props.DLQ_ORIGIN_MESSAGE_ID in p:
        sp.dead_letter_queue.SetInParent()
        sp.dead_letter_queue.topic = p.get(props.DLQ_ORIGIN_TOPIC, "")
        sp.dead_letter_queue.message_id = p.get(props.DLQ_ORIGIN_MESSAGE_ID, "")


def _set_ms(timestamp: Timestamp, ms: int) -> None:
    timestamp.seconds = ms // 1000
    timestamp.nanos = (ms % 1000) * 1_000_000


def _message_type(p: dict[str, str]) -> int:
    if p.keys().isdisjoint(_TYPE_KEYS):
        return _NORMAL
    if p.get(props.TRANSACTION_PREPARED) == "true":
        return _TRANSACTION
    if any(k in p for k in _DELAY_KEYS):
        return _DELAY
    if props.SHARDING_KEY in p:
        return _FIFO
    if props.LITE_TOPIC in p:
        return _LITE
    if props.PRIORITY in p:
        return _PRIORITY
    return _NORMAL


# ---------------------------------------------------------------------- handler
class PopHandler:
    """The servicer's Pop handlers (:class:`~gannet.node.api.plugs.PopHandlers`)."""

    def __init__(
        self,
        servicer: ServicerParts,
        pop: PopBroker,
        limits: ReceiveLimits = DEFAULT_LIMITS,
        renewal: RenewalLimits | None = None,
    ) -> None:
        self.servicer = servicer
        self.resources = servicer.resources
        self.pop = pop
        self.limits = limits
        self.renewals = RenewalTable(renewal)
        self._closing = asyncio.Event()
        self._renewed = asyncio.Condition()
        self._renew_task: asyncio.Task[None] | None = None
        self.shutdown = ShutdownGate()
        """Ends waiting long polls at shutdown (:mod:`shutdown_gate`)."""
        self.acks = ack_batching.AckBatcher(
            lambda jobs, now: pop.ack_jobs(jobs, now_ms=now),
            ack_now=lambda jobs, now: pop.ack_jobs_now(jobs, now_ms=now),
        )
        """Concurrent AckMessage calls share one thread hop and one append (:mod:`ack_batching`)."""

    # --- lifecycle ---
    def begin_shutdown(self) -> None:
        self._closing.set()
        self.shutdown.begin_shutdown()

    def close(self) -> None:
        self.renewals.clear()
        with _serving_lock:
            if _serving.get(self.pop.store) is self.pop:
                del _serving[self.pop.store]
        self.pop.close()

    # --- ReceiveMessage ---
    async def ReceiveMessage(  # noqa: N802 — gRPC method names
        self, request: service_pb2.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[service_pb2.ReceiveMessageResponse]:
        try:
            status, frames = await self._receive(request, context)
        except Exception as exc:
            error = _api_error(exc, "ReceiveMessage")
            yield service_pb2.ReceiveMessageResponse(status=error.status())
            return
        yield service_pb2.ReceiveMessageResponse(status=status)
        for frame in frames:
            yield frame
        yield service_pb2.ReceiveMessageResponse(delivery_timestamp=_timestamp(_now_ms()))

    def polling_ms(
        self, request: service_pb2.ReceiveMessageRequest, remaining_s: float | None
    ) -> int:
        """The long-polling time of a request (see the module docstring)."""
        lim = self.limits
        remaining_ms = None if remaining_s is None else int(remaining_s * 1000)
        if request.HasField("long_polling_timeout"):
            wanted = _ms(request.long_polling_timeout)
        elif remaining_ms is not None:
            wanted = remaining_ms // 2
        else:
            wanted = lim.polling_ms_max
        wanted = min(max(wanted, lim.polling_ms_min), lim.polling_ms_max)
        if remaining_ms is None:
            return wanted
        usable = remaining_ms - lim.deadline_margin_ms
        if wanted <= usable:
            return wanted
        if usable >= lim.polling_ms_min:
            return usable
        raise ApiError(
            Code.ILLEGAL_POLLING_TIME,
            f"deadline time remaining is not enough: {max(remaining_ms, 0)} ms left, long "
            f"polling needs at least {lim.polling_ms_min} ms plus {lim.deadline_margin_ms} ms",
        )

    def invisible_ms(self, request: service_pb2.ReceiveMessageRequest) -> int:
        lim = self.limits
        if request.auto_renew:
            return lim.auto_renew_invisible_ms
        value = _ms(request.invisible_duration)
        if not lim.receive_invisible_ms_min <= value <= lim.invisible_ms_max:
            raise ApiError(
                Code.ILLEGAL_INVISIBLE_TIME,
                f"invisible_duration {value} ms is outside [{lim.receive_invisible_ms_min}, "
                f"{lim.invisible_ms_max}] ms",
            )
        return value

    async def _receive(
        self, request: service_pb2.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> tuple[definition_pb2.Status, list[service_pb2.ReceiveMessageResponse]]:
        """The status and the message frames of a receive (each message filled into its
        frame in place: passed to the frame's constructor it would be copied once more)."""
        group = self.resources.group(str(request.group.name))
        topic = self.resources.topic(str(request.message_queue.topic.name))
        if not topic.readable:
            raise ApiError(statuses.FORBIDDEN, f"topic {topic.topic_name!r} has no readable queue")
        tag_filter: MessageFilter = filter_of(request.filter_expression)
        if topic.message_type is MessageType.LITE:
            lites = self.servicer.lite_subscriptions.topics_of(group, topic.topic_name)
            if not lites:  # nothing subscribed (yet): pass nothing over
                await asyncio.sleep(
                    min(self.polling_ms(request, context.time_remaining()), 1000) / 1000
                )
                return _not_found("no lite topic of the group is subscribed"), []
            tag_filter = LiteFilter(lites)
        invisible_ms = self.invisible_ms(request)
        if request.batch_size <= 0:
            raise ApiError(statuses.BAD_REQUEST, f"batch_size {request.batch_size} is not >= 1")
        poll_ms = self.polling_ms(request, context.time_remaining())
        attempt_id = str(request.attempt_id) if request.HasField("attempt_id") else None
        # a remoting POP_MESSAGE of one queue names it so (gRPC clients pop every queue)
        queue_id = sending.requested_queue_id(context.invocation_metadata())
        work = self.pop.pop_long_polling(
            group,
            topic.topic_name,
            poll_time_ms=poll_ms,
            queue_id=-1 if queue_id is None else queue_id,
            max_msgs=min(int(request.batch_size), BATCH_MESSAGES_MAX),
            invisible_time_ms=invisible_ms,
            init_mode=self.limits.init_mode,
            tag_filter=tag_filter,
            attempt_id=attempt_id,
            run=self._pop_now_or_in_thread,
        )
        try:
            result = await self.shutdown.run(work)
        except pop_errors.PopBusy:
            return ApiError(statuses.TOO_MANY_REQUESTS, "polling full").status(), []
        if result is None:
            return _not_found("broker is shutting down"), []
        if not result.found:
            return _not_found("no new message"), []
        # Raft group: the pop's checkpoint and offset commit reach a majority before the
        # messages are handed out, so a new leader neither hands them out during their
        # invisible time nor after an ack (``_replicated``). Not committed: the client gets
        # an error and the messages come back once invisible (revived by the leader).
        await self._replicated()
        delivered = await self._drop_mismatched(group, tag_filter, result)
        if not delivered:
            return _not_found("no match message"), []
        observer = self.servicer.on_received
        if observer is not None:
            observer(topic.topic_name, group, [m.message for m in delivered])
        now = _now_ms()
        if request.auto_renew:
            self._start_renewing(group, topic.topic_name, delivered, client_id_of(context), now)
        namespace = str(request.message_queue.topic.resource_namespace)
        frames = []
        for m in delivered:
            frame = service_pb2.ReceiveMessageResponse()
            message_pb(m, namespace, now, frame.message)
            frames.append(frame)
        return statuses.ok(), frames

    # --- auto-renew ---
    def _start_renewing(
        self, group: str, topic: str, delivered: list[PoppedMessage], client_id: str, now_ms: int
    ) -> None:
        for m in delivered:
            self.renewals.add(group, topic, m.receipt_handle, m.handle, client_id, now_ms)
        if self._renew_task is None or self._renew_task.done():
            self._renew_task = asyncio.get_running_loop().create_task(self._renew_loop())

    async def _renew_loop(self) -> None:
        """Renew due handles every ``check_interval_ms`` until shutdown or nothing is left."""
        interval_s = self.renewals.limits.check_interval_ms / 1000
        while len(self.renewals) and not self._closing.is_set():
            try:
                await asyncio.wait_for(self._closing.wait(), interval_s)
                return
            except TimeoutError:
                pass
            due = self.renewals.due(_now_ms(), self._client_seen_ms)
            if not due:
                continue
            try:
                await asyncio.to_thread(self._renew_all, due)
            finally:
                async with self._renewed:
                    self._renewed.notify_all()

    def _renew_all(self, due: list[Renewal]) -> None:
        for entry in due:
            try:
                new = self.pop.change_invisible_time(
                    entry.group,
                    entry.topic,
                    entry.current,
                    invisible_time_ms=self.limits.auto_renew_invisible_ms,
                    now_ms=_now_ms(),
                )
            except (pop_errors.PopError, errors.StoreError) as exc:
                log.info("auto-renew of %s stopped: %s", entry.original, exc)
                self.renewals.renewed(entry, None)
            except BaseException:
                self.renewals.renewed(entry, None)
                raise
            else:
                self.renewals.renewed(entry, new)

    def _client_seen_ms(self, client_id: str) -> int | None:
        info = self.servicer.clients.get(client_id)
        return None if info is None else info.last_seen_ms

    async def _release(self, group: str, text: str) -> ReceiptHandle:
        """The handle to act on for the one the client sent: the newest renewal of it (which
        ends renewing it), else the parsed handle itself."""
        while True:
            entry = self.renewals.take(group, text)
            if entry is None:
                return parse_handle(text)
            if not entry.renewing:
                return entry.current
            async with self._renewed:
                await self._renewed.wait()

    async def _pop_now_or_in_thread(self, work: Callable[[], PopResult]) -> PopResult:
        """A pop runs at once on the loop when nothing would make it wait (no other thread
        holds a Pop lock it takes, no SYNC_FLUSH wait: :meth:`PopBroker.now_or_none`); otherwise
        in a worker thread. Like an ack, a pop of a few messages costs less CPU than the hop."""
        return await deferring.call_now(lambda: self.pop.now_or_none(work), work)

    async def _drop_mismatched(
        self, group: str, tag_filter: MessageFilter, result: PopResult
    ) -> list[PoppedMessage]:
        """Messages that really match; the others (hash collisions, retries) are acked."""
        if tag_filter.matches_all:
            return list(result.messages)
        keep = [m for m in result.messages if tag_filter.matches_message(m.message)]
        drop = [m for m in result.messages if not tag_filter.matches_message(m.message)]
        if drop:
            handles: list[str | ReceiptHandle] = [m.handle for m in drop]
            topic = drop[0].message.topic
            await asyncio.to_thread(self.pop.ack_many, group, topic, handles, now_ms=_now_ms())
        return keep

    # --- AckMessage ---
    async def AckMessage(  # noqa: N802
        self, request: service_pb2.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.AckMessageResponse:
        try:
            return await self._ack(request)
        except Exception as exc:
            return service_pb2.AckMessageResponse(status=_api_error(exc, "AckMessage").status())

    async def _ack(self, request: service_pb2.AckMessageRequest) -> service_pb2.AckMessageResponse:
        group = self.resources.group(str(request.group.name))
        topic = self.resources.topic(str(request.topic.name)).topic_name
        if not request.entries:
            raise ApiError(statuses.BAD_REQUEST, "entries is empty: nothing to acknowledge")
        # Entries are added to the response in place and their statuses set field by field:
        # built apart and passed in, each would be copied once more (PROFILE.md, issue 19).
        response = service_pb2.AckMessageResponse()
        add = response.entries.add
        entries: list[service_pb2.AckMessageResultEntry] = []
        slots: list[int] = []
        handles: list[str | ReceiptHandle] = []
        renewed = len(self.renewals) > 0
        for entry in request.entries:
            text = str(entry.receipt_handle)
            result = add(message_id=entry.message_id, receipt_handle=text)
            try:
                handles.append(await self._release(group, text) if renewed else parse_handle(text))
                result.status.code = statuses.OK
                result.status.message = "OK"  # statuses.ok()
                slots.append(len(entries))
            except ApiError as exc:
                result.status.CopyFrom(exc.status())
            entries.append(result)
        if handles:
            outcomes = await self.acks.ack((group, topic, handles))
            for slot, outcome in zip(slots, outcomes, strict=True):
                if outcome is not None:
                    entries[slot].status.CopyFrom(pop_error(outcome).status())
            if self.servicer.replication is not None:
                await self._replicated()
        first = entries[0].status
        if all(e.status.code == first.code for e in entries):
            response.status.CopyFrom(first)
        else:
            response.status.code = Code.MULTIPLE_RESULTS
            response.status.message = "entries have different results"
        return response

    async def _replicated(self) -> None:
        """Raft group: answer an ack, an invisible-time change or a DLQ forward only once what
        it wrote (ACK and checkpoint records, the DLQ copy, consumer-offset commits) is
        committed, so a new leader never hands out an acknowledged message again and keeps
        every changed invisible time."""
        if self.servicer.replication is None:
            return  # one node: Pop waited for the flush (pop_flush_wait, in its thread)
        await self.servicer.commit(NOTHING_TO_FLUSH)

    # --- ChangeInvisibleDuration ---
    async def ChangeInvisibleDuration(  # noqa: N802
        self,
        request: service_pb2.ChangeInvisibleDurationRequest,
        context: grpc.aio.ServicerContext,
    ) -> service_pb2.ChangeInvisibleDurationResponse:
        async def work() -> service_pb2.ChangeInvisibleDurationResponse:
            group = self.resources.group(str(request.group.name))
            topic = self.resources.topic(str(request.topic.name)).topic_name
            value = _ms(request.invisible_duration)
            if not 0 <= value <= self.limits.invisible_ms_max:
                raise ApiError(
                    Code.ILLEGAL_INVISIBLE_TIME,
                    f"invisible_duration {value} ms is outside [0, "
                    f"{self.limits.invisible_ms_max}] ms",
                )
            handle = await self._release(group, str(request.receipt_handle))
            new = await asyncio.to_thread(
                self.pop.change_invisible_time,
                group,
                topic,
                handle,
                invisible_time_ms=value,
                now_ms=_now_ms(),
            )
            await self._replicated()
            return service_pb2.ChangeInvisibleDurationResponse(
                status=statuses.ok(), receipt_handle=new.encode()
            )

        return await _answer(
            service_pb2.ChangeInvisibleDurationResponse, work, "ChangeInvisibleDuration"
        )

    # --- ForwardMessageToDeadLetterQueue ---
    async def ForwardMessageToDeadLetterQueue(  # noqa: N802
        self,
        request: service_pb2.ForwardMessageToDeadLetterQueueRequest,
        context: grpc.aio.ServicerContext,
    ) -> service_pb2.ForwardMessageToDeadLetterQueueResponse:
        async def work() -> service_pb2.ForwardMessageToDeadLetterQueueResponse:
            group = self.resources.group(str(request.group.name))
            topic = self.resources.topic(str(request.topic.name)).topic_name
            handle = await self._release(group, str(request.receipt_handle))
            if handle.commit_offset < 0:
                raise ApiError(
                    Code.INVALID_RECEIPT_HANDLE,
                    "receipt_handle has no commit-log offset (9th field)",
                )
            await asyncio.to_thread(self.pop.forward_to_dlq, group, topic, handle, now_ms=_now_ms())
            await self._replicated()
            return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=statuses.ok())

        return await _answer(
            service_pb2.ForwardMessageToDeadLetterQueueResponse,
            work,
            "ForwardMessageToDeadLetterQueue",
        )


def _not_found(text: str) -> definition_pb2.Status:
    return definition_pb2.Status(code=statuses.MESSAGE_NOT_FOUND, message=statuses.bounded(text))


async def _answer(
    make: Callable[..., Response], work: Callable[[], Awaitable[Response]], what: str
) -> Response:
    """Run ``work``; on failure answer ``make(status=...)`` instead."""
    try:
        return await work()
    except Exception as exc:
        return make(status=_api_error(exc, what).status())
