"""A FUSE filesystem that can lose what was not fsynced, as LazyFS does for Jepsen.

``python -m e2e.faults.lazyfs BACKING MOUNT --stats FILE`` mounts ``MOUNT`` (libfuse 3 through
``mfusepy``, in the foreground until unmounted or SIGTERM). Every operation passes through to
``BACKING`` at once, so reads, ``mmap`` and ``statfs`` (a full disk) behave as the backing
filesystem's; before a change lands, the pages of last-fsynced content it overwrites are kept
in memory (:class:`e2e.faults.unsynced.Journal`: the bookkeeping, pure).

The crash: ``mkdir MOUNT/.lose-unfsynced`` (after the process that wrote was SIGKILLed)
writes every kept page back and sets every changed file to its last-fsynced size, fsyncs the
backing files, writes what was lost to the stats file as JSON, and from then on drops every
change (the kernel may still write back dirty pages of the killed process's mappings until
the unmount). Then unmount and mount again (:class:`LazyMount` does all of it): the kernel's
page cache goes with the old mount, so the next process reads the backing files as a crash
would have left them.

:class:`LazyMount` runs the daemon from the harness (:mod:`e2e.faults.cluster`, nemesis
``lose-unfsynced``). Root only (``/dev/fuse``), libfuse 3 (Debian's ``fuse3``).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from e2e.faults.unsynced import PAGE_BYTES, Journal

LOSE = ".lose-unfsynced"
MOUNT_TIMEOUT_S = 20.0
UNMOUNT_TIMEOUT_S = 10.0
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_FALLOC_FL_ZERO_RANGE = 0x10
_STAT_KEYS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
              "st_atime", "st_mtime", "st_ctime", "st_blocks", "st_blksize")  # fmt: skip


def available() -> str | None:
    """None when a lazy mount can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (/dev/fuse, mount)"
    if not os.path.exists("/dev/fuse"):
        return "needs /dev/fuse"
    if ctypes.util.find_library("fuse3") is None:
        return "needs libfuse 3 (Debian package fuse3)"
    return None


def _fuse_error(code: int) -> OSError:
    from mfusepy import FuseOSError  # type: ignore[import-untyped]  # noqa: PLC0415 - loads libfuse

    error: OSError = FuseOSError(code)
    return error


