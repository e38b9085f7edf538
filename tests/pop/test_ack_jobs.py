"""Several AckMessage requests acknowledged in one pass (``PopBroker.ack_jobs``): each gets the
results it would have had alone, in order; one append carries every ACK record; a failed append
fails them all and changes nothing; a crash that tears the append loses only what it cut."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest

from gannet.node.domain.committing import pop_flush_wait
from gannet.node.pop.config import PopConfig
from gannet.node.pop.errors import PopError
from gannet.node.pop.receipts import ReceiptHandle
from gannet.node.pop.service import PopBroker
from gannet.node.store.config import FlushMode
from gannet.node.store.errors import StoreError
from gannet.node.store.log import records
from tests.pop.pop_harness import GROUP, INVISIBLE_MS, TOPIC, Harness, bodies_of

STORED = PopConfig(buffer_merge_enabled=False)
"""Every checkpoint written at once, so every ack writes an ACK record."""


def _kinds(results: list[list[PopError | None]]) -> list[list[str]]:
    return [[type(r).__name__ if r is not None else "ok" for r in job] for job in results]


def _popped(h: Harness, count: int) -> list[ReceiptHandle]:
    h.produce(count, queue_id=0)
    return [m.handle for m in h.pop(count, queue_id=0).messages]


def _jobs(handles: list[ReceiptHandle]) -> list[tuple[str, str, list[str | ReceiptHandle]]]:
    a, b, c, d = handles
    forged = ReceiptHandle(
        a.ck_queue_offset, a.pop_time_ms, a.invisible_time_ms, a.revive_qid, a.flag,
        "another-broker", a.queue_id, a.queue_offset, a.commit_offset,
    )  # fmt: skip
    return [
        (GROUP, TOPIC, [a, b]),
        (GROUP, TOPIC, [forged, c]),  # a partial failure
        (GROUP, TOPIC, [b, d]),  # b again: acked by the first request
        (GROUP, TOPIC, [c, c]),  # twice in one request, and acked by the second
    ]


@pytest.mark.parametrize("config", [PopConfig(), STORED], ids=["buffered", "stored"])
def test_jobs_get_the_results_of_running_one_after_another(
    tmp_path: Path, config: PopConfig
) -> None:
    together, alone = Harness(tmp_path / "together", config), Harness(tmp_path / "alone", config)
    for h in (together, alone):
        h.setup()
    try:
        jobs_t = _jobs(_popped(together, 4))
        jobs_a = _jobs(_popped(alone, 4))
        batched = together.broker.ack_jobs(jobs_t, now_ms=together.now)
        one_by_one = [alone.broker.ack_many(g, t, hs, now_ms=alone.now) for g, t, hs in jobs_a]
        assert _kinds(batched) == _kinds(one_by_one)
        assert _kinds(batched) == [
            ["ok", "ok"],
            ["ReceiptHandleUnknown", "ok"],
            ["AlreadyAcked", "ok"],
            ["AlreadyAcked", "AlreadyAcked"],
        ]
        for h in (together, alone):
            h.advance(INVISIBLE_MS + 3_000)
            assert h.pop(32).messages == []  # all four acked: nothing comes back
    finally:
        together.close()
        alone.close()


def test_every_ack_record_of_the_jobs_goes_in_one_append(tmp_path: Path) -> None:
    h = Harness(tmp_path, STORED)
    h.setup()
    try:
        a, b = _popped(h, 2)
        c, d = _popped(h, 2)  # a second checkpoint
        appends: list[int] = []
        put = h.store.put_messages_nowait

        def counting(msgs: list[records.Message], **kw: bool) -> object:
            appends.append(len(msgs))
            return put(msgs, **kw)

        h.store.put_messages_nowait = counting  # type: ignore[method-assign, assignment]
        results = h.broker.ack_jobs(
            [(GROUP, TOPIC, [a, c]), (GROUP, TOPIC, [b]), (GROUP, TOPIC, [d])], now_ms=h.now
        )
        assert _kinds(results) == [["ok", "ok"], ["ok"], ["ok"]]
        # one append: one ACK per request and checkpoint (a, c, b, d), in request order
        assert appends == [4]
        h.advance(INVISIBLE_MS + 3_000)
        assert h.pop(32).messages == []
    finally:
        h.close()


def test_a_failed_append_fails_every_job_and_sets_no_bit(tmp_path: Path) -> None:
    h = Harness(tmp_path, STORED)
    h.setup()
    try:
        a, b = _popped(h, 2)
        put = h.store.put_messages_nowait

        def failing(msgs: list[records.Message], **kw: bool) -> object:
            raise StoreError("disk full (test)")

        h.store.put_messages_nowait = failing  # type: ignore[method-assign, assignment]
        with pytest.raises(StoreError, match="disk full"):
            h.broker.ack_jobs([(GROUP, TOPIC, [a]), (GROUP, TOPIC, [b])], now_ms=h.now)
        h.store.put_messages_nowait = put  # type: ignore[method-assign]
        # nothing was marked: the clients' retries ack both
        assert _kinds(h.broker.ack_jobs([(GROUP, TOPIC, [a, b])], now_ms=h.now)) == [["ok", "ok"]]
        h.advance(INVISIBLE_MS + 3_000)
        assert h.pop(32).messages == []
    finally:
        h.close()


def _ack_record_offsets(h: Harness, start: int) -> list[int]:
    end = h.store.commitlog.max_offset()
    scanned = h.store.commitlog.scan_heads(start, end, check_crc=False)
    return [at for at, head, _ in scanned if head is not None]


@pytest.mark.parametrize("torn", [False, True], ids=["whole", "torn"])
def test_a_crash_after_the_append_keeps_what_reached_the_log(tmp_path: Path, torn: bool) -> None:
    h = Harness(tmp_path, STORED)
    h.setup()
    try:
        a, b = _popped(h, 2)  # one checkpoint, m0 and m1
        before = h.store.commitlog.max_offset()
        results = h.broker.ack_jobs([(GROUP, TOPIC, [a]), (GROUP, TOPIC, [b])], now_ms=h.now)
        assert _kinds(results) == [["ok"], ["ok"]]
        first, second = _ack_record_offsets(h, before)  # one ACK record per request
        end = h.store.commitlog.max_offset()
        h.store.consumer_offsets.persist()
        h.store.abandon()  # killed before answering
        if torn:  # the second ACK record never fully reached the disk
            f = next(p for p in sorted((tmp_path / "commitlog").iterdir()))
            with f.open("r+b") as raw:
                raw.seek(second + 8)
                raw.write(b"\0" * 16)
        h.store = h._open_store()
        h.settle()
        h.now += 1_000
        h.broker = PopBroker(h.store, h.config, wait_durable=pop_flush_wait(h.store))
        assert first < second
        # recovery cut the log at the damaged record, or kept both
        assert h.store.commitlog.max_offset() == (second if torn else end)
        h.advance(INVISIBLE_MS + 3_000)
        # m0's ACK survived either way; m1 comes back when its ACK was cut
        assert bodies_of(h.pop(32)) == (["m1"] if torn else [])
    finally:
        h.close()


def test_orderly_handles_in_jobs_still_go_through_the_order_service(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig())
    h.setup()
    try:
        h.produce(2, queue_id=0)
        got = h.pop(2, queue_id=0, order=True)
        (x, y) = [m.handle for m in got.messages]
        assert x.is_order
        results = h.broker.ack_jobs([(GROUP, TOPIC, [x]), (GROUP, TOPIC, [y])], now_ms=h.now)
        assert _kinds(results) == [["ok"], ["ok"]]
        h.advance(INVISIBLE_MS + 3_000)
        assert h.pop(32, queue_id=0, order=True).messages == []
    finally:
        h.close()


def _held_by_another_thread(lock: Any) -> tuple[threading.Thread, threading.Event]:
    """Hold ``lock`` in a thread until the returned ``release`` is set."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert holding.wait(10)
    return holder, release


