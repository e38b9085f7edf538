"""Flush services: when appended commit-log bytes become durable.

* SYNC_FLUSH (group commit, ``GroupCommitService``): an appender announces the end offset of its
  records with :meth:`FlushService.request_flush` and waits until the flushed offset reaches it
  (:meth:`FlushService.wait_flushed` for threads, :class:`OffsetWaiters` for asyncio). The flush
  thread sleeps until a request wakes it (RocketMQ polls every 10 ms; here every request
  notifies, so an idle store costs no wake-ups), then runs one ``fdatasync`` that covers
  everything appended so far, including what was appended while the previous one ran; every
  writer at or below the new flushed offset is released together by one notification. Many
  producers therefore share one sync, and a writer is only answered after its bytes are
  durable. Waiting is offset-based, so there is no per-request queue to bound: the number of
  waiters is the number of callers. No linger: a sync starts as soon as there is work (a
  1 ms linger while appends stream in, measured in ``bench/results/GROUPS.md``, saved no CPU
  per message beyond the noise and would delay every acknowledgement by up to 1 ms).
* ASYNC_FLUSH (``FlushRealTimeService``): every ``flush_interval_ms`` flush when at least
  ``flush_least_pages`` 4 KiB pages are dirty, and everything at least every
  ``flush_thorough_interval_ms``.

After each flush the checkpoint's ``physicMsgTimestamp`` is set to the store time of the last
record known flushed and its ``flushedPhyOffset`` to the flushed offset (recovery's floor), and
every listener is called once with the flushed offset (the message store moves the commit
offset with it in SYNC mode; asyncio waiters are released from there). A failed fsync is fatal:
the service records the error, releases every waiter with it, and stops (see :mod:`durable`).
Called by :mod:`message_store`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import FsyncFailed, StoreError, StoreNotWritable
from gannet.node.store.log.checkpoints import Checkpoint
from gannet.node.store.log.commitlog import CommitLog
from gannet.node.store.service_threads import ServiceThread

log = logging.getLogger(__name__)

FlushListener = Callable[[int], None]


class FlushService(ServiceThread):
    """One thread that makes the commit log durable, in the configured mode."""

    def __init__(self, config: StoreConfig, commitlog: CommitLog, checkpoint: Checkpoint) -> None:
        self.config = config
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.listeners: list[FlushListener] = []
        self._cond = threading.Condition()
        self._requested_offset = 0
        self.flushed_offset = commitlog.flushed_offset()
        self._init_thread("gannet-flush")
        self.fatal_error: StoreError | None = None
        self.flush_count = 0
        self.record_boundary: Callable[[], int] | None = None
        """End of the last complete record appended (the store's); the checkpoint's floor is
        kept at or below it, since a follower's raw appends may end mid-record."""

    # --- lifecycle ---
    def start(self) -> None:
        target = self._run_sync if self.config.flush_mode is FlushMode.SYNC_FLUSH else self._run
        self._start_thread(target)

    def stop(self, *, final_flush: bool = True) -> None:
        """Stop the thread; ``final_flush=False`` simulates a crash (tests)."""
        self._stop_thread()
        if final_flush and self.fatal_error is None:
            self._flush_or_die(0)  # shutdown: everything
        with self._cond:
            self._cond.notify_all()

    def truncated(self, offset: int) -> None:
        """The log was cut at ``offset``: positions past it no longer exist."""
        with self._cond:
            self._requested_offset = min(self._requested_offset, offset)
            self.flushed_offset = min(self.flushed_offset, offset)

    def reset_to(self, offset: int) -> None:
        """The log was discarded and restarts empty at ``offset`` (Raft catch-up)."""
        with self._cond:
            self._requested_offset = offset
            self.flushed_offset = offset

    # --- writers ---
    def request_flush(self, end_offset: int) -> None:
        """Ask for everything up to ``end_offset`` to be made durable (SYNC_FLUSH)."""
        with self._cond:
            if end_offset > self._requested_offset:
                self._requested_offset = end_offset
                self._cond.notify_all()

    def wait_flushed(self, end_offset: int, timeout_s: float) -> bool:
        """Block until ``end_offset`` is durable; False on timeout. Raises after a fatal
        fsync error or when the service stopped without reaching the offset."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: (
                    self.flushed_offset >= end_offset
                    or self.fatal_error is not None
                    or self._stopping
                ),
                timeout_s,
            )
            self.check_reached(end_offset)
            return ok

    def check_reached(self, end_offset: int) -> None:
        if self.flushed_offset >= end_offset:
            return
        if self.fatal_error is not None:
            raise StoreNotWritable(f"fsync failed; the node must stop: {self.fatal_error}")
        if self._stopping:
            raise StoreNotWritable("store is shutting down")

    # --- loops ---
    def _run_sync(self) -> None:
        while True:
            with self._cond:
                # request_flush and stop notify: no timeout, no idle wake-ups.
                self._cond.wait_for(
                    lambda: self._requested_offset > self.flushed_offset or self._stopping
                )
                if self._stopping:
                    return
            if not self._flush_or_die(0):
                return

    def _run(self) -> None:
        last_thorough = time.monotonic()
        interval_s = self.config.flush_interval_ms / 1000
        while True:
            with self._cond:
                if not self._stopping:
                    self._cond.wait(interval_s)
                if self._stopping:
                    return
            least = self.config.flush_least_pages
            now = time.monotonic()
            if (now - last_thorough) * 1000 >= self.config.flush_thorough_interval_ms:
                least = 0
                last_thorough = now
            if not self._flush_or_die(least):
                return

    def _flush_or_die(self, least_pages: int) -> bool:
        ts = self.commitlog.last_store_timestamp_ms
        try:
            flushed = self.commitlog.files.flush(least_pages)
        except FsyncFailed as exc:
            log.critical("%s", exc)
            with self._cond:
                self.fatal_error = exc
                self._cond.notify_all()
            self._notify(self.flushed_offset)
            return False
        self.flush_count += 1
        if flushed > self.flushed_offset:
            self.checkpoint.physic_msg_timestamp_ms = ts
            boundary = self.record_boundary() if self.record_boundary is not None else flushed
            self.checkpoint.flushed_phy_offset = min(flushed, boundary)
            with self._cond:
                self.flushed_offset = flushed
                self._cond.notify_all()
            self._notify(flushed)
        return True

    def _notify(self, flushed: int) -> None:
        for listener in self.listeners:
            try:
                listener(flushed)
            except Exception:
                log.exception("flush listener failed")


class OffsetWaiters:
    """Asyncio side of offset-based waiting: futures released when an offset is reached.

    The thread that moves the offset calls :meth:`advance` (thread-safe); at most one
    callback is scheduled on the loop per burst of advances, and it releases every waiter at or
    below the offset — one cross-thread wake-up per flush, however many writers wait.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, reached: int = 0) -> None:
        self._loop = loop
        self._reached = reached
        self._heap: list[tuple[int, int, asyncio.Future[int]]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._scheduled = False
        self._error: BaseException | None = None

    def wait(self, offset: int) -> asyncio.Future[int]:
        """A future completing with the reached offset once it is ``>= offset`` (loop thread)."""
        fut: asyncio.Future[int] = self._loop.create_future()
        if self._error is not None:
            fut.set_exception(self._error)
        elif self._reached >= offset:
            fut.set_result(self._reached)
        else:
            heapq.heappush(self._heap, (offset, next(self._seq), fut))
        return fut

    def advance(self, offset: int) -> None:
        """Record a new reached offset (any thread)."""
        with self._lock:
            if offset <= self._reached:
                return
            self._reached = offset
            if self._scheduled:
                return
            self._scheduled = True
        self._loop.call_soon_threadsafe(self._release)

    def fail(self, error: BaseException) -> None:
        """Fail every waiter, now and later (fatal fsync error, shutdown)."""
        self._error = error
        self._loop.call_soon_threadsafe(self._release)

    def _release(self) -> None:
        with self._lock:
            self._scheduled = False
            reached = self._reached
        heap = self._heap
        while heap and (heap[0][0] <= reached or self._error is not None):
            offset, _, fut = heapq.heappop(heap)
            if fut.done():
                continue
            if offset <= reached or self._error is None:
                fut.set_result(reached)
            else:
                fut.set_exception(self._error)
