"""Startup recovery: find the end of the valid commit log and make everything agree with it.

Called once by :meth:`MessageStore.load` after the files are opened. The steps follow RocketMQ
5 (``DefaultMessageStore.recover``), with Gannet's dispatch-after-start:

1. Consume queues recover first (each keeps its valid prefix; ``max_physic_offset`` is the end
   of the last record they point at). ``dispatch_from`` = the lowest of that and the index's
   end, so that the dispatcher later rebuilds whatever either structure lacks.
2. Start file. Normal exit (no ``abort`` file): the newest file whose first record is valid and
   starts at or before ``dispatch_from``. Abnormal exit: the newest file whose first record is
   valid, starts at or before ``dispatch_from`` and was stored before the checkpoint's
   ``min_timestamp_ms`` (that data had been flushed). None → the first file.
3. Scan forward validating every record (body CRC when ``check_crc_on_recover``, and the
   PHYSICALOFFSET field must equal the record's position). The first invalid record — torn
   write, zero-filled tail, flipped bit, cut file — ends the valid log: ``process_offset``.
4. Truncate consume-queue entries, index items and timer entries that point at or past
   ``process_offset``, then the commit log itself (tail zeroed, later files deleted).
5. Refuse a store whose queue numbering has a hole (:mod:`queue_consistency`): a consume
   queue's first or last entry pointing at a record with another queue offset, or a scanned
   record numbered past its queue's next offset.
6. Rebuild the per-queue next-offset table: the consume queues' max offsets, raised by the
   queue offsets of records found in the scan that are not dispatched yet.

Nothing here dispatches: the dispatch service starts at ``dispatch_from`` and goes up to the
commit offset, idempotently (consume queues skip entries they hold, the index skips offsets
below its end).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from gannet.node.store.checkpoints import Checkpoint
from gannet.node.store.commitlog import CommitLog, queue_key
from gannet.node.store.consume_queues import ConsumeQueueStore
from gannet.node.store.index_files import IndexService
from gannet.node.store.mapped_files import MappedFile
from gannet.node.store.queue_consistency import TailGapCheck, check_queue_ends

log = logging.getLogger(__name__)


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


def recover(
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    index: IndexService | None,
    checkpoint: Checkpoint,
    *,
    last_exit_ok: bool,
    check_crc: bool,
) -> RecoveryResult:
    result = RecoveryResult(last_exit_ok=last_exit_ok)
    cq_max_phy = queues.recover()
    min_offset = commitlog.min_offset()
    dispatch_from = max(cq_max_phy, min_offset)
    if index is not None:
        dispatch_from = min(dispatch_from, max(index.end_phy_offset(), min_offset))
    files = commitlog.files.files
    if not files:
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
    _truncate_all(commitlog, queues, index, process_offset)
    check_queue_ends(commitlog, queues)
    result.process_offset = process_offset
    result.dispatch_from = min(dispatch_from, process_offset)
    table = offset_table_of(queues)
    for key, value in scanned_offsets.items():
        table[key] = max(table.get(key, 0), value)
    queues.correct_min_offsets(commitlog.min_offset())
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
