"""Concurrent SendMessage calls appended together: one store call, one Raft proposal and one
commit (or flush) wait for all the sends that reach the append in the same event-loop turn.

Group commit for the CPU path, as the flush thread already does for ``fdatasync``. Each send
used to make its own ``put_messages_nowait``, its own ``propose_local`` (at R1 and R3 alike: a
Ready loop, and at R3 one AppendEntries per follower) and its own commit waiter (a future, a
shield, a timeout timer). With two broker groups each event loop has half the calls in flight,
so those per-call costs weigh more per message (``bench/results/GROUPS.md``, issue 22).

How a batch forms (:class:`SendCoalescer`): the first send that finds no open batch opens one
and *leads* it; it yields the loop once (``asyncio.sleep(0)``: no timer, so a lone send waits
one loop turn, never a time) while the sends that reach the append in that turn join. Then the
leader closes the batch, appends it (:func:`put_coalesced` through the store, then one
proposal), waits once for its commit or flush and hands every member its own outcome. The
others wait only on their own future. Batches are appended in the order they opened and the
sends of a batch in the order they joined: the order in which the sends would have been
appended one by one, so the order per queue is unchanged.

Errors stay per send (:func:`put_coalesced`): when the joint store call refuses and wrote
nothing, each send is put alone, so a bad message fails only its own send and a store refusal
(disk full, read-only topic, ...) names itself in each send's answer. A failed proposal or
commit wait fails the sends appended in that batch, as it would have failed each of them.

Limits: a batch holds at most ``messages_per_batch_max`` messages (:data:`MESSAGES_PER_BATCH_MAX`);
a send that would pass it closes the batch and opens the next. At most one batch is open at a
time; the sends in flight are bounded by the gRPC server.

Used by :class:`gannet.node.api.messaging.MessagingServicer` for non-transactional sends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from gannet.node.api import routes
from gannet.node.replication.driver import ReplicationNode
from gannet.node.replication.errors import ReplicationError
from gannet.node.store.log.commitlog import AppendResult
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

MESSAGES_PER_BATCH_MAX = 4096

R = TypeVar("R")

Put = Callable[[list[Message]], tuple[list[AppendResult], int | None]]
"""The store's append (``put_messages_nowait``): results and the offset to flush, or None."""


def put_coalesced(
    sends: Sequence[list[Message]], put: Put, position: Callable[[], int]
) -> tuple[list[list[AppendResult] | Exception], int | None]:
    """Append every send's messages with one ``put`` when it accepts them all; each send's own
    results (in order) or its own error, and the offset to flush before answering (None: none).

    When the joint ``put`` raises and ``position()`` (the store's write position) did not
    move, nothing was written: each send is put alone so the error lands on the send that
    caused it. If it moved, the error came after the write and fails every send (as it would
    have failed the one send that made the call)."""
    if len(sends) == 1:
        try:
            results, flush_to = put(sends[0])
        except Exception as exc:
            return [exc], None
        return [results], flush_to
    joined = [message for messages in sends for message in messages]
    before = position()
    try:
        results, flush_to = put(joined)
    except Exception as exc:
        if position() != before:
            return [exc for _ in sends], None
        return _put_each(sends, put)
    outcomes: list[list[AppendResult] | Exception] = []
    start = 0
    for messages in sends:
        outcomes.append(results[start : start + len(messages)])
        start += len(messages)
    return outcomes, flush_to


def _put_each(
    sends: Sequence[list[Message]], put: Put
) -> tuple[list[list[AppendResult] | Exception], int | None]:
    outcomes: list[list[AppendResult] | Exception] = []
    flush_to: int | None = None
    for messages in sends:
        try:
            results, flushed = put(messages)
        except Exception as exc:
            outcomes.append(exc)
            continue
        outcomes.append(results)
        if flushed is not None:
            flush_to = flushed if flush_to is None else max(flush_to, flushed)
    return outcomes, flush_to


AppendBatch = Callable[[list[list[Message]]], tuple[list[R | Exception], int | None]]
"""Appends a batch's sends at once: an outcome per send and the offset to wait for (None:
nothing to wait for)."""

Settle = Callable[[int], Awaitable[None]]
"""Returns once what ends at the offset may be answered (committed, or flushed); raises an
error that answers every send of the batch otherwise."""


class _Batch(Generic[R]):
    __slots__ = ("futures", "messages", "sends")

    def __init__(self) -> None:
        self.sends: list[list[Message]] = []
        self.futures: list[asyncio.Future[R]] = []
        self.messages = 0


