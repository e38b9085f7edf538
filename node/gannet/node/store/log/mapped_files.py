"""Fixed-size memory-mapped data files and ordered queues of them (RocketMQ ``MappedFile``).

A :class:`MappedFile` is one preallocated file named by the 20-digit decimal global offset of
its first byte. Writes go through ``mmap`` (no system call per append); durability comes from
``fdatasync`` in :mod:`gannet.node.store.durable`. A :class:`MappedFileQueue` is the ordered
list of such files in one directory: the commit log, each consume queue and the timer log use
one.

Positions, all byte counts relative to the file start:

* ``wrote_position`` — bytes appended so far. Invariant: ``flushed_position <= wrote_position
  <= file_size``.
* ``flushed_position`` — bytes known durable (``fdatasync`` returned after they were written).

Load rule (``MappedFileQueue.doLoad``): files sorted by name; a file whose length differs from
the configured size is refused with :class:`CorruptionError`, except a zero-length *last* file,
which is deleted. Positions of loaded files are set by the recovery of the structure that owns
them; until then a loaded file counts as full.

Callers: :mod:`commitlog`, :mod:`consume_queues`, :mod:`timers`. Threading: one writer at a time
(the owner's lock); readers may read concurrently (under the GIL a slice of an mmap is atomic
with respect to appends). A flush thread and cleanup (or truncation) meet on one file: the
queue's lifecycle lock is held around each file's ``fdatasync`` and around closing or deleting
files, and a flush skips a file closed meanwhile, so cleanup never closes a descriptor under a
running ``fdatasync`` (which would fail it with EBADF, and a failed fsync stops the node).
Appends never take that lock.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path

from gannet.node.store import durable
from gannet.node.store.errors import CorruptionError, StoreError

OS_PAGE_SIZE_BYTES = 4096
_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")


def offset_to_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: the start offset as 20 zero-padded decimal digits."""
    return f"{offset:020d}"


def map_file(
    path: Path, size_bytes: int, *, create: bool, expected: str, extend_short: bool = False
) -> tuple[int, mmap.mmap]:
    """Open a fixed-size file (allocated first when ``create``) and map it shared: its
    descriptor and mapping. A file of another length is :class:`CorruptionError` ("length N
    differs from ``expected``"), except that with ``extend_short`` a shorter file (the newest
    one cut short, copied or crashed mid-allocation) is extended with zeros, so that recovery
    cuts at the last valid record inside it."""
    if create:
        durable.allocate_file(path, size_bytes)
    fd = os.open(path, os.O_RDWR)
    actual = os.fstat(fd).st_size
    if extend_short and actual < size_bytes:
        os.ftruncate(fd, size_bytes)
        actual = size_bytes
    if actual != size_bytes:
        os.close(fd)
        raise CorruptionError(f"{path}: length {actual} differs from {expected}")
    return fd, mmap.mmap(fd, size_bytes, mmap.MAP_SHARED)


def unmap_file(fd: int, mm: mmap.mmap) -> None:
    """Unmap and close what :func:`map_file` opened (once; later calls do nothing)."""
    if not mm.closed:
        mm.close()
        os.close(fd)


