"""The message store: one store directory opened, recovered and served (``DefaultMessageStore``).

This is the storage engine's entry point. It owns the commit log, consume queues, index,
checkpoint, flush and dispatch services, timer service, cleanup and the config files
(``topic_configs``, ``group_configs``, ``consumer_offsets``, ``order_infos`` — orderly Pop's
state —, persisted under ``config/``; consumer offsets and order infos every second when changed
and at close), and offers:

* writes — :meth:`MessageStore.put_messages` (answers after the bytes are durable in SYNC_FLUSH;
  group commit shares one fdatasync among concurrent writers) and
  :meth:`MessageStore.put_messages_nowait` (returns a future for durability, for asyncio
  callers);
* reads — :meth:`get_messages` by queue offset with RocketMQ's status rules
  (:mod:`~gannet.node.store.queues.reading`), :meth:`read_message` by commit-log offset; every
  read by commit-log offset goes through :attr:`MessageStore.reads`
  (:class:`~gannet.node.store.tier.routing.RecordReads`), which reads offsets below the first
  local file from the tier when a tier reader is given (``MessageStore(config, tier=...)``);
* queries — by offset message id, key, unique key, store time (see :mod:`querying`);
* maintenance — :meth:`truncate` (Raft divergence), :meth:`reset_to` (Raft catch-up below
  the leader's retention), :meth:`clean_now`, :meth:`statistics`.

Lifecycle: ``MessageStore(config)`` → :meth:`open` (lock, abort file, load, recover, start
services) → use → :meth:`close` (stop services, flush everything, remove the abort file only
when dispatch had caught up). Threads: flush, dispatch, housekeeping, timer; every public method
is thread-safe.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gannet.node.store import durable, steady_clock, validation
from gannet.node.store import properties as props
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.groups import GroupConfigManager
from gannet.node.store.configs.offsets import ConsumerOffsetManager
from gannet.node.store.configs.order_infos import OrderInfoManager
from gannet.node.store.configs.topics import TopicConfigManager
from gannet.node.store.errors import (
    DiskFull,
    FlushTimeout,
    LogMismatch,
    NotLeading,
    StoreError,
    StoreLocked,
    StoreNotWritable,
)
from gannet.node.store.log import native, record_checks
from gannet.node.store.log.checkpoints import Checkpoint
from gannet.node.store.log.commitlog import AppendResult, CommitLog, now_ms
from gannet.node.store.log.flushing import FlushService, OffsetWaiters
from gannet.node.store.log.records import DispatchInfo, Message
from gannet.node.store.msgids import UniqKeyGenerator
from gannet.node.store.queues.consume_queue_store import ConsumeQueueStore
from gannet.node.store.queues.consume_queues import CqUnit
from gannet.node.store.queues.dispatching import DispatchService, dispatch_infos_of
from gannet.node.store.queues.index_service import IndexService
from gannet.node.store.queues.reading import GetResult, read_queue, read_queue_records
from gannet.node.store.tier.reading import TierReader
from gannet.node.store.tier.routing import RecordReads
from gannet.node.store.timers.delivery import TimerService
from gannet.node.store.upkeep.cleaning import CleanService
from gannet.node.store.upkeep.recovering import (
    RecoveryResult,
    TruncationTally,
    offset_table_of,
    recover,
    refuse_short_last_file,
)

log = logging.getLogger(__name__)

HOUSEKEEPING_INTERVAL_MS = 1_000
VALID_TOPICS_CACHE_MAX = 100_000
INLINE_DISPATCH_RECORDS_MAX = 256  # records a send dispatches itself; the rest wakes the thread
DISPATCH_CATCH_UP_S = 1.0  # how long a figure reader waits for dispatch to catch up
# Called once per dispatched batch, in commit-log order (dispatch thread, or the sender's
# inline): one call per batch instead of one per record keeps dispatch's per-record cost down.
ArrivalListener = Callable[[Sequence[DispatchInfo]], None]


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """A snapshot for ``gannet store inspect``, metrics and the admin API."""

    min_offset: int
    max_offset: int
    flushed_offset: int
    commit_offset: int
    dispatched_offset: int
    commitlog_files: int
    consume_queues: int
    index_files: int
    timer_backlog: int
    last_exit_ok: bool
    disk_full: bool


class MessageStore:
    """A RocketMQ-compatible store directory, opened for reading and writing."""

    def __init__(
        self,
        config: StoreConfig,
        *,
        commit_follows_flush: bool = True,
        tier: TierReader | None = None,
    ) -> None:
        self.config = config
        self.commitlog = CommitLog(config)
        self.reads = RecordReads(self.commitlog, tier, topic_retention_s=self._tier_retention_s)
        """Every read by commit-log offset: the local file, or the tier below the local start
        (``tier``: a reader of the offloaded files, :func:`tier.reading.reader_of`; None: local
        files only)."""
        self.queues = ConsumeQueueStore(config)
        self.index = IndexService(config) if config.index_enabled else None
        self.checkpoint: Checkpoint | None = None
        self.recovery: RecoveryResult | None = None
        self.last_exit_ok = True
        self.listeners: list[ArrivalListener] = []
        self.uniq_keys = UniqKeyGenerator(config.store_host, os.getpid(), id(self) & 0x7FFFFFFF)
        self.disk_full = False
        self.disk_full_reason = ""
        self.truncations = TruncationTally()
        self._valid_topics: set[str] = set()
        self._raw_scanned = 0
        self._commit_follows_flush = commit_follows_flush
        self._lock_fd = -1
        self._stop = threading.Event()
        self._housekeeping: threading.Thread | None = None
        self._opened = False
        self.topic_configs = TopicConfigManager(config.config_dir)
        self.group_configs = GroupConfigManager(config.config_dir)
        self.consumer_offsets = ConsumerOffsetManager(config.config_dir)
        self.order_infos = OrderInfoManager(config.config_dir)
        self.dispatch = DispatchService(self.commitlog, self._dispatchers())
        self.flush: FlushService | None = None
        self.cleaner = CleanService(self)
        self.timers = TimerService(self)
        self.write_permit: Callable[[], bool] | None = None
        """Raft: true while this member may append on its own (it leads); None: always. Every
        local append (sends, Pop checkpoints and acks, revives, timers, transaction checks,
        config records) asks it; the leader's bytes (:meth:`append_replicated`) do not. While
        it says no, :meth:`start_services` leaves the timer thread stopped."""

    # ------------------------------------------------------------------ lifecycle
    def open(self, *, start_services: bool = True) -> MessageStore:
        """Lock the directory, load and recover, then start the services."""
        root = self.config.root_dir
        root.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        abort_existed = self.config.abort_path.exists()
        try:
            self._load_and_recover(abort_existed)
        except BaseException:
            self._undo_failed_open(abort_existed)
            raise
        assert self.recovery is not None
        assert self.checkpoint is not None
        self.truncations.record("recovery", self.recovery.truncated_bytes)
        end = self.commitlog.max_offset()
        self._raw_scanned = end
        self.dispatch.reset(self.recovery.dispatch_from, end if self._commit_follows_flush else 0)
        self.flush = FlushService(self.config, self.commitlog, self.checkpoint)
        self.flush.record_boundary = lambda: self._raw_scanned
        self.flush.listeners.append(self._on_flushed)
        self._opened = True
        native.announce()  # which encoder the put path runs, once per process
        if start_services:
            self.start_services()
        return self

    def _load_and_recover(self, abort_existed: bool) -> None:
        self.last_exit_ok = not abort_existed
        self.checkpoint = Checkpoint(self.config.checkpoint_path, repair=self.config.force_recover)
        if self.checkpoint.trust == "repaired" or (
            self.checkpoint.trust == "new" and self._has_commitlog_files()
        ):
            self.last_exit_ok = False  # nothing says what was flushed: scan everything
        self.config.abort_path.write_text(str(os.getpid()))
        self.topic_configs.load()
        self.group_configs.load()
        self.consumer_offsets.load()
        self.order_infos.load()
        refuse_short_last_file(self.config)  # before loading maps (and extends) the last file
        self.commitlog.load()
        self.queues.load()
        if self.index is not None:
            self.index.load(self.last_exit_ok, self.checkpoint.index_msg_timestamp_ms)
        self.recovery = recover(
            self.commitlog,
            self.queues,
            self.index,
            self.checkpoint,
            last_exit_ok=self.last_exit_ok,
            check_crc=self.config.check_crc_on_recover,
            force=self.config.force_recover,
            quarantine_dir=self.config.quarantine_dir,
            readable_min_offset=self.reads.min_offset,
        )
        self.timers.load(self.recovery.process_offset)

    def _undo_failed_open(self, abort_existed: bool) -> None:
        """Leave the directory as found after a refused open: files closed unchanged, no abort
        file the store did not find (a refusal is not a crash), the lock released."""
        index, checkpoint = self.index, self.checkpoint
        closers: list[Callable[[], None]] = [self.timers.close, self.queues.close]
        closers.append(self.commitlog.close)
        if index is not None:
            closers.append(lambda: index.close(flush=False))
        if checkpoint is not None:
            closers.append(lambda: checkpoint.close(flush=False))
        for close in closers:
            try:
                close()
            except Exception:
                log.exception("closing after a failed open")
        if not abort_existed:
            self.config.abort_path.unlink(missing_ok=True)
        if checkpoint is not None and checkpoint.trust == "new":
            durable.remove_file(checkpoint.path)  # made by this open: the directory as found
        self._release_lock()

    def _has_commitlog_files(self) -> bool:
        directory = self.config.commitlog_dir
        return directory.is_dir() and any(p.name.isdigit() for p in directory.iterdir())

    def start_services(self) -> None:
        if self.flush is None:
            raise StoreNotWritable("open() the store before starting its services")
        self.flush.start()
        self.dispatch.start()
        if self.write_permit is None or self.write_permit():
            self.timers.start()  # a Raft member's timers start once it leads
        self._housekeeping = threading.Thread(
            target=self._housekeep, name="gannet-housekeeping", daemon=True
        )
        self._housekeeping.start()

    def close(self) -> None:
        """Stop services, flush everything, persist, release the directory."""
        self._shut(clean=True)

    def abandon(self) -> None:
        """Drop the store as a crash would: no final flush, abort file left behind.

        For tests of abnormal recovery inside one process. Data already copied to the page
        cache stays, as it does when a process is killed.
        """
        self._shut(clean=False)

    def _shut(self, *, clean: bool) -> None:
        if not self._opened:
            return
        self._opened = False
        self._stop.set()
        self.timers.stop()
        if self._housekeeping is not None:
            self._housekeeping.join()
        if self.flush is not None:
            self.flush.stop(final_flush=clean)
        if clean and self._commit_follows_flush:
            self.dispatch.set_commit_offset(self._durable_end())
        self.dispatch.stop(catch_up=clean)
        caught_up = self.dispatch.behind_bytes() == 0
        if clean:
            self._flush_structures()
        self.timers.close()
        self.queues.close()
        if self.index is not None:
            self.index.close(flush=clean)
        self.commitlog.close()
        if self.checkpoint is not None:
            self.checkpoint.close(flush=clean)
        fatal = self.flush is not None and self.flush.fatal_error is not None
        if clean and caught_up and not fatal:
            self.config.abort_path.unlink(missing_ok=True)
        self._release_lock()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take_lock(self) -> None:
        fd = os.open(self.config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreLocked(
                f"{self.config.root_dir} is in use by another process (lock file "
                f"{self.config.lock_path}); stop it or choose another --data-dir"
            ) from exc
        os.ftruncate(fd, 0)
        os.write(fd, b"lock")
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    # ------------------------------------------------------------------ writing
    def put_messages(
        self, msgs: list[Message], *, timeout_s: float | None = None
    ) -> list[AppendResult]:
        """Append and return once durable as the flush mode defines (SYNC: fdatasync'ed).

        The store takes the messages over: it fills in store host, born time, ``UNIQ_KEY``
        and, for delayed delivery, the timer properties, so callers must not reuse them.
        """
        results, durable_at = self.put_messages_nowait(msgs)
        if durable_at is not None and self.flush is not None:
            wait_s = timeout_s if timeout_s is not None else self.config.sync_flush_timeout_ms / 1e3
            if not self.flush.wait_flushed(durable_at, wait_s):
                raise FlushTimeout(
                    f"appended at {results[0].wrote_offset} but not flushed within "
                    f"{wait_s:.1f} s (syncFlushTimeout)"
                )
        return results

    def put_message(self, msg: Message) -> AppendResult:
        return self.put_messages([msg])[0]

    def put_messages_nowait(
        self, msgs: list[Message], *, dispatch_inline: bool = False
    ) -> tuple[list[AppendResult], int | None]:
        """Append; return the results and, in SYNC_FLUSH, the offset that must be flushed
        before they may be acknowledged (wait with :meth:`durable_waiters` or
        ``flush.wait_flushed``); None when they may be acknowledged now.

        ``dispatch_inline``: when the append commits at once (ASYNC_FLUSH, no Raft), dispatch
        it in the calling thread instead of waking the dispatch thread (see
        :mod:`dispatching`); only for callers that hold no lock a dispatcher could take."""
        self._check_writable()
        if self.write_permit is not None and not self.write_permit():
            raise NotLeading(
                "this Raft member does not lead: only the leader appends on its own (a "
                "follower's log takes the leader's bytes only)"
            )
        now = now_ms()
        prepared = self._prepare(msgs, now)
        encoded = self.commitlog.encode_all(prepared)

        def hand_off(results: list[AppendResult]) -> None:
            self._raw_scanned = results[-1].end_offset  # nothing partial behind a local append
            self.dispatch.offer(dispatch_infos_of(prepared, results))

        results = self.commitlog.append(encoded, hand_off)
        if self.config.flush_mode is FlushMode.SYNC_FLUSH and self.flush is not None:
            self.flush.request_flush(results[-1].end_offset)
            return results, results[-1].end_offset
        if self._commit_follows_flush:
            inline = INLINE_DISPATCH_RECORDS_MAX if dispatch_inline else 0
            self.dispatch.set_commit_offset(results[-1].end_offset, inline_records_max=inline)
        return results, None

    def _check_writable(self, *, admission: bool = True) -> None:
        """Refuse writes to a closed or failed store, and new producer writes (``admission``)
        while the disk is above the warning ratio."""
        if not self._opened:
            raise StoreNotWritable("the store is not open")
        if self.flush is not None and self.flush.fatal_error is not None:
            raise StoreNotWritable(f"store stopped after a fatal error: {self.flush.fatal_error}")
        if admission and self.disk_full:
            raise DiskFull(
                self.disk_full_reason
                or f"disk full: {self.config.root_dir} is above the warning ratio; writes are "
                "refused until cleanup frees space"
            )

    def _prepare(self, msgs: list[Message], now: int) -> list[Message]:
        """Validate and complete messages before encoding (store host, unique key, timer);
        the unique keys the batch lacks are drawn under one lock hold."""
        valid = self._valid_topics
        for msg in msgs:
            if msg.topic not in valid:
                validation.validate_topic(msg.topic)
                if len(valid) >= VALID_TOPICS_CACHE_MAX:
                    valid.clear()
                valid.add(msg.topic)
        uniq = props.UNIQ_KEY
        keyless = [m for m in msgs if uniq not in m.properties]
        if keyless:
            for msg, key in zip(keyless, self.uniq_keys.next_keys(now, len(keyless)), strict=True):
                msg.properties[uniq] = key
        host = (self.config.store_host, self.config.store_port)
        route = self.timers.route
        # Whether a delivery time lies ahead is asked of the timer wheel's clock, not of the
        # wall clock: a Pop checkpoint stamped by the steady clock and judged due by a wall
        # clock stepped ahead went straight to the revive log and moved revive's end time
        # past leases still live (fault seed 210, +59 s strobe on the leader).
        timer_now = steady_clock.now_ms()
        prepared = []
        for msg in msgs:
            msg.store_host = host
            if msg.born_timestamp_ms == 0:
                msg.born_timestamp_ms = now
            prepared.append(route(msg, timer_now))
        return prepared

    # ------------------------------------------------------------------ commit / dispatch
    def _durable_end(self) -> int:
        if self.config.flush_mode is FlushMode.SYNC_FLUSH:
            return self.commitlog.flushed_offset()
        return self.commitlog.max_offset()

    def _on_flushed(self, flushed_offset: int) -> None:
        if self._commit_follows_flush and self.config.flush_mode is FlushMode.SYNC_FLUSH:
            self.dispatch.set_commit_offset(flushed_offset)

    def durable_waiters(self, loop: asyncio.AbstractEventLoop) -> OffsetWaiters:
        """Asyncio waiters released as the flushed offset advances (one wake-up per flush)."""
        if self.flush is None:
            raise StoreNotWritable("open() the store first")
        waiters = OffsetWaiters(loop, self.flush.flushed_offset)
        flush = self.flush

        def on_flushed(offset: int) -> None:
            if flush.fatal_error is not None:
                waiters.fail(StoreNotWritable(f"fsync failed: {flush.fatal_error}"))
            else:
                waiters.advance(offset)

        flush.listeners.append(on_flushed)
        return waiters

    def set_commit_offset(self, offset: int) -> None:
        """Let dispatch reach ``offset`` (the Raft layer's commit point)."""
        self.dispatch.set_commit_offset(min(offset, self.commitlog.max_offset()))

    def wait_dispatched(self, offset: int, timeout_s: float = 5.0) -> bool:
        return self.dispatch.wait_dispatched(offset, timeout_s)

    def dispatched_to(self) -> int:
        """The commit-log offset dispatch has reached (consume queues written below it)."""
        return self.dispatch.reput_from

    def dispatch_caught_up(self, timeout_s: float = DISPATCH_CATCH_UP_S) -> bool:
        """Wait until everything committed before this call is dispatched; False on timeout.
        Figures read afterwards (queue offsets, lag, timer counts) include every message
        appended before the call."""
        return self.dispatch.wait_dispatched(self.dispatch.commit_offset, timeout_s)

    def _dispatchers(self) -> list[Callable[[list[DispatchInfo]], None]]:
        chain: list[Callable[[list[DispatchInfo]], None]] = [self._dispatch_consume_queues]
        if self.index is not None:
            chain.append(self.index.build_index_batch)
        chain.append(self._notify_arrivals)
        return chain

    def _dispatch_consume_queues(self, infos: list[DispatchInfo]) -> None:
        """A unit per non-transactional or commit-type record (sysFlag bit 0x4 clear); each
        queue the batch reaches is looked up once (a batch spread over queues alternates)."""
        if infos:
            end, log_end = infos[-1].commit_offset + infos[-1].size, self.commitlog.max_offset()
            assert end <= log_end, (
                f"consume-queue units would point at {end}, past the end of the commit log "
                f"({log_end})"
            )
        find = self.queues.find_or_create
        codec = native.codec
        if codec is not None:  # one run of units per queue, each written with one slice copy
            for topic, queue_id, first_qo, first_end, last_end, units, run in codec.queue_units(
                infos
            ):
                queue = find(topic, queue_id)
                if units is None or not queue.put_units(units, first_qo, first_end, last_end):
                    for info in run:
                        queue.put(info.commit_offset, info.size, info.tags_code, info.queue_offset)
            return
        puts: dict[tuple[str, int], Callable[[int, int, int, int], None]] = {}
        for info in infos:
            if info.sys_flag & 0x4:
                continue  # prepared (0x4) or rollback (0xC): no unit
            key = (info.topic, info.queue_id)
            put = puts.get(key)
            if put is None:
                put = puts[key] = find(info.topic, info.queue_id).put
            put(info.commit_offset, info.size, info.tags_code, info.queue_offset)

    def _notify_arrivals(self, infos: list[DispatchInfo]) -> None:
        listeners = self.listeners
        if not listeners:
            return
        for listener in listeners:
            try:
                listener(infos)
            except Exception:  # a listener must never stop dispatch
                log.exception("message-arrival listener failed")

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """Call ``listener`` with each dispatched batch (a list of :class:`DispatchInfo`).

        A listener that raises is logged and skipped for the rest of that batch only; one that
        must not lose records to its own errors handles them per record."""
        self.listeners.append(listener)

    # ------------------------------------------------------------------ reading
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: Callable[[CqUnit], bool] | None = None,
        record_filter: Callable[[bytes], bool] | None = None,
    ) -> GetResult:
        """Read up to ``max_count`` messages of a queue from ``offset`` (see :mod:`reading`)."""
        queues, reads = self.queues, self.reads
        return read_queue(
            queues, reads, topic, queue_id, offset, max_count, tag_filter, record_filter
        )

    def get_records(
        self, topic: str, queue_id: int, offset: int, max_count: int, bytes_max: int
    ) -> GetResult:
        """The records of up to ``max_count`` messages back to back (see
        :func:`~gannet.node.store.queues.reading.read_queue_records`)."""
        return read_queue_records(
            self.queues, self.reads, topic, queue_id, offset, max_count, bytes_max
        )

    def _tier_retention_s(self, topic: str) -> int | None:
        """The topic's tier retention (``gannet.tier.remote.retention.s``), for tier reads."""
        config = self.topic_configs.get(topic)
        return None if config is None else config.tier_remote_retention_s

    def read_message(self, commit_offset: int) -> Message | None:
        """The record at ``commit_offset``, local or tiered; None when stored in neither."""
        return self.reads.read_message(commit_offset)

    def read_stored(self, commit_offset: int, size_bytes: int) -> bytes | None:
        """The raw bytes ``[commit_offset, +size_bytes)`` as stored, local or tiered."""
        return self.reads.read(commit_offset, size_bytes)

    def readable_min_offset(self) -> int:
        """The lowest commit-log offset a read reaches: the tier's start when a tier reader is
        attached and the tier reaches the local files, else the first local file's start."""
        return self.reads.min_offset()

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.max_offset_in_queue() if cq is not None else 0

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.min_offset_in_queue() if cq is not None else 0

    # ------------------------------------------------------------------ replication
    def read_replicated(self, offset: int, max_bytes: int) -> bytes:
        """Raw commit-log bytes from ``offset`` for a follower (at most ``max_bytes``, never
        past the end of the file holding ``offset``)."""
        return self.commitlog.read_raw(offset, max_bytes)

    def append_replicated(self, offset: int, data: bytes) -> int:
        """Write a leader's bytes at ``offset`` (this log's end) and return the new end.

        The bytes are the leader's, so replicas stay byte-identical; queue offsets and the
        store time are raised from the complete records so that this node can lead later.
        Durability is requested like any append (``durable_waiters`` / ``wait_flushed``);
        dispatch still waits for :meth:`set_commit_offset`.
        """
        # The leader admits writes; a follower above its warning ratio still takes the bytes a
        # majority may already have committed (cleanup frees its space; a write that really
        # finds no space fails and stops the node).
        self._check_writable(admission=False)
        if self._raw_scanned == offset:  # no record of the leader's left partial here
            problem = record_checks.misplaced_start(
                data, offset, self.config.commitlog_file_size_bytes
            )
            if problem is not None:
                raise LogMismatch(
                    f"refusing the leader's bytes [{offset}, {offset + len(data)}): {problem}; "
                    "this log holds bytes the leader's does not (appended here without Raft)"
                )
        end = self.commitlog.append_raw(offset, data)
        self._raw_scanned = self.commitlog.note_raw_records(self._raw_scanned, end)
        if self.flush is not None:
            self.flush.request_flush(end)
        return end

    # ------------------------------------------------------------------ maintenance
    def truncate(self, offset: int) -> None:
        """Cut the commit log and everything derived from it at ``offset`` (a record start).

        Used by the Raft layer for a divergent suffix. Dispatch is paused meanwhile; queue
        offsets are rebuilt from the consume queues and the records kept past the dispatch
        cursor (committed or not).
        """
        with self.dispatch.paused(), self.commitlog.put_lock:
            self._check_record_boundary(offset)
            removed = self.commitlog.max_offset() - offset
            if self.checkpoint is not None:
                self.checkpoint.lower_flushed_offset(offset)
            self.queues.truncate_dirty(offset)
            if self.index is not None:
                self.index.truncate_dirty(offset)
            self.timers.truncate(offset)
            self.commitlog.forget_appended()
            self.commitlog.files.truncate_dirty_files(offset)
            self.dispatch.clear_handoff()
            if self.flush is not None:
                self.flush.truncated(offset)
            self._raw_scanned = min(self._raw_scanned, offset)
            reput = min(self.dispatch.reput_from, offset)
            # Queue offsets continue after every record kept, not only the dispatched ones:
            # the consume queues end at the dispatch cursor, and the records between it and
            # the cut (a Raft tail not committed yet) keep their queue offsets. Numbering from
            # the consume queues alone gave those offsets out again (fault seed 104).
            self.commitlog.queue_offsets = offset_table_of(self.queues)
            kept_from = max(reput, self.commitlog.min_offset())
            self.commitlog.note_records_locked(kept_from, offset)
            self.dispatch.reset(reput, min(self.dispatch.commit_offset, offset))
        if removed > 0:
            log.warning(
                "commit log cut at %d (Raft divergent suffix): %d bytes removed", offset, removed
            )
        self.truncations.record("divergence", removed)

    def reset_to(self, offset: int) -> None:
        """Discard the whole commit log and everything derived from it (consume queues, index,
        timers) and restart the log empty at ``offset``, its first file named by that offset.

        Used by the Raft layer when a follower needs bytes its leader's retention deleted: it
        then starts at the leader's first commit-log file, so ``offset`` must be a multiple of
        the commit-log file size (RocketMQ opens a log whose first file starts above 0). Config
        tables and consumer offsets are kept (the leader's config snapshot replaces them).
        """
        size = self.config.commitlog_file_size_bytes
        if offset < 0 or offset % size:
            raise StoreError(
                f"cannot restart the commit log at {offset}: not a multiple of the commit-log "
                f"file size ({size} bytes)"
            )
        with self.dispatch.paused(), self.commitlog.put_lock:
            removed = self.commitlog.max_offset() - self.commitlog.min_offset()
            if self.checkpoint is not None:
                self.checkpoint.lower_flushed_offset(0)
            self.timers.truncate(0)
            for cq in self.queues.queues():
                self.queues.destroy_queue(cq.topic, cq.queue_id)
            if self.index is not None:
                self.index.truncate_dirty(0)
            self.commitlog.forget_appended()
            self.commitlog.files.destroy()
            self.commitlog.files.create_file(offset)
            durable.sync_directory(self.config.commitlog_dir)
            self.dispatch.clear_handoff()
            if self.flush is not None:
                self.flush.reset_to(offset)
            self._raw_scanned = offset
            self.commitlog.queue_offsets = {}
            self.dispatch.reset(offset, offset)
        if removed > 0:
            log.warning(
                "commit log discarded (%d bytes) to restart at %d (Raft catch-up)", removed, offset
            )
        self.truncations.record("catch_up", removed)

    def _check_record_boundary(self, offset: int) -> None:
        end = self.commitlog.max_offset()
        if offset == end:
            return
        if not self.commitlog.min_offset() <= offset < end:
            raise StoreError(
                f"cannot truncate at {offset}: the commit log holds "
                f"[{self.commitlog.min_offset()}, {end})"
            )
        f = self.commitlog.file_for(offset)
        if f is None or offset == f.file_from_offset:
            return
        head, size, _ = record_checks.check_structure(
            f.buffer, offset - f.file_from_offset, f.wrote_position, check_crc=False
        )
        if (head is None or head.physical_offset != offset) and size != 0:
            raise StoreError(f"cannot truncate at {offset}: it is not the start of a record")

    def clean_now(self) -> int:
        """Run cleanup at once, deleting expired files regardless of ``deleteWhen``."""
        return self.cleaner.run(manual=True).commitlog_files_deleted

    def _flush_structures(self) -> None:
        # Order infos first: the offsets file holds how far replicated config records were
        # applied, and a restart applies them again only from there.
        self.order_infos.persist()
        self.consumer_offsets.persist()
        self.queues.flush_all(0)
        if self.index is not None:
            self.index.flush()
        if self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp_ms = (
                self.dispatch.last_dispatched_store_timestamp_ms
            )
            if self.index is not None:
                self.checkpoint.index_msg_timestamp_ms = self.index.end_timestamp_ms()
            self.checkpoint.flush()

    def _housekeep(self) -> None:
        interval_s = HOUSEKEEPING_INTERVAL_MS / 1000
        last_clean = time.monotonic()
        while not self._stop.wait(interval_s):
            try:
                self._flush_structures()
                now = time.monotonic()
                if (now - last_clean) * 1000 >= self.config.clean_resource_interval_ms:
                    last_clean = now
                    self.cleaner.run(manual=False)
            except Exception:
                log.exception("housekeeping failed")

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(
            min_offset=self.commitlog.min_offset(),
            max_offset=self.commitlog.max_offset(),
            flushed_offset=self.commitlog.flushed_offset(),
            commit_offset=self.dispatch.commit_offset,
            dispatched_offset=self.dispatch.reput_from,
            commitlog_files=len(self.commitlog.files.files),
            consume_queues=len(self.queues.queues()),
            index_files=len(self.index.files) if self.index is not None else 0,
            timer_backlog=self.timers.backlog(),
            last_exit_ok=self.last_exit_ok,
            disk_full=self.disk_full,
        )
