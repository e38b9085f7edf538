"""A retry of a send whose original ended *uncertain* (``MASTER_PERSISTENCE_TIMEOUT``: its commit
wait ran out with its bytes in the leader's log) is not appended as new (``api/dedup.py``, 1.).

Fault seed 1210: the leader's commit stalled, the original's 5 s commit wait ran out, the retry
waiting for it was appended as a second copy, and both committed: one message id stored twice.
Here the original's bytes go to a real store (inline dispatch held back until its "commit"),
its append raises the uncertain answer; the retry that waited for it and a later one get the
same answer and append nothing; once the original is dispatched, a retry gets its receipt.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import service_pb2

from gannet.node.api import dedup
from gannet.node.api.dedup import SendDeduplicator
from gannet.node.protocol import statuses
from gannet.node.store.config import StoreConfig
from gannet.node.store.log import records
from gannet.node.store.message_store import MessageStore

TOPIC = "Uncertain"
MESSAGE_ID = "0A0000000000000000000000000000000001"


def _message() -> records.Message:
    return records.Message(topic=TOPIC, body=b"x", properties={"UNIQ_KEY": MESSAGE_ID})


def _answer(offset: int) -> service_pb2.SendMessageResponse:
    entry = service_pb2.SendResultEntry(status=statuses.ok(), message_id=MESSAGE_ID, offset=offset)
    return service_pb2.SendMessageResponse(status=statuses.ok(), entries=[entry])


def test_a_retry_of_an_uncertain_original_is_held_until_the_original_commits(
    tmp_path: Path,
) -> None:
    store = MessageStore(StoreConfig.for_tests(tmp_path))
    store.open()
    try:
        deduplicator = SendDeduplicator(store)
        appends: list[str] = []
        release = asyncio.Event()

        async def uncertain_original() -> service_pb2.SendMessageResponse:
            appends.append("original")
            await release.wait()  # the commit wait, running out
            raise statuses.ApiError(
                statuses.MASTER_PERSISTENCE_TIMEOUT, "not committed within 5.0 s"
            )

        async def retry_append() -> service_pb2.SendMessageResponse:
            appends.append("retry")
            results, _ = store.put_messages_nowait([_message()], dispatch_inline=True)
            return _answer(results[0].queue_offset)

        async def scenario() -> tuple[list[BaseException], service_pb2.SendMessageResponse]:
            original = asyncio.ensure_future(
                deduplicator.send_once(TOPIC, [MESSAGE_ID], uncertain_original)
            )
            await asyncio.sleep(0)  # the original is in flight
            waiting = asyncio.ensure_future(
                deduplicator.send_once(TOPIC, [MESSAGE_ID], retry_append)
            )
            await asyncio.sleep(0)
            release.set()
            errors: list[BaseException] = []
            for call in (original, waiting):
                with pytest.raises(statuses.ApiError) as refused:
                    await call
                errors.append(refused.value)
            with pytest.raises(statuses.ApiError) as later:  # a later attempt: held too
                await deduplicator.send_once(TOPIC, [MESSAGE_ID], retry_append)
            errors.append(later.value)
            # The original's bytes commit after all: dispatch records its id.
            results, _ = store.put_messages_nowait([_message()], dispatch_inline=True)
            stored_at = results[0].queue_offset
            answer = await deduplicator.send_once(TOPIC, [MESSAGE_ID], retry_append)
            assert answer.entries[0].offset == stored_at
            return errors, answer

        errors, answer = asyncio.run(scenario())
        assert appends == ["original"]  # no retry appended a second copy
        assert all(
            isinstance(e, statuses.ApiError) and e.code == statuses.MASTER_PERSISTENCE_TIMEOUT
            for e in errors
        )
        assert "may still commit" in str(errors[1])
        assert answer.status.code == statuses.ok().code
    finally:
        store.close()


def test_a_refused_original_lets_its_retry_append(tmp_path: Path) -> None:
    """Only an uncertain outcome holds the id: a refusal (nothing appended) does not."""
    store = MessageStore(StoreConfig.for_tests(tmp_path))
    store.open()
    try:
        deduplicator = SendDeduplicator(store)

        async def refused() -> service_pb2.SendMessageResponse:
            raise statuses.ApiError(statuses.INTERNAL_SERVER_ERROR, "refused")

        async def appended() -> service_pb2.SendMessageResponse:
            results, _ = store.put_messages_nowait([_message()], dispatch_inline=True)
            return _answer(results[0].queue_offset)

        async def scenario() -> service_pb2.SendMessageResponse:
            with pytest.raises(statuses.ApiError):
                await deduplicator.send_once(TOPIC, [MESSAGE_ID], refused)
            return await deduplicator.send_once(TOPIC, [MESSAGE_ID], appended)

        assert asyncio.run(scenario()).status.code == statuses.ok().code
    finally:
        store.close()


def test_a_hold_ends_after_its_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Bytes that never commit (cut at a leader change) hold the id no longer than the hold."""
    monkeypatch.setattr(dedup, "UNCERTAIN_HOLD_S", 0.0)
    store = MessageStore(StoreConfig.for_tests(tmp_path))
    store.open()
    try:
        deduplicator = SendDeduplicator(store)

        async def uncertain() -> service_pb2.SendMessageResponse:
            raise statuses.ApiError(statuses.MASTER_PERSISTENCE_TIMEOUT, "not committed")

        async def appended() -> service_pb2.SendMessageResponse:
            results, _ = store.put_messages_nowait([_message()], dispatch_inline=True)
            return _answer(results[0].queue_offset)

        async def scenario() -> service_pb2.SendMessageResponse:
            with pytest.raises(statuses.ApiError):
                await deduplicator.send_once(TOPIC, [MESSAGE_ID], uncertain)
            return await deduplicator.send_once(TOPIC, [MESSAGE_ID], appended)

        assert asyncio.run(scenario()).status.code == statuses.ok().code
    finally:
        store.close()
