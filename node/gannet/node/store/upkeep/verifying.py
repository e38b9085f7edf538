"""Offline inspection and verification of a store directory, without changing it.

:func:`verify` reads every commit-log record (structure, body CRC, whole-record CRC when
present, PHYSICALOFFSET equal to the record's position) and every consume-queue unit (it must
point at a valid record of the same topic, queue, size and tag code, and the record's stored
QUEUEOFFSET must equal the unit's position in its queue: a queue whose numbering shifted, e.g.
after a send that reserved an offset and then failed, is reported per entry with topic, queue
and offset). Every record that dispatch must have given a consume-queue unit (not a transaction
prepare or rollback, as :mod:`dispatching` decides) and that lies below the dispatch reach must
have a unit at its queue offset pointing back at it; a missing one (a dispatched unit lost, e.g.
by a recovery that cut a queue too far) is reported with topic, queue, queue offset and
commit-log offset, the first ``MISSING_REPORTED_MAX`` one by one, then one line with the count.
The store keeps no durable commit offset, so the dispatch reach is taken from the consume queues
themselves: the end of the highest record any valid unit points at. Dispatch is one ordered pass
that never passes the commit offset (with Raft, the majority-durable offset), so every eligible
record below that end was dispatched, and records above it (not committed, or not dispatched
before a crash; recovery dispatches those) are not missing. Records whose units lie below a
queue's first file were cleaned with it. Damage is
reported as ranges; a damaged commit-log file is reported from the first bad byte to its end
(records never straddle files, so the next file is checked independently). The zero-filled
tail of the newest file is the normal end of data, not damage.

:func:`inspect` summarises files, offsets, topics and queues, checkpoint values and whether the
last shutdown was clean.

Files are opened read-only and memory-mapped with ``PROT_READ``; a running broker may keep
writing meanwhile (the report is then a snapshot). Called by ``gannet store inspect|verify``
and by the crash tests.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gannet.node.store.log import checkpoints, record_checks, records

_CQ_UNIT = struct.Struct(">qiq")
CQ_UNIT_SIZE = 20
PRE_BLANK_SIZE = 0x7FFFFFFF
MISSING_REPORTED_MAX = 100
_NONZERO = re.compile(rb"[^\x00]")
_CQ_MAPS_OPEN_MAX = 128
Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Damage:
    where: str
    start: int
    end: int
    reason: str


@dataclass(slots=True)
class VerifyReport:
    records_ok: int = 0
    cq_units_ok: int = 0
    commitlog_end: int = 0
    dispatch_reach: int = 0
    missing_units: int = 0
    damage: list[Damage] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.damage


@contextmanager
def _mapped(path: Path) -> Iterator[mmap.mmap | bytes]:
    size = path.stat().st_size
    if size == 0:
        yield b""
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        try:
            yield mm
        finally:
            mm.close()
    finally:
        os.close(fd)


def commitlog_files(root: Path) -> list[Path]:
    d = root / "commitlog"
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_file() and p.name.isdigit())


def consume_queue_dirs(root: Path) -> list[tuple[str, int, Path]]:
    base = root / "consumequeue"
    found: list[tuple[str, int, Path]] = []
    if not base.is_dir():
        return found
    for topic_dir in sorted(base.iterdir()):
        if not topic_dir.is_dir():
            continue
        for qdir in sorted(topic_dir.iterdir(), key=lambda p: p.name):
            if qdir.is_dir() and qdir.name.lstrip("-").isdigit():
                found.append((topic_dir.name, int(qdir.name), qdir))
    return found


def total_bytes(root: Path) -> int:
    """Bytes of commit log plus consume queue files, the unit of the progress bar."""
    n = sum(p.stat().st_size for p in commitlog_files(root))
    for _, _, qdir in consume_queue_dirs(root):
        n += sum(p.stat().st_size for p in qdir.iterdir() if p.is_file())
    return n


def verify(root: Path, *, progress: Progress | None = None) -> VerifyReport:
    report = VerifyReport()
    files = commitlog_files(root)
    cq_damage: list[Damage] = []
    if files:
        # Consume queues first: they give the dispatch reach the commit-log pass needs.
        report.dispatch_reach = _verify_consume_queues(root, files, report, cq_damage, progress)
    with _QueueUnits(root) as units:
        missing = _MissingUnits(units, report.dispatch_reach)
        for i, path in enumerate(files):
            _verify_commitlog_file(path, report, is_last=i == len(files) - 1, on_record=missing)
            if progress is not None:
                progress(path.stat().st_size)
    report.damage += cq_damage
    report.damage += missing.damage
    report.missing_units = missing.count
    if missing.count > len(missing.damage):
        more = missing.count - len(missing.damage)
        report.damage.append(
            Damage("consumequeue", 0, 0, f"{more:,} more records without a consume-queue entry")
        )
    return report


def _verify_commitlog_file(
    path: Path,
    report: VerifyReport,
    *,
    is_last: bool,
    on_record: Callable[[records.DispatchInfo], None] | None = None,
) -> None:
    start = int(path.name)
    with _mapped(path) as buf:
        ok, end, damage = walk_records(buf, start, path.name, is_last=is_last, on_record=on_record)
    report.records_ok += ok
    if damage is not None:
        report.damage.append(damage)
    report.commitlog_end = end


def walk_records(
    buf: mmap.mmap | bytes,
    start: int,
    name: str,
    *,
    is_last: bool,
    on_record: Callable[[records.DispatchInfo], None] | None = None,
) -> tuple[int, int, Damage | None]:
    """Check every record of one commit-log file's bytes (structure, CRC, PHYSICALOFFSET) up
    to the blank record; returns the records found valid, the offset where the walk ended and
    the damage found (None: clean). A zero tail ends the last file without damage. Used for
    local files and for offloaded ones read back from the tier (``store verify --deep``)."""
    size = len(buf)
    pos = ok = 0
    damage: Damage | None = None
    while pos < size:
        res = record_checks.check_record(buf, pos, size, check_crc=True)
        if res.ok and res.size == 0:
            pos = size
            break
        if res.ok and res.info is not None and res.info.commit_offset != start + pos:
            res = record_checks.CheckResult(False, res.size, error="PHYSICALOFFSET mismatch")
        if not res.ok:
            zero_tail = buf[pos : pos + 8] in (b"", bytes(min(8, size - pos)))
            if zero_tail and is_last:
                break
            damage = Damage(name, start + pos, start + size, res.error or "invalid record")
            break
        ok += 1
        if on_record is not None and res.info is not None:
            on_record(res.info)
        pos += res.size
    return ok, start + pos, damage


class _QueueUnits:
    """Reads one consume-queue unit by (topic, queue, queue offset); at most
    ``_CQ_MAPS_OPEN_MAX`` files mapped at a time (least recently used closed first)."""

    def __init__(self, root: Path) -> None:
        self.base = root / "consumequeue"
        self.dirs: dict[tuple[str, int], tuple[dict[int, Path], int, int]] = {}
        self.maps: OrderedDict[Path, mmap.mmap | bytes] = OrderedDict()

    def __enter__(self) -> _QueueUnits:
        return self

    def __exit__(self, *exc: object) -> None:
        for buf in self.maps.values():
            if isinstance(buf, mmap.mmap):
                buf.close()
        self.maps.clear()

    def _files(self, topic: str, qid: int) -> tuple[dict[int, Path], int, int]:
        """The queue's files by first byte offset, the first one, and the file size (the
        largest: every file is preallocated to it, a damaged one may be shorter)."""
        key = (topic, qid)
        known = self.dirs.get(key)
        if known is None:
            qdir = self.base / topic / str(qid)
            found = qdir.iterdir() if qdir.is_dir() else iter(())
            files = {int(p.name): p for p in found if p.is_file() and p.name.isdigit()}
            first = min(files, default=0)
            file_size = max((p.stat().st_size for p in files.values()), default=0)
            known = self.dirs[key] = (files, first, file_size)
        return known

    def _buffer(self, path: Path) -> mmap.mmap | bytes:
        buf = self.maps.get(path)
        if buf is not None:
            self.maps.move_to_end(path)
            return buf
        size = path.stat().st_size
        if size == 0:
            buf = b""
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                buf = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        self.maps[path] = buf
        if len(self.maps) > _CQ_MAPS_OPEN_MAX:
            _, old = self.maps.popitem(last=False)
            if isinstance(old, mmap.mmap):
                old.close()
        return buf

    def unit(self, topic: str, qid: int, queue_offset: int) -> tuple[int, int] | None:
        """(commit-log offset, size) of the unit, ``None`` when there is none (no file, short
        file, or a zero unit); raises :class:`_Cleaned` when the unit lies below the queue's
        first file."""
        files, first, file_size = self._files(topic, qid)
        if file_size <= 0:
            return None
        pos = queue_offset * CQ_UNIT_SIZE
        if pos < first:
            raise _Cleaned
        start = first + (pos - first) // file_size * file_size
        path = files.get(start)
        if path is None:
            return None
        buf = self._buffer(path)
        at = pos - start
        if at + CQ_UNIT_SIZE > len(buf):
            return None
        offset, size, tags = _CQ_UNIT.unpack_from(buf, at)
        if offset == 0 and size == 0 and tags == 0:
            return None
        return offset, size


class _Cleaned(Exception):
    """The unit asked for lies below the queue's first file: cleaned, not missing."""


