"""Transactional messages over v2: half messages, EndTransaction and orphan checks
(``v2-protocol.md`` §4, RocketMQ ``TransactionalMessageService``).

Storage format (as RocketMQ's broker):

* A transactional SendMessage is stored as a **half message** in ``RMQ_SYS_TRANS_HALF_TOPIC``
  queue 0 with ``REAL_TOPIC`` / ``REAL_QID`` naming where it belongs and ``TRAN_MSG=true``.
  Consumers never read that topic, so the message stays invisible.
* The answer's ``transaction_id`` is the half message's commit-log offset as 16 hex digits;
  EndTransaction finds the half message through it (and checks its message id and topic).
* **COMMIT** appends a copy (without those properties) to the real topic and queue; COMMIT and
  **ROLLBACK** then append an **op record** to ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0: tag
  ``d``, body = the half message's commit-log offset in decimal. A half message with an op
  record is resolved; a second EndTransaction for it is refused (``INVALID_TRANSACTION_ID``).
* Only open transactions are kept in memory (at most ``pending_max``; a transactional send
  beyond that is ``TOO_MANY_REQUESTS``). On start the op topic is read back, then the half
  topic: every half message without an op record is open again.

**Orphan checks.** A pending half message older than ``check_after_ms`` (RocketMQ
``transactionTimeOut``, 6 s) is offered to a connected producer of its topic as a
``RecoverOrphanedTransactionCommand`` on that producer's Telemetry stream, every
``check_interval_ms`` (RocketMQ ``transactionCheckInterval``), at most ``check_max`` times
(``transactionCheckMax``, 15); after that it is rolled back (logged). The producer's checker
answers with EndTransaction (source ``SOURCE_SERVER_CHECK``).

:class:`TransactionService` is bookkeeping over the store with an explicit ``now_ms`` (called
from worker threads); :class:`TransactionHandler` is its event-loop side for
:class:`~gannet.node.api.messaging.MessagingServicer`: the EndTransaction RPC, an outbox per
producer Telemetry stream (merged into the stream by :func:`with_outbox`, at most
``OUTBOX_COMMANDS_MAX`` queued) and the check task (every ``CHECK_TICK_S`` while anything is
pending). Not served on a Raft group (the servicer answers ``UNSUPPORTED`` there).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.api import statuses
from gannet.node.api.statuses import ApiError
from gannet.node.store import errors, records, validation
from gannet.node.store import properties as props
from gannet.node.store.commitlog import AppendResult
from gannet.node.store.message_store import MessageStore
from gannet.node.store.topic_configs import PERM_READ, PERM_WRITE, TopicConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

HALF_TOPIC = validation.TRANS_HALF_TOPIC
OP_TOPIC = validation.TRANS_OP_HALF_TOPIC
OP_TAG = "d"
TRANSACTION_ID_HEX_DIGITS = 16
READ_BATCH_MESSAGES = 256
_HIDDEN = {props.REAL_TOPIC, props.REAL_QUEUE_ID, props.TRANSACTION_PREPARED}


@dataclass(frozen=True, slots=True)
class TransactionLimits:
    check_after_ms: int = 6_000  # transactionTimeOut
    check_interval_ms: int = 60_000  # transactionCheckInterval
    check_max: int = 15  # transactionCheckMax
    pending_max: int = 100_000


@dataclass(slots=True)
class _Pending:
    commit_offset: int
    topic: str
    stored_ms: int
    checks: int = 0
    next_check_ms: int = 0


@dataclass(frozen=True, slots=True)
class OrphanCheck:
    """A half message to offer to a producer of ``topic``."""

    topic: str
    transaction_id: str
    message: definition_pb2.Message


def transaction_id_of(commit_offset: int) -> str:
    return f"{commit_offset:0{TRANSACTION_ID_HEX_DIGITS}X}"


def parse_transaction_id(text: str) -> int:
    if len(text) != TRANSACTION_ID_HEX_DIGITS:
        raise ApiError(
            Code.INVALID_TRANSACTION_ID,
            f"transaction_id {text[:40]!r} is not {TRANSACTION_ID_HEX_DIGITS} hex digits",
        )
    try:
        return int(text, 16)
    except ValueError:
        raise ApiError(
            Code.INVALID_TRANSACTION_ID, f"transaction_id {text!r} is not hexadecimal"
        ) from None


def ensure_topics(store: MessageStore) -> None:
    for name in (HALF_TOPIC, OP_TOPIC):
        if store.topic_configs.get(name) is None:
            store.topic_configs.put(
                TopicConfig(
                    name, read_queue_nums=1, write_queue_nums=1, perm=PERM_READ | PERM_WRITE
                )
            )


def to_half(messages: list[records.Message]) -> list[records.Message]:
    """The half messages to append instead of ``messages`` (already assigned a queue)."""
    halves = []
    for m in messages:
        properties = dict(m.properties)
        properties[props.REAL_TOPIC] = m.topic
        properties[props.REAL_QUEUE_ID] = str(m.queue_id)
        properties[props.TRANSACTION_PREPARED] = "true"
        halves.append(dataclasses.replace(m, topic=HALF_TOPIC, queue_id=0, properties=properties))
    return halves


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def message_pb(half: records.Message) -> definition_pb2.Message:
    """A half message as the v2 message a producer's checker sees."""
    p = half.properties
    sp = definition_pb2.SystemProperties(
        message_id=p.get(props.UNIQ_KEY, ""),
        keys=half.keys,
        body_encoding=definition_pb2.IDENTITY,
        message_type=definition_pb2.TRANSACTION,
        born_timestamp=_timestamp(half.born_timestamp_ms),
        store_timestamp=_timestamp(half.store_timestamp_ms),
    )
    if half.tags is not None:
        sp.tag = half.tags
    user = {
        k: v
        for k, v in p.items()
        if k not in _HIDDEN
        and k not in validation.RESERVED_PROPERTY_KEYS
        and not k.startswith(props.TRANSIENT_PREFIX)
    }
    return definition_pb2.Message(
        topic=definition_pb2.Resource(name=p.get(props.REAL_TOPIC, "")),
        user_properties=user,
        system_properties=sp,
        body=half.body,
    )


