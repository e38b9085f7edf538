"""ShutdownGate: a shutdown ends the awaits it runs with None, in the callers' own tasks; a
caller that cancels its own call stays cancelled; after shutdown nothing new starts."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from gannet.node.api.shutdown_gate import ShutdownGate


def test_shutdown_ends_every_running_await_with_none() -> None:
    async def run() -> None:
        gate = ShutdownGate()
        never: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        callers = [asyncio.ensure_future(gate.run(never)) for _ in range(3)]
        await asyncio.sleep(0)
        gate.begin_shutdown()
        assert await asyncio.gather(*callers) == [None, None, None]
        assert never.cancelled()
        # the callers' tasks are not left cancelling: they go on to answer
        assert all(c.cancelling() == 0 for c in callers)

    asyncio.run(run())


def test_a_caller_cancelling_its_own_call_stays_cancelled() -> None:
    async def run() -> None:
        gate = ShutdownGate()
        never: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        caller = asyncio.ensure_future(gate.run(never))
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        # a later shutdown finds nothing to end
        gate.begin_shutdown()
        assert not gate._running

    asyncio.run(run())


def test_results_pass_through_and_nothing_starts_after_shutdown() -> None:
    async def answer() -> str:
        await asyncio.sleep(0)
        return "popped"

    async def run() -> None:
        gate = ShutdownGate()
        assert await gate.run(answer()) == "popped"
        gate.begin_shutdown()
        started = answer()
        assert await gate.run(started) is None
        assert inspect.getcoroutinestate(started) == inspect.CORO_CLOSED  # never run

    asyncio.run(run())