class _MissingUnits:
    """Called with every valid commit-log record, in order: notes each record dispatch must
    have given a unit (below ``reach``) whose unit is absent or points elsewhere."""

    def __init__(self, units: _QueueUnits, reach: int) -> None:
        self.units = units
        self.reach = reach
        self.count = 0
        self.damage: list[Damage] = []

    def __call__(self, info: records.DispatchInfo) -> None:
        if info.commit_offset + info.size > self.reach:
            return  # not dispatched yet: above the reach of every consume queue
        if records.transaction_type(info.sys_flag) not in (
            records.SYSFLAG_TRANSACTION_NOT_TYPE,
            records.SYSFLAG_TRANSACTION_COMMIT_TYPE,
        ):
            return  # a prepare or rollback never gets a unit
        topic, qid, qoff = info.topic, info.queue_id, info.queue_offset
        try:
            unit = self.units.unit(topic, qid, qoff)
        except _Cleaned:
            return
        if unit is not None and unit == (info.commit_offset, info.size):
            return
        self.count += 1
        if len(self.damage) >= MISSING_REPORTED_MAX:
            return
        if unit is None:
            what = "no consume-queue entry"
        elif unit[1] == PRE_BLANK_SIZE:
            what = "a pre-blank consume-queue entry"
        else:
            what = f"an entry pointing at commit-log offset {unit[0]} instead"
        reason = (
            f"topic {topic} queue {qid} offset {qoff}: {what} for the record at commit-log "
            f"offset {info.commit_offset}"
        )
        self.damage.append(Damage(f"consumequeue/{topic}/{qid}", qoff, qoff + 1, reason))


