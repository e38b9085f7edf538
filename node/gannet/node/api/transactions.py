"""Transactional messages over v2: half messages, EndTransaction and orphan checks
(``docs/protocol.md`` §1, ``docs/formats/commitlog.md`` §9, RocketMQ
``TransactionalMessageService``), on one node or a Raft group.

Every record a transaction writes (half message, commit copy, op record, check record, discard
copy: :mod:`gannet.node.transactions.records`) is an ordinary commit-log append, so on a Raft
group it is proposed and committed like any send. Every replica applies the records that
dispatch reaches to its :class:`~gannet.node.transactions.book.TransactionBook`; only the leader
writes:

* **EndTransaction** (followers forward it, :mod:`forwarding`): the leader waits until the half
  message is dispatched, reserves the resolution in its book (a second request for the same
  transaction meanwhile is refused, a retried identical one is answered OK without a write),
  appends the commit copy and/or op record and answers once they are committed.
* **Orphan checks**: every ``CHECK_TICK_S`` the leader looks for half messages older than
  ``check_after_ms`` (RocketMQ ``transactionTimeOut``) whose last check is ``check_interval_ms``
  old (``transactionCheckInterval``), and appends one check record each. Every member, on
  dispatching a fresh check record, pushes a ``RecoverOrphanedTransactionCommand`` to one of
  its own producers of the topic (Telemetry stream); the producer's checker answers with
  EndTransaction (``SOURCE_SERVER_CHECK``). A check counts whether or not a producer was
  connected (as RocketMQ). After ``check_max`` checks (``transactionCheckMax``) the half
  message is **discarded** as RocketMQ's ``resolveDiscardMsg`` does: copied to
  ``TRANS_CHECK_MAX_TIME_TOPIC`` for inspection, never delivered.

After a leader change the new leader serves only once it applied every record of the previous
terms (:meth:`ReplicationNode.check_leader`), so its book holds every committed resolution: a
committed transaction is neither lost nor written twice. On start the book is read back from
the op, check and half topics (a half message whose commit copy survived without its op record
is found through the index by its unique key).

:class:`TransactionService` is the store side (worker and dispatch threads);
:class:`TransactionHandler` is its event-loop side for
:class:`~gannet.node.api.messaging.MessagingServicer`: the EndTransaction work, an outbox per
producer Telemetry stream (merged into the stream by :func:`with_outbox`, at most
``OUTBOX_COMMANDS_MAX`` queued) and the check task.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.domain.committing import Appended
from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.store import properties as props
from gannet.node.store import querying
from gannet.node.store.configs.topics import PERM_READ, PERM_WRITE, TopicConfig
from gannet.node.store.log import records
from gannet.node.store.log.commitlog import AppendResult
from gannet.node.store.log.records import DispatchInfo
from gannet.node.store.message_store import MessageStore
from gannet.node.transactions import records as tr
from gannet.node.transactions.book import (
    CheckLimits,
    EndRefused,
    Pending,
    Resolution,
    TransactionBook,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

TransactionLimits = CheckLimits
parse_transaction_id = tr.parse_transaction_id
transaction_id_of = tr.transaction_id_of
READ_BATCH_MESSAGES = 256
DISPATCH_WAIT_S = 2.0
"""How long EndTransaction waits for its half message to be dispatched (just committed)."""


@dataclass(frozen=True, slots=True)
class OrphanCheck:
    """A half message to offer to a producer of ``topic``."""

    topic: str
    transaction_id: str
    message: definition_pb2.Message
    half: records.Message | None = None
    """The half message as stored (remoting producers get it in the store's layout)."""


def ensure_topics(store: MessageStore) -> None:
    for name in tr.TOPICS:
        if store.topic_configs.get(name) is None:
            store.topic_configs.put(
                TopicConfig(
                    name, read_queue_nums=1, write_queue_nums=1, perm=PERM_READ | PERM_WRITE
                )
            )


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionService:
    """The book of one store, fed by dispatch; builds what the leader appends.

    ``on_check`` is called (dispatch thread) with each fresh check record's half message."""

    def __init__(
        self,
        store: MessageStore,
        limits: CheckLimits | None = None,
        *,
        on_check: Callable[[OrphanCheck], None] | None = None,
        listen: bool = True,
    ) -> None:
        self.store = store
        self.book = TransactionBook(limits)
        self.on_check = on_check
        self.checks_proposed_total = 0
        self._listening = listen
        if listen:
            store.add_arrival_listener(self._on_dispatched)
        self._replay()

    @property
    def limits(self) -> CheckLimits:
        return self.book.limits

    @limits.setter
    def limits(self, value: CheckLimits) -> None:
        self.book.limits = value

    def close(self) -> None:
        if self._listening and self._on_dispatched in self.store.listeners:
            self.store.listeners.remove(self._on_dispatched)

    def pending(self) -> int:
        return self.book.pending_count()

    @property
    def committed_total(self) -> int:
        return self.book.ended_total[Resolution.COMMIT]

    @property
    def rolled_back_total(self) -> int:
        return self.book.ended_total[Resolution.ROLLBACK]

    @property
    def abandoned_total(self) -> int:
        return self.book.ended_total[Resolution.DISCARD]

    # ------------------------------------------------------------------ applying the log
    def _on_dispatched(self, infos: Sequence[DispatchInfo]) -> None:
        """Dispatch thread (or the sender's, inline): a committed batch. Only transaction
        records cost more than one filtering pass; an error on one is logged and the
        rest of the batch still applied."""
        for info in tr.watched_of(infos):
            try:
                self._apply(info)
            except Exception:
                log.exception(
                    "transaction record at commit-log offset %d not applied", info.commit_offset
                )

    def _apply(self, info: DispatchInfo) -> None:
        body = None
        if info.topic in (tr.OP_TOPIC, tr.CHECK_TOPIC):
            message = self.store.read_message(info.commit_offset)
            body = message.body if message is not None else None
        seen = tr.seen(info, body)
        if seen is None:
            return
        if seen.kind == "half":
            self.book.half(
                seen.half_offset,
                seen.topic,
                info.store_timestamp_ms,
                message_id=info.uniq_key or "",
                queue_offset=info.queue_offset,
            )
        elif seen.kind == "commit":
            self.book.resolve(seen.half_offset, Resolution.COMMIT)
        elif seen.kind == "op":
            self.book.resolve(seen.half_offset, Resolution.ROLLBACK)
        elif seen.kind == "check":
            pending = self.book.checked(seen.half_offset, seen.checks, info.store_timestamp_ms)
            fresh_ms = max(self.limits.check_interval_ms, 1_000)
            if pending is not None and _wall_ms() - info.store_timestamp_ms < fresh_ms:
                self._tell_check(pending)

    def _tell_check(self, pending: Pending) -> None:
        if self.on_check is None:
            return
        half = self.store.read_message(pending.half_offset)
        if half is None or half.topic != tr.HALF_TOPIC:
            return
        offset = pending.half_offset
        self.on_check(
            OrphanCheck(pending.topic, tr.transaction_id_of(offset), tr.message_pb(half), half)
        )

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

    def _replay(self) -> None:
        """Open transactions from the op, check and half topics (start)."""
        resolved: set[int] = set()
        checks: dict[int, tuple[int, int]] = {}
        halves: list[tuple[records.Message, int]] = []
        queue_offsets: dict[int, int] = {}

        def op(message: records.Message, _: int) -> None:
            if message.body.isdigit() and message.tags == tr.OP_TAG:
                resolved.add(int(message.body))

        def check(message: records.Message, _: int) -> None:
            if message.body.isdigit():
                number = message.properties.get(tr.CHECK_TIMES, "0")
                seen = (int(number) if number.isdigit() else 0, message.store_timestamp_ms)
                checks[int(message.body)] = max(checks.get(int(message.body), (0, 0)), seen)

        def half(message: records.Message, offset: int) -> None:
            if offset not in resolved:
                halves.append((message, offset))
                queue_offsets[offset] = message.queue_offset

        self._read_all(tr.OP_TOPIC, op)
        self._read_all(tr.CHECK_TOPIC, check)
        self._read_all(tr.HALF_TOPIC, half)
        for message, offset in halves:
            if self._commit_copy_exists(message, offset):
                continue
            topic = message.properties.get(props.REAL_TOPIC, "")
            count, last_ms = checks.get(offset, (0, 0))
            self.book.half(
                offset,
                topic,
                message.store_timestamp_ms,
                count,
                message_id=message.properties.get(props.UNIQ_KEY, ""),
                queue_offset=queue_offsets[offset],
            )
            if last_ms:
                self.book.checked(offset, count, last_ms)

    def _commit_copy_exists(self, half: records.Message, half_offset: int) -> bool:
        """The commit copy is written before the op record: one may be cut by a crash or a
        failover while the other committed; the index finds the copy by unique key."""
        uniq = half.properties.get(props.UNIQ_KEY)
        topic = half.properties.get(props.REAL_TOPIC)
        if not uniq or not topic or self.store.index is None:
            return False
        found = querying.by_key(self.store, topic, uniq, unique=True)
        return any(
            records.transaction_type(m.sys_flag) == records.SYSFLAG_TRANSACTION_COMMIT_TYPE
            and m.prepared_transaction_offset == half_offset
            for m in found.messages
        )

    # ------------------------------------------------------------------ the leader's writes
    def prepare_end(
        self, topic: str, message_id: str, transaction_id: str, resolution: Resolution
    ) -> tuple[int, list[records.Message]] | None:
        """Check an EndTransaction and reserve it; the records to append, or None when the
        same resolution is already in the log. Raises ApiError naming the problem."""
        offset = tr.parse_transaction_id(transaction_id)
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
        self.store.wait_dispatched(offset + 1, DISPATCH_WAIT_S)
        try:
            if not self.book.begin_end(offset, resolution):
                return None
        except EndRefused as exc:
            raise ApiError(
                Code.INVALID_TRANSACTION_ID, f"transaction_id {transaction_id} {exc}"
            ) from None
        return offset, tr.resolution_records(half, offset, resolution)

    def _half_at(self, offset: int, transaction_id: str) -> records.Message:
        try:
            half = self.store.read_message(offset)
        except Exception:
            half = None
        if half is None or half.topic != tr.HALF_TOPIC:
            raise ApiError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction_id {transaction_id} names no half message",
            )
        return half

    def due_writes(self, now_ms: int) -> tuple[list[records.Message], list[int]]:
        """Leader: the check records and discards due now, and the discarded offsets
        (reserved in the book: :meth:`TransactionBook.end_done` / ``end_failed`` them)."""
        check, discard = self.book.due(now_ms)
        writes = [tr.check_record(p.half_offset, p.checks + 1) for p in check]
        discarded = []
        for p in discard:
            half = self.store.read_message(p.half_offset)
            if half is None or half.topic != tr.HALF_TOPIC:
                self.book.end_failed(p.half_offset)
                self.book.resolve(p.half_offset, Resolution.DISCARD)  # its file was cleaned
                continue
            log.warning(
                "transaction %s of topic %r unresolved after %d checks: discarded to %s",
                tr.transaction_id_of(p.half_offset), p.topic, p.checks, tr.DISCARD_TOPIC,
            )  # fmt: skip
            writes += tr.resolution_records(half, p.half_offset, Resolution.DISCARD)
            discarded.append(p.half_offset)
        if writes:
            ensure_topics(self.store)
        self.checks_proposed_total += len(check)
        return writes, discarded

    def append(self, writes: list[records.Message]) -> tuple[list[AppendResult], int | None]:
        return self.store.put_messages_nowait(writes)


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
    """The servicer's side: Telemetry outboxes of producers, the check task and the
    EndTransaction work. ``commit(appended)`` returns once an append may be answered (the
    broker's one rule: :mod:`gannet.node.domain.committing`); ``is_leader`` says whether this
    node writes."""

    def __init__(
        self,
        store: MessageStore,
        topic_name: Callable[[str], str],
        commit: Callable[[Appended], Awaitable[None]],
        is_leader: Callable[[], bool] = lambda: True,
        limits: CheckLimits | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.service = TransactionService(store, limits, on_check=self._offer_threadsafe)
        self._topic_name = topic_name
        self._commit = commit
        self._is_leader = is_leader
        self._streams: dict[str, tuple[set[str], asyncio.Queue[Outgoing]]] = {}
        self._closing = asyncio.Event()
        self.checks_sent_total = 0
        """RecoverOrphanedTransactionCommands this node pushed to a producer."""
        self.check_listeners: list[Callable[[OrphanCheck], bool]] = []
        """Other protocols' producers (:mod:`gannet.node.remoting.transactions`), asked first
        (event loop): True when one of theirs took the check."""
        self._task = self._loop.create_task(self._check_loop())

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

    # --- sending ---
    def to_half(self, messages: list[records.Message]) -> list[records.Message]:
        """The half messages to store instead (creates the transaction topics on first use);
        ``TOO_MANY_REQUESTS`` while ``pending_max`` transactions are open."""
        pending, limit = self.service.pending(), self.service.limits.pending_max
        if pending + len(messages) > limit:
            raise ApiError(
                statuses.TOO_MANY_REQUESTS,
                f"{pending} transactions are open (at most {limit}); commit or roll back "
                "some first",
            )
        ensure_topics(self.service.store)
        return tr.to_half(messages)

    def retried(
        self, topic: str, message_ids: tuple[str, ...]
    ) -> service_pb2.SendMessageResponse | None:
        """The original answer to a transactional send whose half message is already open
        (the client retried it, e.g. across a failover); None for a new one."""
        if len(message_ids) != 1 or not message_ids[0]:
            return None
        found = self.service.book.open_half(topic, message_ids[0])
        if found is None:
            return None
        entry = service_pb2.SendResultEntry(
            status=statuses.ok(),
            message_id=message_ids[0],
            transaction_id=tr.transaction_id_of(found.half_offset),
            offset=found.queue_offset,
        )
        return service_pb2.SendMessageResponse(status=statuses.ok(), entries=[entry])

    def sent(self, topic: str, results: list[AppendResult]) -> list[str]:
        """The transaction ids of appended half messages (dispatch books them)."""
        return [tr.transaction_id_of(r.wrote_offset) for r in results]

    # --- orphan checks ---
    def begin_shutdown(self) -> None:
        self._closing.set()

    async def _check_loop(self) -> None:
        while not self._closing.is_set():
            try:
                await asyncio.wait_for(self._closing.wait(), CHECK_TICK_S)
                return
            except TimeoutError:
                pass
            if not self._is_leader() or not self.service.pending():
                continue
            try:
                await self._check_once(_wall_ms())
            except ApiError as exc:
                log.info("transaction checks not written: %s", exc.message)
            except Exception:
                log.exception("transaction check failed")

    async def _check_once(self, now_ms: int) -> None:
        writes, discarded = await asyncio.to_thread(self.service.due_writes, now_ms)
        if not writes:
            return
        await self._append_ending(writes, discarded)

    def _offer_threadsafe(self, check: OrphanCheck) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._offer, check)

    def _offer(self, check: OrphanCheck) -> None:
        command = service_pb2.TelemetryCommand(
            recover_orphaned_transaction_command=service_pb2.RecoverOrphanedTransactionCommand(
                message=check.message, transaction_id=check.transaction_id
            )
        )
        for listener in self.check_listeners:
            if listener(check):
                self.checks_sent_total += 1
                return
        for topics, outbox in list(self._streams.values()):
            if check.topic in topics and not outbox.full():
                outbox.put_nowait(Outgoing(command))
                self.checks_sent_total += 1
                return

    # --- EndTransaction ---
    async def end(self, request: service_pb2.EndTransactionRequest) -> None:
        """Apply an EndTransaction on the leader; raises ApiError naming the problem."""
        topic = self._topic_name(str(request.topic.name))
        if request.resolution == definition_pb2.COMMIT:
            resolution = Resolution.COMMIT
        elif request.resolution == definition_pb2.ROLLBACK:
            resolution = Resolution.ROLLBACK
        else:
            raise ApiError(
                statuses.BAD_REQUEST,
                f"resolution {int(request.resolution)} is neither COMMIT nor ROLLBACK",
            )
        prepared = await asyncio.to_thread(
            self.service.prepare_end,
            topic,
            str(request.message_id),
            str(request.transaction_id),
            resolution,
        )
        if prepared is None:
            return  # a retry: the same resolution is already in the log
        offset, writes = prepared
        await self._append_ending(writes, (offset,))

    async def _append_ending(self, writes: list[records.Message], ending: Iterable[int]) -> None:
        """Append ``writes`` and wait for their commit; then the half messages at
        offsets ``ending`` are done in the book, or, on any failure, left to the log to decide
        (:meth:`TransactionBook.end_failed`)."""
        book = self.service.book
        try:
            _, durable_at = await asyncio.to_thread(self.service.append, writes)
            await self._commit(Appended(durable_at))
        except BaseException:
            for offset in ending:
                book.end_failed(offset)
            raise
        for offset in ending:
            book.end_done(offset)
