"""Store configuration: every size, interval and limit of the engine, named with its unit.

Defaults are Apache RocketMQ 5's (``MessageStoreConfig``, ``BrokerConfig``); the RocketMQ name
of each setting is given beside it so that an operator can map a ``broker.conf`` onto it. Tests
build small stores with :func:`StoreConfig.for_tests`. The object is frozen; change a setting
with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import Path


class FlushMode(enum.Enum):
    """When an append is durable (``flushDiskType``)."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Settings of one store directory."""

    root_dir: Path
    # --- commit log (docs/formats/commitlog.md) ---
    commitlog_file_size_bytes: int = 1024 * 1024 * 1024  # mappedFileSizeCommitLog
    message_body_size_max_bytes: int = 4 * 1024 * 1024  # maxMessageSize
    check_crc_on_recover: bool = True  # checkCRCOnRecover
    force_recover: bool = False  # Gannet: cut damage below the flushed floor, keeping the bytes
    # --- flushing (docs/design.md §2, group commit) ---
    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH  # flushDiskType
    flush_interval_ms: int = 500  # flushIntervalCommitLog
    flush_least_pages: int = 4  # flushCommitLogLeastPages
    flush_thorough_interval_ms: int = 10_000  # flushCommitLogThoroughInterval
    sync_flush_timeout_ms: int = 5_000  # syncFlushTimeout
    # --- consume queues (docs/formats/queues.md §1) ---
    consume_queue_units_per_file: int = 300_000  # mappedFileSizeConsumeQueue / 20
    consume_queue_flush_interval_ms: int = 1_000  # flushIntervalConsumeQueue
    # --- index files (docs/formats/queues.md §2) ---
    index_enabled: bool = True  # messageIndexEnable
    index_hash_slots: int = 5_000_000  # maxHashSlotNum
    index_items_max: int = 20_000_000  # maxIndexNum
    index_query_results_max: int = 64  # maxMsgsNumBatch
    # --- cleanup (docs/store.md, Cleanup) ---
    file_reserved_hours: float = 72.0  # fileReservedTime
    delete_when: str = "04"  # deleteWhen: ';'-separated local hours
    disk_max_used_ratio_percent: int = 75  # diskMaxUsedSpaceRatio
    disk_warning_ratio: float = 0.90  # diskSpaceWarningLevelRatio
    disk_clean_forcibly_ratio: float = 0.85  # diskSpaceCleanForciblyRatio
    disk_hysteresis_percentage_points: float = 2.0  # Gannet: a level clears this far below it
    clean_file_forcibly_enabled: bool = True  # cleanFileForciblyEnable
    delete_unconsumed: bool = False  # Gannet: forcible cleanup may delete unconsumed messages
    delete_files_per_run_max: int = 10  # deleteFileBatchMax
    clean_resource_interval_ms: int = 10_000  # cleanResourceInterval
    # --- timer store (docs/formats/timers.md) ---
    timer_precision_ms: int = 1_000  # timerPrecisionMs
    timer_wheel_slots: int = 7 * 86_400  # TIMER_WHEEL_TTL_DAY × seconds per day
    timer_log_file_size_bytes: int = 100 * 1024 * 1024  # mappedFileSizeTimerLog
    timer_max_delay_s: int = 3 * 86_400  # timerMaxDelaySec
    # --- identity ---
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    store_host: str = "127.0.0.1"
    store_port: int = 8081

    @classmethod
    def for_tests(cls, root_dir: Path, **overrides: object) -> StoreConfig:
        """Small files so that tests roll files, fill indexes and clean up quickly."""
        small: dict[str, object] = {
            "commitlog_file_size_bytes": 64 * 1024,
            "consume_queue_units_per_file": 100,
            "index_hash_slots": 64,
            "index_items_max": 256,
            "timer_wheel_slots": 3_600,
            "timer_log_file_size_bytes": 64 * 1024,
            "message_body_size_max_bytes": 16 * 1024,
        }
        small.update(overrides)
        return dataclasses.replace(cls(root_dir=root_dir), **small)  # type: ignore[arg-type]

    # --- paths (StorePathConfigHelper) ---
    @property
    def commitlog_dir(self) -> Path:
        return self.root_dir / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.root_dir / "index"

    @property
    def config_dir(self) -> Path:
        return self.root_dir / "config"

    @property
    def checkpoint_path(self) -> Path:
        return self.root_dir / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.root_dir / "abort"

    @property
    def quarantine_dir(self) -> Path:
        """Where ``force_recover`` keeps the commit-log bytes recovery cut off."""
        return self.root_dir / "quarantine"

    @property
    def lock_path(self) -> Path:
        return self.root_dir / "lock"

    @property
    def timer_log_dir(self) -> Path:
        return self.root_dir / "timerlog"

    @property
    def timer_wheel_path(self) -> Path:
        return self.root_dir / "timerwheel"

    @property
    def consume_queue_file_size_bytes(self) -> int:
        return self.consume_queue_units_per_file * 20