class _CommitLogReader:
    """Read-only access to records by global offset, mapping each file once."""

    def __init__(self, files: list[Path], stack: ExitStack) -> None:
        self.files = files
        self.stack = stack
        self.first = int(files[0].name)
        self.file_size = files[0].stat().st_size
        self.maps: dict[int, mmap.mmap | bytes] = {}

    def record_at(self, offset: int) -> record_checks.CheckResult | None:
        index = (offset - self.first) // self.file_size
        if offset < self.first or index >= len(self.files):
            return None
        buf = self.maps.get(index)
        if buf is None:
            buf = self.stack.enter_context(_mapped(self.files[index]))
            self.maps[index] = buf
        pos = offset - int(self.files[index].name)
        return record_checks.check_record(buf, pos, len(buf), check_crc=False)


def _verify_consume_queues(
    root: Path,
    files: list[Path],
    report: VerifyReport,
    damage: list[Damage],
    progress: Progress | None,
) -> int:
    """Check every unit, appending problems to ``damage``; returns the dispatch reach (the end
    of the highest record a valid unit points at)."""
    reach = 0
    with ExitStack() as stack:
        reader = _CommitLogReader(files, stack)
        for topic, qid, qdir in consume_queue_dirs(root):
            reach = max(reach, _verify_queue(reader, topic, qid, qdir, report, damage, progress))
    return reach