@pytest.mark.parametrize("which", ["buffer", "order infos"])
def test_ack_jobs_now_does_nothing_while_another_thread_holds_a_lock(
    tmp_path: Path, which: str
) -> None:
    h = Harness(tmp_path, PopConfig())
    h.setup()
    try:
        (a,) = _popped(h, 1)
        h.produce(1, queue_id=1)
        (x,) = [m.handle for m in h.pop(1, queue_id=1, order=True).messages]
        assert x.is_order
        lock = h.broker.ctx.buffer.lock if which == "buffer" else h.broker.orders.infos.lock
        holder, release = _held_by_another_thread(lock)
        try:
            assert h.broker.ack_jobs_now([(GROUP, TOPIC, [a, x])], now_ms=h.now) is None
        finally:
            release.set()
            holder.join(10)
        # nothing was acked: acking now (the lock free again) acks both, orderly included
        results = h.broker.ack_jobs_now([(GROUP, TOPIC, [a, x])], now_ms=h.now)
        assert results is not None
        assert _kinds(results) == [["ok", "ok"]]
        h.advance(INVISIBLE_MS + 3_000)
        assert h.pop(32).messages == []
    finally:
        h.close()


def test_ack_jobs_now_leaves_a_sync_flush_store_to_a_thread(tmp_path: Path) -> None:
    h = Harness(tmp_path, STORED)
    h.setup()
    try:
        (a,) = _popped(h, 1)
        h.store.config = dataclasses.replace(h.store.config, flush_mode=FlushMode.SYNC_FLUSH)
        assert h.broker.ack_jobs_now([(GROUP, TOPIC, [a])], now_ms=h.now) is None
        h.store.config = dataclasses.replace(h.store.config, flush_mode=FlushMode.ASYNC_FLUSH)
        results = h.broker.ack_jobs_now([(GROUP, TOPIC, [a])], now_ms=h.now)
        assert results is not None
        assert _kinds(results) == [["ok"]]
    finally:
        h.close()
