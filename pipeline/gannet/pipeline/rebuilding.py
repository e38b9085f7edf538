"""Rebuilding consume queues and index files from dispatch infos: the driver's half of
:func:`gannet.pipeline.jobs.rebuild`, plus the executor-side extraction of those infos.

Executors parse their segments in bulk (:mod:`gannet.pipeline.columns`) and send the driver
:class:`DispatchColumns`: the dispatch fields of a chunk of records as a few flat columns,
which pickle in a fraction of the time one ``DispatchInfo`` per record does; the driver turns
them back into ``DispatchInfo`` s one by one as it dispatches (:meth:`DispatchColumns.infos`).

:class:`Dispatcher` is the broker's dispatch chain without the broker: for every record, in
commit-log order, the consume-queue put (non-transactional and commit-type records only) and
then ``IndexService.build_index`` — the store's own classes, so the bytes are the ones the
broker's dispatch writes (``reference/store-format.md`` §3.2, §4.4, §4.6, §5). Index files are
named from the store time of the record that opened them instead of the wall clock, so a
rebuild of the same commit log is reproducible.

:func:`store_lock` takes a store's lock file the way a broker does, so an in-place rebuild
never runs beside a broker (and a broker cannot start during one).
"""

from __future__ import annotations

import fcntl
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
from gannet.node.store.queues.consume_queues import ConsumeQueueStore
from gannet.node.store.queues.index_files import IndexService
from gannet.pipeline import columns, segments
from gannet.pipeline.columns import Chunk
from gannet.pipeline.segments import Damage, Segment

_NO_PROPERTIES: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class DispatchColumns:
    """The dispatch infos of consecutive records, column by column (property maps dropped:
    dispatch needs only KEYS and UNIQ_KEY, which have their own columns)."""

    topics: list[str]
    numbers: npt.NDArray[np.int64]  # rows: queue id, commit offset, size, tags code,
    # store time, queue offset, sysFlag, prepared transaction offset
    keys: list[str | None]
    uniq_keys: list[str | None]

    @classmethod
    def of(cls, chunk: Chunk) -> DispatchColumns:
        found = chunk.property_columns
        tags = found.value(props.TAGS)
        codes = np.fromiter((tags_code(t) for t in tags.to_pylist()), np.int64, len(tags))
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
            ]
        )
        return cls(
            chunk.topics,
            numbers,
            found.value(props.KEYS).to_pylist(),
            found.value(props.UNIQ_KEY).to_pylist(),
        )

    def __len__(self) -> int:
        return len(self.topics)

    def infos(self) -> Iterator[DispatchInfo]:
        queue, commit, size, code, stored, offset, flag, prepared = self.numbers.tolist()
        for i, topic in enumerate(self.topics):
            yield DispatchInfo(
                topic, queue[i], commit[i], size[i], code[i], stored[i], offset[i],
                self.keys[i], self.uniq_keys[i], flag[i], prepared[i], _NO_PROPERTIES,
            )  # fmt: skip


def dispatch_events(parts: Iterable[Segment]) -> Iterator[DispatchColumns | Damage]:
    """Executor side: each segment's dispatch infos in chunks, up to its first damage."""
    for segment in parts:
        with segments.mapped(segment) as buf:
            for part in columns.chunks(buf, segment):
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
