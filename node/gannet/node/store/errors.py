"""Errors raised by the storage engine, grouped by what the caller should do about them.

Callers (the broker's API layer, the CLI, the pipeline) catch these by type:

* :class:`MessageIllegal` and its subclasses — the request is wrong; answer the client with a
  clear message naming the field and never retry.
* :class:`DiskFull`, :class:`StoreNotWritable` — an operating condition; refuse the write,
  keep serving reads, retry later.
* :class:`CorruptionError` — bytes on disk are not what the format allows; the message names the
  file and offset. Recovery cuts at the last valid record; readers never serve such bytes.
* :class:`FsyncFailed` — fatal: the node must stop (never continue after a failed fsync).
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every storage-engine error."""


class MessageIllegal(StoreError):
    """A message or a name does not satisfy the format's limits; the text names the field."""


class TopicNameIllegal(MessageIllegal):
    """A topic name is empty, too long, or has a character outside ``[A-Za-z0-9%|_-]``."""


class GroupNameIllegal(MessageIllegal):
    """A consumer-group name is empty, too long, or has an illegal character."""


class MessageTooLarge(MessageIllegal):
    """The body (or the whole record) is larger than the configured maximum."""


class PropertiesTooLarge(MessageIllegal):
    """The encoded properties do not fit the record's 16-bit length field."""


class StoreNotWritable(StoreError):
    """The store refuses writes: shut down, read-only, or a previous fatal error."""


class NotLeading(StoreNotWritable):
    """A member of a Raft group that does not lead refuses appends of its own: its log takes
    only the leader's bytes (``MessageStore.append_replicated``), or it would hold records no
    other member has, below offsets the leader writes at."""


class LogMismatch(StoreError):
    """A leader's bytes do not fit where this log ends (they start inside a record, or were made
    for another position): this member holds bytes the leader does not. Never written."""


class DiskFull(StoreNotWritable):
    """The disk holding the store is above the warning ratio or has no room left."""


class CorruptionError(StoreError):
    """A file holds bytes that the format does not allow (bad magic, CRC, length...)."""


class RecoveryRefused(CorruptionError):
    """Recovery would have to cut commit-log bytes that were flushed (or more than a crash can
    leave unflushed); the store does not open. The text names the file, the offset, the bytes
    at stake and ``--force-recover``, which cuts anyway and keeps the cut bytes aside."""

    def __init__(self, message: str, *, path: str, offset: int, bytes_at_stake: int) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.bytes_at_stake = bytes_at_stake


class FsyncFailed(StoreError):
    """fsync/fdatasync failed. Fatal: the data it covered may be lost; stop the node."""


class FlushTimeout(StoreError):
    """A SYNC_FLUSH append was written but not made durable within the configured timeout."""


class StoreLocked(StoreError):
    """Another process holds the store directory's lock file."""
