"""The lazy filesystem's bookkeeping (:mod:`e2e.faults.unsynced`), pure: which last-fsynced
pages a change saves, and what a crash restores."""

from __future__ import annotations

import pytest

from e2e.faults.unsynced import PAGE_BYTES, Journal


def _apply(files: dict[str, bytearray], journal: Journal) -> None:
    """A crash: write the saved pages back and set each file's durable size."""
    for restore in journal.losses():
        data = files[restore.path]
        for offset, page in restore.pages:
            data[offset : offset + len(page)] = page
        del data[restore.size_bytes :]
        data.extend(bytes(restore.size_bytes - len(data)))


def _write(files: dict[str, bytearray], journal: Journal, path: str, offset: int,
           data: bytes) -> None:  # fmt: skip
    current = files[path]
    journal.touch(path, len(current))
    durable = journal.durable_size(path)
    for page in journal.pages_to_save(path, offset, len(data), len(current)):
        start = page * PAGE_BYTES
        journal.save(path, page, bytes(current[start : min(start + PAGE_BYTES, durable)]))
    if len(current) < offset + len(data):
        current.extend(bytes(offset + len(data) - len(current)))
    current[offset : offset + len(data)] = data


def test_a_crash_restores_every_page_written_since_the_fsync_and_the_durable_size() -> None:
    journal = Journal()
    durable = bytes(range(256)) * 40  # 10240 bytes: two full pages and part of a third
    files = {"/log": bytearray(durable)}
    _write(files, journal, "/log", 100, b"a" * 50)
    _write(files, journal, "/log", 120, b"b" * 5000)  # page 0 again, pages 1 and 2
    _write(files, journal, "/log", 10200, b"c" * 3000)  # past the durable end: grows the file
    assert journal.pending_paths() == ["/log"]
    [restore] = journal.losses()
    assert [offset for offset, _ in restore.pages] == [0, PAGE_BYTES, 2 * PAGE_BYTES]
    assert len(restore.pages[2][1]) == 10240 - 2 * PAGE_BYTES  # cut at the durable size
    _apply(files, journal)
    assert bytes(files["/log"]) == durable


def test_an_fsync_makes_changes_durable_and_later_ones_are_lost() -> None:
    journal = Journal()
    files = {"/log": bytearray(PAGE_BYTES * 2)}
    _write(files, journal, "/log", 0, b"synced")
    journal.synced("/log")
    assert journal.losses() == []
    _write(files, journal, "/log", 3, b"XYZ")
    _apply(files, journal)
    assert bytes(files["/log"][:6]) == b"synced"


def test_only_the_first_copy_of_a_page_is_kept() -> None:
    journal = Journal()
    journal.touch("/f", PAGE_BYTES)
    journal.save("/f", 0, b"1" * PAGE_BYTES)
    assert journal.pages_to_save("/f", 10, 10, PAGE_BYTES) == []
    journal.save("/f", 0, b"2" * PAGE_BYTES)
    assert journal.losses()[0].pages == ((0, b"1" * PAGE_BYTES),)


def test_a_cut_file_comes_back_whole_and_a_created_one_empty() -> None:
    journal = Journal()
    files = {"/a": bytearray(b"x" * 9000), "/new": bytearray()}
    journal.touch("/a", 9000)
    for page in journal.pages_to_save("/a", 1000, 8000, 9000):  # cut to 1000 bytes
        start = page * PAGE_BYTES
        journal.save("/a", page, bytes(files["/a"][start : min(start + PAGE_BYTES, 9000)]))
    del files["/a"][1000:]
    journal.created("/new")
    _write(files, journal, "/new", 0, b"hello")
    _apply(files, journal)
    assert bytes(files["/a"]) == b"x" * 9000
    assert bytes(files["/new"]) == b""


def test_renames_carry_the_pending_changes_and_removals_drop_them() -> None:
    journal = Journal()
    journal.created("/x.tmp")
    journal.touch("/y", 10)
    journal.renamed("/x.tmp", "/y")
    assert [(r.path, r.size_bytes) for r in journal.losses()] == [("/y", 0)]
    journal.removed("/y")
    assert journal.losses() == []


def test_a_page_of_the_wrong_length_or_unknown_file_is_refused() -> None:
    journal = Journal()
    with pytest.raises(KeyError, match="before touch"):
        journal.save("/f", 0, b"")
    journal.touch("/f", 100)
    with pytest.raises(ValueError, match="expected 100"):
        journal.save("/f", 0, b"short")
    with pytest.raises(ValueError, match="negative range"):
        journal.pages_to_save("/f", -1, 10, 100)
