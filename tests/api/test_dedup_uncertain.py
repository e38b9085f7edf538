"""A retry of a send whose original ended *uncertain* (``MASTER_PERSISTENCE_TIMEOUT``: its commit
wait ran out with its bytes in the leader's log) is not appended as new (``api/dedup.py``, 1.):
on both paths that deduplicate by message id, normal sends (``SendDeduplicator``) and
transactional half messages (``TransactionHandler.send_once``), through one
``dedup.UncertainHolds``.

Fault seed 1210: the leader's commit stalled, the original's 5 s commit wait ran out, the retry
waiting for it was appended as a second copy, and both committed: one message id stored twice.
A second half message is not harmless either: the client commits the one it was answered with
while the original, committed in the log, stays open; if that commit ends uncertain (the book's
reservation is released), the producer's checker committing the original before the first
commit copy is dispatched writes a second commit copy — one id delivered twice.
Here the original's bytes go to a real store (inline dispatch held back until its "commit"),
its append raises the uncertain answer; the retry that waited for it and a later one get the
same answer and append nothing; once the original is dispatched, a retry gets its receipt (a
half message: its transaction, the one to end).

EndTransaction holds the same way (``TransactionHandler.end``): a COMMIT whose commit wait ran
out released the book's reservation, and its retry (the client's, or the producer's checker
answering COMMIT) before the first commit copy was dispatched wrote a second commit copy of
the same half. Here the first end's append raises ``CommitUncertain`` with its records kept
back until :meth:`_Ends.dispatch`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.api import dedup, transactions
from gannet.node.api.dedup import SendDeduplicator
from gannet.node.protocol import statuses
from gannet.node.replication.errors import CommitUncertain
from gannet.node.store.config import StoreConfig
from gannet.node.store.log import records
from gannet.node.store.message_store import MessageStore
from gannet.node.transactions import records as tr

TOPIC = "Uncertain"
MESSAGE_ID = "0A0000000000000000000000000000000001"
Append = Callable[[], Awaitable[service_pb2.SendMessageResponse]]


def _message() -> records.Message:
    return records.Message(topic=TOPIC, body=b"x", properties={"UNIQ_KEY": MESSAGE_ID})


class _Sends:
    """Normal sends; a receipt is the queue offset."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.deduplicator = SendDeduplicator(store)

    async def send_once(self, append: Append) -> service_pb2.SendMessageResponse:
        return await self.deduplicator.send_once(TOPIC, [MESSAGE_ID], append)

    def store_copy(self) -> str:
        """Append the message as a commit would dispatch it; its receipt."""
        results, _ = self.store.put_messages_nowait([_message()], dispatch_inline=True)
        return str(results[0].queue_offset)

    def receipt(self, answer: service_pb2.SendMessageResponse) -> str:
        return str(answer.entries[0].offset)

    def answer(self, receipt: str) -> service_pb2.SendMessageResponse:
        entry = service_pb2.SendResultEntry(
            status=statuses.ok(), message_id=MESSAGE_ID, offset=int(receipt)
        )
        return service_pb2.SendMessageResponse(status=statuses.ok(), entries=[entry])

    def close(self) -> None:
        return None


