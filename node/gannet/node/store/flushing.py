"""Flush services: when appended commit-log bytes become durable.

* SYNC_FLUSH (group commit, ``GroupCommitService``): an appender registers the end offset of its
  records with :meth:`FlushService.request_flush` and waits on the returned future. The flush
  thread waits at most ``GROUP_COMMIT_WAIT_MS`` for work, then runs one ``fdatasync`` that covers
  every request registered so far; all requests at or below the flushed offset complete
  together. Many producers therefore share one sync, and a caller is only answered after its
  bytes are durable. Waiting requests are bounded by ``group_commit_requests_max``.
* ASYNC_FLUSH (``FlushRealTimeService``): every ``flush_interval_ms`` flush when at least
  ``flush_least_pages`` 4 KiB pages are dirty, and everything at least every
  ``flush_thorough_interval_ms``.

After each flush the checkpoint's ``physicMsgTimestamp`` is set to the store time of the last
record known flushed, and ``on_flushed(offset)`` is called (the message store moves the commit
offset forward with it in SYNC mode). A failed fsync is fatal: the service records the error,
fails every waiter, and stops (see :mod:`durable`). Called by :mod:`message_store`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from gannet.node.store.checkpoints import Checkpoint
from gannet.node.store.commitlog import CommitLog
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import FsyncFailed, StoreError, StoreNotWritable

log = logging.getLogger(__name__)

GROUP_COMMIT_WAIT_MS = 10


class FlushService:
    """One thread that makes the commit log durable, in the configured mode."""

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        checkpoint: Checkpoint,
        on_flushed: Callable[[int], None],
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.on_flushed = on_flushed
        self._cond = threading.Condition()
        self._requests: list[tuple[int, Future[int]]] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.fatal_error: StoreError | None = None
        self.flush_count = 0

    # --- lifecycle ---
    def start(self) -> None:
        target = self._run_sync if self.config.flush_mode is FlushMode.SYNC_FLUSH else self._run
        self._thread = threading.Thread(target=target, name="gannet-flush", daemon=True)
        self._thread.start()

    def stop(self, *, final_flush: bool = True) -> None:
        """Stop the thread; ``final_flush=False`` simulates a crash (tests)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if final_flush and self.fatal_error is None:
            self._flush(0)  # shutdown: everything
        self._fail_all(StoreNotWritable("store is shutting down"))

    # --- requests ---
    def request_flush(self, end_offset: int) -> Future[int]:
        """Future that completes with the flushed offset once ``end_offset`` is durable."""
        fut: Future[int] = Future()
        with self._cond:
            if self.fatal_error is not None:
                fut.set_exception(self.fatal_error)
                return fut
            if self._stopping:
                fut.set_exception(StoreNotWritable("store is shutting down"))
                return fut
            if len(self._requests) >= self.config.group_commit_requests_max:
                fut.set_exception(
                    StoreNotWritable(
                        f"{len(self._requests)} writers already wait for a flush "
                        "(group_commit_requests_max); retry later"
                    )
                )
                return fut
            self._requests.append((end_offset, fut))
            self._cond.notify()
        return fut

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    # --- loops ---
    def _run_sync(self) -> None:
        while True:
            with self._cond:
                if not self._requests and not self._stopping:
                    self._cond.wait(GROUP_COMMIT_WAIT_MS / 1000)
                if self._stopping:
                    return
                batch, self._requests = self._requests, []
            if not self._flush_or_die(0):
                self._complete(batch, StoreNotWritable("fsync failed; the node must stop"))
                return
            flushed = self.commitlog.flushed_offset()
            waiting = [(o, f) for o, f in batch if o > flushed]
            for o, f in batch:
                if o <= flushed:
                    f.set_result(flushed)
            if waiting:  # written after our snapshot; the next round covers them
                with self._cond:
                    self._requests[:0] = waiting

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
        try:
            self._flush(least_pages)
        except FsyncFailed as exc:
            log.critical("%s", exc)
            self.fatal_error = exc
            self._fail_all(exc)
            return False
        return True

    def _flush(self, least_pages: int) -> None:
        ts = self.commitlog.last_store_timestamp_ms
        before = self.commitlog.flushed_offset()
        flushed = self.commitlog.files.flush(least_pages)
        self.flush_count += 1
        if flushed > before:
            self.checkpoint.physic_msg_timestamp_ms = ts
            self.on_flushed(flushed)

    def _fail_all(self, exc: StoreError) -> None:
        with self._cond:
            batch, self._requests = self._requests, []
        self._complete(batch, exc)

    @staticmethod
    def _complete(batch: list[tuple[int, Future[int]]], exc: StoreError) -> None:
        for _, fut in batch:
            if not fut.done():
                fut.set_exception(exc)
