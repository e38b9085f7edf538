"""A flush thread and cleanup on the same commit-log file: cleanup must not close a file under
a running ``fdatasync``. (A CI run stopped a broker this way: cleanup deleted the oldest file
while the flush thread, behind under load, was syncing it; the fsync failed with EBADF, and a
failed fsync stops the node.)"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gannet.node.store import durable
from gannet.node.store.log.mapped_files import MappedFileQueue

FILE_SIZE = 4096
WAIT_S = 10.0


def test_cleanup_waits_for_a_running_fdatasync_of_the_file_it_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = MappedFileQueue(tmp_path, FILE_SIZE)
    for start in (0, FILE_SIZE):
        queue.create_file(start).append(b"x" * 100)
    head = queue.files[0]
    syncing, release = threading.Event(), threading.Event()
    real_sync = durable.sync_data

    def slow_sync(fd: int, what: str) -> None:
        if what == str(head.path):
            syncing.set()
            assert release.wait(WAIT_S)
        real_sync(fd, what)

    monkeypatch.setattr(durable, "sync_data", slow_sync)
    failures: list[BaseException] = []

    def flush() -> None:
        try:
            queue.flush()
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)

    flusher = threading.Thread(target=flush)
    flusher.start()
    assert syncing.wait(WAIT_S)
    deleter = threading.Thread(target=queue.delete_files, args=([head],))
    deleter.start()
    deleter.join(timeout=1.0)  # bounded: it must NOT finish while the fdatasync runs
    assert deleter.is_alive(), "cleanup closed the file under a running fdatasync"
    assert queue.files[0] is not head  # forgotten at once: no new reader finds it
    release.set()
    flusher.join(WAIT_S)
    deleter.join(WAIT_S)
    assert failures == []
    assert not head.path.exists()
    assert [f.file_from_offset for f in queue.files] == [FILE_SIZE]


def test_a_flush_skips_a_file_cleanup_closed_meanwhile(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, FILE_SIZE)
    f = queue.create_file(0)
    f.append(b"y" * 10)
    f.destroy()
    assert f.flush() == 0  # nothing synced, no error: the file is gone