class MappedFile:
    """One fixed-size data file mapped into memory."""

    __slots__ = (
        "_fd",
        "_mm",
        "file_from_offset",
        "file_size",
        "flushed_position",
        "path",
        "wrote_position",
    )

    def __init__(
        self, path: Path, file_size: int, *, create: bool, extend_short: bool = False
    ) -> None:
        self.path = path
        self.file_size = file_size
        try:
            self.file_from_offset = int(path.name)
        except ValueError as exc:
            raise CorruptionError(f"{path}: file name is not a 20-digit offset") from exc
        self._fd, self._mm = map_file(
            path,
            file_size,
            create=create,
            extend_short=extend_short,
            expected=f"the configured file size {file_size}; "
            "was the store written with another file size?",
        )
        self.wrote_position = 0 if create else file_size
        self.flushed_position = self.wrote_position

    # --- positions ---
    @property
    def remaining_bytes(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def end_offset(self) -> int:
        """Global offset just past the written bytes."""
        return self.file_from_offset + self.wrote_position

    def set_positions(self, position: int) -> None:
        """Set written and flushed positions (recovery, truncation)."""
        assert 0 <= position <= self.file_size, (
            f"{self.path}: position {position} outside the file of {self.file_size} bytes"
        )
        self.wrote_position = position
        self.flushed_position = position

    # --- writing ---
    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Copy ``data`` at the write position and return the position it was written at."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise StoreError(f"{self.path}: append of {len(data)} bytes past the end of the file")
        self._mm[pos:end] = data
        self.wrote_position = end
        return pos

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """Overwrite bytes at an absolute position (headers, slots); positions unchanged."""
        self._mm[position : position + len(data)] = data

    def zero_from(self, position: int) -> None:
        """Erase every byte from ``position`` to the end of the file (truncation)."""
        durable.zero_range(self._fd, position, self.file_size - position)

    # --- reading ---
    @property
    def buffer(self) -> mmap.mmap:
        """The mapping, for ``struct.unpack_from``/``pack_into``. Do not keep memoryviews."""
        return self._mm

    def read(self, position: int, size: int) -> bytes:
        return self._mm[position : position + size]

    def read_int(self, position: int) -> int:
        value: int = _INT.unpack_from(self._mm, position)[0]
        return value

    def read_long(self, position: int) -> int:
        value: int = _LONG.unpack_from(self._mm, position)[0]
        return value

    # --- durability ---
    def is_able_to_flush(self, least_pages: int) -> bool:
        if self.flushed_position >= self.wrote_position:
            return False
        if self.is_full():
            return True
        if least_pages > 0:
            dirty_pages = (
                self.wrote_position // OS_PAGE_SIZE_BYTES
                - self.flushed_position // OS_PAGE_SIZE_BYTES
            )
            return dirty_pages >= least_pages
        return True

    @property
    def closed(self) -> bool:
        return self._mm.closed

    def flush(self, least_pages: int = 0) -> int:
        """fdatasync when enough is dirty; returns the flushed position."""
        if self.is_able_to_flush(least_pages) and not self.closed:
            target = self.wrote_position
            durable.sync_data(self._fd, str(self.path))
            self.flushed_position = target
        return self.flushed_position

    def sync_all(self) -> None:
        """fdatasync unconditionally (headers written with :meth:`write_at`)."""
        durable.sync_data(self._fd, str(self.path))
        self.flushed_position = self.wrote_position

    def last_modified_ms(self) -> int:
        return int(os.stat(self.path).st_mtime * 1000)

    # --- lifecycle ---
    def close(self) -> None:
        unmap_file(self._fd, self._mm)

    def destroy(self) -> None:
        self.close()
        durable.remove_file(self.path)


class MappedFileQueue:
    """The ordered files of one directory, addressed by global byte offset."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        # Held around one file's fdatasync and around closing or deleting files (module doc).
        self._lifecycle = threading.Lock()

    def load(self) -> None:
        """Open every file in the directory (see the module docstring for the load rule)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        names = sorted(p for p in self.directory.iterdir() if p.is_file() and p.name.isdigit())
        for i, path in enumerate(names):
            if path.stat().st_size == 0 and i == len(names) - 1:
                durable.remove_file(path)
                continue
            is_last = i == len(names) - 1
            self.files.append(MappedFile(path, self.file_size, create=False, extend_short=is_last))
        for prev, nxt in zip(self.files, self.files[1:], strict=False):
            if nxt.file_from_offset != prev.file_from_offset + self.file_size:
                raise CorruptionError(
                    f"{self.directory}: files {prev.path.name} and {nxt.path.name} are not "
                    f"consecutive (a file of the sequence is missing)"
                )

    # --- lookup ---
    def first_file(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    def last_file(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def min_offset(self) -> int:
        """Start offset of the first file, or -1 when there is none."""
        return self.files[0].file_from_offset if self.files else -1

    def max_offset(self) -> int:
        """Global offset just past the last written byte (0 when empty)."""
        return self.files[-1].end_offset if self.files else 0

    def flushed_offset(self) -> int:
        """Global offset up to which every byte is durable."""
        for f in self.files:
            if f.flushed_position < f.file_size:
                return f.file_from_offset + f.flushed_position
        return self.files[-1].file_from_offset + self.file_size if self.files else 0

    def find_file(self, offset: int) -> MappedFile | None:
        """The file holding global ``offset`` (``findMappedFileByOffset``), or None."""
        if not self.files:
            return None
        index = offset // self.file_size - self.files[0].file_from_offset // self.file_size
        if 0 <= index < len(self.files):
            f = self.files[index]
            if f.file_from_offset <= offset < f.file_from_offset + self.file_size:
                return f
        return None

    def roll_next_file(self, offset: int) -> int:
        """Start offset of the file after the one holding ``offset``."""
        return offset + self.file_size - offset % self.file_size

    # --- writing ---
    def last_file_for_append(self, start_offset: int = 0) -> MappedFile:
        """The last file if it has room, else a newly created next file.

        With no file yet, the first one starts at ``start_offset`` rounded down to a file
        boundary (a queue that begins at a non-zero offset).
        """
        last = self.last_file()
        if last is not None and not last.is_full():
            return last
        if last is None:
            create_from = start_offset - start_offset % self.file_size
        else:
            create_from = last.file_from_offset + self.file_size
        return self.create_file(create_from)

    def create_file(self, file_from_offset: int) -> MappedFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / offset_to_file_name(file_from_offset)
        f = MappedFile(path, self.file_size, create=True)
        self.files.append(f)
        return f

    def flush(self, least_pages: int = 0) -> int:
        """Flush every file with unflushed bytes (full ones first); returns the flushed offset."""
        for f in self.files:
            if f.flushed_position < f.wrote_position:
                with self._lifecycle:  # not closed under the fdatasync by cleanup
                    f.flush(0 if f.is_full() else least_pages)
        return self.flushed_offset()

    def truncate_dirty_files(self, offset: int) -> None:
        """Cut everything at and after global ``offset`` (``truncateDirtyFiles``).

        The file holding ``offset`` keeps its head, and its tail is zeroed; later files are
        deleted. Zeroing keeps cut records from being found again by a forward scan.
        """
        keep: list[MappedFile] = []
        for f in self.files:
            if f.file_from_offset + self.file_size <= offset:
                keep.append(f)
            elif f.file_from_offset <= offset:
                position = offset - f.file_from_offset
                f.zero_from(position)
                f.set_positions(position)
                keep.append(f)
            else:
                with self._lifecycle:
                    f.destroy()
        self.files = keep

    def delete_files(self, doomed: list[MappedFile]) -> None:
        """Destroy and forget the given files (cleanup); waits for a running fdatasync of one
        of them to end first."""
        ids = {id(f) for f in doomed}
        self.files = [f for f in self.files if id(f) not in ids]
        with self._lifecycle:
            for f in doomed:
                f.destroy()

    def destroy(self) -> None:
        with self._lifecycle:
            for f in self.files:
                f.destroy()
        self.files = []

    def close(self) -> None:
        with self._lifecycle:
            for f in self.files:
                f.close()
