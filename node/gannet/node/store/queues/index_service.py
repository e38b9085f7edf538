"""The index files of a store: keys of dispatched records in, commit-log offsets out.

:class:`IndexService` keeps the hash-index files of ``<root>/index/`` oldest first (RocketMQ's
``IndexService``): it opens them at start, adds the keys of dispatched records to the newest
one and starts the next when it is full, answers queries by key across files newest first, and
deletes or cuts files for cleanup and truncation. One file and its byte format are
:class:`~gannet.node.store.queues.index_files.IndexFile`.

Called by the dispatcher (:meth:`IndexService.build_index_batch` for each batch of dispatched
records; :meth:`IndexService.build_index` is the same for one record), by the query paths (by
key and by unique key: :meth:`IndexService.query_offsets`), by recovery and Raft truncation
(:meth:`IndexService.truncate_dirty`), by the cleaner (:meth:`IndexService.delete_expired_file`)
and by the pipeline's rebuild job (``gannet.pipeline.rebuilding``).

Gannet addition: :meth:`IndexService.truncate_dirty` removes exactly the items at or past a
commit-log offset: the newest files whose items all go are deleted and the file spanning the
cut is undone item by item (:meth:`~gannet.node.store.queues.index_files.IndexFile.truncate_from`).

Threading: one writer (the dispatch thread). Queries, cleanup and truncation take the service
lock, so a query never reads a file that is being deleted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gannet.node.store import durable
from gannet.node.store.config import StoreConfig
from gannet.node.store.hashing import index_key_hash
from gannet.node.store.log import native
from gannet.node.store.log.records import (
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    DispatchInfo,
    transaction_type,
)
from gannet.node.store.properties import split_keys
from gannet.node.store.queues.index_files import (
    IndexFile,
    build_key,
    epoch_ms_of_name,
    file_name_for,
)

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueryOffsetResult:
    """Hash matches for a key (newest file first) and the index's last update point."""

    phy_offsets: list[int]
    index_last_update_timestamp_ms: int
    index_last_update_phy_offset: int


