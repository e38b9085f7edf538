"""Cleanup: delete expired commit-log files, then the consume-queue and index files that only
pointed into them (RocketMQ ``CleanCommitLogService`` + ``CleanConsumeQueueService``), without
throwing away messages a consumer group has not consumed unless the operator allows it.

Triggers, checked every ``clean_resource_interval_ms`` by the store's housekeeping thread:

* time-up — the current local hour is in ``delete_when`` (``"04"`` or ``"03;04"``);
* space — disk usage of the store's partition (used / (used + available), as ``df`` and RocketMQ
  count it: :mod:`~gannet.node.store.upkeep.disk_space`; :attr:`CleanService.ratio_probe`,
  replaceable in tests) above ``disk_max_used_ratio_percent`` deletes expired files at any hour;
* manual — :meth:`CleanService.run` with ``manual=True`` (``gannet store clean``, admin API).

A commit-log file is expired when ``now ≥ last-modified + file_reserved_hours``: expired files
go whatever their consumers (time-based retention, as RocketMQ). Files go oldest first, never
the last (active) file, at most ``delete_files_per_run_max`` per run, stopping at the first file
that stays (no holes).

Disk pressure (Gannet's policy; RocketMQ deletes at once and Kafka only refuses writes):

* above ``disk_clean_forcibly_ratio`` the store must free space, so unexpired files may go too
  (when ``clean_file_forcibly_enabled``) — but by default only files whose every message each
  consumer group has consumed. When the oldest remaining file still holds unconsumed messages,
  cleanup keeps it and the store **refuses new writes** instead (:class:`DiskFull`, which the v2
  API answers as RocketMQ's proxy answers the broker's SERVICE_NOT_AVAILABLE:
  ``INTERNAL_SERVER_ERROR`` with the reason — the clients retry it) until consumers catch up,
  space is freed or the ratios are raised. With ``delete_unconsumed``
  (``gannet broker run --delete-unconsumed``) it deletes them anyway, as RocketMQ does;
* above ``disk_warning_ratio`` writes are refused in every mode.

Hysteresis: each of the three levels (max-used, clean-forcibly, warning) turns on when the ratio
rises above its threshold and off only once it falls below the threshold minus
``disk_hysteresis_percentage_points`` (2 by default), so a disk hovering at a threshold does not
flip writes between refused and accepted at every pass (:func:`latched`, :func:`space_state`
given the previous state). Each change of state is logged once, with the ratio and thresholds.

"Unconsumed" (:func:`unconsumed_below`): a consume-queue entry that points below the new commit-
log minimum and lies at or above the committed offset of a group that has offsets for its
topic; a topic no group has offsets for counts all its entries under
``(no consumer group of <topic>)``, so topics nobody reads yet, DLQs, delayed messages parked in
the timer topic and pending transaction halves are kept too (expiry still removes them).

Tiered storage (``docs/tiered-storage.md`` §6): when the broker offloads sealed files to a
bucket it sets :attr:`CleanService.tier_range` (the commit-log range the tier holds). Then
these rules count only files not yet offloaded: a file the tier holds loses no message when it
goes (:func:`unconsumed_below` is not asked about it, so disk pressure deletes it before any
write is refused), expiry (``file_reserved_hours``) deletes only files the tier holds (remote
retention is the tier's), and consume-queue and index files are kept down to the tier's start
(a reader finds offloaded records through them). The offload loop deletes what the manifest
records through :meth:`CleanService.delete_offloaded`.

Every deletion is logged at WARNING: the files, the offset range, why, and the unconsumed
messages it removed per group; the metrics count files, bytes and unconsumed messages removed
(``gannet_cleanup_*_total``). When the commit log's minimum offset moved, every consume queue
drops files whose last unit points below it and corrects its minimum offset, and the index
drops files whose end offset is below it (never its last file).

The decisions are pure functions (:func:`space_state`, :func:`plan_deletion`) over the measured
ratio, the previous state, the files and a loss function, so tests drive them with any disk
usage and any sequence of readings. Ratios are
clamped: max-used to [10, 95] %, warning to [0.35, 0.99], forcibly to [0.30, 0.99]; RocketMQ
caps the last two at 0.90 / 0.85, which left a disk more than 85 % full with no setting that
stops deletions. Called by :class:`MessageStore`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gannet.node.store.config import StoreConfig
from gannet.node.store.configs.offsets import ConsumerOffsetManager
from gannet.node.store.errors import StoreError
from gannet.node.store.log.commitlog import CommitLog
from gannet.node.store.log.mapped_files import MappedFile
from gannet.node.store.queues.consume_queue_store import ConsumeQueueStore
from gannet.node.store.queues.dispatching import DispatchService
from gannet.node.store.queues.index_service import IndexService
from gannet.node.store.upkeep.disk_space import disk_used_ratio

log = logging.getLogger(__name__)


class CleanedStore(Protocol):
    """What cleanup needs of the store it cleans (the message store): the files it deletes,
    the consumer offsets it protects, the dispatch it pauses, and the disk-full flag it sets."""

    disk_full: bool
    disk_full_reason: str

    @property
    def config(self) -> StoreConfig: ...

    @property
    def commitlog(self) -> CommitLog: ...

    @property
    def queues(self) -> ConsumeQueueStore: ...

    @property
    def index(self) -> IndexService | None: ...

    @property
    def dispatch(self) -> DispatchService: ...

    @property
    def consumer_offsets(self) -> ConsumerOffsetManager: ...

    def readable_min_offset(self) -> int:
        """The lowest commit-log offset readers reach (the tier's start, when it has one)."""
        ...


MAX_USED_PERCENT_RANGE = (10, 95)
WARNING_RATIO_RANGE = (0.35, 0.99)
CLEAN_FORCIBLY_RATIO_RANGE = (0.30, 0.99)
HYSTERESIS_PERCENTAGE_POINTS_RANGE = (0.0, 20.0)
DESCRIBE_GROUPS_MAX = 8
UnconsumedBelow = Callable[[int], dict[str, int]]


@dataclass(frozen=True, slots=True)
class CleanPolicy:
    """The settings an operator may change at run time (operator, admin API)."""

    file_reserved_hours: float
    delete_when: str
    disk_max_used_ratio_percent: int
    disk_warning_ratio: float
    disk_clean_forcibly_ratio: float
    delete_unconsumed: bool = False
    disk_hysteresis_percentage_points: float = 2.0
    """A disk level that turned on turns off only below its threshold minus this many
    percentage points (module docstring, Hysteresis)."""

    def delete_hours(self) -> set[int]:
        hours: set[int] = set()
        for raw in self.delete_when.split(";"):
            part = raw.strip()
            if part.isdigit() and 0 <= int(part) <= 23:
                hours.add(int(part))
        return hours

    def validate(self, name: Callable[[str], str] = str) -> None:
        """Every rule a policy must meet, for each way in (``gannet broker run`` and the admin
        API's ``Cleanup``); :class:`PolicyError` names the setting at fault. ``name`` words a
        setting in the caller's terms: the admin API's field names by default, the command's
        option names from the command line. The clamps of :func:`space_state` apply on top."""
        for field_name in ("disk_warning_ratio", "disk_clean_forcibly_ratio"):
            ratio = getattr(self, field_name)
            if not 0 < ratio <= 1:
                raise PolicyError(field_name, f"{name(field_name)} is {ratio}; use (0, 1]")
        percent = self.disk_max_used_ratio_percent
        if not 1 <= percent <= 100:
            raise PolicyError(
                "disk_max_used_ratio_percent",
                f"{name('disk_max_used_ratio_percent')} is {percent}; use 1 to 100",
            )
        if self.disk_clean_forcibly_ratio > self.disk_warning_ratio:
            raise PolicyError(
                "disk_clean_forcibly_ratio",
                f"{name('disk_clean_forcibly_ratio')} {self.disk_clean_forcibly_ratio} is above "
                f"{name('disk_warning_ratio')} {self.disk_warning_ratio}; cleanup must start "
                "before writes are refused",
            )
        if self.file_reserved_hours <= 0:
            raise PolicyError("file_reserved_hours", "fileReservedHours must be positive")
        if not self.delete_hours() and self.delete_when.strip():
            raise PolicyError(
                "delete_when",
                f"deleteWhen {self.delete_when!r} names no hour; use ';'-separated hours 0-23",
            )
        low, high = HYSTERESIS_PERCENTAGE_POINTS_RANGE
        if not low <= self.disk_hysteresis_percentage_points <= high:
            raise PolicyError(
                "disk_hysteresis_percentage_points",
                f"disk hysteresis of {self.disk_hysteresis_percentage_points:g} percentage "
                f"points is outside {low:g}-{high:g}",
            )


class PolicyError(StoreError):
    """A cleanup policy breaks a rule of :meth:`CleanPolicy.validate`; ``field_name`` is the
    :class:`CleanPolicy` field to change."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field_name = field_name


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
    unconsumed_deleted: dict[str, int] = field(default_factory=dict)
    """Unconsumed messages the deleted files held, per group."""
    kept_unconsumed: dict[str, int] = field(default_factory=dict)
    """Unconsumed messages of the oldest file that disk pressure would have deleted, per group
    (non-empty: writes are refused until they are consumed or the policy changes)."""


@dataclass(frozen=True, slots=True)
class SpaceState:
    """What the measured disk ratio asks for (:func:`space_state`)."""

    space_delete: bool
    """Above the max-used ratio: delete expired files at any hour."""
    clean_at_once: bool
    """Above the clean-forcibly ratio (and forcible cleaning enabled): unexpired files too."""
    forcibly: bool
    """Above the clean-forcibly ratio."""
    warning: bool
    """Above the warning ratio: writes are refused whatever cleanup does."""


CLEAR = SpaceState(space_delete=False, clean_at_once=False, forcibly=False, warning=False)
"""No disk pressure: the state before the first measurement."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A commit-log file cleanup may delete: its start offset, size and last-modified time."""

    start: int
    size: int
    last_modified_ms: int

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True, slots=True)
class Plan:
    """How many leading candidates to delete, and what kept the next one (if unconsumed)."""

    delete: int
    kept_unconsumed: dict[str, int] = field(default_factory=dict)


