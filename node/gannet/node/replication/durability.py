"""Durability reports: fsync results of the store's flush thread, handed to the Raft core.

Used by :class:`~gannet.node.replication.driver.ReplicationNode` in SYNC_FLUSH (in
ASYNC_FLUSH the driver counts written bytes as durable itself). A flush listener on the store
posts every fsync result with its round number to the event loop; only fsyncs that started
after the last truncation count (:meth:`DriverState.counts`): a round that may have started
before one is ignored and replaced by an fsync of our own, so that bytes cut and rewritten are
never reported durable on the strength of an fsync of the old bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from gannet.node.replication.driver_state import DriverState
from gannet.node.store.message_store import MessageStore


class FlushReports:
    """Listens to the store's fsyncs and calls ``report(offset)`` on the loop for each that
    counts. ``usable()`` says whether the driver still takes reports."""

    def __init__(
        self,
        store: MessageStore,
        state: DriverState,
        report: Callable[[int], None],
        usable: Callable[[], bool],
    ) -> None:
        self.store = store
        self.state = state
        self.report = report
        self.usable = usable
        self._loop: asyncio.AbstractEventLoop | None = None
        self._own_fsync_running = False

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        flush = self.store.flush
        if flush is None:
            raise RuntimeError("open the store before listening to its flushes")
        self._loop = loop
        flush.listeners.append(self._on_flushed_thread)

    def detach(self) -> None:
        flush = self.store.flush
        self._loop = None
        if flush is not None and self._on_flushed_thread in flush.listeners:
            flush.listeners.remove(self._on_flushed_thread)

    def _on_flushed_thread(self, offset: int) -> None:
        """Flush thread: hand the fsync result (and its round number) to the loop."""
        loop, flush = self._loop, self.store.flush
        if loop is None or flush is None:
            return
        round_number = flush.flush_count
        with contextlib.suppress(RuntimeError):  # the loop closed during shutdown
            loop.call_soon_threadsafe(self._on_flushed, offset, round_number)

    def _on_flushed(self, offset: int, round_number: int) -> None:
        if not self.usable():
            return
        if not self.state.counts(round_number):
            self.start_own_fsync()
            return
        self.report(offset)

    def start_own_fsync(self) -> None:
        """After a truncation: an fsync that certainly started after it."""
        if self._own_fsync_running:
            return
        self._own_fsync_running = True
        valid_from = self.state.valid_flush_round

        async def run() -> None:
            try:
                offset = await asyncio.to_thread(self.store.commitlog.files.flush, 0)
            finally:
                self._own_fsync_running = False
            if valid_from == self.state.valid_flush_round and self.usable():
                self.report(offset)
            elif self.usable():
                self.start_own_fsync()

        asyncio.get_running_loop().create_task(run())
