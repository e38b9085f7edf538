"""Rebuilding consume queues and index files from dispatch infos: the driver's half of
:func:`gannet.pipeline.jobs.rebuild`, plus the executor-side extraction of those infos.

Executors parse their segments in bulk (:mod:`gannet.pipeline.columns`) and send the driver
:class:`DispatchColumns`: the dispatch fields of a chunk of records as a few flat columns,
which pickle in a fraction of the time one ``DispatchInfo`` per record does.

:class:`Dispatcher` is the broker's dispatch chain without the broker: in commit-log order,
the consume-queue units (non-transactional and commit-type records only) and then the index
items — the store's own classes, so the bytes are the ones the broker's dispatch writes
(``docs/formats/queues.md`` §1.3, §2.4). :meth:`Dispatcher.dispatch` takes one
record; :meth:`Dispatcher.dispatch_columns` takes a whole chunk in bulk: the units of every
queue the chunk reaches packed in one numpy step (a structured array of the 20-byte ``>qiq``
layout) and appended with ``ConsumeQueue.put_units`` (one slice copy per queue and file; the
record-by-record ``put`` only where that declines: a queue's first unit, a new file, a gap),
and the index through ``IndexService.build_index_batch`` (the broker's batch path). Index
files are named from the store time of the record that opened them instead of the wall
clock, so a rebuild of the same commit log is reproducible; the bulk path splits a chunk where
an index file fills so that each new file is named by the same record as one by one.

:func:`store_lock` takes a store's lock file the way a broker does, so an in-place rebuild
never runs beside a broker (and a broker cannot start during one).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gannet.node.store import properties as props
from gannet.node.store.config import StoreConfig
from gannet.node.store.hashing import tags_code
from gannet.node.store.log.records import DispatchInfo
from gannet.node.store.queues.consume_queue_store import ConsumeQueueStore
from gannet.node.store.queues.consume_queues import CQ_UNIT_SIZE_BYTES, ConsumeQueue
from gannet.node.store.queues.index_service import IndexService
from gannet.pipeline import columns, objects, segments
from gannet.pipeline.columns import Chunk
from gannet.pipeline.segments import Damage, Segment
from gannet.pipeline.sources import TierSegment

_NO_PROPERTIES: dict[str, str] = {}
_UNIT = np.dtype([("commit_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
"""A consume-queue unit as stored (``ConsumeQueue``'s ``>qiq``): 20 bytes, no padding."""
assert _UNIT.itemsize == CQ_UNIT_SIZE_BYTES
_PREPARED_BIT = 0x4  # sysFlag: prepared (0x4) or rollback (0xC) records get no unit
_ROLLBACK_TYPE = 0xC  # sysFlag & 0xC: rolled back, not indexed


@dataclass(frozen=True, slots=True)
class DispatchColumns:
    """The dispatch infos of consecutive records, column by column (property maps dropped:
    dispatch needs only KEYS and UNIQ_KEY, which have their own columns)."""

    topic_names: list[str]  # the distinct topics; row TOPIC of ``numbers`` indexes them
    numbers: npt.NDArray[np.int64]  # rows: queue id, commit offset, size, tags code,
    # store time, queue offset, sysFlag, prepared transaction offset, topic (index), index
    # items the record adds (counted on the executor: :func:`_index_item_counts`)
    keys: list[str | None]
    uniq_keys: list[str | None]

    QUEUE, COMMIT, SIZE, CODE, STORED, QUEUE_OFFSET, FLAG, PREPARED, TOPIC, ITEMS = range(10)

    @classmethod
    def of(cls, chunk: Chunk) -> DispatchColumns:
        found = chunk.property_columns
        tags = found.value(props.TAGS)
        codes = np.fromiter((tags_code(t) for t in tags.to_pylist()), np.int64, len(tags))
        encoded = chunk.topic_column.dictionary_encode()
        keys = found.value(props.KEYS).to_pylist()
        uniq_keys = found.value(props.UNIQ_KEY).to_pylist()
        numbers = np.stack(
            [
                chunk.queue_ids,
                chunk.commit_offsets,
                chunk.sizes,
                codes,
                chunk.store_timestamps_ms,
                chunk.queue_offsets,
                chunk.sys_flags,
                chunk.prepared_offsets,
                encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
                _index_item_counts(keys, uniq_keys, chunk.sys_flags),
            ]
        )
        return cls(encoded.dictionary.to_pylist(), numbers, keys, uniq_keys)

    def __len__(self) -> int:
        return int(self.numbers.shape[1])

    @property
    def topics(self) -> list[str]:
        names = self.topic_names
        return [names[i] for i in self.numbers[self.TOPIC].tolist()]

    def infos(self, start: int = 0, stop: int | None = None) -> list[DispatchInfo]:
        """The records ``[start, stop)`` as the store's ``DispatchInfo`` s."""
        stop = len(self) if stop is None else stop
        rows = self.numbers[:, start:stop].tolist()
        queue, commit, size, code, stored, offset, flag, prepared, topic, _ = rows
        names, keys, uniq_keys = self.topic_names, self.keys, self.uniq_keys
        infos = []
        for i in range(stop - start):
            info = DispatchInfo(
                names[topic[i]], queue[i], commit[i], size[i], code[i], stored[i], offset[i],
                keys[start + i], uniq_keys[start + i], flag[i], prepared[i], _NO_PROPERTIES,
            )  # fmt: skip
            infos.append(info)
        return infos


def _index_item_counts(
    keys: list[str | None], uniq_keys: list[str | None], sys_flags: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Index items each record adds (``IndexService._index_items``'s rules: the unique key and
    every non-empty KEYS token; none for a rolled-back record)."""
    counts = np.fromiter(
        (
            (u is not None) + (len(props.split_keys(k)) if k else 0)
            for k, u in zip(keys, uniq_keys, strict=True)
        ),
        np.int64,
        len(keys),
    )
    counts[(sys_flags & _ROLLBACK_TYPE) == _ROLLBACK_TYPE] = 0
    return counts


SegmentRange = tuple[Segment, int, int | None]
"""A segment and the byte range of it whose records a task reads (cut, next cut or None for
the file's end; :func:`gannet.pipeline.columns.range_chunks`)."""


def dispatch_events(
    parts: Iterable[Segment | SegmentRange | tuple[TierSegment, int, None]],
) -> Iterator[DispatchColumns | Damage]:
    """Executor side: the dispatch infos of each segment (or byte range of one, or tier object
    read from the bucket, :mod:`gannet.pipeline.objects`) in chunks, up to its first damage."""
    for part_of in parts:
        segment, cut, next_cut = (part_of, 0, None) if isinstance(part_of, Segment) else part_of
        if isinstance(segment, TierSegment):
            bucket = objects.open_bucket(segment.tier)
            for _, found in objects.chunks(bucket, segment):
                if isinstance(found, Damage):
                    yield found
                    break
                yield DispatchColumns.of(found)
            continue
        with segments.mapped(segment) as buf:
            for part in columns.range_chunks(buf, segment, cut, next_cut):
                if isinstance(part, Damage):
                    yield part
                    break
                yield DispatchColumns.of(part)


@dataclass(slots=True)
class Dispatcher:
    """Driver side: the broker's dispatch chain (consume queue, then index) for one target.

    Invariant: infos arrive in commit-log order; ``last_store_timestamp_ms`` is the store time
    of the record being dispatched, which names index files created for it.
    """

    config: StoreConfig
    queues: ConsumeQueueStore = field(init=False)
    index: IndexService | None = field(init=False)
    records: int = 0
    end_offset: int = 0
    last_store_timestamp_ms: int = 0

    def __post_init__(self) -> None:
        self.queues = ConsumeQueueStore(self.config)
        self.index = None
        if self.config.index_enabled:
            self.index = IndexService(self.config, clock_ms=self._clock_ms)

    def _clock_ms(self) -> int:
        return self.last_store_timestamp_ms or time.time_ns() // 1_000_000

    def dispatch(self, info: DispatchInfo) -> None:
        self.last_store_timestamp_ms = info.store_timestamp_ms
        if segments.is_consumable(info.sys_flag):
            cq = self.queues.find_or_create(info.topic, info.queue_id)
            cq.put(info.commit_offset, info.size, info.tags_code, info.queue_offset)
        if self.index is not None:
            self.index.build_index(info)
        self.records += 1
        self.end_offset = info.commit_offset + info.size

    def dispatch_columns(self, chunk: DispatchColumns, stop_at: Damage | None) -> Damage | None:
        """:meth:`dispatch_all` of a chunk's records in bulk (same bytes): ``stop_at`` when a
        record at or past it was reached (the records before it are dispatched), else None."""
        rows = chunk.numbers
        count = len(chunk)
        reached = None
        if stop_at is not None:
            cut = int(np.searchsorted(rows[chunk.COMMIT], stop_at.start_offset, side="left"))
            if cut < count:
                count, reached = cut, stop_at
        if count:
            self._put_units(chunk, count)
            if self.index is not None:
                self._build_index(chunk, count)
            last = count - 1
            self.records += count
            self.end_offset = int(rows[chunk.COMMIT, last] + rows[chunk.SIZE, last])
            self.last_store_timestamp_ms = int(rows[chunk.STORED, last])
        return reached

    def _put_units(self, chunk: DispatchColumns, count: int) -> None:
        """The consume-queue units of the first ``count`` records: every queue's units packed
        in one step, each queue's run appended in file-sized slices."""
        rows = chunk.numbers[:, :count]
        kept = np.flatnonzero((rows[chunk.FLAG] & _PREPARED_BIT) == 0)
        if not len(kept):
            return
        queue_keys = (rows[chunk.TOPIC, kept] << 32) | rows[chunk.QUEUE, kept]
        by_queue = np.argsort(queue_keys, kind="stable")  # log order within a queue
        order = kept[by_queue]
        units = np.empty(len(order), _UNIT)
        units["commit_offset"] = rows[chunk.COMMIT, order]
        units["size"] = rows[chunk.SIZE, order]
        units["tags_code"] = rows[chunk.CODE, order]
        packed = units.tobytes()
        starts = [0, *(np.flatnonzero(np.diff(queue_keys[by_queue])) + 1).tolist(), len(order)]
        run = _Run(packed, rows, order, chunk)
        for first, end in itertools.pairwise(starts):
            at = int(order[first])
            topic = chunk.topic_names[int(rows[chunk.TOPIC, at])]
            queue = self.queues.find_or_create(topic, int(rows[chunk.QUEUE, at]))
            run.put(queue, first, end, self.config.consume_queue_units_per_file)

    def _build_index(self, chunk: DispatchColumns, count: int) -> None:
        """``build_index_batch`` over the first ``count`` records, split where an index file
        fills: a new file is then opened by the call's first record and named by its store
        time, as one record at a time would (a record whose keys straddle files goes alone)."""
        index = self.index
        assert index is not None
        items_max = self.config.index_items_max
        stored = chunk.numbers[chunk.STORED]
        ends = np.cumsum(chunk.numbers[chunk.ITEMS, :count])  # items after each record
        start = base = 0
        while start < count:
            last = index.last_file()
            room = items_max - 1
            if last is not None and not last.is_full():
                room = items_max - last.index_count
            filler = int(np.searchsorted(ends, base + room, side="left"))
            if filler >= count:
                stop = count
            elif ends[filler] == base + room:
                stop = filler + 1  # fills the file: the next record opens a new one
            else:
                stop = max(filler, start + 1)
            self.last_store_timestamp_ms = int(stored[start])
            index.build_index_batch(chunk.infos(start, stop))
            base = int(ends[stop - 1])
            start = stop

    def dispatch_all(self, infos: Iterable[DispatchInfo], stop_at: Damage | None) -> Damage | None:
        """Dispatch ``infos`` in order up to ``stop_at`` (a missing segment); ``stop_at`` when
        it was reached, else None."""
        for info in infos:
            if stop_at is not None and info.commit_offset >= stop_at.start_offset:
                return stop_at
            self.dispatch(info)
        return None

    def close(self) -> tuple[int, int]:
        """Flush and close everything; (consume queues, index files) written."""
        queues = len(self.queues.queues())
        index_files = len(self.index.files) if self.index is not None else 0
        self.queues.flush_all(0)
        self.queues.close()
        if self.index is not None:
            self.index.close()
        return queues, index_files


@dataclass(frozen=True, slots=True)
class _Run:
    """The packed units of one chunk, sorted by queue (``order``: record index of each unit)."""

    packed: bytes
    rows: npt.NDArray[np.int64]
    order: npt.NDArray[np.intp]
    chunk: DispatchColumns

    def put(self, queue: ConsumeQueue, first: int, end: int, units_per_file: int) -> None:
        """Append units ``[first, end)`` (one queue's, in log order) to ``queue``: slices that
        fit its last file and have consecutive queue offsets with ``put_units``, the rest (a
        first unit, the one opening a file, a gap) with ``put``, which handles those cases."""
        c = self.chunk
        at = self.order[first:end]
        commit = self.rows[c.COMMIT, at]
        size = self.rows[c.SIZE, at]
        offsets = self.rows[c.QUEUE_OFFSET, at]
        gaps = np.concatenate(([0], np.cumsum(np.diff(offsets) != 1)))  # breaks before each
        file_bytes = units_per_file * CQ_UNIT_SIZE_BYTES
        i, n = 0, end - first
        while i < n:
            files = queue.files
            room = (file_bytes - files[-1].wrote_position) // CQ_UNIT_SIZE_BYTES if files else 0
            k = min(room, n - i)
            if k > 0:
                k = int(np.searchsorted(gaps[i : i + k], gaps[i], side="right"))
                lo, hi = (first + i) * CQ_UNIT_SIZE_BYTES, (first + i + k) * CQ_UNIT_SIZE_BYTES
                last = i + k - 1
                if queue.put_units(
                    self.packed[lo:hi],
                    int(offsets[i]),
                    int(commit[i] + size[i]),
                    int(commit[last] + size[last]),
                ):
                    i += k
                    continue
            code = int(self.rows[c.CODE, at[i]])
            queue.put(int(commit[i]), int(size[i]), code, int(offsets[i]))
            i += 1


class StoreLockedError(RuntimeError):
    """The store directory is open in a broker (its lock file is held)."""


@contextmanager
def store_lock(config: StoreConfig) -> Iterator[None]:
    """Hold the store's lock file, as a broker does, for the duration of the block."""
    fd = os.open(config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raise StoreLockedError(
                f"{config.root_dir} is open in a running broker; stop it first"
            ) from exc
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def require_empty(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} is not empty; rebuild into a fresh directory")


def store_config_for(
    root: Path,
    *,
    commitlog_file_size_bytes: int,
    consume_queue_units_per_file: int,
    index_hash_slots: int,
    index_items_max: int,
    index_enabled: bool = True,
) -> StoreConfig:
    """The target of a rebuild: a store config with the sizes the broker used."""
    return StoreConfig(
        root_dir=root,
        commitlog_file_size_bytes=commitlog_file_size_bytes,
        consume_queue_units_per_file=consume_queue_units_per_file,
        index_hash_slots=index_hash_slots,
        index_items_max=index_items_max,
        index_enabled=index_enabled,
    )