def _clamp(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])


def effective_ratios(policy: CleanPolicy) -> tuple[float, float, float]:
    """(max-used, clean-forcibly, warning) as fractions, clamped."""
    max_used = _clamp(policy.disk_max_used_ratio_percent, MAX_USED_PERCENT_RANGE) / 100
    forcibly = _clamp(policy.disk_clean_forcibly_ratio, CLEAN_FORCIBLY_RATIO_RANGE)
    warning = _clamp(policy.disk_warning_ratio, WARNING_RATIO_RANGE)
    return max_used, forcibly, warning


def hysteresis_margin(policy: CleanPolicy) -> float:
    """The hysteresis margin as a fraction (2 percentage points: 0.02), clamped."""
    points = _clamp(policy.disk_hysteresis_percentage_points, HYSTERESIS_PERCENTAGE_POINTS_RANGE)
    return points / 100


def latched(ratio: float, threshold: float, *, was_on: bool, margin: float) -> bool:
    """Pure hysteresis of one level: on above ``threshold``; once on, it stays on until the
    ratio falls below ``threshold - margin``."""
    if ratio > threshold:
        return True
    return was_on and ratio >= threshold - margin


def space_state(
    ratio: float,
    policy: CleanPolicy,
    *,
    forcibly_enabled: bool,
    previous: SpaceState = CLEAR,
) -> SpaceState:
    """Pure: what a disk used ``ratio`` (0-1) asks of cleanup under ``policy``, the state of
    the previous measurement being ``previous`` (each level is :func:`latched`)."""
    max_used, forcibly, warning = effective_ratios(policy)
    margin = hysteresis_margin(policy)
    above_warning = latched(ratio, warning, was_on=previous.warning, margin=margin)
    above_forcibly = (
        latched(ratio, forcibly, was_on=previous.forcibly, margin=margin) or above_warning
    )
    above_max_used = latched(ratio, max_used, was_on=previous.space_delete, margin=margin)
    return SpaceState(
        space_delete=above_max_used or above_forcibly,
        clean_at_once=above_forcibly and forcibly_enabled,
        forcibly=above_forcibly,
        warning=above_warning,
    )


