"""Cleanup: delete expired commit-log files, then the consume-queue and index files that only
pointed into them (RocketMQ ``CleanCommitLogService`` + ``CleanConsumeQueueService``).

Triggers, checked every ``clean_resource_interval_ms`` by the store's housekeeping thread:

* time-up — the current local hour is in ``delete_when`` (``"04"`` or ``"03;04"``);
* space — disk usage of the store's partition (used / (used + available), rounded up to a whole
  percent) above ``disk_max_used_ratio_percent`` deletes expired files at any hour; above
  ``disk_clean_forcibly_ratio`` deletes the oldest files even if not expired ("clean at once");
  above ``disk_warning_ratio`` also marks the disk full, which refuses writes until usage drops;
* manual — :meth:`CleanService.run` with ``manual=True`` (``gannet store clean``, admin API).

A commit-log file is expired when ``now ≥ last-modified + file_reserved_hours``. Files go oldest
first, never the last (active) file, at most ``delete_files_per_run_max`` per run, stopping at
the first file that stays (no holes). When the commit log's minimum offset moved, every consume
queue drops files whose last unit points below it and corrects its minimum offset, and the
index drops files whose end offset is below it (never its last file).

Ratios are clamped as RocketMQ does (max-used to [10, 95] %, warning to [0.35, 0.90], forcibly
to [0.30, 0.85]). Called by :class:`MessageStore`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gannet.node.store.errors import StoreError
from gannet.node.store.mapped_files import MappedFile

if TYPE_CHECKING:
    from gannet.node.store.message_store import MessageStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CleanPolicy:
    """The settings an operator may change at run time (operator, admin API)."""

    file_reserved_hours: float
    delete_when: str
    disk_max_used_ratio_percent: int
    disk_warning_ratio: float
    disk_clean_forcibly_ratio: float

    def delete_hours(self) -> set[int]:
        hours: set[int] = set()
        for raw in self.delete_when.split(";"):
            part = raw.strip()
            if part.isdigit() and 0 <= int(part) <= 23:
                hours.add(int(part))
        return hours

    def validate(self) -> None:
        if self.file_reserved_hours <= 0:
            raise StoreError("fileReservedHours must be positive")
        if not self.delete_hours() and self.delete_when.strip():
            raise StoreError(
                f"deleteWhen {self.delete_when!r} names no hour; use ';'-separated hours 0-23"
            )


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one run did; the latest is kept for ``gannet status`` and the admin API."""

    started_ms: int
    reason: str
    disk_used_ratio: float
    commitlog_files_deleted: int = 0
    consume_queue_files_deleted: int = 0
    index_files_deleted: int = 0
    bytes_freed: int = 0


def disk_used_ratio(path: str) -> float:
    """used / (used + available) rounded up to a whole percent, as a fraction."""
    usage = shutil.disk_usage(path)
    used = usage.total - usage.free
    denominator = used + usage.free
    if denominator <= 0:
        return 0.0
    return math.ceil(used * 100 / denominator) / 100


class CleanService:
    def __init__(self, store: MessageStore) -> None:
        cfg = store.config
        self.store = store
        self.policy = CleanPolicy(
            file_reserved_hours=cfg.file_reserved_hours,
            delete_when=cfg.delete_when,
            disk_max_used_ratio_percent=cfg.disk_max_used_ratio_percent,
            disk_warning_ratio=cfg.disk_warning_ratio,
            disk_clean_forcibly_ratio=cfg.disk_clean_forcibly_ratio,
        )
        self.last_result: CleanResult | None = None
        self.listeners: list[Callable[[CleanResult], None]] = []
        self._last_min_offset = -1
        self.ratio_probe = disk_used_ratio

    def set_policy(self, **changes: object) -> CleanPolicy:
        policy = dataclasses.replace(self.policy, **changes)  # type: ignore[arg-type]
        policy.validate()
        self.policy = policy
        return policy

    def run(self, *, manual: bool, now_ms: int | None = None) -> CleanResult:
        """One cleanup pass; returns (and remembers) what it did."""
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        ratio = self.ratio_probe(str(self.store.config.root_dir))
        clean_at_once, space_delete = self._check_space(ratio)
        hour = dt.datetime.fromtimestamp(now / 1000).astimezone().hour
        time_up = hour in self.policy.delete_hours()
        reason = "manual" if manual else "time" if time_up else "space" if space_delete else ""
        result = CleanResult(now, reason or "idle", ratio)
        if reason:
            result = self._delete_commitlog_files(result, now, clean_at_once)
        result = self._delete_derived_files(result)
        self.last_result = result
        for listener in self.listeners:
            listener(result)
        if result.commitlog_files_deleted:
            log.info("cleanup (%s): %s", reason, result)
        return result

    def _check_space(self, ratio: float) -> tuple[bool, bool]:
        p = self.policy
        warning = min(max(p.disk_warning_ratio, 0.35), 0.90)
        forcibly = min(max(p.disk_clean_forcibly_ratio, 0.30), 0.85)
        max_used = min(max(p.disk_max_used_ratio_percent, 10), 95) / 100
        enabled = self.store.config.clean_file_forcibly_enabled
        if ratio > warning:
            if not self.store.disk_full:
                log.error("disk usage %.0f%% above warning ratio; refusing writes", ratio * 100)
            self.store.disk_full = True
            return enabled, True
        self.store.disk_full = False
        if ratio > forcibly:
            return enabled, True
        return False, ratio > max_used

    def _delete_commitlog_files(
        self, result: CleanResult, now: int, clean_at_once: bool
    ) -> CleanResult:
        cl = self.store.commitlog
        reserved_ms = int(self.policy.file_reserved_hours * 3_600_000)
        doomed: list[MappedFile] = []
        freed = 0
        with cl.put_lock:
            for f in cl.files.files[:-1]:
                if len(doomed) >= self.store.config.delete_files_per_run_max:
                    break
                if now >= f.last_modified_ms() + reserved_ms or clean_at_once:
                    doomed.append(f)
                    freed += f.file_size
                else:
                    break
            cl.files.delete_files(doomed)
        return dataclasses.replace(
            result, commitlog_files_deleted=len(doomed), bytes_freed=result.bytes_freed + freed
        )

    def _delete_derived_files(self, result: CleanResult) -> CleanResult:
        min_offset = self.store.commitlog.min_offset()
        if min_offset <= self._last_min_offset:
            return result
        self._last_min_offset = min_offset
        cq_deleted = 0
        index_deleted = 0
        with self.store.dispatch.paused():
            cq_deleted = self.store.queues.delete_expired(min_offset)
            if self.store.index is not None:
                index_deleted = self.store.index.delete_expired_file(min_offset)
        return dataclasses.replace(
            result,
            consume_queue_files_deleted=cq_deleted,
            index_files_deleted=index_deleted,
        )
