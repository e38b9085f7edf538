"""Dispatch (RocketMQ ``ReputMessageService``): one ordered pass from the commit log to the
consume queues and the index, never past the commit offset.

The commit offset is supplied by the owner of durability: with one node it follows the flushed
offset (SYNC_FLUSH) or the written offset (ASYNC_FLUSH, as RocketMQ's ``confirmOffset``);
with Raft it is the majority-durable offset. Consumers therefore never see a record that a
failover could lose.

For each record between ``reput_from`` and the commit offset: BLANK → continue at the next file;
a valid record → every dispatcher in order (consume queue for non-transactional and
commit-type messages, index when enabled, then the message-arrival listeners that wake long
polls); an invalid record stops the pass and is logged with its offset (recovery has cut torn
tails, so this only happens on bytes damaged while the node runs).

One thread; work per wake-up is bounded by ``DISPATCH_BATCH_RECORDS_MAX``. Called by
:mod:`message_store`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from gannet.node.store import records
from gannet.node.store.commitlog import CommitLog
from gannet.node.store.records import DispatchInfo

log = logging.getLogger(__name__)

DISPATCH_BATCH_RECORDS_MAX = 4096
Dispatcher = Callable[[DispatchInfo], None]


class DispatchService:
    """Moves ``reput_from`` up to the commit offset, feeding the dispatchers."""

    def __init__(self, commitlog: CommitLog, dispatchers: list[Dispatcher]) -> None:
        self.commitlog = commitlog
        self.dispatchers = dispatchers
        self.reput_from = 0
        self.commit_offset = 0
        self.last_dispatched_store_timestamp_ms = 0
        self.error: str | None = None
        self._cond = threading.Condition()
        self._pass_lock = threading.Lock()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gannet-dispatch", daemon=True)
        self._thread.start()

    def stop(self, *, catch_up: bool = True) -> None:
        """Stop the thread; ``catch_up=False`` simulates a crash (tests)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if catch_up:
            self.dispatch_available()

    def set_commit_offset(self, offset: int) -> None:
        """Raise the commit offset (never lowers it) and wake the dispatcher."""
        with self._cond:
            if offset > self.commit_offset:
                self.commit_offset = offset
                self._cond.notify_all()

    def behind_bytes(self) -> int:
        return max(0, self.commit_offset - self.reput_from)

    def wait_dispatched(self, offset: int, timeout_s: float) -> bool:
        """Block until ``reput_from >= offset``; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.reput_from >= offset, timeout_s)

    def paused(self) -> threading.Lock:
        """Hold this lock to keep dispatch from running (truncation)."""
        return self._pass_lock

    def reset(self, reput_from: int, commit_offset: int) -> None:
        """Move the cursor (after recovery or truncation; hold :meth:`paused`)."""
        with self._cond:
            self.reput_from = reput_from
            self.commit_offset = commit_offset
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._stopping or self.reput_from < self.commit_offset, 1.0
                )
                if self._stopping:
                    return
            self.dispatch_available()

    def dispatch_available(self) -> int:
        """Dispatch everything up to the commit offset now; returns records dispatched."""
        total = 0
        with self._pass_lock:
            while True:
                n = self._dispatch_batch()
                total += n
                if n < DISPATCH_BATCH_RECORDS_MAX:
                    return total

    def _dispatch_batch(self) -> int:
        end = self.commit_offset
        start = self.reput_from
        start = max(start, self.commitlog.min_offset())
        count = 0
        offset = start
        for offset_at, res in self.commitlog.scan(start, end, check_crc=False):
            if not res.ok or res.info is None:
                if self.error is None:
                    self.error = f"dispatch stopped at commit-log offset {offset_at}: {res.error}"
                    log.error("%s", self.error)
                offset = offset_at
                break
            info = res.info
            for dispatch in self.dispatchers:
                dispatch(info)
            self.last_dispatched_store_timestamp_ms = info.store_timestamp_ms
            offset = offset_at + res.size
            count += 1
            if count >= DISPATCH_BATCH_RECORDS_MAX:
                break
        else:
            offset = self._end_after_blanks(offset, end)
        with self._cond:
            if offset > self.reput_from:
                self.reput_from = offset
                self._cond.notify_all()
        return count

    def _end_after_blanks(self, offset: int, end: int) -> int:
        """After a scan that ran out, the cursor may sit on a BLANK: skip to the commit end."""
        while offset < end:
            f = self.commitlog.file_for(offset)
            if f is None:
                return offset
            res = records.check_record(
                f.buffer, offset - f.file_from_offset, f.wrote_position, check_crc=False
            )
            if res.ok and res.size == 0:
                offset = self.commitlog.roll_next_file(offset)
            else:
                return offset
        return offset