def percent(fraction: float) -> str:
    """``0.88`` → ``"88%"``, ``0.8812`` → ``"88.1%"`` (to a tenth of a percent)."""
    return f"{round(fraction * 100, 1):g}%"


def plan_deletion(
    candidates: list[Candidate],
    *,
    now_ms: int,
    reserved_ms: int,
    clean_at_once: bool,
    delete_unconsumed: bool,
    files_max: int,
    unconsumed_below: UnconsumedBelow,
) -> Plan:
    """Pure given ``unconsumed_below``: the leading ``candidates`` (oldest first, the active
    file excluded) to delete. Expired files go; with ``clean_at_once`` unexpired ones too, but
    only while ``unconsumed_below(file end)`` is empty unless ``delete_unconsumed``. Stops at
    the first file that stays."""
    count = 0
    for c in candidates:
        if count >= files_max:
            break
        if now_ms < c.last_modified_ms + reserved_ms:
            if not clean_at_once:
                break
            if not delete_unconsumed:
                lost = unconsumed_below(c.end)
                if lost:
                    return Plan(count, lost)
        count += 1
    return Plan(count)


def unconsumed_below(store: CleanedStore, new_min_offset: int) -> dict[str, int]:
    """Unconsumed messages per group that moving the commit-log minimum to ``new_min_offset``
    would remove (module docstring); empty when none."""
    lost: dict[str, int] = {}
    offsets = store.consumer_offsets
    for cq in store.queues.queues():
        low = cq.min_offset_in_queue()
        high = cq.first_offset_at_or_after(new_min_offset)
        if high <= low:
            continue
        groups = offsets.groups_of(cq.topic)
        if not groups:
            key = no_group_key(cq.topic)
            lost[key] = lost.get(key, 0) + high - low
            continue
        for group in groups:
            committed = max(offsets.query(group, cq.topic, cq.queue_id), 0)
            count = high - max(low, committed)
            if count > 0:
                lost[group] = lost.get(group, 0) + count
    return lost


