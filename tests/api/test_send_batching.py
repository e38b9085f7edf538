"""SendCoalescer and put_coalesced: sends that reach the append in one loop turn share one store
call and one settle; each send gets its own results in order, a bad send fails alone, a batch
never passes its bound, batches keep arrival order, and a send that goes away does not stop
the others of its batch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gannet.node.api import send_batching
from gannet.node.api.send_batching import SendCoalescer, put_coalesced
from gannet.node.store import properties as props
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import StoreError
from gannet.node.store.log.commitlog import AppendResult
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore


def _send(*bodies: str, topic: str = "T") -> list[Message]:
    return [Message(topic=topic, body=b.encode()) for b in bodies]


class FakeStore:
    """A store's ``put``: appends whole calls, refuses any call holding a body ``bad``
    before writing, and can fail after writing (``fail_after_write``)."""

    def __init__(self, flush: bool = True) -> None:
        self.log: list[bytes] = []
        self.calls: list[int] = []
        self.flush = flush
        self.fail_after_write = False

    def position(self) -> int:
        return len(self.log)

    def put(self, messages: list[Message]) -> tuple[list[AppendResult], int | None]:
        self.calls.append(len(messages))
        if any(m.body == b"bad" for m in messages):
            raise StoreError("message 'bad' refused (test)")
        results = []
        for message in messages:
            self.log.append(message.body)
            offset = len(self.log) - 1
            results.append(AppendResult(offset, 1, offset, 0, "h", 1))
        if self.fail_after_write:
            raise StoreError("failed after writing (test)")
        return results, (len(self.log) if self.flush else None)


def _bodies(outcome: list[AppendResult] | BaseException, store: FakeStore) -> list[bytes] | str:
    if isinstance(outcome, BaseException):
        return str(outcome)
    return [store.log[r.wrote_offset] for r in outcome]


def test_put_coalesced_makes_one_call_and_splits_results_in_order() -> None:
    store = FakeStore()
    sends = [_send("a", "b"), _send("c"), _send("d", "e", "f")]
    outcomes, flush_to = put_coalesced(sends, store.put, store.position)
    assert store.calls == [6]
    assert [_bodies(o, store) for o in outcomes] == [[b"a", b"b"], [b"c"], [b"d", b"e", b"f"]]
    assert flush_to == 6


def test_put_coalesced_isolates_a_refused_send() -> None:
    store = FakeStore()
    sends = [_send("a"), _send("x", "bad"), _send("c")]
    outcomes, flush_to = put_coalesced(sends, store.put, store.position)
    assert store.calls == [4, 1, 2, 1]  # the joint call wrote nothing, then one call per send
    assert [_bodies(o, store) for o in outcomes] == [
        [b"a"],
        "message 'bad' refused (test)",
        [b"c"],
    ]
    assert store.log == [b"a", b"c"]
    assert flush_to == 2


def test_put_coalesced_fails_every_send_when_the_error_came_after_the_write() -> None:
    store = FakeStore()
    store.fail_after_write = True
    outcomes, flush_to = put_coalesced([_send("a"), _send("b")], store.put, store.position)
    assert store.calls == [2]  # never put again: the bytes are written
    assert [str(o) for o in outcomes] == ["failed after writing (test)"] * 2
    assert flush_to is None


def test_put_coalesced_names_each_store_refusal(tmp_path: Path) -> None:
    """A real store: a delay beyond the limit refuses its own send; the others are stored."""
    with MessageStore(StoreConfig.for_tests(tmp_path)).open() as store:
        late = Message(topic="T", body=b"late", properties={props.TIMER_DELAY_SEC: "999999999"})
        sends = [_send("a"), [late], _send("b", "c")]
        outcomes, _ = put_coalesced(
            sends,
            lambda m: store.put_messages_nowait(m, dispatch_inline=True),
            store.commitlog.max_offset,
        )
        assert isinstance(outcomes[1], Exception)
        assert "limit" in str(outcomes[1])
        first, third = outcomes[0], outcomes[2]
        assert not isinstance(first, Exception)
        assert not isinstance(third, Exception)
        assert [r.queue_offset for r in first + third] == [0, 1, 2]


class Edge:
    """The coalescer's store edge over a :class:`FakeStore`, recording every batch and settle."""

    def __init__(self, store: FakeStore, settle_error: Exception | None = None) -> None:
        self.store = store
        self.batches: list[list[list[bytes]]] = []
        self.settled: list[int] = []
        self.settle_error = settle_error
        self.settle_gate: asyncio.Event | None = None

    def append_batch(
        self, sends: list[list[Message]]
    ) -> tuple[list[list[AppendResult] | Exception], int | None]:
        self.batches.append([[m.body for m in s] for s in sends])
        return put_coalesced(sends, self.store.put, self.store.position)

    async def settle(self, end_offset: int) -> None:
        self.settled.append(end_offset)
        if self.settle_gate is not None:
            await self.settle_gate.wait()
        if self.settle_error is not None:
            raise self.settle_error