def _verify_queue(
    reader: _CommitLogReader,
    topic: str,
    qid: int,
    qdir: Path,
    report: VerifyReport,
    damage: list[Damage],
    progress: Progress | None,
) -> int:
    reach = 0
    for cq_file in sorted(p for p in qdir.iterdir() if p.is_file() and p.name.isdigit()):
        base = int(cq_file.name) // CQ_UNIT_SIZE
        with _mapped(cq_file) as buf:
            pos = 0
            while pos + CQ_UNIT_SIZE <= len(buf):
                offset, size, tags = _CQ_UNIT.unpack_from(buf, pos)
                if offset == 0 and size == 0 and tags == 0:
                    # End of written units, or a hole (zeroed units) with units after it: skip
                    # to the next written unit so they are checked and count for the reach.
                    found = _NONZERO.search(buf, pos)
                    if found is None:
                        break
                    pos = found.start() // CQ_UNIT_SIZE * CQ_UNIT_SIZE
                    continue
                qoff = base + pos // CQ_UNIT_SIZE
                pos += CQ_UNIT_SIZE
                if size == PRE_BLANK_SIZE or offset < reader.first:
                    continue  # pre-blank, or points into cleaned commit log
                problem = _check_unit(reader, offset, size, tags, topic, qid, qoff)
                if problem:
                    where = f"consumequeue/{topic}/{qid}"
                    damage.append(Damage(where, qoff, qoff + 1, problem))
                else:
                    report.cq_units_ok += 1
                    reach = max(reach, offset + size)
        if progress is not None:
            progress(cq_file.stat().st_size)
    return reach


def _check_unit(
    reader: _CommitLogReader,
    offset: int,
    size: int,
    tags: int,
    topic: str,
    qid: int,
    queue_offset: int,
) -> str:
    res = reader.record_at(offset)
    if res is None or not res.ok or res.info is None:
        return f"points at commit-log offset {offset}, where there is no valid record"
    info = res.info
    if info.size != size:
        return f"size {size} but the record at {offset} has {info.size} bytes"
    if (info.topic, info.queue_id) != (topic, qid):
        return f"record at {offset} belongs to {info.topic}/{info.queue_id}"
    if info.tags_code != tags:
        return f"tag code {tags} but the record's tags hash to {info.tags_code}"
    if info.queue_offset != queue_offset:
        return (
            f"topic {topic} queue {qid} offset {queue_offset}: the record at commit-log offset "
            f"{offset} has queue offset {info.queue_offset} (the queue's numbering is shifted)"
        )
    return ""


@dataclass(slots=True)
class QueueSummary:
    topic: str
    queue_id: int
    files: int
    min_offset: int
    max_offset: int


@dataclass(slots=True)
class Inspection:
    root: Path
    commitlog_files: list[tuple[str, int]]
    commitlog_end: int
    queues: list[QueueSummary]
    index_files: list[str]
    checkpoint: dict[str, int]
    clean_shutdown: bool


def inspect(root: Path) -> Inspection:
    files = commitlog_files(root)
    report = VerifyReport()
    if files:
        _verify_commitlog_file(files[-1], report, is_last=True)
    queues = [_summarise_queue(t, q, d) for t, q, d in consume_queue_dirs(root)]
    index_dir = root / "index"
    index_files = sorted(p.name for p in index_dir.iterdir()) if index_dir.is_dir() else []
    return Inspection(
        root=root,
        commitlog_files=[(p.name, p.stat().st_size) for p in files],
        commitlog_end=report.commitlog_end,
        queues=queues,
        index_files=index_files,
        checkpoint=checkpoints.read_values(root / "checkpoint"),
        clean_shutdown=not (root / "abort").exists(),
    )


def _summarise_queue(topic: str, qid: int, qdir: Path) -> QueueSummary:
    cq_files = sorted(p for p in qdir.iterdir() if p.is_file() and p.name.isdigit())
    if not cq_files:
        return QueueSummary(topic, qid, 0, 0, 0)
    lo = hi = 0
    with _mapped(cq_files[0]) as buf:
        base = int(cq_files[0].name) // CQ_UNIT_SIZE
        lo = base
        for pos in range(0, len(buf) - CQ_UNIT_SIZE + 1, CQ_UNIT_SIZE):
            _, size, _ = _CQ_UNIT.unpack_from(buf, pos)
            if size != PRE_BLANK_SIZE:
                lo = base + pos // CQ_UNIT_SIZE
                break
    with _mapped(cq_files[-1]) as buf:
        base = int(cq_files[-1].name) // CQ_UNIT_SIZE
        hi = base
        for pos in range(0, len(buf) - CQ_UNIT_SIZE + 1, CQ_UNIT_SIZE):
            if bytes(buf[pos : pos + CQ_UNIT_SIZE]) == bytes(CQ_UNIT_SIZE):
                break
            hi = base + pos // CQ_UNIT_SIZE + 1
    return QueueSummary(topic, qid, len(cq_files), lo, hi)