def no_group_key(topic: str) -> str:
    """The key under which :func:`unconsumed_below` counts a topic no group has offsets for."""
    return f"(no consumer group of {topic})"


def _describe(lost: dict[str, int]) -> str:
    """``"G1: 12, G2: 3"``, the largest first, at most :data:`DESCRIBE_GROUPS_MAX` of them."""
    ranked = sorted(lost.items(), key=lambda item: (-item[1], item[0]))
    text = ", ".join(f"{group}: {count}" for group, count in ranked[:DESCRIBE_GROUPS_MAX])
    if len(ranked) > DESCRIBE_GROUPS_MAX:
        rest = sum(count for _, count in ranked[DESCRIBE_GROUPS_MAX:])
        text += f" and {len(ranked) - DESCRIBE_GROUPS_MAX} more ({rest})"
    return text or "none"


class CleanService:
    def __init__(self, store: CleanedStore) -> None:
        cfg = store.config
        self.store = store
        self.policy = CleanPolicy(
            file_reserved_hours=cfg.file_reserved_hours,
            delete_when=cfg.delete_when,
            disk_max_used_ratio_percent=cfg.disk_max_used_ratio_percent,
            disk_warning_ratio=cfg.disk_warning_ratio,
            disk_clean_forcibly_ratio=cfg.disk_clean_forcibly_ratio,
            delete_unconsumed=cfg.delete_unconsumed,
            disk_hysteresis_percentage_points=cfg.disk_hysteresis_percentage_points,
        )
        self.last_result: CleanResult | None = None
        self.listeners: list[Callable[[CleanResult], None]] = []
        self._last_min_offset = -1
        self.ratio_probe: Callable[[str], float] = disk_used_ratio
        self.space = CLEAR
        """The disk state of the latest pass; the next pass's :func:`space_state` starts
        from it (hysteresis)."""
        self._refusal = ""
        """Why writes are refused for space ("warning", "forcibly") or ""."""
        self._run_lock = threading.Lock()  # the housekeeping thread and the admin API
        self.tier_range: Callable[[], tuple[int, int] | None] | None = None
        """The commit-log range ``[start, end)`` the tier holds (None: empty); the attribute
        is None when the broker has no tier (module docstring, Tiered storage)."""

    def _tier_end(self) -> int | None:
        """Where the tier ends (None: no tier); an empty tier ends at 0."""
        if self.tier_range is None:
            return None
        held = self.tier_range()
        return held[1] if held is not None else 0

    def delete_offloaded(self, base_offsets: Sequence[int]) -> int:
        """Delete the leading commit-log files (never the active one) whose start offset is in
        ``base_offsets`` — files the tier holds, verified by the caller — then the derived
        files below the new minimum; returns how many commit-log files went."""
        wanted = set(base_offsets)
        with self._run_lock:
            cl = self.store.commitlog
            with cl.put_lock:
                files = cl.files.files[:-1]
                doomed = list(itertools.takewhile(lambda f: f.file_from_offset in wanted, files))
                if doomed:
                    log.info(
                        "tier: deleted %d offloaded commit-log file(s) %s locally (offsets %d to"
                        " %d; the tier holds them)",
                        len(doomed),
                        ", ".join(f.path.name for f in doomed),
                        doomed[0].file_from_offset,
                        doomed[-1].file_from_offset + doomed[-1].file_size,
                    )
                cl.files.delete_files(doomed)
            self._delete_derived_files(CleanResult(0, "tier", 0.0))
        return len(doomed)

    def tier_moved(self) -> CleanResult:
        """The tier's start moved up (remote expiry): delete the consume-queue and index files
        below the new readable minimum and move the queues' minimum offsets up to it, so the
        earliest offset users see (QueryOffset BEGINNING, GET_MIN_OFFSET) follows the tier."""
        with self._run_lock:
            return self._delete_derived_files(CleanResult(0, "tier", 0.0))

    def set_policy(self, **changes: object) -> CleanPolicy:
        policy = dataclasses.replace(self.policy, **changes)  # type: ignore[arg-type]
        policy.validate()
        self.policy = policy
        return policy

    def run(self, *, manual: bool, now_ms: int | None = None) -> CleanResult:
        """One cleanup pass; returns (and remembers) what it did."""
        with self._run_lock:
            result = self._run(manual=manual, now_ms=now_ms)
        for listener in self.listeners:
            listener(result)
        return result

    def _run(self, *, manual: bool, now_ms: int | None) -> CleanResult:
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        ratio = self.ratio_probe(str(self.store.config.root_dir))
        space = space_state(
            ratio,
            self.policy,
            forcibly_enabled=self.store.config.clean_file_forcibly_enabled,
            previous=self.space,
        )
        self._log_forcibly_change(ratio, space)
        self.space = space
        hour = dt.datetime.fromtimestamp(now / 1000).astimezone().hour
        time_up = hour in self.policy.delete_hours()
        reason = (
            "manual" if manual else "time" if time_up else "space" if space.space_delete else ""
        )
        result = CleanResult(now, reason or "idle", ratio)
        if reason:
            result = self._delete_commitlog_files(result, now, space.clean_at_once)
        result = self._delete_derived_files(result)
        self._admit_writes(ratio, space, result)
        self.last_result = result
        return result

    def _against(self, ratio: float, name: str, threshold: float) -> str:
        """Where ``ratio`` stands against a level that is on: above its threshold, or back
        under it but not yet below the hysteresis margin."""
        if ratio > threshold:
            return f"above the {name} ratio ({percent(threshold)})"
        return (
            f"not yet below {percent(threshold - hysteresis_margin(self.policy))} after rising "
            f"above the {name} ratio ({percent(threshold)})"
        )

    def _log_forcibly_change(self, ratio: float, space: SpaceState) -> None:
        """Log, once per change, when disk pressure starts and stops (clean-forcibly level)."""
        if space.forcibly == self.space.forcibly:
            return
        _, forcibly, _ = effective_ratios(self.policy)
        resume = forcibly - hysteresis_margin(self.policy)
        root = self.store.config.root_dir
        if space.forcibly:
            log.warning(
                "disk pressure: %s is %s used, above the clean-forcibly ratio (%s); cleanup may "
                "delete unexpired files until it is below %s",
                root,
                percent(ratio),
                percent(forcibly),
                percent(resume),
            )
        else:
            log.warning(
                "disk pressure over: %s is %s used, below %s (the clean-forcibly ratio %s minus "
                "the hysteresis margin)",
                root,
                percent(ratio),
                percent(resume),
                percent(forcibly),
            )

    def _admit_writes(self, ratio: float, space: SpaceState, result: CleanResult) -> None:
        """Refuse writes above the warning ratio, and above the clean-forcibly ratio while
        unconsumed messages keep cleanup from freeing space; admit them again once neither
        holds (each level with its hysteresis). Logged once per change."""
        _, forcibly, warning = effective_ratios(self.policy)
        margin = hysteresis_margin(self.policy)
        root = self.store.config.root_dir
        why = ""
        refusal = ""
        if space.warning:
            refusal = "warning"
            why = (
                f"disk full: {root} is {percent(ratio)} used, "
                f"{self._against(ratio, 'warning', warning)}; writes are refused until cleanup "
                f"frees space (accepted again below {percent(warning - margin)}) — free disk "
                "space, lower --file-reserved-hours or raise --disk-warning-ratio"
            )
        elif space.forcibly and result.kept_unconsumed:
            refusal = "forcibly"
            why = (
                f"disk full: {root} is {percent(ratio)} used, "
                f"{self._against(ratio, 'clean-forcibly', forcibly)}, and the oldest commit-log "
                f"file holds messages not consumed yet ({_describe(result.kept_unconsumed)}); "
                "writes are refused until cleanup frees space (accepted again once those "
                f"messages are consumed or below {percent(forcibly - margin)}) — let consumers "
                "catch up, free disk space, raise --disk-clean-forcibly-ratio, or start the "
                "broker with --delete-unconsumed"
            )
        if refusal and refusal != self._refusal:
            log.error("%s", why)
        elif not refusal and self._refusal:
            log.warning(
                "disk usage of %s is %s: writes are accepted again (refused above the warning "
                "ratio %s until below %s, and above the clean-forcibly ratio %s until below %s "
                "while unconsumed messages keep cleanup from freeing space)",
                root,
                percent(ratio),
                percent(warning),
                percent(warning - margin),
                percent(forcibly),
                percent(forcibly - margin),
            )
        self._refusal = refusal
        self.store.disk_full_reason = why
        self.store.disk_full = bool(why)

    def _delete_commitlog_files(
        self, result: CleanResult, now: int, clean_at_once: bool
    ) -> CleanResult:
        cl = self.store.commitlog
        policy = self.policy
        tier_end = self._tier_end()

        def lost_below(end: int) -> dict[str, int]:
            if tier_end is not None and end <= tier_end:
                return {}  # the tier holds every message below ``end``
            return unconsumed_below(self.store, end)

        with cl.put_lock:
            files = cl.files.files[:-1]
            if tier_end is not None and not clean_at_once:
                # Expiry deletes only what the tier holds; disk pressure follows today's rules.
                files = [f for f in files if f.file_from_offset + f.file_size <= tier_end]
            candidates = [
                Candidate(f.file_from_offset, f.file_size, f.last_modified_ms()) for f in files
            ]
            plan = plan_deletion(
                candidates,
                now_ms=now,
                reserved_ms=int(policy.file_reserved_hours * 3_600_000),
                clean_at_once=clean_at_once,
                delete_unconsumed=policy.delete_unconsumed,
                files_max=self.store.config.delete_files_per_run_max,
                unconsumed_below=lost_below,
            )
            doomed: list[MappedFile] = files[: plan.delete]
            lost: dict[str, int] = {}
            if doomed:
                lost = lost_below(doomed[-1].file_from_offset + doomed[-1].file_size)
                self._log_deletion(result, doomed, lost, clean_at_once)
            cl.files.delete_files(doomed)
        freed = sum(f.file_size for f in doomed)
        return dataclasses.replace(
            result,
            commitlog_files_deleted=len(doomed),
            bytes_freed=result.bytes_freed + freed,
            unconsumed_deleted=lost,
            kept_unconsumed=plan.kept_unconsumed,
        )

    def _log_deletion(
        self, result: CleanResult, doomed: list[MappedFile], lost: dict[str, int], forced: bool
    ) -> None:
        start = doomed[0].file_from_offset
        end = doomed[-1].file_from_offset + doomed[-1].file_size
        why = {
            "manual": "manual cleanup",
            "time": f"deleteWhen hour, older than {self.policy.file_reserved_hours:g} h",
            "space": f"disk {percent(result.disk_used_ratio)} used",
        }.get(result.reason, result.reason)
        if forced:
            why += ", unexpired files deleted for space"
            if self.policy.delete_unconsumed:
                why += " (--delete-unconsumed)"
        log.warning(
            "cleanup deleted %d commit-log file(s) %s (offsets %d to %d, %s); unconsumed "
            "messages removed per group: %s",
            len(doomed),
            ", ".join(f.path.name for f in doomed),
            start,
            end,
            why,
            _describe(lost),
        )

    def _delete_derived_files(self, result: CleanResult) -> CleanResult:
        min_offset = self.store.readable_min_offset()  # offloaded records keep units
        held = self.tier_range() if self.tier_range is not None else None
        if held is not None:
            min_offset = min(min_offset, held[0])  # readers of the tier find records by them
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
