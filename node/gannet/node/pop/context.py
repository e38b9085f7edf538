"""State shared by the Pop services of one broker: the store, settings, the in-flight buffer,
queue locks, the seeded random source and the revive-queue round robin.

Also the buffer's periodic work (:meth:`PopContext.flush_buffer`, RocketMQ's 5 ms scan): write
buffered checkpoints that must be stored, commit consumer offsets over finished pops, forget
checkpoints past their revive time. The broker thread calls it when :meth:`PopContext.next_flush_ms`
is due (at most every ``buffer_scan_interval_ms`` while work keeps coming); tests call it with a
virtual ``now_ms``.

Durability: every revive-log write waits, outside any lock, until the flush mode has made it
durable, through the :data:`DurableWait` it is given — the blocking entry point of the broker's
one commit rule (``gannet.node.domain.committing.blocking_flush_wait``, which sits above Pop and
so is handed in by whoever builds the :class:`~gannet.node.pop.service.PopBroker`).

Created by :class:`gannet.node.pop.service.PopBroker`; used by :mod:`popping`, :mod:`acking`,
:mod:`reviving`.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable

from gannet.node.pop import revive_log
from gannet.node.pop.acks import AckMsg
from gannet.node.pop.checkpoints import PopCheckPoint
from gannet.node.pop.ck_floors import CheckpointFloors
from gannet.node.pop.config import CK_DELIVER_LEAD_MS, RE_PUT_BACKOFF_S, PopConfig
from gannet.node.pop.errors import InvisibleTimeIllegal
from gannet.node.pop.locks import QueueLocks
from gannet.node.pop.merging import Inflight, InflightBuffer
from gannet.node.store import steady_clock
from gannet.node.store.message_store import MessageStore

EXPIRE_INTERVAL_MS = 1_000  # how often tracked checkpoints past their revive time are dropped
REVIVE_HORIZON_MARGIN_MS = RE_PUT_BACKOFF_S[-1] * 1000

REVIVE_LOG_WRITE = "revive-log write"
"""What a flush timeout of Pop's writes names (the ``what`` of ``blocking_flush_wait``)."""

DurableWait = Callable[[int | None], None]
"""Blocks until the commit-log offset it is given (None: nothing) is durable per the flush
mode; raises :class:`~gannet.node.store.errors.FlushTimeout` when it is not in time."""


