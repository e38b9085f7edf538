"""AckBatcher: AckMessage calls that arrive while a batch runs go together in the next one, each
caller gets its own results in order, a failure reaches every caller of its batch only, and a
caller that goes away does not stop the others."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gannet.node.api.ack_batching import AckBatcher
from gannet.node.pop.acking import AckJob
from gannet.node.pop.errors import AlreadyAcked, PopError
from gannet.node.store.errors import StoreError


class Recorder:
    """A blocking ``ack_jobs``: records each batch; the first waits until ``release``."""

    def __init__(self, fail_batch: int = -1) -> None:
        self.batches: list[list[AckJob]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_batch = fail_batch

    def __call__(self, jobs: list[AckJob], now_ms: int) -> list[list[PopError | None]]:
        assert now_ms > 0
        self.batches.append(jobs)
        if len(self.batches) == 1:
            self.entered.set()
            assert self.release.wait(10)
        if len(self.batches) - 1 == self.fail_batch:
            raise StoreError("disk full (test)")
        return [
            [AlreadyAcked(h) if h == "dup" else None for h in handles] for _, _, handles in jobs
        ]


async def _entered(recorder: Recorder) -> None:
    assert await asyncio.to_thread(recorder.entered.wait, 10)


def test_calls_arriving_during_a_batch_share_the_next_one() -> None:
    async def run() -> None:
        recorder = Recorder()
        batcher = AckBatcher(recorder)
        first = asyncio.ensure_future(batcher.ack(("g", "t", ["a"])))
        await _entered(recorder)
        jobs: list[AckJob] = [("g", "t", ["b", "dup"]), ("g", "t", ["c"]), ("g", "t", ["dup"])]
        later = [asyncio.ensure_future(batcher.ack(job)) for job in jobs]
        await asyncio.sleep(0)  # queued behind the running batch
        recorder.release.set()
        assert await first == [None]
        results = await asyncio.gather(*later)
        assert [[type(r).__name__ if r else None for r in res] for res in results] == [
            [None, "AlreadyAcked"],
            [None],
            ["AlreadyAcked"],
        ]
        assert [[handles for _, _, handles in batch] for batch in recorder.batches] == [
            [["a"]],
            [["b", "dup"], ["c"], ["dup"]],
        ]
        assert (batcher.batches_total, batcher.jobs_total) == (2, 4)

    asyncio.run(run())


def test_a_failed_batch_fails_its_callers_only() -> None:
    async def run() -> None:
        recorder = Recorder(fail_batch=1)
        batcher = AckBatcher(recorder, jobs_per_batch_max=2)
        first = asyncio.ensure_future(batcher.ack(("g", "t", ["a"])))
        await _entered(recorder)
        queued = [asyncio.ensure_future(batcher.ack(("g", "t", [h]))) for h in "bcd"]
        await asyncio.sleep(0)
        recorder.release.set()
        assert await first == [None]
        outcomes = await asyncio.gather(*queued, return_exceptions=True)
        # batch 1 (b, c) failed; d, over the per-batch limit, went in batch 2 and succeeded
        assert [type(o).__name__ for o in outcomes[:2]] == ["StoreError", "StoreError"]
        assert outcomes[2] == [None]
        assert len(recorder.batches) == 3

    asyncio.run(run())


def test_a_caller_that_goes_away_leaves_the_batch_to_the_others() -> None:
    async def run() -> None:
        recorder = Recorder()
        batcher = AckBatcher(recorder)
        first = asyncio.ensure_future(batcher.ack(("g", "t", ["a"])))
        await _entered(recorder)
        gone = asyncio.ensure_future(batcher.ack(("g", "t", ["b"])))
        stays = asyncio.ensure_future(batcher.ack(("g", "t", ["c"])))
        await asyncio.sleep(0)
        gone.cancel()
        first.cancel()  # its batch is already running: it completes for nobody
        recorder.release.set()
        assert await stays == [None]
        with pytest.raises(asyncio.CancelledError):
            await gone
        # the cancelled call's ack still ran (as a to_thread hop would have)
        assert [[h for _, _, h in b] for b in recorder.batches] == [[["a"]], [["b"], ["c"]]]

    asyncio.run(run())


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AckBatcher(Recorder(), jobs_per_batch_max=0)


def test_ack_now_acks_at_once_when_idle_and_queues_behind_a_running_batch() -> None:
    async def run() -> None:
        recorder = Recorder()
        now_calls: list[list[AckJob]] = []
        refuse = [False]

        def ack_now(jobs: list[AckJob], now_ms: int) -> list[list[PopError | None]] | None:
            assert now_ms > 0
            now_calls.append(jobs)
            if refuse[0]:
                return None  # e.g. another thread holds the buffer lock
            return [[AlreadyAcked(h) if h == "dup" else None for h in hs] for _, _, hs in jobs]

        batcher = AckBatcher(recorder, ack_now=ack_now)
        # idle: acked at once, on the loop, no batch
        assert [
            type(r).__name__ if r else None for r in await batcher.ack(("g", "t", ["a", "dup"]))
        ] == [
            None,
            "AlreadyAcked",
        ]
        assert (batcher.inline_total, batcher.batches_total, recorder.batches) == (1, 0, [])
        # ack_now declines: the call goes to a batch in the thread
        refuse[0] = True
        first = asyncio.ensure_future(batcher.ack(("g", "t", ["b"])))
        await _entered(recorder)
        refuse[0] = False
        # a batch is running: later calls queue behind it (arrival order), ack_now not asked
        asked = len(now_calls)
        later = asyncio.ensure_future(batcher.ack(("g", "t", ["c"])))
        await asyncio.sleep(0)
        assert len(now_calls) == asked
        recorder.release.set()
        assert await first == [None]
        assert await later == [None]
        assert [[h for _, _, h in b] for b in recorder.batches] == [[["b"]], [["c"]]]
        assert batcher.inline_total == 1

    asyncio.run(run())
