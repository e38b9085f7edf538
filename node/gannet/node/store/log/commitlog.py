"""The commit log: every message of every topic, appended to one sequence of files.

Files are :class:`~gannet.node.store.log.mapped_files.MappedFile`\\ s of
``commitlog_file_size_bytes`` (1 GiB by default) named by their 20-digit start offset; records
use the layout of :mod:`records`. A record never straddles two files: when a record plus the
8-byte minimum blank does not fit the room left, an 8-byte BLANK record (remaining length +
magic 0xCBD43194) closes the file and the record goes to the next one
(``END_FILE_MIN_BLANK_LENGTH``).

Append: callers encode outside the lock (:func:`packing.record_fields`); under ``put_lock`` the
commit log assigns queue offsets (per ``"<topic>-<queueId>"``, only for non-transactional and
commit-type messages), physical offsets and a non-decreasing store timestamp, packs the records
into one pre-sized buffer per file (:func:`packing.pack_record_into`) and copies each with one
``mmap`` slice write. With the native encoder built (:mod:`native`), encoding and laying out
are one C call per batch each, with the same bytes and errors. Durability is the flush
service's job (:mod:`flushing`); this module never syncs on the append path.

Invariant: every byte below :meth:`CommitLog.max_offset` is a valid record or a BLANK, once
recovery has run. Callers: :mod:`message_store`, :mod:`recovering`, :mod:`dispatching`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import NamedTuple

from gannet.node.invariants import InvariantViolation, invariant
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import CorruptionError, MessageTooLarge, StoreError
from gannet.node.store.log import layout, native, packing, record_checks, records
from gannet.node.store.log.mapped_files import MappedFile, MappedFileQueue
from gannet.node.store.msgids import create_offset_msg_id


def queue_key(topic: str, queue_id: int) -> str:
    """Key of the per-queue offset table (``CommitLog.generateKey``)."""
    return f"{topic}-{queue_id}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendResult(NamedTuple):
    """Where one message went (``AppendMessageResult``); a named tuple, one per append."""

    wrote_offset: int
    wrote_bytes: int
    queue_offset: int
    store_timestamp_ms: int
    store_host: str
    store_port: int

    @property
    def end_offset(self) -> int:
        """Offset just past the record: the flush position that makes it durable."""
        return self.wrote_offset + self.wrote_bytes

    @property
    def offset_msg_id(self) -> str:
        return create_offset_msg_id(self.store_host, self.store_port, self.wrote_offset)


Encoded = tuple[packing.RecordFields, str | None]
"""A message encoded outside the put lock, waiting for its offsets: its record fields and the
key of the queue it takes an offset in (None for prepared and rollback transaction records)."""


class CommitLog:
    """Append and read records; positions are global byte offsets."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.files = MappedFileQueue(config.commitlog_dir, config.commitlog_file_size_bytes)
        self.put_lock = threading.Lock()
        self.queue_offsets: dict[str, int] = {}
        self.last_store_timestamp_ms = 0
        self.append_crc = False
        self._appended: tuple[int, bytes | bytearray] = (-1, b"")

    # --- lifecycle ---
    def load(self) -> None:
        self.files.load()

    def close(self) -> None:
        self.files.close()

    # --- offsets ---
    def min_offset(self) -> int:
        """Start offset of the first file (0 for an empty log)."""
        first = self.files.first_file()
        return first.file_from_offset if first is not None else 0

    def max_offset(self) -> int:
        return self.files.max_offset()

    def flushed_offset(self) -> int:
        return self.files.flushed_offset()

    def roll_next_file(self, offset: int) -> int:
        return self.files.roll_next_file(offset)

    # --- appending ---
    def encode(self, msg: records.Message) -> Encoded:
        """Encode what does not depend on the position, outside the lock."""
        return self.encode_all([msg])[0]

    def encode_all(self, msgs: list[records.Message]) -> list[Encoded]:
        """:meth:`encode` of each message, the settings read once per batch."""
        fields_of = packing.record_fields
        body_max, append_crc = self.config.message_body_size_max_bytes, self.append_crc
        limit = self.config.commitlog_file_size_bytes - layout.END_FILE_MIN_BLANK_LENGTH
        codec = native.codec
        if codec is not None:
            return codec.encode_all(
                msgs, body_max, append_crc, limit, self.config.commitlog_file_size_bytes,
                records.encode_host, records.topic_field_of,
                partial(fields_of, body_size_max_bytes=body_max, append_crc=append_crc),
                MessageTooLarge,
            )  # fmt: skip
        prepared_type = records.SYSFLAG_TRANSACTION_PREPARED_TYPE
        encoded: list[Encoded] = []
        for msg in msgs:
            fields = fields_of(msg, body_size_max_bytes=body_max, append_crc=append_crc)
            if fields[0] > limit:
                raise MessageTooLarge(
                    f"record of {fields[0]} bytes does not fit a commit-log file of "
                    f"{self.config.commitlog_file_size_bytes} bytes"
                )
            # Only non-transactional and commit-type records (transaction bits 0x0, 0x8) take
            # a queue offset.
            key = None
            if not msg.sys_flag & prepared_type:
                key = f"{msg.topic}-{msg.queue_id}"
            encoded.append((fields, key))
        return encoded

    def append(
        self,
        batch: list[Encoded],
        on_appended: Callable[[list[AppendResult]], None] | None = None,
    ) -> list[AppendResult]:
        """Append encoded messages in order; returns one result per message.

        Under the put lock the batch is packed straight into one pre-sized buffer per file it
        touches, each record's head with its final offsets and store time, and each buffer is
        copied with one write. ``on_appended`` runs under the lock after the copy, so
        successive calls see the batches in commit-log order (the dispatch hand-off relies on
        it). The bytes of the last append stay at hand for the Raft layer
        (:meth:`appended_bytes`).

        All or nothing per message: every record is packed before any queue offset is
        reserved, so a record that cannot be encoded (a field out of range) changes nothing.
        Raises :class:`~gannet.node.store.errors.DiskFull` when a new file cannot be created;
        messages before that point are written and their results are lost to the caller, so
        they are treated as not acknowledged (they are valid records that a consumer may see,
        which at-least-once delivery allows); the offsets of the messages not written are given
        back, so the queue has no hole.
        """
        host, port = self.config.store_host, self.config.store_port
        with self.put_lock:
            ts = max(now_ms(), self.last_store_timestamp_ms)
            f = self.files.last_file_for_append(0)
            start = f.end_offset
            # Phase 1 (nothing changes yet): lay the batch out, assign offsets in a private
            # table and pack every record. Any exception here leaves the queue offsets, the
            # files and the store time as they were: no offset is reserved for a message
            # that is not written.
            plan, results, reserved = self._lay_out(batch, f, ts, host, port)
            _check_laid_out(plan, results)
            # Phase 2: reserve the offsets and copy the bytes.
            self.last_store_timestamp_ms = ts
            invariant(
                all(n > self.queue_offsets.get(k, 0) for k, n in reserved.items()),
                "queue offsets only grow: an append reserved an offset below one already taken",
            )
            self.queue_offsets.update(reserved)
            written = 0
            try:
                for roll, buf, count in plan:
                    if roll:
                        f.append(records.blank_record(f.remaining_bytes))
                        f.wrote_position = f.file_size
                        f = self.files.last_file_for_append(0)
                    if buf:
                        f.append(buf)
                    written += count
            except BaseException:
                self._unreserve(batch[written:], results[written:])
                raise
            if results and f.end_offset != results[-1].end_offset:
                raise InvariantViolation(
                    f"the commit log ends at {f.end_offset} after an append whose last record "
                    f"ends at {results[-1].end_offset}"
                )
            self._appended = (start, plan[0][1]) if len(plan) == 1 else (-1, b"")
            if on_appended is not None:
                on_appended(results)
        return results

    def forget_appended(self) -> None:
        """Drop the bytes kept by :meth:`append` (the log was cut or written by other means)."""
        self._appended = (-1, b"")

    def appended_bytes(self, start: int, end: int) -> bytes | None:
        """The bytes ``[start, end)`` when they are exactly those of the last :meth:`append`
        (within one file), else None: the Raft leader proposes them without reading them back
        from the file."""
        at, buf = self._appended
        if at != start or at + len(buf) != end:
            return None
        return bytes(buf)

    def _lay_out(
        self, batch: list[Encoded], f: MappedFile, ts: int, host: str, port: int
    ) -> tuple[list[tuple[bool, bytearray, int]], list[AppendResult], dict[str, int]]:
        """Per file touched: (roll to a new file first, the packed records, messages); the
        results; the queue offsets the batch reserves (next offset per key)."""
        append_crc = self.append_crc
        codec = native.codec
        if codec is not None:
            return codec.lay_out(
                batch, self.queue_offsets, f.end_offset, f.remaining_bytes, f.file_size, ts,
                append_crc, host, port, AppendResult,
            )  # fmt: skip
        pack = packing.pack_record_into
        offsets = self.queue_offsets
        reserved: dict[str, int] = {}
        results: list[AppendResult] = []
        plan: list[tuple[bool, bytearray, int]] = []
        left = sum([enc[0][0] for enc in batch])
        buf = bytearray(left)  # the whole batch, cut short if it rolls to a new file
        pos = count = 0
        roll = False
        offset = f.end_offset
        room = f.remaining_bytes
        file_size = f.file_size
        for fields, key in batch:
            size = fields[0]
            if size + layout.END_FILE_MIN_BLANK_LENGTH > room:
                del buf[pos:]
                plan.append((roll, buf, count))
                left -= pos
                buf, pos, count, roll = bytearray(left), 0, 0, True
                offset += room  # the BLANK closes the file; the next one starts here
                room = file_size
            queue_offset = 0
            if key is not None:
                queue_offset = reserved.get(key, -1)
                if queue_offset < 0:
                    queue_offset = offsets.get(key, 0)
                reserved[key] = queue_offset + 1
            pack(buf, pos, fields, queue_offset, offset, ts, append_crc=append_crc)
            pos += size
            count += 1
            results.append(AppendResult(offset, size, queue_offset, ts, host, port))
            offset += size
            room -= size
        plan.append((roll, buf, count))
        return plan, results, reserved

    def _unreserve(self, batch: list[Encoded], results: list[AppendResult]) -> None:
        """Give back the queue offsets of messages that were not written (lowest per key)."""
        for (_, key), res in zip(batch, results, strict=True):
            if key is not None:
                current = self.queue_offsets.get(key, 0)
                self.queue_offsets[key] = min(current, res.queue_offset)

    # --- replication (the Raft layer) ---
    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Bytes from ``offset`` as stored, at most ``max_bytes`` and never past the end of
        the file holding ``offset`` (a leader ships ranges; BLANK tails included)."""
        f = self.files.find_file(offset)
        if f is None:
            return b""
        pos = offset - f.file_from_offset
        end = min(f.wrote_position, pos + max_bytes)
        try:
            return f.read(pos, max(0, end - pos))
        except ValueError:
            return b""

    def record_end(self, start: int, cap: int) -> int | None:
        """Where a leader may end the range it ships from ``start`` (a record boundary): the
        last boundary ``b`` with ``start < b <= cap``, or the end of the record at ``start``
        when it alone passes ``cap``. A BLANK ends at the next file's start. None when no
        record begins at ``start`` (or at a boundary stepped to), or no byte is stored there.

        Steps by TOTALSIZE with MAGICCODE checked, like the segment parser's fast path
        (``layout.record_starts``; the native one when built: a 1 MiB range of 230-byte
        records takes ~5 ms in Python): the bytes below the leader's written end are whole
        records of its own log."""
        codec = native.codec
        offset = start
        while offset < cap:
            f = self.files.find_file(offset)
            if f is None:
                return None
            pos = offset - f.file_from_offset
            if codec is not None:  # over the whole records that end by cap, in this file
                limit = min(f.wrote_position, cap - f.file_from_offset)
                if limit - pos >= layout.BLANK.size:
                    _, stop, _ = codec.record_starts(
                        f.buffer, pos, limit, limit - pos, layout.RECORD_LENGTH_MIN
                    )
                    offset, pos = f.file_from_offset + stop, stop
                    if offset >= cap:
                        break
            readable = f.wrote_position - pos
            if readable < layout.BLANK.size:
                return None
            total, magic = layout.BLANK.unpack_from(f.buffer, pos)
            if magic == layout.MAGIC_BLANK:
                end = self.files.roll_next_file(offset)
            elif magic in (layout.MAGIC_V1, layout.MAGIC_V2) and (
                layout.RECORD_LENGTH_MIN <= total <= readable
            ):
                end = offset + total
            else:
                return None
            if end > cap:
                return end if offset == start else offset
            offset = end
        return offset if offset > start else None

    def append_raw(self, offset: int, data: bytes) -> int:
        """Write a leader's bytes at ``offset``, which must be this log's end; returns the new
        end. Records may be split across calls. Queue offsets are not assigned here: the
        caller rebuilds them from the complete records (:meth:`note_raw_records`)."""
        with self.put_lock:
            self.forget_appended()
            end = self.max_offset()
            if offset != end:
                raise StoreError(f"raw append at {offset}, but the commit log ends at {end}")
            view = memoryview(data)
            while view:
                f = self.files.last_file_for_append(offset)
                part = view[: f.remaining_bytes]
                f.append(part)
                offset += len(part)
                view = view[len(part) :]
            return offset

    def note_raw_records(self, start: int, end: int) -> int:
        """Account the complete records in ``[start, end)`` written by :meth:`append_raw`:
        raise the queue-offset table and the last store time. Returns where the next call
        must start (the first incomplete record, or ``end``)."""
        with self.put_lock:
            return self.note_records_locked(start, end)

    def note_records_locked(self, start: int, end: int) -> int:
        """:meth:`note_raw_records` for a caller that holds :attr:`put_lock` (a truncation
        renumbering the records kept past what was dispatched)."""
        offset = start
        for at, head, _ in self.scan_heads(start, end, check_crc=False):
            if head is None:
                return at
            if head.sys_flag & 0xC in (0x0, 0x8):
                key = queue_key(head.topic, head.queue_id)
                self.queue_offsets[key] = max(self.queue_offsets.get(key, 0), head.queue_offset + 1)
            self.last_store_timestamp_ms = max(
                self.last_store_timestamp_ms, head.store_timestamp_ms
            )
            offset = at + head.size
        return self._skip_blanks(offset, end)

    def _skip_blanks(self, offset: int, end: int) -> int:
        while offset < end:
            f = self.files.find_file(offset)
            if f is None:
                return offset
            head, size, _ = record_checks.check_structure(
                f.buffer, offset - f.file_from_offset, f.wrote_position, check_crc=False
            )
            if head is not None or size != 0:
                return offset
            offset = self.files.roll_next_file(offset)
        return offset

    # --- reading ---
    def file_for(self, offset: int) -> MappedFile | None:
        return self.files.find_file(offset)

    def read(self, offset: int, size: int) -> bytes | None:
        """Raw bytes of ``size`` at ``offset``, or None when not (or no longer) stored."""
        f = self.files.find_file(offset)
        if f is None:
            return None
        pos = offset - f.file_from_offset
        if pos + size > f.wrote_position:
            return None
        try:
            return f.read(pos, size)
        except ValueError:  # unmapped by a concurrent cleanup: no longer stored
            return None

    def record_size_at(self, offset: int) -> int:
        """TOTALSIZE of the record at ``offset`` (−1 when not stored)."""
        f = self.files.find_file(offset)
        if f is None or offset - f.file_from_offset + 4 > f.wrote_position:
            return -1
        try:
            return f.read_int(offset - f.file_from_offset)
        except ValueError:  # unmapped by a concurrent cleanup
            return -1

    def read_message(self, offset: int) -> records.Message | None:
        """Decode the record at ``offset`` (``lookMessageByOffset``), None if absent."""
        size = self.record_size_at(offset)
        if size <= 0:
            return None
        data = self.read(offset, size)
        if data is None:
            return None
        return decode_stored(data, offset)

    def store_timestamp_at(self, offset: int, size: int) -> int:
        """Store time of the record at ``offset`` or −1 (time search,
        ``docs/formats/queues.md`` §1.6)."""
        f = self.files.find_file(offset)
        if f is None:
            return -1
        pos = offset - f.file_from_offset
        if pos + max(size, 64) > f.wrote_position:
            return -1
        try:
            sys_flag = f.read_int(pos + layout.SYSFLAG_POSITION)
            return f.read_long(pos + layout.store_timestamp_position(sys_flag))
        except ValueError:  # unmapped by a concurrent cleanup
            return -1

    def scan_heads(
        self, start: int, end: int, *, check_crc: bool
    ) -> Iterator[tuple[int, record_checks.RecordHead | None, str]]:
        """Yield ``(offset, head, "")`` for each record from ``start`` up to ``end``, checked by
        :func:`record_checks.check_structure` (no property parsing): the commit log's one scan
        loop (recovery, finding record starts). BLANK records are followed to the next file; a
        final ``(offset, None, error)`` marks the first invalid record, where the scan stops; a
        record that lies past ``end`` (written, not committed yet) ends it silently."""
        offset = start
        while offset < end:
            f = self.files.find_file(offset)
            if f is None:
                return
            pos = offset - f.file_from_offset
            head, size, error = record_checks.check_structure(
                f.buffer, pos, f.wrote_position, check_crc=check_crc
            )
            if head is None and size == 0:
                offset = self.files.roll_next_file(offset)
                continue
            if head is not None and head.physical_offset != offset:
                error = f"PHYSICALOFFSET field says {head.physical_offset}, record is at {offset}"
                head = None
            if head is None:
                yield offset, None, error
                return
            if offset + size > end:
                return
            yield offset, head, ""
            offset += size

    @staticmethod
    def first_record_info_of(f: MappedFile) -> records.DispatchInfo | None:
        """The first record of a file, if it is valid (recovery's start-file choice)."""
        res = record_checks.check_record(f.buffer, 0, f.file_size, check_crc=False)
        if res.ok and res.info is not None and res.info.commit_offset == f.file_from_offset:
            return res.info
        return None

    # --- truncation ---
    def truncate(self, offset: int) -> None:
        """Cut the log at ``offset`` (a record boundary): later bytes are erased, later files
        deleted. Used by recovery and by the Raft layer for a divergent suffix."""
        with self.put_lock:
            self.forget_appended()
            self.files.truncate_dirty_files(offset)

    def set_queue_offsets(self, table: dict[str, int]) -> None:
        with self.put_lock:
            self.queue_offsets = dict(table)

    def remove_queue_offsets(self, predicate: Callable[[str], bool]) -> None:
        with self.put_lock:
            for key in [k for k in self.queue_offsets if predicate(k)]:
                del self.queue_offsets[key]


def decode_stored(data: bytes, offset: int) -> records.Message:
    """Decode the stored record ``data`` read at commit-log ``offset`` (from a local file or
    the tier): bytes that do not decode, or that say another offset or size, are corruption."""
    try:
        msg = records.decode(data)
    except ValueError as exc:
        raise CorruptionError(f"commit log record at {offset} is undecodable: {exc}") from exc
    if msg.physical_offset != offset or msg.store_size != len(data):  # bytes from disk: data
        raise CorruptionError(
            f"the record read back at {offset} ({len(data)} bytes) says PHYSICALOFFSET "
            f"{msg.physical_offset}, TOTALSIZE {msg.store_size}"
        )
    return msg


_LAID_OUT_PREFIX = layout.HEAD  # TOTALSIZE .. BORNTIMESTAMP, one unpack per buffer


def _check_laid_out(plan: list[tuple[bool, bytearray, int]], results: list[AppendResult]) -> None:
    """Before a batch is written: each buffer holds exactly its records, and its first record
    carries the TOTALSIZE, PHYSICALOFFSET and QUEUEOFFSET its result reports (one unpack per
    buffer, not per record; no CRC)."""
    at = 0
    for _, buf, count in plan:
        if not count:
            continue
        start, size, expected_queue_offset = results[at][:3]
        last = results[at + count - 1]
        total, _, _, _, _, queue_offset, physical, _, _ = _LAID_OUT_PREFIX.unpack_from(buf)
        if (
            total != size
            or physical != start
            or queue_offset != expected_queue_offset
            or len(buf) != last.wrote_offset + last.wrote_bytes - start
        ):
            raise InvariantViolation(
                f"a laid-out buffer of {len(buf)} bytes for {count} records at {start} starts "
                f"with TOTALSIZE {total}, PHYSICALOFFSET {physical}, QUEUEOFFSET {queue_offset}; "
                f"expected {last.end_offset - start} bytes, {size}, {start}, "
                f"{expected_queue_offset}"
            )
        at += count
