"""Long-running awaits that the broker's shutdown ends early, in the caller's own task.

:class:`ShutdownGate` runs an awaitable (a Pop long poll) straight in the calling task and
remembers the task; :meth:`ShutdownGate.begin_shutdown` cancels every task it holds, and for
those :meth:`ShutdownGate.run` turns the cancellation into None (the caller answers "broker is
shutting down"). A cancellation that did not come from the gate (the client cancelled its call,
gRPC ends the handler) stays a cancellation. The awaitable is not wrapped in tasks of its own:
racing it against a shutdown event used to cost two tasks and an ``asyncio.wait`` per
ReceiveMessage (``bench/results/PROFILE.md``).

Single-threaded: one gate per event loop, called on it. Used by
:class:`gannet.node.api.receiving.PopHandler`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class ShutdownGate:
    def __init__(self) -> None:
        self.closing = False
        self._running: set[asyncio.Task[object]] = set()
        """Tasks inside :meth:`run`: at most one entry per call in flight."""
        self._ended: set[asyncio.Task[object]] = set()
        """Of those, the ones :meth:`begin_shutdown` cancelled."""

    def begin_shutdown(self) -> None:
        """End every :meth:`run` in progress (each returns None) and refuse new ones."""
        self.closing = True
        for task in self._running - self._ended:
            self._ended.add(task)
            task.cancel()

    async def run(self, work: Awaitable[T]) -> T | None:
        """``work``'s result, or None when the broker begins shutting down first (``work`` is
        then cancelled, or never started if the shutdown had begun already)."""
        if self.closing:
            if inspect.iscoroutine(work):
                work.close()
            return None
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("ShutdownGate.run must be awaited inside a task")
        self._running.add(task)
        try:
            return await work
        except asyncio.CancelledError:
            if task not in self._ended:
                raise  # the caller's own cancellation
            task.uncancel()
            return None
        finally:
            self._running.discard(task)
            self._ended.discard(task)
