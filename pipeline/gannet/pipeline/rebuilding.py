"""Rebuilding consume queues and index files from dispatch infos: the driver's half of
:func:`gannet.pipeline.jobs.rebuild`, plus the executor-side extraction of those infos.

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

from gannet.node.store.config import StoreConfig
from gannet.node.store.consume_queues import ConsumeQueueStore
from gannet.node.store.index_files import IndexService
from gannet.node.store.records import DispatchInfo
from gannet.pipeline import segments
from gannet.pipeline.segments import Damage, Segment


def dispatch_events(parts: Iterable[Segment]) -> Iterator[DispatchInfo | Damage]:
    """Executor side: each segment's dispatch infos (property maps dropped: dispatch needs
    only KEYS and UNIQ_KEY, which the info carries), up to the segment's first damage."""
    for segment in parts:
        with segments.mapped(segment) as buf:
            for event in segments.scan(buf, segment, check_crc=True):
                if isinstance(event, segments.Record):
                    yield event.info._replace(properties={})
                elif isinstance(event, Damage):
                    yield event
                    break


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
