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
    known committed) holds the half message: the client's retried COMMIT, or the producer's
    checker answering COMMIT, gets the same uncertain answer and writes nothing; once the
    first commit copy is dispatched, the retry is answered OK. One commit copy in all."""
    written: list[list[records.Message]] = []

    def append(writes: list[records.Message]) -> tuple[list[object], None]:
        written.append(writes)  # in the log, not dispatched (the commit stalls)
        if len(written) == 1:
            raise CommitUncertain("written at the leader but not committed by a majority")
        return [], None

    async def scenario() -> tuple[list[statuses.ApiError], list[records.Message]]:
        path = _Halves(store)
        monkeypatch.setattr(path.handler.service, "append", append)
        request = service_pb2.EndTransactionRequest(
            topic=definition_pb2.Resource(name=TOPIC),
            message_id=MESSAGE_ID,
            transaction_id=path.store_copy(),
            resolution=definition_pb2.COMMIT,
        )
        retry = service_pb2.EndTransactionRequest()
        retry.CopyFrom(request)
        retry.source = source  # type: ignore[assignment]
        errors: list[statuses.ApiError] = []
        try:
            for end in (request, retry):
                with pytest.raises(statuses.ApiError) as uncertain:
                    await path.handler.end(end)
                errors.append(uncertain.value)
            [first] = written[:1]
            store.put_messages_nowait(first, dispatch_inline=True)  # it committed after all
            await path.handler.end(retry)  # the book knows it committed: OK, nothing written
            return errors, [m for w in written for m in w if m.topic == TOPIC]
        finally:
            path.close()

    errors, copies = asyncio.run(scenario())
    assert [e.code for e in errors] == [statuses.MASTER_PERSISTENCE_TIMEOUT] * 2
    assert "may still commit" in str(errors[1])
    assert len(copies) == 1  # the retry wrote no second commit copy