class Passthrough:
    """The filesystem's operations (mfusepy's high-level API, paths relative to the mount)."""

    use_ns = True

    def __init__(self, backing: Path, stats: Path) -> None:
        self.backing = backing
        self.stats = stats
        self.journal = Journal()
        self._mutex = threading.Lock()
        self.lost = False
        """After the crash: every change is dropped."""
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._fallocate = libc.fallocate
        self._fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        self._fallocate.restype = ctypes.c_int

    def _full(self, path: str) -> str:
        return str(self.backing) + path

    # ------------------------------------------------------------------ bookkeeping
    def _before_change(self, path: str, offset: int, length: int) -> None:
        """Keep the last-fsynced pages that a change of ``path`` is about to overwrite."""
        full = self._full(path)
        size = os.stat(full).st_size
        self.journal.touch(path, size)
        pages = self.journal.pages_to_save(path, offset, length, size)
        if not pages:
            return
        durable = self.journal.durable_size(path)
        fd = os.open(full, os.O_RDONLY)
        try:
            for page in pages:
                start = page * PAGE_BYTES
                want = max(0, min(PAGE_BYTES, durable - start))
                data = os.pread(fd, want, start)
                self.journal.save(path, page, data + bytes(want - len(data)))
        finally:
            os.close(fd)

    def _lose(self) -> None:
        restores = self.journal.losses()
        for restore in restores:
            full = self._full(restore.path)
            if not os.path.exists(full):
                continue
            fd = os.open(full, os.O_WRONLY)
            try:
                for offset, data in restore.pages:
                    os.pwrite(fd, data, offset)
                os.ftruncate(fd, restore.size_bytes)
                os.fsync(fd)
            finally:
                os.close(fd)
        summary = {
            "files": len(restores),
            "restored_bytes": sum(r.lost_bytes for r in restores),
            "sizes": {r.path: r.size_bytes for r in restores},
        }
        self.stats.write_text(json.dumps(summary) + "\n")
        self.journal.clear()
        self.lost = True

    # ------------------------------------------------------------------ metadata
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        if path == "/" + LOSE:
            if not self.lost:
                raise _fuse_error(errno.ENOENT)
            return {"st_mode": stat.S_IFDIR | 0o500, "st_nlink": 2}
        st = os.lstat(self._full(path))
        found = {key: getattr(st, key) for key in _STAT_KEYS}
        for key in ("st_atime", "st_mtime", "st_ctime"):
            found[key] = getattr(st, key + "_ns")  # use_ns: times in nanoseconds
        return found

    def readdir(self, path: str, fh: int) -> Iterable[str]:
        return [".", "..", *os.listdir(self._full(path))]

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._full(path), amode):
            raise _fuse_error(errno.EACCES)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._full(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                "f_flag", "f_frsize", "f_namemax")  # fmt: skip
        return {key: int(getattr(st, key)) for key in keys}

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._full(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._full(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            os.utime(self._full(path))
        else:
            os.utime(self._full(path), ns=times)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        if path == "/" + LOSE:
            with self._mutex:
                self._lose()
            return 0
        os.mkdir(self._full(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._full(path))
        return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            os.unlink(self._full(path))
            self.journal.removed(path)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            os.rename(self._full(old), self._full(new))
            self.journal.renamed(old, new)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        fd = os.open(self._full(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return 0

    # ------------------------------------------------------------------ files
    def open(self, path: str, flags: int) -> int:
        if flags & os.O_TRUNC:
            self.truncate(path, 0)
        return os.open(self._full(path), flags & ~os.O_TRUNC)

    def create(self, path: str, mode: int, flags: int) -> int:
        with self._mutex:
            fd = os.open(self._full(path), flags | os.O_CREAT, mode)
            if not self.lost:
                self.journal.created(path)
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            if self.lost:
                return len(data)
            self._before_change(path, offset, len(data))
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._mutex:
            if self.lost:
                return 0
            full = self._full(path)
            size = os.stat(full).st_size
            if length < size:
                self._before_change(path, length, size - length)
            else:
                self.journal.touch(path, size)
            os.truncate(full, length)
        return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        with self._mutex:
            if self.lost:
                return 0
            if mode & (_FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_ZERO_RANGE):
                self._before_change(path, offset, size)
            else:
                self.journal.touch(path, os.fstat(fh).st_size)
            if self._fallocate(fh, mode, offset, size) != 0:
                raise _fuse_error(ctypes.get_errno())
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            if self.lost:
                return 0
            (os.fdatasync if datasync else os.fsync)(fh)
            self.journal.synced(path)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0


def serve(backing: Path, mount: Path, stats: Path) -> None:
    from mfusepy import FUSE  # noqa: PLC0415 - loads libfuse

    FUSE(Passthrough(backing, stats), str(mount), foreground=True, fsname="gannet-lazyfs")


# ---------------------------------------------------------------------------- the harness's side
class LazyMount:
    """The daemon for one directory, seen from the harness: mount, lose, unmount."""

    def __init__(self, backing: Path, mount: Path, log: Path) -> None:
        self.backing = backing
        self.mount = mount
        self.log = log
        self.stats = mount.with_name(mount.name + ".lost.json")
        self.process: subprocess.Popen[bytes] | None = None
        backing.mkdir(parents=True, exist_ok=True)
        mount.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        argv = [sys.executable, "-m", "e2e.faults.lazyfs", str(self.backing), str(self.mount),
                "--stats", str(self.stats)]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not os.path.ismount(self.mount):
            if self.process.poll() is not None:
                raise RuntimeError(f"lazyfs for {self.mount} exited {self.process.returncode}; "
                                   f"see {self.log}")  # fmt: skip
            if time.monotonic() > deadline:
                raise TimeoutError(f"lazyfs did not mount {self.mount} in {MOUNT_TIMEOUT_S} s")
            time.sleep(0.05)

    def lose(self) -> dict[str, Any]:
        """Drop every change not fsynced (the writer must be dead), unmount and mount again;
        what was lost (files, restored_bytes, sizes)."""
        self.stats.unlink(missing_ok=True)
        os.mkdir(self.mount / LOSE)
        lost: dict[str, Any] = json.loads(self.stats.read_text())
        self.stop()
        self.start()
        return lost

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        subprocess.run(["umount", str(self.mount)], capture_output=True, timeout=30,
                       check=False)  # fmt: skip
        # The members' processes run in mount namespaces of their own (ip netns exec), each
        # with a copy of this mount that the unmount here does not reach: the daemon would
        # serve on. SIGTERM ends it (libfuse's handler); the copies then answer ENOTCONN.
        process.terminate()
        try:
            process.wait(UNMOUNT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if os.path.ismount(self.mount):
            subprocess.run(["umount", "-l", str(self.mount)], capture_output=True, timeout=30,
                           check=False)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backing", type=Path)
    parser.add_argument("mount", type=Path)
    parser.add_argument("--stats", type=Path, required=True)
    args = parser.parse_args()
    serve(args.backing.resolve(), args.mount.resolve(), args.stats)


if __name__ == "__main__":
    main()
