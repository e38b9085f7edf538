"""Startup recovery: find the end of the valid commit log and make everything agree with it.

Called once by :meth:`MessageStore.load` after the files are opened. The steps follow RocketMQ
5 (``DefaultMessageStore.recover``), with Gannet's dispatch-after-start:

1. Consume queues recover first (each keeps its valid prefix; ``max_physic_offset`` is the end
   of the last record they point at). ``dispatch_from`` = the lowest of the highest of these
   and the index's end, so that the dispatcher later rebuilds whatever either structure lacks;
   lowered after the scan (step 3) to the first record that its own consume queue lacks (a
   crash may drop each queue file's unsynced tail separately).
2. Start file. Normal exit (no ``abort`` file): the newest file whose first record is valid and
   starts at or before ``dispatch_from``. Abnormal exit: the newest file whose first record is
   valid, starts at or before ``dispatch_from`` and was stored before the checkpoint's
   ``min_timestamp_ms`` (that data had been flushed). None → the first file.
3. Scan forward validating every record (body CRC when ``check_crc_on_recover``, and the
   PHYSICALOFFSET field must equal the record's position). The first invalid record — torn
   write, zero-filled tail, flipped bit, cut file — ends the valid log: ``process_offset``.
4. Guard (Gannet; RocketMQ and Kafka cut or skip silently here). The *bytes at stake* are
   ``[process_offset, stake_end)``, ``stake_end`` being just past the last non-zero byte of the
   log after the cut (zeros are preallocated space, not data). A scan that stopped on zeros
   looks :data:`ZERO_GAP_PEEK_BYTES` further for data; a longer run of zeros is taken for the
   end of the log, as RocketMQ does. The cut is a torn *tail* only if all of these hold:

   a. ``process_offset >= flushedPhyOffset`` of the checkpoint (every byte below it had been
      fdatasync'ed, and it is a record boundary; 0 = unknown, e.g. a store written by
      RocketMQ);
   b. nothing is at stake after a normal exit (a clean shutdown flushes everything), except
      the written prefix of one record (valid magic, declared length past the last non-zero
      byte): a Raft follower receives byte ranges, not records, and may stop cleanly with one;
   c. ``stake_end - process_offset <= commitlog_file_size_bytes`` — the *last unflushed
      region*: the flush service writes full files first and flushes at least every
      ``flush_thorough_interval_ms``, so a crash leaves at most the newest mapped file's worth
      unflushed;
   d. the bytes at stake end inside the file of the cut: a torn tail is the end of the *last*
      file holding data, never data running on into a later file;
   e. the file of the cut holds a valid record before it, unless the bytes at stake are the
      written prefix of one record (as in b): a file with no valid record at all — garbage, a
      partial copy, another program's file — is not a torn write.

   Before any file is mapped, :func:`refuse_short_last_file` applies the same rule to a last
   commit-log file shorter than the configured size (a copy cut short, a restore that missed
   bytes): holding data, it is refused as it is, not extended with zeros (which would move the
   bytes into a file the broker then owns).

   Otherwise recovery raises :class:`~gannet.node.store.errors.RecoveryRefused` naming the
   file, the offset, the bytes at stake and what to do, and changes nothing. With
   ``force_recover`` it cuts anyway after copying the bytes at stake to
   ``<root>/quarantine/<commit-log file name>.truncated-<offset>`` (one file per commit-log
   file touched, fsync'ed), and logs at WARNING. Every cut that removes data is logged at
   WARNING and counted in :class:`TruncationTally` (exported as
   ``gannet_store_truncations_total`` / ``gannet_store_truncated_bytes_total``).
5. Truncate consume-queue entries, index items and timer entries that point at or past
   ``process_offset``, then the commit log itself (tail zeroed, later files deleted); the
   checkpoint's flushed offset is lowered to the cut first.
6. Refuse a store whose queue numbering has a hole (:mod:`queue_consistency`): a consume
   queue's first or last entry pointing at a record with another queue offset, or a scanned
   record numbered past its queue's next offset.
7. Rebuild the per-queue next-offset table: the consume queues' max offsets, raised by the
   queue offsets of records found in the scan that are not dispatched yet.

Nothing here dispatches: the dispatch service starts at ``dispatch_from`` and goes up to the
commit offset, idempotently (consume queues skip entries they hold, the index skips offsets
below its end). The Raft layer's truncation of a divergent suffix does not come here: it is
:meth:`MessageStore.truncate`, which needs no guard (its cut is above the commit point by
construction) and is counted with cause ``divergence``.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gannet.node.store import durable
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import RecoveryRefused
from gannet.node.store.log import layout
from gannet.node.store.log.checkpoints import Checkpoint
from gannet.node.store.log.commitlog import CommitLog, queue_key
from gannet.node.store.log.mapped_files import MappedFile
from gannet.node.store.queues.consume_queue_store import ConsumeQueueStore
from gannet.node.store.queues.index_service import IndexService
from gannet.node.store.upkeep.queue_consistency import TailGapCheck, check_queue_ends

log = logging.getLogger(__name__)

ZERO_GAP_PEEK_BYTES = 4 * 1024 * 1024
_SCAN_CHUNK_BYTES = 4 * 1024 * 1024
TRUNCATION_CAUSES = ("recovery", "divergence", "catch_up")


class TruncationTally:
    """Commit-log truncations that removed data, by cause: ``recovery`` (a torn tail or a
    forced cut at start), ``divergence`` (the Raft layer cut a divergent suffix), ``catch_up``
    (the Raft layer discarded the log to restart at the leader's first file). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events = dict.fromkeys(TRUNCATION_CAUSES, 0)
        self.bytes = dict.fromkeys(TRUNCATION_CAUSES, 0)

    def record(self, cause: str, removed_bytes: int) -> None:
        if removed_bytes <= 0:
            return
        with self._lock:
            self.events[cause] += 1
            self.bytes[cause] += removed_bytes


@dataclass(slots=True)
class RecoveryResult:
    """What recovery found; reported by ``gannet store inspect`` and logged at start."""

    last_exit_ok: bool
    start_offset: int = 0
    process_offset: int = 0
    dispatch_from: int = 0
    records_scanned: int = 0
    damaged: bool = False
    stop_reason: str = ""
    queue_offsets: dict[str, int] = field(default_factory=dict)
    flushed_floor: int = 0
    """The checkpoint's flushed offset recovery trusted (0: unknown)."""
    truncated_bytes: int = 0
    """Data bytes (up to the last non-zero byte) the cut removed."""
    quarantined: list[Path] = field(default_factory=list)
    """Where ``force_recover`` kept the bytes it cut."""


def recover(
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    index: IndexService | None,
    checkpoint: Checkpoint,
    *,
    last_exit_ok: bool,
    check_crc: bool,
    force: bool = False,
    quarantine_dir: Path | None = None,
    readable_min_offset: Callable[[], int] | None = None,
) -> RecoveryResult:
    """Recover (see the module docstring); raises :class:`RecoveryRefused` when the cut would
    remove flushed data and ``force`` is not set. ``readable_min_offset``: the lowest offset
    readers reach (below the local files when a tier holds the older ones; default the first
    local file's start), to which the consume queues' minimums are corrected."""
    result = RecoveryResult(last_exit_ok=last_exit_ok)
    floor = checkpoint.flushed_phy_offset
    result.flushed_floor = floor
    cq_max_phy = queues.recover()
    min_offset = commitlog.min_offset()
    dispatch_from = max(cq_max_phy, min_offset)
    if index is not None:
        dispatch_from = min(dispatch_from, max(index.end_phy_offset(), min_offset))
    files = commitlog.files.files
    if not files:
        if floor > 0 and not force:
            raise RecoveryRefused(
                f"recovery refused: the commit log {commitlog.config.commitlog_dir} has no "
                f"files, but the checkpoint says {floor:,} bytes were flushed to it; restore "
                "the files, or start the broker with --force-recover to begin an empty log",
                path=str(commitlog.config.commitlog_dir),
                offset=0,
                bytes_at_stake=floor,
            )
        checkpoint.lower_flushed_offset(0)
        queues.destroy_all()
        result.dispatch_from = 0
        return result
    start_file = _choose_start_file(files, dispatch_from, checkpoint, last_exit_ok=last_exit_ok)
    result.start_offset = start_file.file_from_offset
    process_offset = start_file.file_from_offset
    scanned_offsets: dict[str, int] = {}
    gaps = TailGapCheck(queues, start_file.file_from_offset)
    end = commitlog.max_offset()
    scan = commitlog.scan_heads(start_file.file_from_offset, end, check_crc=check_crc)
    error = ""
    for offset, head, error in scan:
        if head is None:
            process_offset = offset
            if _is_zero_tail(commitlog, offset):
                result.stop_reason = "end of written data"
            else:
                result.damaged = True
                result.stop_reason = f"cut at offset {offset}: {error}"
            break
        if head.sys_flag & 0xC in (0x0, 0x8):
            gaps.see(head.topic, head.queue_id, head.queue_offset, offset)
        if offset >= dispatch_from and head.sys_flag & 0xC in (0x0, 0x8):
            key = queue_key(head.topic, head.queue_id)
            scanned_offsets[key] = max(scanned_offsets.get(key, 0), head.queue_offset + 1)
        process_offset = offset + head.size
        result.records_scanned += 1
    else:
        result.stop_reason = "end of written data"
    stake_end = _stake_end(commitlog, process_offset, damaged=result.damaged)
    _guard(commitlog, result, process_offset, stake_end, floor, error, force, quarantine_dir)
    checkpoint.lower_flushed_offset(process_offset)
    _truncate_all(commitlog, queues, index, process_offset)
    check_queue_ends(commitlog, queues)
    result.process_offset = process_offset
    if gaps.first_unheld is not None:
        # A consume queue that lost its unsynced tail at a crash (each file loses its own) may
        # end well before another queue's end, the ``dispatch_from`` above: its records in
        # between must be dispatched again, or its later entries land shifted (seed 620).
        dispatch_from = min(dispatch_from, gaps.first_unheld)
        for key, value in gaps.unheld_next.items():
            scanned_offsets[key] = max(scanned_offsets.get(key, 0), value)
    result.dispatch_from = min(dispatch_from, process_offset)
    table = offset_table_of(queues)
    for key, value in scanned_offsets.items():
        table[key] = max(table.get(key, 0), value)
    queues.correct_min_offsets((readable_min_offset or commitlog.min_offset)())
    commitlog.set_queue_offsets(table)
    result.queue_offsets = table
    log.info(
        "recovered commit log: exit %s, scanned %d records from %d, valid end %d (%s), "
        "dispatch from %d",
        "normal" if last_exit_ok else "ABNORMAL",
        result.records_scanned,
        result.start_offset,
        process_offset,
        result.stop_reason,
        result.dispatch_from,
    )
    return result


def _guard(
    commitlog: CommitLog,
    result: RecoveryResult,
    cut: int,
    stake_end: int,
    floor: int,
    error: str,
    force: bool,
    quarantine_dir: Path | None,
) -> None:
    """Refuse (or, forced, quarantine) a cut that is not a torn tail (module docstring, 4)."""
    stake = stake_end - cut
    region = commitlog.config.commitlog_file_size_bytes
    reasons: list[str] = []
    if cut < floor:
        reasons.append(
            f"the checkpoint says every byte below offset {floor:,} had been flushed to disk"
        )
    if stake > 0 and result.last_exit_ok and not _incomplete_last_record(commitlog, cut, stake_end):
        reasons.append("the last shutdown was clean (no abort file), so nothing was unflushed")
    if stake > region:
        reasons.append(
            f"that is more than one commit-log file ({region:,} bytes), the most a crash can "
            "leave unflushed"
        )
    f = commitlog.files.find_file(cut) or commitlog.files.files[-1]
    if stake > 0 and stake_end > f.file_from_offset + f.file_size:
        reasons.append(
            f"the data runs on past {f.path.name} into a later file, and a torn tail is only "
            "ever the end of the last file"
        )
    if (
        stake > 0
        and cut == f.file_from_offset
        and not _incomplete_last_record(commitlog, cut, stake_end)
    ):
        reasons.append(f"{f.path.name} holds no valid record at all, so this is no torn write")
    what = error or "zeros where flushed records should be"
    if reasons and not force:
        root = commitlog.config.root_dir
        short = (
            f"; the log ends {floor - stake_end:,} bytes short of it" if floor > stake_end else ""
        )
        raise RecoveryRefused(
            f"recovery refused: commit-log file {f.path} is invalid at offset {cut:,} "
            f"(position {cut - f.file_from_offset:,} in the file: {what}); cutting there "
            f"would remove {stake:,} bytes of data (offsets {cut:,} to {stake_end:,}), but "
            f"{'; and '.join(reasons)}{short}. This is damage, not a torn write. Copy {root} "
            f"aside, check it with `gannet store verify {root}`, then start the broker with "
            f"--force-recover to cut at {cut:,} and keep the removed bytes in "
            f"{root / 'quarantine'}",
            path=str(f.path),
            offset=cut,
            bytes_at_stake=max(stake, floor - cut),
        )
    if stake <= 0 and not reasons:
        return
    if force and quarantine_dir is not None and stake > 0:
        result.quarantined = _quarantine(commitlog, cut, stake_end, quarantine_dir)
    result.truncated_bytes = max(stake, 0)
    log.warning(
        "recovery cut the commit log at offset %d in %s (%s): %d bytes of data removed "
        "(offsets %d to %d)%s%s",
        cut,
        f.path,
        what,
        max(stake, 0),
        cut,
        stake_end,
        f"; FORCED past: {'; '.join(reasons)}" if reasons else " (a torn tail)",
        f"; kept in {', '.join(str(p) for p in result.quarantined)}" if result.quarantined else "",
    )


def refuse_short_last_file(config: StoreConfig) -> None:
    """Refuse a last commit-log file shorter than ``commitlog_file_size_bytes`` that holds
    data, unless ``force_recover`` (module docstring, step 4). A zero-length or all-zero short
    file holds nothing: loading deletes or extends it. Earlier files of another length are
    refused by the load itself; so is a longer last file (another configured size)."""
    directory = config.commitlog_dir
    if config.force_recover or not directory.is_dir():
        return
    names = sorted(p for p in directory.iterdir() if p.is_file() and p.name.isdigit())
    if not names:
        return
    last = names[-1]
    size = last.stat().st_size
    if size >= config.commitlog_file_size_bytes:
        return
    data_bytes = _data_length(last)
    if data_bytes == 0:
        return
    offset = int(last.name)
    raise RecoveryRefused(
        f"recovery refused: commit-log file {last} is {size:,} bytes long, not the configured "
        f"{config.commitlog_file_size_bytes:,} (a copy or restore cut short?), and holds "
        f"{data_bytes:,} bytes of data (offsets {offset:,} to {offset + data_bytes:,}). Nothing "
        f"was changed. Restore the whole file, or check the store with `gannet store verify "
        f"{config.root_dir}` and start the broker with --force-recover to keep the valid "
        f"records and move the rest to {config.quarantine_dir}",
        path=str(last),
        offset=offset,
        bytes_at_stake=data_bytes,
    )


def _data_length(path: Path) -> int:
    """Bytes up to and including the last non-zero byte of ``path`` (read from the end)."""
    with open(path, "rb") as f:
        top = os.fstat(f.fileno()).st_size
        while top > 0:
            bottom = max(0, top - _SCAN_CHUNK_BYTES)
            f.seek(bottom)
            kept = f.read(top - bottom).rstrip(b"\0")
            if kept:
                return bottom + len(kept)
            top = bottom
    return 0


def _incomplete_last_record(commitlog: CommitLog, cut: int, stake_end: int) -> bool:
    """Whether the bytes at stake are the written prefix of one record: a valid magic code at
    the cut and a declared length reaching past the last non-zero byte. A follower stopped
    cleanly may hold one (the leader ships byte ranges, not records)."""
    head = commitlog.read(cut, 8)
    if head is None:
        return False
    size, magic = struct.unpack(">ii", head)
    f = commitlog.files.find_file(cut)
    room = f.file_from_offset + f.file_size - cut if f is not None else 0
    return magic in (layout.MAGIC_V1, layout.MAGIC_V2) and stake_end < cut + size <= cut + room


def _stake_end(commitlog: CommitLog, cut: int, *, damaged: bool) -> int:
    """Just past the last non-zero byte at or after ``cut`` (``cut`` when there is none)."""
    files = [f for f in commitlog.files.files if f.file_from_offset + f.file_size > cut]
    if not files:
        return cut
    if not damaged:
        first = files[0]
        lo = cut - first.file_from_offset
        hi = min(first.file_size, lo + ZERO_GAP_PEEK_BYTES)
        if _last_nonzero(first, lo, hi) < 0 and not _any_data_after(files[1:]):
            return cut
    for f in reversed(files):
        lo = max(0, cut - f.file_from_offset)
        last = _last_nonzero(f, lo, f.file_size)
        if last >= 0:
            return f.file_from_offset + last + 1
    return cut


def _any_data_after(files: list[MappedFile]) -> bool:
    """Whether a later file holds data: its first 8 bytes (a record or BLANK header)."""
    return any(f.read(0, 8) != bytes(8) for f in files)


def _last_nonzero(f: MappedFile, lo: int, hi: int) -> int:
    """Position of the last non-zero byte of ``f`` in ``[lo, hi)``, or -1."""
    top = hi
    while top > lo:
        bottom = max(lo, top - _SCAN_CHUNK_BYTES)
        kept = f.read(bottom, top - bottom).rstrip(b"\0")
        if kept:
            return bottom + len(kept) - 1
        top = bottom
    return -1


def _quarantine(commitlog: CommitLog, cut: int, stake_end: int, directory: Path) -> list[Path]:
    """Copy ``[cut, stake_end)`` to ``<file name>.truncated-<offset>`` files, one per
    commit-log file touched, fsync'ed; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    kept: list[Path] = []
    for f in commitlog.files.files:
        start = max(cut, f.file_from_offset)
        stop = min(stake_end, f.file_from_offset + f.file_size)
        if start >= stop:
            continue
        target = directory / f"{f.path.name}.truncated-{start}"
        with open(target, "wb") as out:
            pos = start - f.file_from_offset
            while pos < stop - f.file_from_offset:
                n = min(_SCAN_CHUNK_BYTES, stop - f.file_from_offset - pos)
                out.write(f.read(pos, n))
                pos += n
            out.flush()
            durable.sync_data(out.fileno(), str(target))
        kept.append(target)
    durable.sync_directory(directory)
    return kept


def offset_table_of(queues: ConsumeQueueStore) -> dict[str, int]:
    """Next queue offset of every consume queue, keyed ``"<topic>-<queueId>"``."""
    return {queue_key(q.topic, q.queue_id): q.max_offset_in_queue() for q in queues.queues()}


def _choose_start_file(
    files: list[MappedFile], dispatch_from: int, checkpoint: Checkpoint, *, last_exit_ok: bool
) -> MappedFile:
    min_ts = checkpoint.min_timestamp_ms()
    for f in reversed(files):
        if f.file_from_offset > dispatch_from:
            continue
        info = CommitLog.first_record_info_of(f)
        if info is None or info.store_timestamp_ms == 0:
            continue
        if last_exit_ok or info.store_timestamp_ms <= min_ts:
            return f
    return files[0]


def _is_zero_tail(commitlog: CommitLog, offset: int) -> bool:
    """True when the bytes at ``offset`` are the untouched zeros of preallocated space."""
    head = commitlog.read(offset, 8)
    return head is None or head == bytes(8)


def _truncate_all(
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    index: IndexService | None,
    process_offset: int,
) -> None:
    queues.truncate_dirty(process_offset)
    if index is not None:
        index.truncate_dirty(process_offset)
    commitlog.truncate(process_offset)