class SendCoalescer(Generic[R]):
    """One per servicer, used on its event loop."""

    def __init__(
        self,
        append_batch: AppendBatch[R],
        settle: Settle,
        *,
        messages_per_batch_max: int = MESSAGES_PER_BATCH_MAX,
    ) -> None:
        if messages_per_batch_max < 1:
            raise ValueError("messages_per_batch_max must be at least 1")
        self._append_batch = append_batch
        self._settle = settle
        self._messages_max = messages_per_batch_max
        self._open: _Batch[R] | None = None
        self._background: set[asyncio.Task[None]] = set()
        """Waits finished for the rest of a batch whose leading send was cancelled."""
        self.batches_total = 0
        self.sends_total = 0

    async def append(self, messages: list[Message]) -> R:
        """Append ``messages`` (one send's) with whatever else arrives this loop turn; return
        once they may be answered: this send's outcome, or raise its error."""
        batch = self._open
        if batch is not None and batch.messages + len(messages) <= self._messages_max:
            future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
            batch.sends.append(messages)
            batch.futures.append(future)
            batch.messages += len(messages)
            return await future
        batch = _Batch()
        batch.sends.append(messages)
        batch.messages = len(messages)
        self._open = batch
        try:
            await asyncio.sleep(0)  # the sends of this loop turn join (no timer)
        except asyncio.CancelledError:
            # This send's client went away: its batch is still appended in its turn and the
            # others get their answers.
            self._close(batch)
            self._settle_later(batch, *self._run(batch))
            raise
        self._close(batch)
        outcomes, wait_for = self._run(batch)
        mine = outcomes[0]
        try:
            if wait_for is not None:
                await self._settle(wait_for)
        except asyncio.CancelledError:
            self._settle_later(batch, outcomes, wait_for)
            raise
        except Exception as exc:
            _hand_out(batch, outcomes, exc)
            if isinstance(mine, Exception):
                raise mine from None
            raise
        _hand_out(batch, outcomes, None)
        if isinstance(mine, Exception):
            raise mine
        return mine

    def _close(self, batch: _Batch[R]) -> None:
        if self._open is batch:
            self._open = None

    def _settle_later(
        self, batch: _Batch[R], outcomes: list[R | Exception], wait_for: int | None
    ) -> None:
        if batch.futures:
            task = asyncio.get_running_loop().create_task(
                self._settle_rest(batch, outcomes, wait_for)
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _run(self, batch: _Batch[R]) -> tuple[list[R | Exception], int | None]:
        self.batches_total += 1
        self.sends_total += len(batch.sends)
        try:
            return self._append_batch(batch.sends)
        except Exception as exc:  # the edge failed as a whole: every send gets it
            return [exc for _ in batch.sends], None

    async def _settle_rest(
        self, batch: _Batch[R], outcomes: list[R | Exception], wait_for: int | None
    ) -> None:
        try:
            if wait_for is not None:
                await self._settle(wait_for)
        except Exception as exc:
            _hand_out(batch, outcomes, exc)
            return
        _hand_out(batch, outcomes, None)


def _hand_out(batch: _Batch[R], outcomes: list[R | Exception], failure: Exception | None) -> None:
    """Answer the sends that joined (the leader's is outcome 0 and has no future)."""
    for future, outcome in zip(batch.futures, outcomes[1:], strict=True):
        if future.done():  # its caller went away
            continue
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        elif failure is not None:
            future.set_exception(failure)
        else:
            future.set_result(outcome)


def store_appender(
    store: MessageStore,
    replication: ReplicationNode | None,
    on_sent: Callable[[str, Sequence[Message]], None] | None,
) -> AppendBatch[list[AppendResult]]:
    """The store edge of :class:`SendCoalescer`: :func:`put_coalesced` into ``store``, count
    each appended send (``on_sent``), then one Raft proposal of everything appended; the offset
    to settle is the proposal's end (Raft) or the flush offset (SYNC_FLUSH without Raft)."""

    def put(messages: list[Message]) -> tuple[list[AppendResult], int | None]:
        return store.put_messages_nowait(messages, dispatch_inline=True)

    def append_batch(
        sends: list[list[Message]],
    ) -> tuple[list[list[AppendResult] | Exception], int | None]:
        outcomes, flush_to = put_coalesced(sends, put, store.commitlog.max_offset)
        appended = False
        for messages, outcome in zip(sends, outcomes, strict=True):
            if not isinstance(outcome, Exception):
                appended = True
                if on_sent is not None:
                    on_sent(messages[0].topic, messages)
        if not appended:
            return outcomes, None
        if replication is None:
            return outcomes, flush_to
        try:
            end_offset = replication.propose_local()
        except ReplicationError as exc:
            refusal = routes.replication_refusal(exc)
            return [o if isinstance(o, Exception) else refusal for o in outcomes], None
        return outcomes, end_offset

    return append_batch
