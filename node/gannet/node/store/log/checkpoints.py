"""The store checkpoint file ``<root>/checkpoint`` (RocketMQ ``StoreCheckpoint``).

Format: a 4096-byte file of big-endian longs::

    @0   physicMsgTimestamp   store time of the last flushed commit-log data (flush service)
    @8   logicsMsgTimestamp   store time of the last dispatched consume-queue entry
    @16  indexMsgTimestamp    end time of the last full and flushed index file
    @24  masterFlushedOffset  (RocketMQ HA; kept as read)
    @32  confirmPhyOffset     confirm offset (Gannet: the commit offset dispatch may reach)
    @40  flushedPhyOffset     Gannet only: commit-log offset below which every byte had been
                              fdatasync'ed when the checkpoint was written (0 = unknown; RocketMQ
                              leaves the rest of the file zero and ignores it)

``min_timestamp_ms`` = min(physic, logics) − 3000, floored at 0: abnormal recovery starts from
the commit-log file whose first record is older than that. ``flushedPhyOffset`` is the floor
below which recovery refuses to cut the commit log (:mod:`recovering`); the flush service raises
it after each flush, a truncation lowers it and writes the file *before* the log is cut.

Written in place and fdatasync'ed by :meth:`Checkpoint.flush` (every second by the store and at
shutdown). A file of the wrong length, or one whose values cannot be real (negative, or a
timestamp more than a year ahead of the clock), is corrupt: :class:`Checkpoint` refuses it with
:class:`~gannet.node.store.errors.CorruptionError` rather than starting as if the store were new;
with ``repair=True`` (``--force-recover``) the bad file is kept as ``checkpoint.corrupt-<ms>``
and a zeroed one replaces it (:attr:`Checkpoint.trust` then says recovery must scan everything).
Callers: message store, recovery, flush and dispatch services.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import time
from pathlib import Path

from gannet.node.store import durable
from gannet.node.store.errors import CorruptionError

log = logging.getLogger(__name__)

FILE_SIZE_BYTES = 4096
_LONGS = struct.Struct(">qqqqqq")
_TIMESTAMP_AHEAD_MAX_MS = 366 * 86_400_000
_KEPT_AS_READ = ("masterFlushedOffset", "confirmPhyOffset")  # RocketMQ's; Gannet reads neither
_NAMES = (
    "physicMsgTimestamp",
    "logicsMsgTimestamp",
    "indexMsgTimestamp",
    "masterFlushedOffset",
    "confirmPhyOffset",
    "flushedPhyOffset",
)


def read_values(path: Path) -> dict[str, int]:
    """The six longs of a checkpoint file by RocketMQ name, read without judging them (the
    verifier shows them as they are); empty when the file is missing or shorter than 48 bytes."""
    if not path.exists() or path.stat().st_size < _LONGS.size:
        return {}
    return dict(zip(_NAMES, _LONGS.unpack(path.read_bytes()[: _LONGS.size]), strict=True))


def problem_of(path: Path) -> str | None:
    """Why the checkpoint file at ``path`` is corrupt, or None when it is usable (or absent)."""
    if not path.exists():
        return None
    size = path.stat().st_size
    if size != FILE_SIZE_BYTES:
        return f"its length is {size} bytes, not {FILE_SIZE_BYTES}"
    with open(path, "rb") as f:
        values = _LONGS.unpack(f.read(_LONGS.size))
    ahead = time.time_ns() // 1_000_000 + _TIMESTAMP_AHEAD_MAX_MS
    for name, value in zip(_NAMES, values, strict=True):
        if value < 0 and name not in _KEPT_AS_READ:
            return f"{name} is negative ({value})"
        if name.endswith("Timestamp") and value > ahead:
            return f"{name} is {value}, more than a year ahead of this clock"
    return None


class Checkpoint:
    """In-memory values of the checkpoint file, written through on :meth:`flush`.

    ``trust`` says what the file tells recovery: ``"file"`` (read from an existing, valid
    file), ``"new"`` (there was none) or ``"repaired"`` (a corrupt one was set aside).
    """

    def __init__(self, path: Path, *, repair: bool = False) -> None:
        self.path = path
        self.trust = "file"
        problem = problem_of(path)
        if problem is not None:
            if not repair:
                raise CorruptionError(
                    f"checkpoint file {path} is corrupt: {problem}. Recovery will not guess "
                    "which commit-log bytes were flushed; restore the file from a backup, or "
                    "start the broker with --force-recover to keep it as checkpoint.corrupt-<time> "
                    "and recover with a full scan"
                )
            kept = path.with_name(f"{path.name}.corrupt-{time.time_ns() // 1_000_000}")
            durable.move_aside(path, kept)
            log.warning("checkpoint %s is corrupt (%s); kept as %s", path, problem, kept)
            self.trust = "repaired"
        if not path.exists():
            if self.trust == "file":
                self.trust = "new"
            path.parent.mkdir(parents=True, exist_ok=True)
            durable.allocate_file(path, FILE_SIZE_BYTES)
            durable.sync_directory(path.parent)
        self._fd = os.open(path, os.O_RDWR)
        self._mm = mmap.mmap(self._fd, FILE_SIZE_BYTES)
        values: tuple[int, int, int, int, int, int] = _LONGS.unpack_from(self._mm, 0)
        self.physic_msg_timestamp_ms: int = values[0]
        self.logics_msg_timestamp_ms: int = values[1]
        self.index_msg_timestamp_ms: int = values[2]
        self.master_flushed_offset: int = values[3]
        self.confirm_phy_offset: int = values[4]
        self.flushed_phy_offset: int = values[5]

    def min_timestamp_ms(self) -> int:
        """min(physic, logics) − 3 s, floored at 0 (``getMinTimestamp``)."""
        return max(0, min(self.physic_msg_timestamp_ms, self.logics_msg_timestamp_ms) - 3000)

    def min_timestamp_index_ms(self) -> int:
        return min(self.min_timestamp_ms(), self.index_msg_timestamp_ms)

    def lower_flushed_offset(self, offset: int) -> None:
        """The log is about to be cut at ``offset``: write a floor no higher than it, durably,
        before the cut, so that a crash in between never finds a floor above the log's end."""
        if self.flushed_phy_offset > offset:
            self.flushed_phy_offset = offset
            self.flush()

    def flush(self) -> None:
        _LONGS.pack_into(
            self._mm,
            0,
            self.physic_msg_timestamp_ms,
            self.logics_msg_timestamp_ms,
            self.index_msg_timestamp_ms,
            self.master_flushed_offset,
            self.confirm_phy_offset,
            self.flushed_phy_offset,
        )
        durable.sync_data(self._fd, str(self.path))

    def close(self, *, flush: bool = True) -> None:
        if not self._mm.closed:
            if flush:
                self.flush()
            self._mm.close()
            os.close(self._fd)
