"""The commit log as the Raft driver edits and reads it: cut, reset, write, read.

Used by :class:`~gannet.node.replication.driver.ReplicationNode` for the log steps of each
``Ready`` (``raft/ready.py``: ``log_reset``, ``truncate_to``, ``entries``) and to fill
``AppendEntries`` payloads and proposals from the segment files. Every edit that cuts bytes
also tells :class:`~gannet.node.replication.driver_state.DriverState` (the fsync rounds that
may predate the cut no longer count) and the replicated config tables (:mod:`config_log`).
"""

from __future__ import annotations

import logging

from gannet.node.raft.ready import LogReset
from gannet.node.replication.config_log import ConfigLog
from gannet.node.replication.driver_state import DriverState
from gannet.node.replication.errors import ReplicationError
from gannet.node.replication.state_files import RaftStateFiles
from gannet.node.store.message_store import MessageStore

log = logging.getLogger(__name__)


class StoreLog:
    """One node's commit log, edited for its Raft core (node ``node_id``, for log lines)."""

    def __init__(
        self,
        store: MessageStore,
        files: RaftStateFiles,
        state: DriverState,
        config_log: ConfigLog,
        node_id: int,
    ) -> None:
        self.store = store
        self.files = files
        self.state = state
        self.config_log = config_log
        self.node_id = node_id

    def flush_count(self) -> int:
        """fsync rounds started so far (a round in progress may predate a cut)."""
        flush = self.store.flush
        return flush.flush_count if flush is not None else 0

    def truncate(self, offset: int) -> None:
        """Cut a divergent suffix (commit log, consume queues, index, timers) at ``offset``."""
        log.warning(
            "raft node %d: cutting a divergent suffix at %d (log end %d)",
            self.node_id,
            offset,
            self.store.commitlog.max_offset(),
        )
        self.store.truncate(offset)
        self.state.cut(offset, self.flush_count())
        self.config_log.after_truncate()

    def reset(self, reset: LogReset) -> None:
        """Catch-up below the leader's retention: restart the store's log empty at the leader's
        log start; the leader's config snapshot (appended after it) replaces the tables."""
        log.warning(
            "raft node %d: the leader's log starts at %d, past what this node holds (log end "
            "%d): discarding the local log and restarting it there",
            self.node_id,
            reset.start_offset,
            self.store.commitlog.max_offset(),
        )
        self.store.reset_to(reset.start_offset)
        self.files.save_log_start(reset.start_offset, reset.start_term)
        self.state.cut(reset.start_offset, self.flush_count())
        self.state.last_durable = reset.start_offset
        self.config_log.after_truncate()
        self.state.log_resets_total += 1

    def write(self, start: int, payload: bytes) -> None:
        """Write the leader's exact bytes at ``start`` (the log end, after cutting local bytes
        past it that were never acknowledged)."""
        end = self.store.commitlog.max_offset()
        if end > start:
            # Bytes this node appended as leader but never had committed (proposals refused,
            # leadership lost): never acknowledged. A member that does not lead appends
            # nothing of its own (``MessageStore.write_permit``).
            self.truncate(start)
        elif end < start:
            raise ReplicationError(f"asked to write at {start} but the commit log ends at {end}")
        if not payload:
            raise ReplicationError(f"range at {start} came without its bytes")
        self.store.append_replicated(start, payload)

    def read(self, start: int, end: int) -> bytes:
        """Commit-log bytes ``[start, end)``, read file after file."""
        parts: list[bytes] = []
        position = start
        while position < end:
            chunk = self.store.read_replicated(position, end - position)
            if not chunk:
                raise ReplicationError(
                    f"the commit log holds no bytes at {position} (wanted [{start}, {end})): "
                    "deleted by retention? a follower this far behind needs a fresh copy"
                )
            parts.append(chunk)
            position += len(chunk)
        return b"".join(parts)