class _Halves(_Sends):
    """Transactional sends; a receipt is the half message's transaction id."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store

        async def no_commit_wait(_: object) -> None:
            return None

        self.handler = transactions.TransactionHandler(
            store, str, no_commit_wait, is_leader=lambda: False
        )

    async def send_once(self, append: Append) -> service_pb2.SendMessageResponse:
        return await self.handler.send_once(TOPIC, (MESSAGE_ID,), append)

    def store_copy(self) -> str:
        halves = self.handler.to_half([_message()])
        results, _ = self.store.put_messages_nowait(halves, dispatch_inline=True)
        return tr.transaction_id_of(results[0].wrote_offset)

    def receipt(self, answer: service_pb2.SendMessageResponse) -> str:
        return str(answer.entries[0].transaction_id)

    def answer(self, receipt: str) -> service_pb2.SendMessageResponse:
        entry = service_pb2.SendResultEntry(
            status=statuses.ok(), message_id=MESSAGE_ID, transaction_id=receipt
        )
        return service_pb2.SendMessageResponse(status=statuses.ok(), entries=[entry])

    def close(self) -> None:
        self.handler.begin_shutdown()
        self.handler.service.close()


PATHS = pytest.mark.parametrize("path_type", [_Sends, _Halves], ids=["send", "half"])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    opened = MessageStore(StoreConfig.for_tests(tmp_path))
    opened.open()
    yield opened
    opened.close()


@PATHS
def test_a_retry_of_an_uncertain_original_is_held_until_the_original_commits(
    store: MessageStore, path_type: type[_Sends]
) -> None:
    appends: list[str] = []

    async def scenario() -> tuple[list[BaseException], str, str]:
        path = path_type(store)
        release = asyncio.Event()

        async def uncertain_original() -> service_pb2.SendMessageResponse:
            appends.append("original")
            await release.wait()  # the commit wait, running out
            raise statuses.ApiError(
                statuses.MASTER_PERSISTENCE_TIMEOUT, "not committed within 5.0 s"
            )

        async def retry_append() -> service_pb2.SendMessageResponse:
            appends.append("retry")
            return path.answer(path.store_copy())

        try:
            original = asyncio.ensure_future(path.send_once(uncertain_original))
            await asyncio.sleep(0)  # the original is in flight
            waiting = asyncio.ensure_future(path.send_once(retry_append))
            await asyncio.sleep(0)
            release.set()
            errors: list[BaseException] = []
            for call in (original, waiting):
                with pytest.raises(statuses.ApiError) as refused:
                    await call
                errors.append(refused.value)
            with pytest.raises(statuses.ApiError) as later:  # a later attempt: held too
                await path.send_once(retry_append)
            errors.append(later.value)
            # The original's bytes commit after all: dispatch records its id.
            stored_as = path.store_copy()
            answer = await path.send_once(retry_append)
            assert answer.status.code == statuses.ok().code
            return errors, stored_as, path.receipt(answer)
        finally:
            path.close()

    errors, stored_as, answered = asyncio.run(scenario())
    assert appends == ["original"]  # no retry appended a second copy
    assert all(
        isinstance(e, statuses.ApiError) and e.code == statuses.MASTER_PERSISTENCE_TIMEOUT
        for e in errors
    )
    assert "may still commit" in str(errors[1])
    assert answered == stored_as  # the original's receipt


async def _refused_then_sent(path: _Sends, first_code: int) -> service_pb2.SendMessageResponse:
    """A first send that fails with ``first_code``, then a retry that appends."""

    async def failed() -> service_pb2.SendMessageResponse:
        raise statuses.ApiError(first_code, "not appended")

    async def appended() -> service_pb2.SendMessageResponse:
        return path.answer(path.store_copy())

    try:
        with pytest.raises(statuses.ApiError):
            await path.send_once(failed)
        return await path.send_once(appended)
    finally:
        path.close()


@PATHS
def test_a_refused_original_lets_its_retry_append(
    store: MessageStore, path_type: type[_Sends]
) -> None:
    """Only an uncertain outcome holds the id: a refusal (nothing appended) does not."""

    async def scenario() -> service_pb2.SendMessageResponse:
        return await _refused_then_sent(path_type(store), statuses.INTERNAL_SERVER_ERROR)

    assert asyncio.run(scenario()).status.code == statuses.ok().code


@PATHS
def test_a_hold_ends_after_its_time(
    monkeypatch: pytest.MonkeyPatch, store: MessageStore, path_type: type[_Sends]
) -> None:
    """Bytes that never commit (cut at a leader change) hold the id no longer than the hold."""
    monkeypatch.setattr(dedup, "UNCERTAIN_HOLD_S", 0.0)

    async def scenario() -> service_pb2.SendMessageResponse:
        return await _refused_then_sent(path_type(store), statuses.MASTER_PERSISTENCE_TIMEOUT)

    assert asyncio.run(scenario()).status.code == statuses.ok().code


class _Ends(_Halves):
    """EndTransactions of half messages; the first end's append ends uncertain (its records
    in the log, the commit stalled), the others are taken; nothing is dispatched until
    :meth:`dispatch` (the first end committed after all)."""

    def __init__(self, store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(store)
        self.written: list[list[records.Message]] = []
        monkeypatch.setattr(self.handler.service, "append", self._append)

    def _append(self, writes: list[records.Message]) -> tuple[list[object], None]:
        self.written.append(writes)
        if len(self.written) == 1:
            raise CommitUncertain("written at the leader but not committed by a majority")
        return [], None

    async def end(
        self,
        transaction_id: str,
        resolution: int = definition_pb2.COMMIT,
        source: int = definition_pb2.SOURCE_CLIENT,
    ) -> None:
        request = service_pb2.EndTransactionRequest(
            topic=definition_pb2.Resource(name=TOPIC),
            message_id=MESSAGE_ID,
            transaction_id=transaction_id,
            resolution=resolution,
            source=source,
        )
        await self.handler.end(request)

    async def uncertain(self, transaction_id: str, **fields: int) -> statuses.ApiError:
        with pytest.raises(statuses.ApiError) as refused:
            await self.end(transaction_id, **fields)
        assert refused.value.code == statuses.MASTER_PERSISTENCE_TIMEOUT
        return refused.value

    def dispatch(self) -> None:
        self.store.put_messages_nowait(self.written[0], dispatch_inline=True)

    def copies(self) -> int:
        """Commit copies written (records of the real topic)."""
        return sum(m.topic == TOPIC for writes in self.written for m in writes)


END_SOURCES = pytest.mark.parametrize(
    "source",
    [definition_pb2.SOURCE_CLIENT, definition_pb2.SOURCE_SERVER_CHECK],
    ids=["client-retry", "checker"],
)


@END_SOURCES
def test_a_retried_end_of_an_uncertain_commit_writes_no_second_copy(
    monkeypatch: pytest.MonkeyPatch, store: MessageStore, source: int
) -> None:
    """An EndTransaction COMMIT whose commit wait ran out (its commit copy in the log, not
    known committed) holds the half message's id: the client's retried COMMIT, or the
    producer's checker answering COMMIT, gets the same uncertain answer and writes nothing;
    once the first commit copy is dispatched, the retry is answered OK. One commit copy."""

    async def scenario() -> tuple[statuses.ApiError, int]:
        ends = _Ends(store, monkeypatch)
        try:
            transaction_id = ends.store_copy()
            await ends.uncertain(transaction_id)
            held = await ends.uncertain(transaction_id, source=source)
            ends.dispatch()  # the first commit copy committed after all
            await ends.end(transaction_id, source=source)  # the book knows: OK, no write
            return held, ends.copies()
        finally:
            ends.close()

    held, copies = asyncio.run(scenario())
    assert "EndTransaction of message id" in str(held)
    assert "may still commit" in str(held)
    assert copies == 1  # the retry wrote no second commit copy


def test_a_commit_of_another_half_waits_for_the_uncertain_commit(
    monkeypatch: pytest.MonkeyPatch, store: MessageStore
) -> None:
    """Two half messages of one id (a resend stored twice): while the first one's COMMIT is
    uncertain, a COMMIT of the second is held too; once the first copy is dispatched, it
    writes its op record only."""

    async def scenario() -> int:
        ends = _Ends(store, monkeypatch)
        try:
            first, second = ends.store_copy(), ends.store_copy()
            await ends.uncertain(first)
            await ends.uncertain(second)
            ends.dispatch()
            await ends.end(second)
            assert [m.topic for m in ends.written[-1]] == [tr.OP_TOPIC]
            return ends.copies()
        finally:
            ends.close()

    assert asyncio.run(scenario()) == 1


def test_an_uncertain_rollback_holds_off_a_commit_not_its_retry(
    monkeypatch: pytest.MonkeyPatch, store: MessageStore
) -> None:
    """A ROLLBACK that ended uncertain: a COMMIT of the half meanwhile (it may be rolled
    back) gets the uncertain answer; a retried ROLLBACK writes its op record again, which
    changes nothing."""

    async def scenario() -> list[list[str]]:
        ends = _Ends(store, monkeypatch)
        try:
            transaction_id = ends.store_copy()
            await ends.uncertain(transaction_id, resolution=definition_pb2.ROLLBACK)
            await ends.uncertain(transaction_id)
            await ends.end(transaction_id, resolution=definition_pb2.ROLLBACK)
            return [[m.topic for m in writes] for writes in ends.written]
        finally:
            ends.close()

    assert asyncio.run(scenario()) == [[tr.OP_TOPIC], [tr.OP_TOPIC]]


def test_an_uncertain_end_is_held_no_longer_than_the_hold(
    monkeypatch: pytest.MonkeyPatch, store: MessageStore
) -> None:
    """Records that never commit (cut at a leader change) hold the id no longer than the
    hold: then a retried COMMIT writes the commit copy."""
    monkeypatch.setattr(dedup, "UNCERTAIN_HOLD_S", 0.0)

    async def scenario() -> int:
        ends = _Ends(store, monkeypatch)
        try:
            transaction_id = ends.store_copy()
            await ends.uncertain(transaction_id)
            await ends.end(transaction_id)
            return ends.copies()
        finally:
            ends.close()

    assert asyncio.run(scenario()) == 2  # the first one's records were cut
