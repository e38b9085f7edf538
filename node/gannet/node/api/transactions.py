"""Transactional messages over v2: half messages, EndTransaction and orphan checks
(``docs/protocol.md`` §1, ``docs/formats/commitlog.md`` §9, RocketMQ
``TransactionalMessageService``), on one node or a Raft group.

Every record a transaction writes (half message, commit copy, op record, check record, discard
copy: :mod:`gannet.node.transactions.records`) is an ordinary commit-log append, so on a Raft
group it is proposed and committed like any send. Every replica applies the records that
dispatch reaches to its :class:`~gannet.node.transactions.book.TransactionBook`; only the leader
writes:

* **Half messages**: a send of a message id already sent on its topic (a client's retry) is
  answered as the first was, not stored again (:meth:`TransactionHandler.send_once`).
* **EndTransaction** (followers forward it, :mod:`forwarding`): the leader waits until the half
  message is dispatched, reserves the resolution in its book (a second request for the same
  transaction meanwhile is refused, a retried identical one is answered OK without a write),
  appends the commit copy and/or op record and answers once they are committed (the op record
  only when the message id is committed through another half message already); one that ended
  uncertain holds the message id against a second commit copy (:meth:`TransactionHandler.end`).
* **Orphan checks**: every ``CHECK_TICK_S`` the leader looks for half messages older than
  ``check_after_ms`` (RocketMQ ``transactionTimeOut``) whose last check is ``check_interval_ms``
  old (``transactionCheckInterval``), and appends one check record each. Every member, on
  dispatching a check record, pushes a ``RecoverOrphanedTransactionCommand`` to one of its own
  producers of the topic (Telemetry stream) — the replicated record relays the leader's check
  to a producer connected to any member; at most once per half check interval per transaction
  (:meth:`TransactionService._offer_due`) — and the producer's checker answers with
  EndTransaction (``SOURCE_SERVER_CHECK``). A check counts whether or not a producer was
  connected (as RocketMQ). After ``check_max`` checks (``transactionCheckMax``) the half
  message is **discarded** as RocketMQ's ``resolveDiscardMsg`` does: copied to
  ``TRANS_CHECK_MAX_TIME_TOPIC`` for inspection, never delivered.

After a leader change the new leader serves only once it applied every record of the previous
terms (:meth:`ReplicationNode.check_leader`), so its book holds every committed resolution: a
committed transaction is neither lost nor written twice. On start the book is read back from
the op, check and half topics (a half message whose commit copy survived without its op record
is found through the index by its unique key).

:class:`~gannet.node.transactions.service.TransactionService` is the store side (worker and
dispatch threads);
:class:`TransactionHandler` is its event-loop side for
:class:`~gannet.node.api.messaging.MessagingServicer`: the EndTransaction work, an outbox per
producer Telemetry stream (merged into the stream by :func:`with_outbox`, at most
``OUTBOX_COMMANDS_MAX`` queued) and the check task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.api import dedup, routes
from gannet.node.domain.committing import PersistenceTimeout
from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.replication.errors import ReplicationError
from gannet.node.store.log import records
from gannet.node.store.log.commitlog import AppendResult
from gannet.node.store.message_store import MessageStore
from gannet.node.transactions import ending as ending_of
from gannet.node.transactions import records as tr
from gannet.node.transactions.book import CheckLimits, Resolution
from gannet.node.transactions.service import (
    OrphanCheck,
    TransactionService,
    ensure_topics,
    wall_ms,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


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
    EndTransaction work. ``commit`` is the broker's one rule for when an append may be answered
    (:meth:`gannet.node.domain.committing.Committer.commit`; its domain errors are mapped
    here); ``is_leader`` says whether this node writes."""

    def __init__(
        self,
        store: MessageStore,
        topic_name: Callable[[str], str],
        commit: ending_of.Commit,
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
        self._sending: dedup.InFlight = {}
        """(topic, message id) → the answer of its half message in flight (:meth:`send_once`)."""
        self._holds = dedup.UncertainHolds()
        """Ids whose half message ended uncertain (:meth:`send_once`)."""
        self._ending_holds = dedup.UncertainHolds("EndTransaction")
        """Ids whose EndTransaction ended uncertain (:meth:`end`)."""
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

    async def send_once(
        self,
        topic: str,
        message_ids: tuple[str, ...],
        append: Callable[[], Awaitable[service_pb2.SendMessageResponse]],
    ) -> service_pb2.SendMessageResponse:
        """``append()``'s answer (a new half message), or the original answer to a send of the
        same message id: one in flight on this node (waited for; its append runs to its
        outcome even when its caller went away), or one the book holds, open or committed
        (:meth:`TransactionBook.sent_half`); while one that ended uncertain is held, the same
        uncertain answer. The rule and reasons of
        :meth:`gannet.node.api.dedup.SendDeduplicator.send_once`, with the book as the window:
        a half message sent twice is checked, and may be committed, twice (fault seed 1002);
        the book does not absorb a second half in every order (its commit copy may be written
        while the other's commit is uncertain: ``tests/api/test_dedup_uncertain.py``)."""
        if len(message_ids) != 1 or not message_ids[0]:
            return await append()
        key = (topic, message_ids[0])
        pending = self._sending.get(key)
        if pending is not None:
            with contextlib.suppress(Exception):
                return await asyncio.shield(pending)
            # The original failed: if its half message committed after all, the book has it.
        retried = self.retried(topic, message_ids)
        if retried is not None:
            return retried
        self._holds.refuse_held(key)
        noted = dedup.start_original(self._sending, key, lambda: self._holds.noting(key, append))
        return await asyncio.shield(noted)

    def retried(
        self, topic: str, message_ids: tuple[str, ...]
    ) -> service_pb2.SendMessageResponse | None:
        """The original answer to a transactional send whose half message is in the book,
        open or committed (the client retried it, e.g. across a failover); None for a new
        one."""
        if len(message_ids) != 1 or not message_ids[0]:
            return None
        found = self.service.book.sent_half(topic, message_ids[0])
        if found is None:
            return None
        entry = service_pb2.SendResultEntry(
            status=statuses.ok(),
            message_id=message_ids[0],
            transaction_id=tr.transaction_id_of(found.half_offset),
            offset=found.queue_offset,
        )
        return service_pb2.SendMessageResponse(status=statuses.ok(), entries=[entry])

    def sent(
        self, topic: str, message_ids: tuple[str, ...], results: list[AppendResult]
    ) -> list[str]:
        """The transaction ids of committed half messages, booked now (dispatch books them
        again, harmlessly): a retry right after the answer finds them."""
        now_ms = wall_ms()
        for message_id, result in zip(message_ids, results, strict=True):
            self.service.book.half(
                result.wrote_offset,
                topic,
                now_ms,
                message_id=message_id,
                queue_offset=result.queue_offset,
            )
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
                await self._check_once(wall_ms())
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
        """Apply an EndTransaction on the leader; raises ApiError naming the problem.

        An end that ended uncertain (``MASTER_PERSISTENCE_TIMEOUT``: its records are in the
        log, not known committed; the book's reservation is released) holds the half
        message's id (:class:`dedup.UncertainHolds`): until the log decides, an end that
        would write a commit copy of that id (a retried COMMIT, the checker's COMMIT, a COMMIT
        of another half of the id) gets the same uncertain answer instead of a second copy.
        Once the first copy is dispatched the book answers (OK; the other half: its op record
        only); if the records were cut, the hold ends after ``UNCERTAIN_HOLD_S``. An op record
        alone (a ROLLBACK) is written again: a second one changes nothing."""
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
        pending = self.service.book.get(offset)
        key = (topic, pending.message_id if pending and pending.message_id else str(offset))
        if any(w.topic == topic for w in writes):  # a commit copy: the message itself
            try:
                self._ending_holds.refuse_held(key)
            except ApiError:
                self.service.book.end_failed(offset)
                raise
        await self._ending_holds.noting(key, lambda: self._append_ending(writes, (offset,)))

    async def _append_ending(self, writes: list[records.Message], ending: Iterable[int]) -> None:
        """:func:`gannet.node.transactions.ending.append_ending`, its commit errors as v2
        statuses (:func:`routes.commit_refusal`)."""
        try:
            await ending_of.append_ending(self.service, self._commit, writes, ending)
        except (ReplicationError, PersistenceTimeout) as exc:
            raise routes.commit_refusal(exc) from None
