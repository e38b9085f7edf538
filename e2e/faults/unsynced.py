"""What a directory tree holds beyond its last fsync, file by file: the bookkeeping of the
lazy filesystem (:mod:`e2e.faults.lazyfs`), pure.

The filesystem passes every change through to a backing directory at once; before a change
lands it asks :meth:`Journal.pages_to_save` which pages of the file's last-fsynced content the
change is about to overwrite, reads them from the backing file and hands them to
:meth:`Journal.save`. Only the first change of a page since the file's last fsync saves it
(that copy is what the disk holds durably); later changes of the same page save nothing. The
durable size is taken at the file's first change since its fsync. An fsync of the file
(:meth:`Journal.synced`) forgets all of it: what was written is durable now.

:meth:`Journal.losses` is the crash: per file, the saved pages to write back and the durable
size to cut or extend the file to, which together restore every byte to its last-fsynced
content (what LazyFS does for Jepsen by dropping its page cache).

Model, stated where it is coarser than a disk:

* a file created since its last fsync comes back empty (it is not removed);
* renames and unlinks are durable at once (the store makes them durable with a directory fsync
  right after, :mod:`gannet.node.store.durable`);
* ``fdatasync`` and ``fsync`` both make the file's data and size durable.

Bounded: a file keeps at most one saved copy of each page of its durable size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PAGE_BYTES = 4096


@dataclass
class _Pending:
    durable_size: int
    saved: dict[int, bytes] = field(default_factory=dict)
    """page number -> the page's last-fsynced bytes (cut at the durable size)."""


@dataclass(frozen=True)
class Restore:
    """How to bring one file back to its last-fsynced content: write each page, then set the
    file's size to ``size_bytes``."""

    path: str
    size_bytes: int
    pages: tuple[tuple[int, bytes], ...]
    """(byte offset, bytes) to write back, in offset order."""

    @property
    def lost_bytes(self) -> int:
        return sum(len(data) for _, data in self.pages)


class Journal:
    """The unfsynced changes of the files of one tree, by path."""

    def __init__(self) -> None:
        self._files: dict[str, _Pending] = {}

    def pages_to_save(self, path: str, offset: int, length: int, size_bytes: int) -> list[int]:
        """The pages a change of ``length`` bytes at ``offset`` to ``path`` (now ``size_bytes``
        long) overwrites that hold last-fsynced bytes not saved yet. A change that cuts a
        file is the range from the new end to the old one."""
        if offset < 0 or length < 0 or size_bytes < 0:
            raise ValueError(f"negative range {offset}+{length} of {path} ({size_bytes} bytes)")
        pending = self._files.get(path)
        durable = size_bytes if pending is None else pending.durable_size
        end = min(offset + length, durable)
        if end <= offset:
            return []
        saved = {} if pending is None else pending.saved
        pages = range(offset // PAGE_BYTES, (end - 1) // PAGE_BYTES + 1)
        return [page for page in pages if page not in saved]

    def touch(self, path: str, size_bytes: int) -> None:
        """``path`` is about to change and is ``size_bytes`` long now: if it has not changed
        since its last fsync, that is its durable size."""
        self._files.setdefault(path, _Pending(size_bytes))

    def durable_size(self, path: str) -> int:
        """The size of ``path`` at its last fsync (it must have been touched since)."""
        return self._files[path].durable_size

    def save(self, path: str, page: int, data: bytes) -> None:
        """The last-fsynced content of ``page`` (what the backing file holds there now, cut at
        the durable size); the first copy of a page is kept, later ones are ignored."""
        pending = self._files.get(path)
        if pending is None:
            raise KeyError(f"save of page {page} of {path} before touch")
        start = page * PAGE_BYTES
        expected = max(0, min(PAGE_BYTES, pending.durable_size - start))
        if len(data) != expected:
            raise ValueError(f"page {page} of {path}: {len(data)} bytes, expected {expected}")
        pending.saved.setdefault(page, data)

    def created(self, path: str) -> None:
        """``path`` was created (empty): until its fsync, a crash leaves it empty."""
        self._files[path] = _Pending(0)

    def synced(self, path: str) -> None:
        """``path`` was fsynced: its content and size are durable."""
        self._files.pop(path, None)

    def renamed(self, old: str, new: str) -> None:
        """``old`` now is ``new`` (which it replaced, if it existed)."""
        self._files.pop(new, None)
        pending = self._files.pop(old, None)
        if pending is not None:
            self._files[new] = pending

    def removed(self, path: str) -> None:
        self._files.pop(path, None)

    def pending_paths(self) -> list[str]:
        return sorted(self._files)

    def losses(self) -> list[Restore]:
        """What a crash now loses, file by file (the journal is left as it is)."""
        return [
            Restore(path, pending.durable_size, self._pages(pending))
            for path, pending in sorted(self._files.items())
        ]

    @staticmethod
    def _pages(pending: _Pending) -> tuple[tuple[int, bytes], ...]:
        return tuple((page * PAGE_BYTES, data) for page, data in sorted(pending.saved.items()))

    def clear(self) -> None:
        self._files.clear()
