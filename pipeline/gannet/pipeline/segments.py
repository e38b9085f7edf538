"""Commit-log segments: finding them and scanning one of them on its own.

A *segment* is one commit-log file, named by the 20-digit decimal global offset of its first
byte (``docs/formats/commitlog.md`` §2). Records never straddle files: a file ends with a
BLANK record (``docs/formats/commitlog.md`` §6) or, for the newest file, with zero bytes past
the last record. So every segment can be parsed independently of the others, which is what
lets the Spark jobs of :mod:`gannet.pipeline.jobs` split work one task per segment.

:func:`find_segments` accepts a store directory (its ``commitlog/`` folder is used) or any
folder of segment copies. :func:`scan` walks one mapped segment and yields, in file order,
:class:`Record` events for valid records (with the store's own ``DispatchInfo``, so the
dispatch rules stay the store's) and :class:`Damage` events for invalid byte ranges. After a
damaged record the scan resynchronises on the next position that holds a valid record whose
PHYSICALOFFSET equals its position, so one flipped bit costs one record, not the rest of the
file. Zero bytes up to the end of the newest segment are its normal end, not damage.

Pure apart from read-only mapping of files; runs on Spark executors. Called by
:mod:`gannet.pipeline.jobs`.
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gannet.node.store.log import layout, record_checks, records
from gannet.node.store.log.layout import Buffer
from gannet.node.store.log.records import DispatchInfo

SEGMENT_NAME_LENGTH = 20
_MAGIC_BYTES = (
    struct.pack(">i", layout.MAGIC_V1),
    struct.pack(">i", layout.MAGIC_V2),
)
_PHYSICAL_OFFSET = struct.Struct(">q")
_ZERO_PROBE_BYTES = 8


@dataclass(frozen=True, slots=True)
class Segment:
    """One commit-log file. ``path`` is a string so that the value pickles to executors."""

    path: str
    start_offset: int
    size_bytes: int
    is_last: bool
    group: str = ""
    """The broker group the segment belongs to, when a job reads several groups' stores."""

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size_bytes


@dataclass(frozen=True, slots=True)
class Record:
    """A valid record at ``position`` (bytes from the segment start)."""

    position: int
    info: DispatchInfo


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes ``[start_offset, end_offset)`` (global commit-log offsets) holding no valid record."""

    segment: str
    start_offset: int
    end_offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class End:
    """Where the data of a segment ends: a BLANK, the file end or the zero tail."""

    data_end_offset: int


ScanEvent = Record | Damage | End


def is_consumable(sys_flag: int) -> bool:
    """Whether a record is a message consumers see: not a prepared or rolled-back
    transactional record (the consume-queue dispatch rule,
    ``docs/formats/queues.md`` §1.3)."""
    return records.transaction_type(sys_flag) in (
        records.SYSFLAG_TRANSACTION_NOT_TYPE,
        records.SYSFLAG_TRANSACTION_COMMIT_TYPE,
    )


def is_segment_name(name: str) -> bool:
    return len(name) == SEGMENT_NAME_LENGTH and name.isdigit()


def segment_dir(path: Path) -> Path:
    """The folder holding segments: ``<store>/commitlog`` for a store, else ``path``."""
    commitlog = path / "commitlog"
    return commitlog if commitlog.is_dir() else path


def find_segments(path: Path) -> list[Segment]:
    """Segments of a store directory or of a folder of segment copies, in offset order."""
    folder = segment_dir(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{path}: no such directory")
    found = sorted(
        (int(p.name), p) for p in folder.iterdir() if p.is_file() and is_segment_name(p.name)
    )
    return [
        Segment(str(p.resolve()), start, p.stat().st_size, is_last=i == len(found) - 1)
        for i, (start, p) in enumerate(found)
    ]


def gaps(segments: list[Segment]) -> list[Damage]:
    """Missing commit-log bytes between consecutive segments (a lost or uncopied file)."""
    missing: list[Damage] = []
    for before, after in itertools.pairwise(segments):
        if after.start_offset > before.end_offset:
            missing.append(
                Damage(after.name, before.end_offset, after.start_offset, "missing segment")
            )
        elif after.start_offset < before.end_offset:
            missing.append(
                Damage(after.name, after.start_offset, before.end_offset, "overlapping segment")
            )
    return missing


@contextmanager
def mapped(segment: Segment) -> Iterator[Buffer]:
    """The segment's bytes, mapped read-only (an empty file maps to ``b""``)."""
    size = os.path.getsize(segment.path)
    if size == 0:
        yield b""
        return
    fd = os.open(segment.path, os.O_RDONLY)
    try:
        buf = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        try:
            yield buf
        finally:
            buf.close()
    finally:
        os.close(fd)


def scan(buf: Buffer, segment: Segment, *, check_crc: bool = True) -> Iterator[ScanEvent]:
    """Valid records and damaged ranges of one segment in file order, then its :class:`End`."""
    size = len(buf)
    pos = 0
    while pos < size:
        result = record_checks.check_record(buf, pos, size, check_crc=check_crc)
        if result.ok and result.size == 0:
            break  # BLANK: the rest of the file is filler
        info = result.info
        if result.ok and info is not None and info.commit_offset == segment.start_offset + pos:
            yield Record(pos, info)
            pos += result.size
            continue
        reason = result.error or "PHYSICALOFFSET differs from the record's position"
        resume = next_record_position(buf, segment, pos + 1, check_crc=check_crc)
        if resume is None and segment.is_last and is_zero_at(buf, pos):
            break  # the unwritten tail of the newest file
        end = size if resume is None else resume
        yield Damage(segment.name, segment.start_offset + pos, segment.start_offset + end, reason)
        if resume is None:
            pos = size
            break
        pos = resume
    yield End(segment.start_offset + pos)


def next_record_position(
    buf: Buffer, segment: Segment, start: int, *, check_crc: bool
) -> int | None:
    """First position at or after ``start`` holding a valid record that knows its own offset.

    Candidates are found by their magic code; one counts only if its PHYSICALOFFSET equals the
    position and the whole record checks, so message bodies that happen to contain a magic
    code are not mistaken for records.
    """
    size = len(buf)
    candidates = [_find(buf, magic, start + 4) for magic in _MAGIC_BYTES]
    while True:
        found = [c for c in candidates if c >= 0]
        if not found:
            return None
        hit = min(found)
        pos = hit - 4
        if _record_at(buf, segment, pos, size, check_crc=check_crc):
            return pos
        candidates = [_find(buf, magic, hit + 1) if c == hit else c for magic, c in
                      zip(_MAGIC_BYTES, candidates, strict=True)]  # fmt: skip


def _find(buf: Buffer, needle: bytes, start: int) -> int:
    if isinstance(buf, memoryview):
        return bytes(buf).find(needle, start)
    return buf.find(needle, start)


def _record_at(buf: Buffer, segment: Segment, pos: int, size: int, *, check_crc: bool) -> bool:
    if pos + layout.PHYSICAL_OFFSET_POSITION + 8 > size:
        return False
    (physical,) = _PHYSICAL_OFFSET.unpack_from(buf, pos + layout.PHYSICAL_OFFSET_POSITION)
    if physical != segment.start_offset + pos:
        return False
    return record_checks.check_record(buf, pos, size, check_crc=check_crc).ok


def is_zero_at(buf: Buffer, pos: int) -> bool:
    """Whether the bytes at ``pos`` are zeros (the unwritten tail of the newest file)."""
    probe = bytes(buf[pos : pos + _ZERO_PROBE_BYTES])
    return probe == bytes(len(probe))