class IndexService:
    """The index files of a store, oldest first (``IndexService``).

    ``index_msg_timestamp_ms`` reads the checkpoint's ``indexMsgTimestamp`` for :meth:`load`
    when no value is passed there. ``on_full_file_flushed(end_timestamp_ms)`` is called after a
    full file has been flushed (the store records it in the checkpoint); here this happens
    synchronously, on the dispatch thread, when the next file is created. ``clock_ms`` gives the
    creation time that names new files.
    """

    def __init__(
        self,
        config: StoreConfig,
        index_msg_timestamp_ms: Callable[[], int] | None = None,
        on_full_file_flushed: Callable[[int], None] | None = None,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if config.index_items_max < 2 or config.index_hash_slots < 1:
            raise ValueError("an index file needs index_items_max >= 2 and index_hash_slots >= 1")
        self.config = config
        self.directory = config.index_dir
        self.files: list[IndexFile] = []
        self._checkpoint_ms = index_msg_timestamp_ms
        self._on_full_file_flushed = on_full_file_flushed
        self._clock_ms = clock_ms if clock_ms is not None else _wall_clock_ms
        self._lock = threading.RLock()

    # --- lifecycle ---
    def load(
        self, last_exit_ok: bool, checkpoint_index_msg_timestamp_ms: int | None = None
    ) -> None:
        """Open every index file; after an abnormal exit drop files newer than the checkpoint."""
        checkpoint_ms = checkpoint_index_msg_timestamp_ms
        if checkpoint_ms is None:
            checkpoint_ms = self._checkpoint_ms() if self._checkpoint_ms is not None else 0
        self.directory.mkdir(parents=True, exist_ok=True)
        paths = sorted(p for p in self.directory.iterdir() if p.is_file() and p.name.isdigit())
        with self._lock:
            for path in paths:
                if path.stat().st_size == 0:
                    durable.remove_file(path)  # a crash while creating it
                    continue
                f = self._open(path, create=False)
                if not last_exit_ok and f.end_timestamp_ms > checkpoint_ms:
                    _log.info("abnormal exit: dropping index file %s (newer than checkpoint)", path)
                    f.destroy()
                    continue
                self.files.append(f)

    def _open(
        self, path: Path, *, create: bool, end_phy_offset: int = 0, end_ms: int = 0
    ) -> IndexFile:
        return IndexFile(
            path,
            self.config.index_hash_slots,
            self.config.index_items_max,
            create=create,
            end_phy_offset=end_phy_offset,
            end_timestamp_ms=end_ms,
        )

    def flush(self) -> None:
        with self._lock:
            for f in self.files:
                f.flush()

    def close(self, *, flush: bool = True) -> None:
        """Flush (unless dropped as by a crash, e.g. after a failed fsync) and unmap every
        file."""
        with self._lock:
            for f in self.files:
                if flush:
                    f.flush()
                f.close()
            self.files = []

    def last_file(self) -> IndexFile | None:
        return self.files[-1] if self.files else None

    def end_phy_offset(self) -> int:
        """Commit-log offset of the newest indexed message (0 without files)."""
        last = self.last_file()
        return last.end_phy_offset if last is not None else 0

    def end_timestamp_ms(self) -> int:
        """Store time of the newest indexed message (0 without files)."""
        last = self.last_file()
        return last.end_timestamp_ms if last is not None else 0

    # --- dispatch ---
    def build_index(self, info: DispatchInfo) -> None:
        """Index the unique key and every KEYS token of one dispatched record
        (``docs/formats/queues.md`` §2.4)."""
        if not self.config.index_enabled:
            return
        f = self._writable_file()
        if not _indexable(info, f.end_phy_offset):
            return
        if info.uniq_key is not None:
            f = self._put(f, build_key(info.topic, info.uniq_key), info)
        for key in split_keys(info.keys):
            f = self._put(f, build_key(info.topic, key), info)

    def build_index_batch(self, infos: list[DispatchInfo]) -> None:
        """:meth:`build_index` for consecutive dispatched records: the keys hashed in one pass,
        the items added in a loop over locals and the header written once per file touched —
        the same items, slots and final header bytes as one call per record."""
        if not self.config.index_enabled or not infos:
            return
        f = self._writable_file()
        first_end_phy_offset = f.end_phy_offset
        codec = native.codec
        if codec is not None:
            items = codec.index_items(infos, first_end_phy_offset, index_key_hash)
        else:
            items = self._index_items(infos, first_end_phy_offset)
        done = 0
        while items:
            done = f.add_items(items, done)
            f.write_header()
            if done == len(items):
                break
            _log.info("index file %s is full; creating the next one", f.name)
            f = self._writable_file()
        if items and f.is_full():
            # One call per record opens the next file as soon as any record arrives after the
            # file filled up, even one that indexes nothing: so does the batch (rare: once per
            # index file), so that both leave the same files.
            last = self._last_indexing_record(infos, first_end_phy_offset)
            if last < len(infos) - 1:
                self._writable_file()

    @staticmethod
    def _index_items(infos: list[DispatchInfo], end_phy_offset: int) -> list[tuple[int, int, int]]:
        """(key hash, commit offset, store time) of every key the records index: the unique key,
        then each KEYS token; records below ``end_phy_offset`` are indexed already."""
        items: list[tuple[int, int, int]] = []
        for info in infos:
            if not _indexable(info, end_phy_offset):
                continue
            offset, stored_ms, keys = info.commit_offset, info.store_timestamp_ms, info.keys
            prefix = info.topic + "#"
            count = len(items)
            if info.uniq_key is not None:
                items.append((index_key_hash(prefix + info.uniq_key), offset, stored_ms))
            if keys:
                for key in keys.split(" ") if " " in keys else (keys,):
                    if key:
                        items.append((index_key_hash(prefix + key), offset, stored_ms))
            if len(items) > count:
                end_phy_offset = offset
        return items

    @staticmethod
    def _last_indexing_record(infos: list[DispatchInfo], end_phy_offset: int) -> int:
        """The position in ``infos`` of the last record that indexes a key (the rules of
        :meth:`_index_items`), -1 when none does."""
        last = -1
        for position, info in enumerate(infos):
            if not _indexable(info, end_phy_offset):
                continue
            if info.uniq_key is not None or any(info.keys.split(" ") if info.keys else ()):
                last = position
                end_phy_offset = info.commit_offset
        return last

    def _put(self, f: IndexFile, key: str, info: DispatchInfo) -> IndexFile:
        while not f.put_key(key, info.commit_offset, info.store_timestamp_ms):
            _log.info("index file %s is full; creating the next one", f.name)
            f = self._writable_file()
        return f

    def _writable_file(self) -> IndexFile:
        """The last file if it has room, else a new file (and the full one is flushed)."""
        last = self.last_file()
        if last is not None and not last.is_full():
            return last
        end_phy, end_ms = (last.end_phy_offset, last.end_timestamp_ms) if last else (0, 0)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._new_file_path()
        created = self._open(path, create=True, end_phy_offset=end_phy, end_ms=end_ms)
        with self._lock:
            self.files.append(created)
        if last is not None:
            self._flush_full(last)
        return created

    def _flush_full(self, f: IndexFile) -> None:
        end_ms = f.end_timestamp_ms if f.is_full() else 0
        f.flush()
        if end_ms > 0 and self._on_full_file_flushed is not None:
            self._on_full_file_flushed(end_ms)

    def _new_file_path(self) -> Path:
        """Named by the clock; never equal to or (clock permitting) before the last name."""
        epoch_ms = self._clock_ms()
        last = self.last_file()
        last_ms = epoch_ms_of_name(last.name) if last is not None else None
        if last_ms is not None and epoch_ms <= last_ms:
            epoch_ms = last_ms + 1
        while (self.directory / file_name_for(epoch_ms)).exists():
            epoch_ms += 1
        return self.directory / file_name_for(epoch_ms)

    # --- queries ---
    def query_offsets(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> QueryOffsetResult:
        """Commit-log offsets of hash matches of ``topic#key`` stored in ``[begin, end]``."""
        max_num = min(max_num, self.config.index_query_results_max)
        key_hash = index_key_hash(build_key(topic, key))
        found: list[int] = []
        last_ms = last_phy = 0
        with self._lock:
            if self.files:
                last_ms, last_phy = self.files[-1].end_timestamp_ms, self.files[-1].end_phy_offset
            for f in reversed(self.files):
                if f.is_time_matched(begin_ms, end_ms):
                    budget = max_num - len(found)
                    found.extend(f.select_phy_offsets(key_hash, budget, begin_ms, end_ms))
                if f.begin_timestamp_ms < begin_ms or len(found) >= max_num:
                    break
        return QueryOffsetResult(found, last_ms, last_phy)

    # --- cleanup and truncation ---
    def delete_expired_file(self, min_commit_offset: int) -> int:
        """Delete oldest files whose endPhyOffset < ``min_commit_offset``, never the last."""
        with self._lock:
            if not self.files or self.files[0].end_phy_offset >= min_commit_offset:
                return 0
            doomed = 0
            for f in self.files[:-1]:
                if f.end_phy_offset >= min_commit_offset:
                    break
                doomed += 1
            for f in self.files[:doomed]:
                f.destroy()
            self.files = self.files[doomed:]
            return doomed

    def truncate_dirty(self, phy_offset: int) -> None:
        """Remove exactly the items whose phyOffset >= ``phy_offset`` (recovery, Raft).

        Newest files whose items all go (or that are empty but inherited an end offset at or
        past the cut) are deleted; the file spanning the cut is undone item by item.
        """
        with self._lock:
            while self.files:
                f = self.files[-1]
                if f.end_phy_offset < phy_offset:
                    break
                if f.index_count <= 1 or f.read_item(1).phy_offset >= phy_offset:
                    f.destroy()
                    self.files.pop()
                    continue
                f.truncate_from(phy_offset)
                f.flush()
                break


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _indexable(info: DispatchInfo, end_phy_offset: int) -> bool:
    """Whether a record's keys go into the index: not below ``end_phy_offset`` (indexed
    already) and not a rolled-back transaction."""
    return (
        info.commit_offset >= end_phy_offset
        and transaction_type(info.sys_flag) != SYSFLAG_TRANSACTION_ROLLBACK_TYPE
    )
