"""The lazy filesystem (:mod:`e2e.faults.lazyfs`) on a real FUSE mount: what was fsynced
survives the crash byte for byte, what was not (written through ``write`` and through a shared
``mmap``, as the store writes) is gone after the remount, and a file created since its last
fsync comes back empty. Root only (``/dev/fuse``, libfuse 3); skipped elsewhere."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from e2e.faults import lazyfs
from gannet.node.store.timers.wheel import Wheel

pytestmark = [
    pytest.mark.skipif(lazyfs.available() is not None, reason=str(lazyfs.available())),
    pytest.mark.timeout(120),
]

SIZE_BYTES = 64 * 1024
WHEEL_SLOTS = 4096


def test_a_crash_keeps_what_was_fsynced_and_drops_the_rest(tmp_path: Path) -> None:
    mount = lazyfs.LazyMount(tmp_path / "backing", tmp_path / "mnt", tmp_path / "lazyfs.log")
    mount.start()
    try:
        path = mount.mount / "00000000000000000000"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(fd, 0, SIZE_BYTES)
        os.pwrite(fd, b"durable-record", 0)
        os.fdatasync(fd)
        mapped = mmap.mmap(fd, SIZE_BYTES, mmap.MAP_SHARED)
        mapped[0:7] = b"changed"
        mapped[9000:9008] = b"unsynced"
        mapped.close()
        os.pwrite(fd, b"tail", SIZE_BYTES - 4)
        os.close(fd)
        (mount.mount / "created").write_bytes(b"never fsynced")
        assert path.read_bytes()[:7] == b"changed"  # visible before the crash

        lost = mount.lose()

        assert lost["files"] == 2, lost
        assert lost["sizes"] == {"/00000000000000000000": SIZE_BYTES, "/created": 0}
        data = path.read_bytes()
        assert len(data) == SIZE_BYTES
        assert data[:14] == b"durable-record"
        assert data[14:] == bytes(SIZE_BYTES - 14)
        assert (mount.mount / "created").read_bytes() == b""
    finally:
        mount.stop()
    assert not os.path.ismount(mount.mount)


def test_a_store_file_allocated_before_a_crash_keeps_its_length(tmp_path: Path) -> None:
    """Fault seed 501 (lose-unfsynced): the timer wheel, created and never written, came back
    with 0 bytes and the member could not open its store again ("length 0, expected ...").
    ``durable.allocate_file`` now fsyncs the file, not only its directory."""
    mount = lazyfs.LazyMount(tmp_path / "backing", tmp_path / "mnt", tmp_path / "lazyfs.log")
    mount.start()
    try:
        wheel = Wheel(mount.mount / "timerwheel", WHEEL_SLOTS, 1000)
        assert wheel.open()
        wheel.close()

        mount.lose()

        assert (mount.mount / "timerwheel").stat().st_size == wheel.size_bytes
        again = Wheel(mount.mount / "timerwheel", WHEEL_SLOTS, 1000)
        assert not again.open()
        again.close()
    finally:
        mount.stop()
