"""The store checkpoint file ``<root>/checkpoint`` (RocketMQ ``StoreCheckpoint``).

Format: a 4096-byte file of big-endian longs::

    @0   physicMsgTimestamp   store time of the last flushed commit-log data (flush service)
    @8   logicsMsgTimestamp   store time of the last dispatched consume-queue entry
    @16  indexMsgTimestamp    end time of the last full and flushed index file
    @24  masterFlushedOffset  (RocketMQ HA; kept as read)
    @32  confirmPhyOffset     confirm offset (Gannet: the commit offset dispatch may reach)

``min_timestamp_ms`` = min(physic, logics) − 3000, floored at 0: abnormal recovery starts from
the commit-log file whose first record is older than that. Written in place and fdatasync'ed by
:meth:`Checkpoint.flush` (every second by the store and at shutdown). Callers: message store,
recovery, flush and dispatch services.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from gannet.node.store import durable

FILE_SIZE_BYTES = 4096
_LONGS = struct.Struct(">qqqqq")


class Checkpoint:
    """In-memory values of the checkpoint file, written through on :meth:`flush`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        exists = path.exists() and path.stat().st_size == FILE_SIZE_BYTES
        if not exists:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
            durable.allocate_file(path, FILE_SIZE_BYTES)
        self._fd = os.open(path, os.O_RDWR)
        self._mm = mmap.mmap(self._fd, FILE_SIZE_BYTES)
        values: tuple[int, int, int, int, int] = _LONGS.unpack_from(self._mm, 0)
        self.physic_msg_timestamp_ms: int = values[0]
        self.logics_msg_timestamp_ms: int = values[1]
        self.index_msg_timestamp_ms: int = values[2]
        self.master_flushed_offset: int = values[3]
        self.confirm_phy_offset: int = values[4]

    def min_timestamp_ms(self) -> int:
        """min(physic, logics) − 3 s, floored at 0 (``getMinTimestamp``)."""
        return max(0, min(self.physic_msg_timestamp_ms, self.logics_msg_timestamp_ms) - 3000)

    def min_timestamp_index_ms(self) -> int:
        return min(self.min_timestamp_ms(), self.index_msg_timestamp_ms)

    def flush(self) -> None:
        _LONGS.pack_into(
            self._mm,
            0,
            self.physic_msg_timestamp_ms,
            self.logics_msg_timestamp_ms,
            self.index_msg_timestamp_ms,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )
        durable.sync_data(self._fd, str(self.path))

    def close(self, *, flush: bool = True) -> None:
        if not self._mm.closed:
            if flush:
                self.flush()
            self._mm.close()
            os.close(self._fd)