class PopContext:
    def __init__(
        self, store: MessageStore, config: PopConfig, rng: random.Random, wait_durable: DurableWait
    ) -> None:
        self.store = store
        self.wait_durable = wait_durable
        """Wait (outside any lock) until an offset is flushed (:data:`DurableWait`)."""
        self.config = config
        self.rng = rng
        self.buffer = InflightBuffer(config)
        self.locks = QueueLocks()
        self._revive_counter = itertools.count()
        self._flush_lock = threading.Lock()
        self._last_expire_ms = 0
        existed = store.topic_configs.get(revive_log.revive_topic(store)) is not None
        revive = revive_log.ensure_revive_topic(store, config.revive_queue_count)
        self.revive_write_queues = revive.write_queue_nums
        self.ck_floors = CheckpointFloors(store, revive.topic_name)
        """Where the CKs in the log put each queue's pop offset (:mod:`ck_floors`)."""
        self.ck_floors.attach()
        self._flush_lock_deliveries = threading.Lock()
        self._last_delivery_ms: dict[int, int] = {}
        # CKs parked by an earlier process may reach any revive queue until this horizon.
        self._restart_horizon_ms = (
            steady_clock.now_ms() + config.invisible_time_ms_max + REVIVE_HORIZON_MARGIN_MS
            if existed
            else 0
        )

    @property
    def broker_name(self) -> str:
        return self.store.config.broker_name

    # --- revive-log writes ---
    # The *_nowait variants append and return the offset that must be durable before the
    # write may be relied on (None: nothing to wait for), so that callers holding the buffer
    # lock can release it before waiting: concurrent acks then share one group commit.
    def write_cks_nowait(self, cks: list[tuple[PopCheckPoint, int]]) -> int | None:
        """Append ``(checkpoint, revive_qid)`` CK messages in one write."""
        if not cks:
            return None
        _, durable_at = self.store.put_messages_nowait(
            [revive_log.ck_message(self.store, ck, q) for ck, q in cks]
        )
        for ck, q in cks:
            self._note_delivery(q, ck.revive_time_ms - CK_DELIVER_LEAD_MS)
        return durable_at

    def write_ck(self, ck: PopCheckPoint, revive_qid: int) -> None:
        """Append a CK message and wait until it is durable (per the flush mode)."""
        self.wait_durable(self.write_cks_nowait([(ck, revive_qid)]))

    def write_acks_nowait(self, acks_to_write: list[tuple[AckMsg, int, int]]) -> int | None:
        """Append ``(ack, revive_qid, deliver_ms)`` ACK messages in one write."""
        if not acks_to_write:
            return None
        _, durable_at = self.store.put_messages_nowait(
            [revive_log.ack_message(self.store, a, q, d) for a, q, d in acks_to_write]
        )
        for _, q, d in acks_to_write:
            self._note_delivery(q, d)
        return durable_at

    def _note_delivery(self, revive_qid: int, deliver_ms: int) -> None:
        with self._flush_lock_deliveries:
            known = self._last_delivery_ms.get(revive_qid, 0)
            self._last_delivery_ms[revive_qid] = max(known, deliver_ms)

    def last_delivery_ms(self, revive_qid: int) -> int:
        """Latest delivery time of a CK/ACK written to ``revive_qid`` by this process; before
        any, a horizon covering whatever an earlier process may have parked."""
        with self._flush_lock_deliveries:
            return self._last_delivery_ms.get(revive_qid, self._restart_horizon_ms)

    def next_revive_qid(self) -> int:
        return next(self._revive_counter) % self.revive_write_queues

    def set_revive_queue_count(self, count: int) -> None:
        """New checkpoints go to queues ``0..count-1``; older queues stay readable."""
        if count < 1:
            raise ValueError(f"revive queue count must be at least 1, not {count}")
        revive_log.ensure_revive_topic(self.store, count)
        self.revive_write_queues = count

    def check_invisible_time(self, invisible_time_ms: int) -> None:
        lo, hi = self.config.invisible_time_ms_min, self.config.invisible_time_ms_max
        if not lo <= invisible_time_ms <= hi:
            raise InvisibleTimeIllegal(
                f"invisible time {invisible_time_ms} ms is outside [{lo}, {hi}] ms"
            )

    # --- buffer scan ---
    def flush_buffer(self, now_ms: int) -> None:
        """Store due buffered checkpoints, commit finished pops' offsets, expire old ones."""
        with self._flush_lock:
            self._store_entries(self.buffer.due_for_store(now_ms))
            self.commit_offsets()
            self.commit_ck_floors()
            if now_ms - self._last_expire_ms >= EXPIRE_INTERVAL_MS or now_ms < self._last_expire_ms:
                self._last_expire_ms = now_ms
                self.buffer.expire(now_ms)

    def next_flush_ms(self) -> int | None:
        """When :meth:`flush_buffer` next has work (see :meth:`InflightBuffer.next_due_ms`;
        tracked checkpoints are expired every ``EXPIRE_INTERVAL_MS``); None when it has none."""
        due = self.buffer.next_due_ms()
        if self.buffer.statistics().tracked:
            expire_ms = self._last_expire_ms + EXPIRE_INTERVAL_MS
            due = expire_ms if due is None else min(due, expire_ms)
        return due

    def flush_all(self) -> None:
        """Write every buffered checkpoint now (shutdown), then commit offsets."""
        with self._flush_lock:
            self._store_entries(self.buffer.unstored())
            self.commit_offsets()

    def _store_entries(self, entries: list[Inflight]) -> None:
        """Write buffered checkpoints (with their in-memory ack bits) in one append. While
        the write becomes durable they are *storing*: new acks go to ACK records, and their
        pops' offsets are committed only once they are *stored*."""
        with self.buffer.lock:
            doing = [
                e for e in entries if not (e.stored or e.storing or e.all_acked or e.ck is None)
            ]
            cks = [(e.ck.with_bits(e.acked_bits), e.revive_qid) for e in doing if e.ck is not None]
            durable_at = self.write_cks_nowait(cks)
            for e in doing:
                e.storing = True
        self.wait_durable(durable_at)
        for e in doing:
            self.buffer.mark_stored(e)

    def commit_ck_floors(self) -> None:
        """Commit the offset past a CK in the log over a consumer offset still behind it
        (:mod:`ck_floors`); a queue with pops in flight waits for them (they start at or past
        the floor and commit their own offsets), and a floor reached is forgotten."""
        if not len(self.ck_floors):
            return
        offsets = self.store.consumer_offsets
        with self.buffer.lock:
            for key, floor in self.ck_floors.pending():
                if self.buffer.latest_next_begin(key) is not None:
                    continue
                topic, group, queue = key.rsplit("@", 2)
                queue_id = int(queue)
                if offsets.query(group, topic, queue_id) < floor:
                    offsets.commit(group, topic, queue_id, floor)
                self.ck_floors.drop(key, floor)

    def commit_offsets(self) -> None:
        offsets = self.store.consumer_offsets
        with self.buffer.lock:
            for key, next_begin, count in self.buffer.committable():
                topic, group, queue = key.rsplit("@", 2)
                offsets.commit(group, topic, int(queue), next_begin)
                self.buffer.release(key, count)
