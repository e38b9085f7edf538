"""Dispatch (RocketMQ ``ReputMessageService``): one ordered pass from the commit log to the
consume queues and the index, never past the commit offset.

The commit offset is supplied by the owner of durability: with one node it follows the flushed
offset (SYNC_FLUSH) or the written offset (ASYNC_FLUSH, as RocketMQ's ``confirmOffset``);
with Raft it is the majority-durable offset. Consumers therefore never see a record that a
failover could lose.

For each record between ``reput_from`` and the commit offset: BLANK → continue at the next file;
a valid record joins the pass's batch; an invalid record ends the batch and is logged with its
offset (recovery has cut torn tails, so this only happens on bytes damaged while the node
runs). Every dispatcher then takes the whole batch, in order (consume queues for
non-transactional and commit-type messages, index when enabled, then the message-arrival
listeners that wake long polls): one call per dispatcher and batch instead of one per record
(the index writes its header once per batch), and ``reput_from`` moves once the batch is done.

Records appended by this node are handed over in memory (:meth:`DispatchService.offer`, in
commit-log order, bounded by ``HANDOFF_RECORDS_MAX``) so that dispatch does not parse them
again; anything else — recovery, a follower's replicated bytes, an overflowing hand-off — is
parsed from the commit log (:func:`dispatch_infos_of` builds the hand-off of one append). One
thread; work per wake-up is bounded by ``DISPATCH_BATCH_RECORDS_MAX``.

Inline dispatch: a caller that raises the commit offset on a hot path holding no other lock
(the v2 send path on the event loop) may pass ``inline_records_max``; it then dispatches up to
that many records itself when no pass is running, and wakes the thread only for what is left.
Waking the thread for every small append cost ~90 µs of CPU per 1-message send in thread and
GIL hand-offs, against ~15 µs for the dispatch itself (``bench/results/PROFILE.md``).
A pass in which a dispatcher raises (a full disk refusing a new consume-queue or index file)
moves nothing: the thread logs it, waits ``RETRY_AFTER_ERROR_S`` and takes the same batch again
until it passes. (Before, the thread died: seed 702 of the fault harness had a member whose
dispatch stopped at a full disk and who, elected later, served Pop from the state of 40 s
earlier — messages acked since were handed out and acked again.)

Called by :mod:`message_store`.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from gannet.node.store import properties as props
from gannet.node.store.hashing import tags_code
from gannet.node.store.log import native, record_checks
from gannet.node.store.log.commitlog import AppendResult, CommitLog
from gannet.node.store.log.records import DispatchInfo, Message
from gannet.node.store.service_threads import ServiceThread

log = logging.getLogger(__name__)

DISPATCH_BATCH_RECORDS_MAX = 4096
HANDOFF_RECORDS_MAX = 100_000
RETRY_AFTER_ERROR_S = 0.5
"""A failed dispatch pass (a dispatcher raised) is retried after this pause."""
Dispatcher = Callable[[list[DispatchInfo]], None]
"""Takes consecutive dispatched records, in commit-log order."""


class DispatchService(ServiceThread):
    """Moves ``reput_from`` up to the commit offset, feeding the dispatchers."""

    def __init__(self, commitlog: CommitLog, dispatchers: list[Dispatcher]) -> None:
        self.commitlog = commitlog
        self.dispatchers = dispatchers
        self.reput_from = 0
        self.commit_offset = 0
        self.last_dispatched_store_timestamp_ms = 0
        self.error: str | None = None
        self.pass_error: str | None = None
        """The last failed pass's error while passes fail (None once one succeeds again)."""
        self.failed_passes_total = 0
        # One lock, two conditions: ``_cond`` wakes the dispatch thread (work to do),
        # ``_dispatched`` wakes :meth:`wait_dispatched` callers (so an inline pass that moves
        # ``reput_from`` does not wake the idle thread as well).
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        self._dispatched = threading.Condition(lock)
        self._dispatched_waiters = 0
        self._pass_lock = threading.Lock()
        self._init_thread("gannet-dispatch")
        self._handoff: deque[DispatchInfo] = deque()

    def start(self) -> None:
        self._start_thread(self._run)

    def stop(self, *, catch_up: bool = True) -> None:
        """Stop the thread; ``catch_up=False`` simulates a crash (tests)."""
        self._stop_thread()
        if catch_up:
            self.dispatch_available()

    def set_commit_offset(self, offset: int, *, inline_records_max: int = 0) -> None:
        """Raise the commit offset (never lowers it) and wake the dispatcher; with
        ``inline_records_max`` > 0, first dispatch up to that many records in the calling thread
        when no pass is running (the caller must hold no lock a dispatcher could take)."""
        with self._cond:
            if offset <= self.commit_offset:
                return
            self.commit_offset = offset
            if inline_records_max <= 0:
                self._cond.notify_all()
                return
        if self._pass_lock.acquire(blocking=False):
            try:
                self._dispatch_batch(inline_records_max)
            finally:
                self._pass_lock.release()
        with self._cond:
            if self.reput_from < self.commit_offset:
                self._cond.notify_all()

    def behind_bytes(self) -> int:
        return max(0, self.commit_offset - self.reput_from)

    def wait_dispatched(self, offset: int, timeout_s: float) -> bool:
        """Block until ``reput_from >= offset``; False on timeout."""
        with self._cond:
            self._dispatched_waiters += 1
            try:
                return self._dispatched.wait_for(lambda: self.reput_from >= offset, timeout_s)
            finally:
                self._dispatched_waiters -= 1

    def paused(self) -> threading.Lock:
        """Hold this lock to keep dispatch from running (truncation)."""
        return self._pass_lock

    def reset(self, reput_from: int, commit_offset: int) -> None:
        """Move the cursor (after recovery or truncation; hold :meth:`paused`)."""
        with self._cond:
            self.reput_from = reput_from
            self.commit_offset = commit_offset
            self._cond.notify_all()
            self._dispatched.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._stopping or self.reput_from < self.commit_offset, 1.0
                )
                if self._stopping:
                    return
            try:
                self.dispatch_available()
            except Exception as exc:  # the thread must outlive a failed pass: retry it
                self._pass_failed(exc)
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping, RETRY_AFTER_ERROR_S)
                continue
            if self.pass_error is not None:
                log.warning(
                    "dispatch resumed at commit-log offset %d after %d failed passes",
                    self.reput_from,
                    self.failed_passes_total,
                )
                self.pass_error = None

    def _pass_failed(self, exc: Exception) -> None:
        """A dispatcher raised (a full disk refused a new consume-queue or index file): nothing
        of the batch counted as dispatched (``reput_from`` did not move), so the next pass
        takes it again; units already written are skipped then (:meth:`ConsumeQueue.put` is
        idempotent). Logged once per run of failures."""
        self.failed_passes_total += 1
        if self.pass_error is None:
            log.exception("dispatch failed at commit-log offset %d; retrying", self.reput_from)
        self.pass_error = f"{type(exc).__name__}: {exc}"

    def dispatch_available(self) -> int:
        """Dispatch everything up to the commit offset now; returns records dispatched."""
        total = 0
        with self._pass_lock:
            while True:
                n = self._dispatch_batch()
                total += n
                if n < DISPATCH_BATCH_RECORDS_MAX:
                    return total

    def offer(self, infos: list[DispatchInfo]) -> None:
        """Hand over the dispatch info of just-appended records (called under the put lock,
        so in commit-log order). Saves re-reading them; when the hand-off queue is full the
        dispatcher reads them from the commit log instead."""
        if len(self._handoff) + len(infos) <= HANDOFF_RECORDS_MAX:
            self._handoff.extend(infos)

    def clear_handoff(self) -> None:
        self._handoff.clear()

    def _dispatch_batch(self, records_max: int = DISPATCH_BATCH_RECORDS_MAX) -> int:
        end = self.commit_offset
        offset = max(self.reput_from, self.commitlog.min_offset())
        count = 0
        handoff = self._handoff
        batch: list[DispatchInfo] = []
        take = native.codec.take_handoff if native.codec is not None else None
        while offset < end and count < records_max:
            if take is not None:  # the hand-off steps below, in one C call
                offset, count, stop = take(handoff, batch, offset, end, count, records_max)
                if stop or offset >= end or count >= records_max:
                    break
            while handoff and handoff[0].commit_offset < offset:
                handoff.popleft()
            if handoff and handoff[0].commit_offset == offset:
                info: DispatchInfo | None = handoff[0]
                if offset + handoff[0].size > end:
                    break  # appended, not committed yet
                handoff.popleft()
            else:
                info, offset = self._read_record(offset, end)
                if info is None:
                    break
            assert info is not None
            batch.append(info)
            offset = info.commit_offset + info.size
            count += 1
        if batch:
            last = batch[-1]
            assert last.commit_offset + last.size <= end, (
                f"dispatch took a record ending at {last.commit_offset + last.size}, past the "
                f"commit offset {end}"
            )
            for dispatch in self.dispatchers:
                dispatch(batch)
            self.last_dispatched_store_timestamp_ms = batch[-1].store_timestamp_ms
        with self._cond:
            if offset > self.reput_from:
                self.reput_from = offset
                if self._dispatched_waiters:
                    self._dispatched.notify_all()
        return count

    def _read_record(self, offset: int, end: int) -> tuple[DispatchInfo | None, int]:
        """Parse the record at ``offset`` from the commit log, following BLANKs.

        Returns (info, its offset), or (None, where to resume) when nothing complete and
        committed is there, or the bytes are invalid (logged once).
        """
        while offset < end:
            f = self.commitlog.file_for(offset)
            if f is None:
                return None, offset
            pos = offset - f.file_from_offset
            res = record_checks.check_record(f.buffer, pos, f.wrote_position, check_crc=False)
            if res.ok and res.size == 0:
                offset = self.commitlog.roll_next_file(offset)
                continue
            if not res.ok or res.info is None or res.info.commit_offset != offset:
                if self.error is None:
                    reason = res.error or "PHYSICALOFFSET mismatch"
                    self.error = f"dispatch stopped at commit-log offset {offset}: {reason}"
                    log.error("%s", self.error)
                return None, offset
            if offset + res.size > end:
                return None, offset
            return res.info, offset
        return None, offset


def dispatch_infos_of(msgs: list[Message], results: list[AppendResult]) -> list[DispatchInfo]:
    """What dispatch needs of the records of one append by this node (no re-parse), built
    in one loop while the put lock is held (one C call with the native encoder)."""
    codec = native.codec
    if codec is not None:
        return codec.dispatch_infos(msgs, results, DispatchInfo, tags_code, _dispatch_infos_of)
    return _dispatch_infos_of(msgs, results)


def _dispatch_infos_of(msgs: list[Message], results: list[AppendResult]) -> list[DispatchInfo]:
    tags, keys, uniq = props.TAGS, props.KEYS, props.UNIQ_KEY
    infos = []
    for msg, res in zip(msgs, results, strict=True):
        p = msg.properties
        tag_text = p.get(tags)
        infos.append(
            DispatchInfo(
                msg.topic,
                msg.queue_id,
                res.wrote_offset,
                res.wrote_bytes,
                tags_code(tag_text) if tag_text else 0,
                res.store_timestamp_ms,
                res.queue_offset,
                p.get(keys),
                p.get(uniq),
                msg.sys_flag,
                msg.prepared_transaction_offset,
                p,
            )
        )
    return infos
