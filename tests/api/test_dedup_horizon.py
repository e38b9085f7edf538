"""Which sends the deduplicator looks up in the index files (``api/dedup.py``, its horizon).

A real store (files, index, inline dispatch) and :class:`SendDeduplicator` with a small map,
on a virtual clock shared by the store's store times and the deduplicator: sustained fresh
sends past ``entries_max`` make no index lookup; a retry whose original was dropped for room
(born before the horizon) is looked up and gets the original receipt; after a restart a retry
of an id indexed before it is found, and a send without a born time is always looked up.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import service_pb2

from gannet.node.api import dedup
from gannet.node.api.dedup import SendDeduplicator
from gannet.node.protocol import statuses
from gannet.node.store import message_store
from gannet.node.store.config import StoreConfig
from gannet.node.store.log import commitlog, records
from gannet.node.store.message_store import MessageStore

TOPIC = "Horizon"
ENTRIES_MAX = 50
MARGIN_S = 2.0
STEP_MS = 100  # 10 fresh ids a second: the map of 50 holds 5 s, above margin + 1 s


class Clock:
    """Virtual epoch milliseconds, for the store's store times and the deduplicator."""

    def __init__(self, start_ms: int) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    virtual = Clock(time.time_ns() // 1_000_000)
    monkeypatch.setattr(message_store, "now_ms", virtual)
    monkeypatch.setattr(commitlog, "now_ms", virtual)
    monkeypatch.setattr(dedup, "_now_ms", virtual)
    return virtual


def _open(root: Path) -> MessageStore:
    store = MessageStore(StoreConfig.for_tests(root))
    store.open()
    return store


def _deduplicator(store: MessageStore) -> SendDeduplicator:
    return SendDeduplicator(store, window_s=120, entries_max=ENTRIES_MAX, born_margin_s=MARGIN_S)


def _send(
    store: MessageStore, dedup_: SendDeduplicator, message_id: str, born_ms: int
) -> tuple[str, int]:
    """One one-message send through ``send_once``, appended to the real store."""

    async def append() -> service_pb2.SendMessageResponse:
        message = records.Message(
            topic=TOPIC, body=b"x", properties={"UNIQ_KEY": message_id}, born_timestamp_ms=born_ms
        )
        results, _ = store.put_messages_nowait([message], dispatch_inline=True)
        entry = service_pb2.SendResultEntry(
            status=statuses.ok(), message_id=message_id, offset=results[0].queue_offset
        )
        return service_pb2.SendMessageResponse(status=statuses.ok(), entries=[entry])

    async def once() -> service_pb2.SendMessageResponse:
        return await dedup_.send_once(TOPIC, [message_id], append, born_ms=born_ms)

    answer = asyncio.run(once())
    assert answer.status.code == statuses.ok().code, answer.status.message
    (entry,) = answer.entries
    return entry.message_id, entry.offset


def _whole_seconds(ms: int) -> int:
    """A born time as the official Python client stamps it (``int(time.time())``)."""
    return ms // 1000 * 1000


def _stored(store: MessageStore) -> int:
    return store.max_offset_in_queue(TOPIC, 0)


def _sustained(store: MessageStore, dedup_: SendDeduplicator, clock: Clock, count: int) -> None:
    for i in range(count):
        clock.ms += STEP_MS
        _send(store, dedup_, f"N{i}", _whole_seconds(clock.ms))


def test_sustained_fresh_sends_past_the_map_make_no_lookup(tmp_path: Path, clock: Clock) -> None:
    store = _open(tmp_path)
    try:
        checker = _deduplicator(store)
        _sustained(store, checker, clock, 300)
        assert checker.held() == ENTRIES_MAX
        assert checker.complete_since_ms() > 0  # 250 ids were dropped for room
        assert checker.looks_in_log()  # ... and are still within the window
        assert checker.log_lookups_total == 0
        assert _stored(store) == 300
    finally:
        store.close()


def test_a_retry_of_a_dropped_original_is_looked_up_and_gets_its_receipt(
    tmp_path: Path, clock: Clock
) -> None:
    store = _open(tmp_path)
    try:
        checker = _deduplicator(store)
        start_ms = clock.ms
        _sustained(store, checker, clock, 300)
        assert not checker.remembers(TOPIC, "N0")
        # The client stamps each attempt anew: the retry is born a little after the original.
        retry = _send(store, checker, "N0", _whole_seconds(start_ms + 3_000))
        assert retry == ("N0", 0)
        assert checker.log_lookups_total == 1
        assert checker.duplicates_total == 1
        assert _stored(store) == 300  # not appended again
    finally:
        store.close()


def test_after_a_restart_an_old_retry_is_found_and_new_sends_skip_the_lookup(
    tmp_path: Path, clock: Clock
) -> None:
    store = _open(tmp_path)
    try:
        first = _send(store, _deduplicator(store), "OLD", _whole_seconds(clock.ms))
    finally:
        store.close()
    clock.ms += 5_000
    store = _open(tmp_path)
    try:
        checker = _deduplicator(store)
        assert checker.held() == 0
        assert checker.looks_in_log()
        assert _send(store, checker, "OLD", _whole_seconds(clock.ms)) == first
        assert checker.log_lookups_total == 1
        clock.ms += int(MARGIN_S * 1000) + 1_000
        _sustained(store, checker, clock, 20)  # born after the start + the margin
        assert checker.log_lookups_total == 1
        assert checker.duplicates_total == 1
        assert _stored(store) == 21
    finally:
        store.close()


def test_a_send_without_a_born_time_is_looked_up(tmp_path: Path, clock: Clock) -> None:
    store = _open(tmp_path)
    try:
        checker = _deduplicator(store)
        _sustained(store, checker, clock, 100)
        assert checker.log_lookups_total == 0
        assert _send(store, checker, "UNBORN", 0) == ("UNBORN", 100)
        assert checker.log_lookups_total == 1
        assert _send(store, checker, "N1", 0) == ("N1", 1)  # dropped, found in the index
        assert checker.log_lookups_total == 2
        clock.ms += 121_000  # the dropped ids left the window: no lookup at all
        assert not checker.looks_in_log()
        assert _send(store, checker, "LATE", 0) == ("LATE", 101)
        assert checker.log_lookups_total == 2
    finally:
        store.close()


def test_the_margin_and_limits_are_checked(tmp_path: Path) -> None:
    store = _open(tmp_path)
    try:
        with pytest.raises(ValueError, match="born_margin_s"):
            SendDeduplicator(store, born_margin_s=-1)
    finally:
        store.close()


def test_a_retry_waits_for_an_original_whose_caller_went_away(tmp_path: Path) -> None:
    """Fault seed 104 (replayed after the queue-offset fix): the original's client deadline
    passed while its append waited for the commit; the cancelled original left the pending
    map, its retry appended the id again, and both records committed. The original must stay
    in flight until its outcome is known, and the retry get that outcome."""
    store = _open(tmp_path)
    try:
        checker = _deduplicator(store)

        async def scenario() -> None:
            appended: list[str] = []
            committed = asyncio.Event()

            async def append() -> service_pb2.SendMessageResponse:
                appended.append("ID")
                await committed.wait()  # proposed, waiting for the commit
                entry = service_pb2.SendResultEntry(status=statuses.ok(), message_id="ID", offset=7)
                return service_pb2.SendMessageResponse(status=statuses.ok(), entries=[entry])

            original = asyncio.create_task(checker.send_once(TOPIC, ["ID"], append))
            while not appended:
                await asyncio.sleep(0)
            original.cancel()  # the client's deadline: its call is cancelled
            with pytest.raises(asyncio.CancelledError):
                await original
            retry = asyncio.create_task(checker.send_once(TOPIC, ["ID"], append))
            for _ in range(10):
                await asyncio.sleep(0)
            committed.set()
            answer = await retry
            assert [(e.message_id, e.offset) for e in answer.entries] == [("ID", 7)]
            assert appended == ["ID"]
            assert checker.duplicates_total == 1

        asyncio.run(scenario())
    finally:
        store.close()


def test_two_copies_arriving_during_the_lookup_are_appended_once(
    tmp_path: Path, clock: Clock
) -> None:
    """Two copies of a send (a hedged forward's, ``api/forwarding.py``) arriving while the
    first one's index lookup runs: the second waits for the first, one append, one receipt.
    Before, each copy looked up on its own, neither found the other, and both were appended."""
    store = _open(tmp_path)
    try:
        checker = _deduplicator(store)
        _sustained(store, checker, clock, 60)  # ids dropped for room: a send without a born
        assert checker.looks_in_log()  # time is looked up
        appended: list[int] = []
        looking = asyncio.Event()

        async def append() -> service_pb2.SendMessageResponse:
            appended.append(1)
            message = records.Message(
                topic=TOPIC, body=b"x", properties={"UNIQ_KEY": "TWICE"}, born_timestamp_ms=0
            )
            results, _ = store.put_messages_nowait([message], dispatch_inline=True)
            entry = service_pb2.SendResultEntry(
                status=statuses.ok(), message_id="TWICE", offset=results[0].queue_offset
            )
            return service_pb2.SendMessageResponse(status=statuses.ok(), entries=[entry])

        async def both() -> list[service_pb2.SendMessageResponse]:
            loop = asyncio.get_running_loop()
            in_log = checker._in_log

            def slow_lookup(key: dedup.Key) -> object:
                loop.call_soon_threadsafe(looking.set)
                time.sleep(0.2)  # the lookup's worker thread, still searching
                return in_log(key)

            checker._in_log = slow_lookup  # type: ignore[method-assign, assignment]
            first = asyncio.ensure_future(checker.send_once(TOPIC, ["TWICE"], append, born_ms=0))
            await looking.wait()  # the first copy is in its lookup
            second = await checker.send_once(TOPIC, ["TWICE"], append, born_ms=0)
            return [await first, second]

        answers = asyncio.run(both())
        assert appended == [1]
        assert [a.entries[0].offset for a in answers] == [60, 60]
        assert _stored(store) == 61
    finally:
        store.close()