class TransactionService:
    def __init__(self, store: MessageStore, limits: TransactionLimits | None = None) -> None:
        self.store = store
        self.limits = limits or TransactionLimits()
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self.committed_total = 0
        self.rolled_back_total = 0
        self.abandoned_total = 0
        self._recover()

    # --- start ---
    def _read_all(self, topic: str, each: Callable[[records.Message, int], None]) -> None:
        if self.store.topic_configs.get(topic) is None:
            return
        offset = self.store.min_offset_in_queue(topic, 0)
        while True:
            got = self.store.get_messages(topic, 0, offset, READ_BATCH_MESSAGES)
            if not got.messages:
                return
            for stored in got.messages:
                each(records.decode(stored.data), stored.commit_offset)
            offset = got.next_begin_offset

    def _recover(self) -> None:
        resolved: set[int] = set()

        def op(message: records.Message, _: int) -> None:
            if message.body.isdigit():
                resolved.add(int(message.body))

        def half(message: records.Message, commit_offset: int) -> None:
            if commit_offset in resolved or len(self._pending) >= self.limits.pending_max:
                return
            topic = message.properties.get(props.REAL_TOPIC, "")
            self._pending[commit_offset] = _Pending(
                commit_offset, topic, message.store_timestamp_ms
            )

        self._read_all(OP_TOPIC, op)
        self._read_all(HALF_TOPIC, half)

    # --- send ---
    def sent(self, topic: str, results: list[AppendResult]) -> list[str]:
        """Half messages appended: track them; their transaction ids."""
        with self._lock:
            for r in results:
                if len(self._pending) < self.limits.pending_max:
                    self._pending[r.wrote_offset] = _Pending(
                        r.wrote_offset, topic, r.store_timestamp_ms
                    )
        return [transaction_id_of(r.wrote_offset) for r in results]

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    # --- end ---
    def end(
        self, topic: str, message_id: str, transaction_id: str, commit: bool
    ) -> tuple[list[AppendResult], int | None]:
        """Commit or roll back; returns the appends and the offset to wait for (see
        ``put_messages_nowait``). Raises ApiError naming the problem."""
        offset = parse_transaction_id(transaction_id)
        half = self._half_at(offset, transaction_id)
        real_topic = half.properties.get(props.REAL_TOPIC, "")
        if real_topic != topic:
            raise ApiError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction_id {transaction_id} belongs to topic {real_topic!r}, not {topic!r}",
            )
        if message_id and half.properties.get(props.UNIQ_KEY) != message_id:
            raise ApiError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction_id {transaction_id} is not the one of message_id {message_id!r}",
            )
        with self._lock:
            pending = self._pending.pop(offset, None)
        if pending is None:  # only open transactions are tracked (memory: open ones only)
            raise ApiError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction_id {transaction_id} has already been committed or rolled back",
            )
        writes = [self._op(offset)]
        if commit:
            writes.insert(0, self._real(half))
        try:
            results, durable_at = self.store.put_messages_nowait(writes)
        except BaseException:
            with self._lock:
                self._pending[offset] = pending
            raise
        with self._lock:
            if commit:
                self.committed_total += 1
            else:
                self.rolled_back_total += 1
        return results, durable_at

    def _half_at(self, offset: int, transaction_id: str) -> records.Message:
        try:
            half = self.store.read_message(offset)
        except Exception:
            half = None
        if half is None or half.topic != HALF_TOPIC:
            raise ApiError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction_id {transaction_id} names no half message",
            )
        return half

    @staticmethod
    def _real(half: records.Message) -> records.Message:
        p = {k: v for k, v in half.properties.items() if k not in _HIDDEN}
        return records.Message(
            topic=half.properties[props.REAL_TOPIC],
            body=half.body,
            properties=p,
            queue_id=int(half.properties.get(props.REAL_QUEUE_ID, "0")),
            sys_flag=half.sys_flag,
            born_timestamp_ms=half.born_timestamp_ms,
            born_host=half.born_host,
        )

    @staticmethod
    def _op(offset: int) -> records.Message:
        return records.Message(
            topic=OP_TOPIC, body=str(offset).encode(), properties={props.TAGS: OP_TAG}
        )

    # --- orphan checks ---
    def due_checks(self, now_ms: int, has_producer: Callable[[str], bool]) -> list[OrphanCheck]:
        """Half messages to offer now; those past ``check_max`` are rolled back."""
        lim = self.limits
        due: list[_Pending] = []
        abandon: list[_Pending] = []
        with self._lock:
            for p in self._pending.values():
                if now_ms - p.stored_ms < lim.check_after_ms or now_ms < p.next_check_ms:
                    continue
                if not has_producer(p.topic):
                    continue
                if p.checks >= lim.check_max:
                    abandon.append(p)
                    continue
                p.checks += 1
                p.next_check_ms = now_ms + lim.check_interval_ms
                due.append(p)
        for p in abandon:
            log.warning(
                "transaction %s of topic %r unresolved after %d checks: rolled back",
                transaction_id_of(p.commit_offset), p.topic, p.checks,
            )  # fmt: skip
            try:
                self.end(p.topic, "", transaction_id_of(p.commit_offset), commit=False)
                self.abandoned_total += 1
            except ApiError:
                pass
        checks = []
        for p in due:
            half = self.store.read_message(p.commit_offset)
            if half is None:
                with self._lock:
                    self._pending.pop(p.commit_offset, None)
                continue
            checks.append(
                OrphanCheck(p.topic, transaction_id_of(p.commit_offset), message_pb(half))
            )
        return checks


