"""Every consume queue of a store, keyed by (topic, queue id) (RocketMQ's ``ConsumeQueueStore``).

:class:`ConsumeQueueStore` finds the queue directories under ``<root>/consumequeue/`` at start,
creates a queue on its first dispatched record, and runs what concerns all queues at once:
recovery, truncation past a commit-log offset, cleanup of expired files, flushing, and removing
the queues of a topic. One queue and its on-disk format are
:class:`~gannet.node.store.queues.consume_queues.ConsumeQueue`.

Called by the message store (``message_store``: dispatch, reads, statistics), recovery
(``upkeep.recovering``), the cleaner (``upkeep.cleaning``), the queue-numbering checks
(``upkeep.queue_consistency``), timer delivery (``timers.delivery``), the reading helpers
(``queues.reading``) and the pipeline's rebuild job (``gannet.pipeline.rebuilding``).

Threading: as :class:`~gannet.node.store.queues.consume_queues.ConsumeQueue`; the table itself
changes on the writer's thread only (dispatch, or recovery and cleanup while dispatch is paused).
"""

from __future__ import annotations

import logging

from gannet.node.store.config import StoreConfig
from gannet.node.store.queues.consume_queues import ConsumeQueue, remove_empty_dir

_log = logging.getLogger(__name__)


class ConsumeQueueStore:
    """Every consume queue of a store, keyed by (topic, queue id) (``ConsumeQueueStore``)."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self._table: dict[str, dict[int, ConsumeQueue]] = {}

    def load(self) -> None:
        """Open ``<root>/consumequeue/<topic>/<queueId>/`` for every directory found."""
        root = self.config.consume_queue_dir
        root.mkdir(parents=True, exist_ok=True)
        for topic_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            for queue_dir in sorted(p for p in topic_dir.iterdir() if p.is_dir()):
                if not queue_dir.name.isdigit():
                    _log.warning("ignoring %s: queue directory name is not a number", queue_dir)
                    continue
                cq = self.find_or_create(topic_dir.name, int(queue_dir.name))
                cq.load()

    def recover(self) -> int:
        """Recover every queue; the max ``max_physic_offset`` over them (-1 when none)."""
        best = -1
        for cq in self.queues():
            cq.recover()
            best = max(best, cq.max_physic_offset)
        return best

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        by_id = self._table.setdefault(topic, {})
        cq = by_id.get(queue_id)
        if cq is None:
            cq = ConsumeQueue(topic, queue_id, self.config)
            by_id[queue_id] = cq
        return cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        by_id = self._table.get(topic)
        return None if by_id is None else by_id.get(queue_id)

    def queues(self) -> list[ConsumeQueue]:
        return [cq for by_id in self._table.values() for cq in by_id.values()]

    def topics(self) -> list[str]:
        return list(self._table)

    def truncate_dirty(self, phy_offset: int) -> None:
        """Cut units at or past ``phy_offset`` in every queue that has any."""
        for cq in self.queues():
            unknown = cq.max_physic_offset < 0 and bool(cq.files)
            if cq.max_physic_offset > phy_offset or unknown:
                cq.truncate_dirty_logic_files(phy_offset)

    def correct_min_offsets(self, min_commitlog_offset: int) -> None:
        for cq in self.queues():
            cq.correct_min_offset(min_commitlog_offset)

    def delete_expired(self, min_commitlog_offset: int) -> int:
        """Delete expired files of every queue; the number of files deleted."""
        return sum(cq.delete_expired_file(min_commitlog_offset) for cq in self.queues())

    def flush_all(self, least_pages: int) -> None:
        for cq in self.queues():
            cq.flush(least_pages)

    def destroy_queue(self, topic: str, queue_id: int) -> None:
        by_id = self._table.get(topic)
        cq = None if by_id is None else by_id.pop(queue_id, None)
        if cq is not None:
            cq.destroy()
        if by_id is not None and not by_id:
            del self._table[topic]
            remove_empty_dir(self.config.consume_queue_dir / topic)

    def destroy_topic(self, topic: str) -> None:
        for cq in self._table.pop(topic, {}).values():
            cq.destroy()
        remove_empty_dir(self.config.consume_queue_dir / topic)

    def destroy_all(self) -> None:
        for topic in list(self._table):
            self.destroy_topic(topic)

    def close(self) -> None:
        for cq in self.queues():
            cq.close()
