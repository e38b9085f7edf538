"""Durability primitives: the only module that calls fsync, fdatasync, fallocate and rename.

Everything the store acknowledges depends on these calls, so they live in one place where their
failure rules are stated once:

* A failed ``fsync``/``fdatasync`` raises :class:`FsyncFailed`, which is fatal. After such a
  failure the kernel may have dropped the dirty pages, so retrying and carrying on would
  acknowledge data that is gone (the "fsyncgate" lesson).
* Small state files are replaced atomically: write ``<name>.tmp``, fsync it, move the previous
  file to ``<name>.bak`` (RocketMQ's ``ConfigManager`` keeps the same backup), rename the temp
  file into place, fsync the directory.
* Data files are preallocated with ``posix_fallocate`` so that writes through ``mmap`` can never
  hit ENOSPC (which would arrive as SIGBUS): a full disk shows up here, as :class:`DiskFull`,
  when the file is created.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from gannet.node.store.errors import DiskFull, FsyncFailed, StoreError


def sync_data(fd: int, what: str) -> None:
    """``fdatasync`` a file descriptor; any failure is fatal (:class:`FsyncFailed`)."""
    try:
        os.fdatasync(fd)
    except OSError as exc:
        raise FsyncFailed(f"fdatasync of {what} failed: {exc}; stop the node") from exc


def sync_directory(path: Path) -> None:
    """fsync a directory so that created, renamed or removed entries in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        raise FsyncFailed(f"fsync of directory {path} failed: {exc}; stop the node") from exc
    finally:
        os.close(fd)


def write_file_atomically(path: Path, data: bytes, *, keep_backup: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    With ``keep_backup`` the previous content survives as ``<path>.bak``, which readers fall
    back to when the main file is missing, empty or unparsable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data, tmp)
        try:
            os.fsync(fd)
        except OSError as exc:
            raise FsyncFailed(f"fsync of {tmp} failed: {exc}; stop the node") from exc
    finally:
        os.close(fd)
    if keep_backup and path.exists():
        os.replace(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
    sync_directory(path.parent)


def _write_all(fd: int, data: bytes, path: Path) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise DiskFull(f"no space left on device writing {path}") from exc
            raise
        view = view[written:]


def allocate_file(path: Path, size_bytes: int) -> None:
    """Create ``path`` with exactly ``size_bytes`` bytes of allocated, zeroed space, durably
    (the file's size and its name).

    Raises :class:`DiskFull` (and removes the partial file) when the disk has no room.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, size_bytes)
        except OSError as exc:
            if exc.errno == errno.EOPNOTSUPP:
                os.ftruncate(fd, size_bytes)  # filesystems without fallocate (e.g. some tmpfs)
            elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
                os.close(fd)
                fd = -1
                path.unlink(missing_ok=True)
                raise DiskFull(
                    f"no space left to create {path} ({size_bytes} bytes); free disk space "
                    "or lower the retention (fileReservedTime)"
                ) from exc
            else:
                raise StoreError(f"cannot allocate {path}: {exc}") from exc
        # The size is the file's metadata: only an fsync of the file makes it durable (the
        # directory's fsync makes the name durable). Without it a crash could leave the name
        # with 0 bytes, which opening refuses as a file of the wrong length (fault harness,
        # lose-unfsynced: the timer wheel, created and never written, came back empty).
        sync_data(fd, str(path))
    finally:
        if fd >= 0:
            os.close(fd)
    sync_directory(path.parent)


def remove_file(path: Path) -> None:
    """Unlink a data file and make the removal durable."""
    path.unlink(missing_ok=True)
    sync_directory(path.parent)


def move_aside(path: Path, target: Path) -> None:
    """Rename ``path`` to ``target`` in the same directory and make the rename durable (a
    corrupt file kept for inspection)."""
    os.replace(path, target)
    sync_directory(path.parent)


def publish_unsynced(temp: Path, path: Path) -> None:
    """Rename a complete ``temp`` file to ``path`` without any fsync: for files that may be
    lost in a crash and are checked when read back (the tier's disk cache,
    :mod:`gannet.node.store.tier.disk_caching`). A reader sees the whole file or none."""
    os.replace(temp, path)


_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_ZERO_RANGE = 0x10
_ZERO_CHUNK_BYTES = 1024 * 1024


def _libc_fallocate() -> object | None:
    try:
        import ctypes  # noqa: PLC0415 - optional fast path, loaded once
        import ctypes.util  # noqa: PLC0415

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        func = libc.fallocate
        func.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        func.restype = ctypes.c_int
        return func
    except (OSError, AttributeError):
        return None


_FALLOCATE = _libc_fallocate()


def zero_range(fd: int, offset: int, length: int) -> None:
    """Make ``length`` bytes at ``offset`` read back as zeros, keeping the file size.

    Truncating a log must erase the bytes past the cut: otherwise a later, shorter append
    followed by a crash would let recovery's forward scan run into the old records and bring
    back data that was cut (for example a divergent Raft suffix). ``FALLOC_FL_ZERO_RANGE`` does
    it without writing; filesystems without it get explicit zero writes.
    """
    if length <= 0:
        return
    if _FALLOCATE is not None:
        flags = _FALLOC_FL_ZERO_RANGE | _FALLOC_FL_KEEP_SIZE
        if _FALLOCATE(fd, flags, offset, length) == 0:  # type: ignore[operator]
            return
    zeros = bytes(min(length, _ZERO_CHUNK_BYTES))
    end = offset + length
    while offset < end:
        chunk = min(end - offset, len(zeros))
        os.pwrite(fd, zeros[:chunk], offset)
        offset += chunk