# ---------------------------------------------------------------------- serving
@dataclass(frozen=True, slots=True)
class Outgoing:
    """A command the broker sends on a Telemetry stream (merged by :func:`with_outbox`)."""

    command: service_pb2.TelemetryCommand


OUTBOX_COMMANDS_MAX = 256
CHECK_TICK_S = 1.0


async def with_outbox(
    requests: AsyncIterator[T], outbox: asyncio.Queue[Outgoing] | None
) -> AsyncIterator[T | Outgoing]:
    """The client's commands interleaved with what the broker queued for this stream."""
    iterator = aiter(requests)
    if outbox is None:
        async for request in iterator:
            yield request
        return
    following: asyncio.Future[T | None] = asyncio.ensure_future(anext(iterator, None))
    queued: asyncio.Future[Outgoing] = asyncio.ensure_future(outbox.get())
    try:
        while True:
            waiting: set[asyncio.Future[object]] = {following, queued}  # type: ignore[arg-type]
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if queued in done:
                yield queued.result()
                queued = asyncio.ensure_future(outbox.get())
            if following in done:
                received = following.result()
                if received is None:
                    return
                yield received
                following = asyncio.ensure_future(anext(iterator, None))
    finally:
        following.cancel()
        queued.cancel()


class TransactionHandler:
    """The servicer's side: Telemetry outboxes of producers, the orphan-check task and the
    EndTransaction RPC. ``wait_durable`` waits until an append may be acknowledged."""

    def __init__(
        self,
        store: MessageStore,
        topic_name: Callable[[str], str],
        wait_durable: Callable[[int], Awaitable[None]],
        limits: TransactionLimits | None = None,
    ) -> None:
        self.service = TransactionService(store, limits)
        self._topic_name = topic_name
        self._wait_durable = wait_durable
        self._streams: dict[str, tuple[set[str], asyncio.Queue[Outgoing]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        if self.service.pending():
            self._ensure_checking()

    # --- Telemetry streams ---
    def open_stream(self, client_id: str) -> asyncio.Queue[Outgoing]:
        outbox: asyncio.Queue[Outgoing] = asyncio.Queue(OUTBOX_COMMANDS_MAX)
        self._streams[client_id] = (set(), outbox)
        return outbox

    def publishing(self, client_id: str, settings: definition_pb2.Settings) -> None:
        stream = self._streams.get(client_id)
        if stream is not None and settings.HasField("publishing"):
            stream[0].clear()
            stream[0].update(str(t.name) for t in settings.publishing.topics)

    def close_stream(self, client_id: str, outbox: asyncio.Queue[Outgoing]) -> None:
        stream = self._streams.get(client_id)
        if stream is not None and stream[1] is outbox:
            del self._streams[client_id]

    def _has_producer(self, topic: str) -> bool:
        return any(topic in topics for topics, _ in list(self._streams.values()))

    # --- sending ---
    def to_half(self, messages: list[records.Message]) -> list[records.Message]:
        """The half messages to store instead (creates the transaction topics on first use);
        ``TOO_MANY_REQUESTS`` while ``pending_max`` transactions are open."""
        if self.service.pending() + len(messages) > self.service.limits.pending_max:
            raise ApiError(
                statuses.TOO_MANY_REQUESTS,
                f"{self.service.pending()} transactions are open (at most "
                f"{self.service.limits.pending_max}); commit or roll back some first",
            )
        ensure_topics(self.service.store)
        return to_half(messages)

    def sent(self, topic: str, results: list[AppendResult]) -> list[str]:
        ids = self.service.sent(topic, results)
        self._ensure_checking()
        return ids

    # --- orphan checks ---
    def _ensure_checking(self) -> None:
        if (self._task is None or self._task.done()) and not self._closing.is_set():
            self._task = asyncio.get_running_loop().create_task(self._check_loop())

    def begin_shutdown(self) -> None:
        self._closing.set()

    async def _check_loop(self) -> None:
        while self.service.pending():
            try:
                await asyncio.wait_for(self._closing.wait(), CHECK_TICK_S)
                return
            except TimeoutError:
                pass
            try:
                due = await asyncio.to_thread(
                    self.service.due_checks, _wall_ms(), self._has_producer
                )
            except Exception:
                log.exception("transaction check failed")
                continue
            for check in due:
                self._offer(check)

    def _offer(self, check: OrphanCheck) -> None:
        command = service_pb2.TelemetryCommand(
            recover_orphaned_transaction_command=service_pb2.RecoverOrphanedTransactionCommand(
                message=check.message, transaction_id=check.transaction_id
            )
        )
        for topics, outbox in list(self._streams.values()):
            if check.topic in topics and not outbox.full():
                outbox.put_nowait(Outgoing(command))
                return

    # --- EndTransaction ---
    async def EndTransaction(  # noqa: N802 — gRPC method name
        self, request: service_pb2.EndTransactionRequest
    ) -> service_pb2.EndTransactionResponse:
        try:
            topic = self._topic_name(str(request.topic.name))
            if request.resolution not in (definition_pb2.COMMIT, definition_pb2.ROLLBACK):
                raise ApiError(
                    statuses.BAD_REQUEST,
                    f"resolution {int(request.resolution)} is neither COMMIT nor ROLLBACK",
                )
            _, durable_at = await asyncio.to_thread(
                self.service.end,
                topic,
                str(request.message_id),
                str(request.transaction_id),
                request.resolution == definition_pb2.COMMIT,
            )
            if durable_at is not None:
                await self._wait_durable(durable_at)
        except ApiError as exc:
            return service_pb2.EndTransactionResponse(status=exc.status())
        except errors.StoreError as exc:
            return service_pb2.EndTransactionResponse(
                status=statuses.from_store_error(exc).status()
            )
        except Exception as exc:
            log.exception("EndTransaction failed")
            return service_pb2.EndTransactionResponse(
                status=ApiError(statuses.INTERNAL_SERVER_ERROR, f"EndTransaction: {exc}").status()
            )
        return service_pb2.EndTransactionResponse(status=statuses.ok())


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000
