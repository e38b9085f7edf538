"""Checkpoint floors: the pop offset of a queue is never behind a checkpoint in the log
(``docs/formats/pop.md`` §2, fault seed 1000).

A pop appends its CK record before it commits the queue's consumer offset. When the pop fails
after the append (on a Raft group: leadership lost before the write committed, the answer says
the message "may or may not survive"), the pop is withdrawn and the offset is not committed —
but the CK record may still be in the log: a follower had it and a new leader committed it with
its own term. That CK is a live lease the client never saw; it is revived when due. A pop that
read the same offsets again from the behind-hand consumer offset would hand out a second copy
under a second lease, and once that copy is acked the first CK still brings the message back:
"delivered after its ack was answered".

So every member notes, from the dispatch of committed records (:meth:`CheckpointFloors.
on_dispatched`: CK records parked in the timer topic or delivered to the revive topic), the
offset just past the last message of each CK that starts at or before the offset reached
(committed or noted: the floor never jumps over messages no CK covers) per
``topic@group@queue`` (the key of
:func:`~gannet.node.pop.locks.lock_key`). :meth:`PopService.pop_offset
<gannet.node.pop.popping.PopService.pop_offset>` never starts below it, and the leader's
buffer pass (:meth:`PopContext.flush_buffer <gannet.node.pop.context.PopContext.flush_buffer>`)
commits a floor that the consumer offset (and every in-flight pop) is still behind, so that the
offsets stay skipped after a restart or the next election. The messages of such a CK stay
invisible until it is due and are then revived once, like those of any lease whose pop answer
was lost. A floor at or behind the committed offset is dropped (the ordinary case: the pop
committed its offset after its CK).

Floors live in memory: records dispatched before a process started are not seen again (a
member restarted between such a CK and the next election does not know it).

Created by :class:`gannet.node.pop.context.PopContext`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from gannet.node.pop import checkpoints
from gannet.node.pop.checkpoints import PopCheckPoint
from gannet.node.pop.locks import lock_key
from gannet.node.store import properties as props
from gannet.node.store import validation
from gannet.node.store.log.records import DispatchInfo
from gannet.node.store.message_store import MessageStore

log = logging.getLogger(__name__)


def next_offset_after(ck: PopCheckPoint) -> int:
    """The queue offset just past the last message ``ck`` covers."""
    return ck.queue_offset(ck.num - 1) + 1


class CheckpointFloors:
    def __init__(self, store: MessageStore, revive_topic: str) -> None:
        self.store = store
        self.revive_topic = revive_topic
        self._lock = threading.Lock()
        self._floors: dict[str, int] = {}
        """``topic@group@queue`` → next offset past the CKs seen (only while ahead)."""

    def attach(self) -> None:
        self.store.add_arrival_listener(self.on_dispatched)

    def detach(self) -> None:
        if self.on_dispatched in self.store.listeners:
            self.store.listeners.remove(self.on_dispatched)

    def _is_ck(self, info: DispatchInfo) -> bool:
        properties = info.properties
        if properties.get(props.TAGS) != checkpoints.CK_TAG:
            return False
        if info.topic == self.revive_topic:
            return True
        return (
            info.topic == validation.TIMER_TOPIC
            and properties.get(props.REAL_TOPIC) == self.revive_topic
        )

    def on_dispatched(self, infos: Sequence[DispatchInfo]) -> None:
        """Dispatch thread: note the CK records of a committed batch (an unreadable one is
        logged and skipped)."""
        for info in infos:
            if not self._is_ck(info):
                continue
            try:
                message = self.store.read_message(info.commit_offset)
                if message is not None:
                    self.note(checkpoints.decode(message.body))
            except Exception:
                log.exception("CK record at commit-log offset %d not noted", info.commit_offset)

    def note(self, ck: PopCheckPoint) -> None:
        """A CK is in the (committed) log: its queue's pop offset must not be behind it."""
        key = lock_key(ck.topic, ck.cid, ck.queue_id)
        end = next_offset_after(ck)
        committed = self.store.consumer_offsets.query(ck.cid, ck.topic, ck.queue_id)
        if committed < 0:  # not committed yet: a pop starts at the queue's first offset
            committed = self.store.min_offset_in_queue(ck.topic, ck.queue_id)
        if committed >= end:
            return
        with self._lock:
            floor = self._floors.get(key, -1)
            # Only a CK that continues from the offset reached: one further on (a change of
            # invisible time of a message whose pop's CK was only buffered and lost in a
            # crash) does not cover the messages before it.
            if floor < end and ck.start_offset <= max(committed, floor):
                self._floors[key] = end

    def floor(self, key: str) -> int:
        """The offset ``key``'s pops start at or after; -1 when no CK is ahead."""
        with self._lock:
            return self._floors.get(key, -1)

    def pending(self) -> list[tuple[str, int]]:
        """Every ``(key, floor)`` noted (a copy)."""
        with self._lock:
            return list(self._floors.items())

    def drop(self, key: str, reached: int) -> None:
        """The consumer offset of ``key`` reached ``reached``: forget a floor not ahead of it."""
        with self._lock:
            if self._floors.get(key, -1) <= reached:
                self._floors.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._floors)
