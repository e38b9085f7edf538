"""Does each consume queue's numbering agree with the queue offsets stored in the records?

A consume-queue unit at position *n* of ``<topic>/<queueId>`` must point at a record whose
QUEUEOFFSET field is *n*: that is the offset the producer was told and the one consumers,
receipt handles and ``store get --queue-offset`` use. A store written by a broker that reserved
a queue offset for a send that then failed (fixed: the append path is all or nothing) has a
hole in the records' numbering, and its consume queue is shifted from the hole on.

Recovery calls :func:`check_queue_ends` after truncation (the first and last unit of every
queue; a shift persists to the end, so the last unit shows it) and feeds the scanned,
not-yet-dispatched records through :class:`TailGapCheck` (a record numbered past the queue's
next offset would be dispatched into the wrong position). Either finding raises
:class:`~gannet.node.store.errors.CorruptionError` naming topic, queue and offset: the broker
refuses to serve such a store rather than hand out wrong offsets. ``gannet store verify``
lists every mismatched entry.
"""

from __future__ import annotations

from gannet.node.store.errors import CorruptionError
from gannet.node.store.log.commitlog import CommitLog, queue_key
from gannet.node.store.queues.consume_queue_store import ConsumeQueueStore
from gannet.node.store.queues.consume_queues import is_pre_blank

_ADVICE = (
    "the queue's numbering has a hole (a send that reserved an offset and failed, in an "
    "older version); `gannet store verify` lists every shifted entry. The broker does not "
    "serve this store; restore it from a replica or a backup"
)


def check_queue_ends(commitlog: CommitLog, queues: ConsumeQueueStore) -> None:
    """Raise CorruptionError when a queue's first or last unit points at a record with
    another queue offset."""
    for queue in queues.queues():
        lo, hi = queue.min_offset_in_queue(), queue.max_offset_in_queue()
        for position in sorted({lo, hi - 1}):
            if not lo <= position < hi:
                continue
            unit = queue.get_unit(position)
            if unit is None or is_pre_blank(unit.commit_offset, unit.size):
                continue
            if unit.commit_offset < commitlog.min_offset():
                continue
            msg = commitlog.read_message(unit.commit_offset)
            if msg is None:
                continue  # a unit past the log was cut by recovery's truncation
            if msg.queue_offset != position:
                raise CorruptionError(
                    f"consume queue of topic {queue.topic} queue {queue.queue_id}: the entry "
                    f"at offset {position} points at commit-log offset {unit.commit_offset}, "
                    f"whose record has queue offset {msg.queue_offset}; {_ADVICE}"
                )


class TailGapCheck:
    """Records scanned past each queue's consume queue must continue it without a gap.

    A record the queue already holds (before the end of its last unit) is not looked at: it is
    dispatched, or it belongs to an earlier topic of the same name (deleted and created
    again). A queue's consume queue is trusted as the start only when it reaches the scan's
    start (its last unit ends at or after it); otherwise the first scanned record of the queue
    starts the count, as records in between may not have been dispatched (flush lag)."""

    def __init__(self, queues: ConsumeQueueStore, scan_start: int) -> None:
        self._next: dict[str, int] = {}
        self._held_until: dict[str, int] = {}
        self.first_unheld: int | None = None
        """Commit-log offset of the first scanned record that its (existing) consume queue
        does not hold: dispatch must start there at the latest."""
        self.unheld_next: dict[str, int] = {}
        """Queue key → next queue offset after the records its consume queue does not hold."""
        for q in queues.queues():
            key = queue_key(q.topic, q.queue_id)
            self._held_until[key] = q.max_physic_offset
            if q.max_physic_offset >= scan_start:
                self._next[key] = q.max_offset_in_queue()

    def see(self, topic: str, queue_id: int, queue_offset: int, commit_offset: int) -> None:
        key = queue_key(topic, queue_id)
        held_until = self._held_until.get(key)
        if held_until is not None and commit_offset < held_until:
            return
        if held_until is not None:
            if self.first_unheld is None:
                self.first_unheld = commit_offset
            self.unheld_next[key] = max(self.unheld_next.get(key, 0), queue_offset + 1)
        expected = self._next.get(key)
        if expected is None:
            self._next[key] = queue_offset + 1
            return
        if queue_offset > expected:
            raise CorruptionError(
                f"topic {topic} queue {queue_id}: the record at commit-log offset "
                f"{commit_offset} has queue offset {queue_offset}, but the queue continues at "
                f"offset {expected}; {_ADVICE}"
            )
        self._next[key] = max(expected, queue_offset + 1)
