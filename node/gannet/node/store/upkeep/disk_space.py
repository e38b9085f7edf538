"""How full the store's partition is, counted as ``df`` and RocketMQ count it.

The ratio is ``used / (used + available)`` where, from ``statvfs``,

* ``used = (f_blocks - f_bfree) × f_frsize`` — blocks some file holds;
* ``available = f_bavail × f_frsize`` — blocks the broker (an unprivileged process) may still
  allocate.

The blocks the filesystem reserves for root (``f_bfree - f_bavail``, 5 % of an ext4 volume by
default) are in neither term: the broker can never write them, so counting them as used (as
``(total - available) / total`` does) reported a disk 72–80 % full by ``df`` as 91 % and refused
writes early. This is ``df``'s ``Use%`` and RocketMQ's ``UtilAll.getDiskPartitionSpaceUsedPercent``
(``totalSpace - freeSpace`` over that plus ``usableSpace``); both round it *up* to a whole
percent, Gannet keeps it exact (so ``df`` shows 80 % for any exact ratio in (0.79, 0.80]).

:func:`space_of` is the pure core (statvfs numbers in, bytes out, tested with table cases);
:func:`measure` and :func:`disk_used_ratio` are the IO edge (one ``os.statvfs``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DiskSpace:
    """The bytes of a filesystem that count for the ratio (module docstring)."""

    used_bytes: int
    available_bytes: int

    @property
    def used_ratio(self) -> float:
        """``used / (used + available)``, exact, 0-1; 0 for a filesystem with neither (``df``
        prints ``-`` for it)."""
        counted = self.used_bytes + self.available_bytes
        if counted <= 0:
            return 0.0
        return self.used_bytes / counted


def space_of(
    *, fragment_size_bytes: int, total_blocks: int, free_blocks: int, available_blocks: int
) -> DiskSpace:
    """Pure: the used and available bytes of ``statvfs`` numbers (``f_frsize``, ``f_blocks``,
    ``f_bfree``, ``f_bavail``). Negative differences (a filesystem reporting inconsistent
    counts mid-update) are taken as 0."""
    used_blocks = max(total_blocks - free_blocks, 0)
    return DiskSpace(
        used_bytes=used_blocks * fragment_size_bytes,
        available_bytes=max(available_blocks, 0) * fragment_size_bytes,
    )


def measure(path: str) -> DiskSpace:
    """The used and available bytes of the filesystem holding ``path`` (one ``statvfs``)."""
    st = os.statvfs(path)
    return space_of(
        fragment_size_bytes=st.f_frsize,
        total_blocks=st.f_blocks,
        free_blocks=st.f_bfree,
        available_blocks=st.f_bavail,
    )


def disk_used_ratio(path: str) -> float:
    """``used / (used + available)`` of the filesystem holding ``path``, as ``df`` (0-1)."""
    return measure(path).used_ratio