def test_sends_of_one_loop_turn_share_one_batch_and_one_settle() -> None:
    async def run() -> None:
        store = FakeStore()
        edge = Edge(store)
        coalescer = SendCoalescer(edge.append_batch, edge.settle)
        sends = [_send("a"), _send("b", "c"), _send("d")]
        outcomes = await asyncio.gather(*(coalescer.append(s) for s in sends))
        assert edge.batches == [[[b"a"], [b"b", b"c"], [b"d"]]]
        assert edge.settled == [4]
        assert [_bodies(o, store) for o in outcomes] == [[b"a"], [b"b", b"c"], [b"d"]]
        assert (coalescer.batches_total, coalescer.sends_total) == (1, 3)

    asyncio.run(run())


def test_a_lone_send_is_appended_after_one_loop_turn() -> None:
    async def run() -> None:
        store = FakeStore(flush=False)  # nothing to wait for: no settle at all
        edge = Edge(store)
        coalescer = SendCoalescer(edge.append_batch, edge.settle)
        task = asyncio.ensure_future(coalescer.append(_send("a")))
        await asyncio.sleep(0)  # the task starts and yields once
        assert edge.batches == []
        await asyncio.sleep(0)
        assert edge.batches == [[[b"a"]]]
        assert _bodies(await task, store) == [b"a"]
        assert edge.settled == []

    asyncio.run(run())


def test_a_refused_send_fails_alone_and_names_its_error() -> None:
    async def run() -> None:
        store = FakeStore()
        edge = Edge(store)
        coalescer = SendCoalescer(edge.append_batch, edge.settle)
        sends = [_send("bad"), _send("b"), _send("bad", "x")]
        outcomes = await asyncio.gather(
            *(coalescer.append(s) for s in sends), return_exceptions=True
        )
        assert [_bodies(o, store) for o in outcomes] == [
            "message 'bad' refused (test)",
            [b"b"],
            "message 'bad' refused (test)",
        ]
        assert store.log == [b"b"]

    asyncio.run(run())


def test_a_failed_settle_fails_the_appended_sends_of_its_batch_only() -> None:
    async def run() -> None:
        store = FakeStore()
        edge = Edge(store, settle_error=StoreError("not flushed in time (test)"))
        coalescer = SendCoalescer(edge.append_batch, edge.settle)
        sends = [_send("a"), _send("bad"), _send("c")]
        outcomes = await asyncio.gather(
            *(coalescer.append(s) for s in sends), return_exceptions=True
        )
        assert [str(o) for o in outcomes] == [
            "not flushed in time (test)",
            "message 'bad' refused (test)",
            "not flushed in time (test)",
        ]
        edge.settle_error = None
        assert _bodies(await coalescer.append(_send("d")), store) == [b"d"]

    asyncio.run(run())


def test_a_batch_never_passes_its_bound_and_batches_keep_arrival_order() -> None:
    async def run() -> None:
        store = FakeStore()
        edge = Edge(store)
        coalescer = SendCoalescer(edge.append_batch, edge.settle, messages_per_batch_max=3)
        sends = [_send("a", "b"), _send("c"), _send("d", "e"), _send("f", "g", "h"), _send("i")]
        outcomes = await asyncio.gather(*(coalescer.append(s) for s in sends))
        assert edge.batches == [
            [[b"a", b"b"], [b"c"]],
            [[b"d", b"e"]],
            [[b"f", b"g", b"h"]],
            [[b"i"]],
        ]
        assert all(sum(map(len, batch)) <= 3 for batch in edge.batches)
        assert store.log == [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h", b"i"]
        assert [_bodies(o, store) for o in outcomes] == [[m.body for m in s] for s in sends]

    asyncio.run(run())


@pytest.mark.parametrize("when", ["before the append", "while settling"])
def test_a_cancelled_leading_send_does_not_stop_its_batch(when: str) -> None:
    async def run() -> None:
        store = FakeStore()
        edge = Edge(store)
        edge.settle_gate = asyncio.Event()
        coalescer = SendCoalescer(edge.append_batch, edge.settle)
        leader = asyncio.ensure_future(coalescer.append(_send("a")))
        follower = asyncio.ensure_future(coalescer.append(_send("b")))
        await asyncio.sleep(0)  # the leader opened the batch, the follower joined
        assert edge.batches == []
        if when == "while settling":
            await asyncio.sleep(0)
            assert edge.batches == [[[b"a"], [b"b"]]]
            assert edge.settled == [2]
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
        assert edge.batches == [[[b"a"], [b"b"]]]  # appended in its turn all the same
        edge.settle_gate.set()
        assert _bodies(await follower, store) == [b"b"]

    asyncio.run(run())


def test_the_bound_must_allow_one_message() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        send_batching.SendCoalescer(
            lambda s: ([], None), lambda e: asyncio.sleep(0), messages_per_batch_max=0
        )
