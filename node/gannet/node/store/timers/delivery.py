"""Delayed delivery wired into the store: park, enqueue, fire, re-put (RocketMQ's
``TimerMessageStore`` services, one thread here).

* Park (on the append path, :meth:`TimerService.route`): a message with ``TIMER_DELIVER_MS``,
  ``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC`` due in the future is stored in ``rmq_sys_wheel_timer``
  queue 0 with ``TIMER_OUT_MS``, ``REAL_TOPIC`` and ``REAL_QID`` (:func:`timers.park_message`).
  A legacy ``DELAY`` level is turned into a delivery time first (levels 1s 5s 10s 30s 1m … 2h)
  and then parked the same way, so delayed messages of both kinds share one persistent wheel.
* Enqueue: the thread reads the timer topic's consume queue from the timer store's persisted
  queue offset (only committed, dispatched messages) and adds each to the wheel. Re-reading
  after a crash is harmless: the timer store ignores commit offsets it already holds.
* Fire: every tick, entries whose second has passed are read back from the commit log,
  restored to their real topic and queue (:func:`timers.restore_message`) and appended; entries
  beyond the wheel's window come back as ROLL entries and are parked again. Only after those
  appends return is the read cursor committed, so a crash repeats a delivery rather than losing
  it (at least once).

Called by :class:`MessageStore` (route, load, start, stop, truncate, backlog).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from gannet.node.store import properties as props
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import StoreError
from gannet.node.store.log.commitlog import AppendResult
from gannet.node.store.log.records import Message
from gannet.node.store.queues.consume_queues import ConsumeQueueStore
from gannet.node.store.timers import store as timers

log = logging.getLogger(__name__)

TICK_MS = 100
ENQUEUE_BATCH_MAX = 1024
FIRE_BATCH_MAX = 1024
_TIMING_KEYS = frozenset(
    (props.DELAY_TIME_LEVEL, props.TIMER_DELAY_SEC, props.TIMER_DELAY_MS, props.TIMER_DELIVER_MS)
)
FLUSH_INTERVAL_MS = 1_000
DELAY_LEVELS_MS = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
    420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
]  # fmt: skip


class TimerHost(Protocol):
    """What the timer service needs of the store that owns it (the message store): its
    configuration, the timer topic's consume queue, and reading and re-putting messages."""

    @property
    def config(self) -> StoreConfig: ...

    @property
    def queues(self) -> ConsumeQueueStore: ...

    def read_message(self, commit_offset: int) -> Message | None: ...

    def put_messages(
        self, msgs: list[Message], *, timeout_s: float | None = None
    ) -> list[AppendResult]: ...


class TimerService:
    def __init__(self, store: TimerHost) -> None:
        self.store = store
        self.timer_store: timers.TimerStore | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired_total = 0
        self.enqueued_total = 0

    # --- lifecycle ---
    def load(self, commit_log_end: int) -> None:
        self.timer_store = timers.TimerStore.open(
            self.store.config, commit_log_max_offset=commit_log_end
        )

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gannet-timer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        if self.timer_store is not None:
            self.timer_store.close()
            self.timer_store = None

    # --- append path ---
    def route(self, msg: Message, now_ms: int) -> Message:
        """The message to store: parked in the timer topic when its delivery is in the future."""
        if msg.topic == timers.TIMER_TOPIC or _TIMING_KEYS.isdisjoint(msg.properties):
            return msg  # the common case: no property that asks for a delay
        level = msg.properties.get(props.DELAY_TIME_LEVEL)
        if level is not None and level.isdigit() and int(level) > 0:
            index = min(int(level), len(DELAY_LEVELS_MS)) - 1
            msg.properties[props.TIMER_DELIVER_MS] = str(now_ms + DELAY_LEVELS_MS[index])
            del msg.properties[props.DELAY_TIME_LEVEL]
        routing = timers.route_for_timer(msg.properties, now_ms, self.store.config)
        if routing is None:
            return msg
        return timers.park_message(msg, routing)

    # --- the thread ---
    def _run(self) -> None:
        last_flush = time.monotonic()
        while not self._stop.wait(TICK_MS / 1000):
            try:
                self.tick(time.time_ns() // 1_000_000)
                if (time.monotonic() - last_flush) * 1000 >= FLUSH_INTERVAL_MS:
                    last_flush = time.monotonic()
                    if self.timer_store is not None:
                        self.timer_store.flush()
            except StoreError as exc:
                log.error("timer service: %s", exc)
            except Exception:
                log.exception("timer service failed")

    def tick(self, now_ms: int) -> int:
        """Enqueue newly committed parked messages, then fire what is due; returns fired."""
        ts = self.timer_store
        if ts is None:
            return 0
        self._enqueue_new(ts)
        fired = 0
        while True:
            entries = ts.due_entries(now_ms, FIRE_BATCH_MAX)
            if not entries:
                break
            fired += self._fire(entries, now_ms)
            read_ms = ts.read_time_ms
            if read_ms is not None:
                ts.commit_read(read_ms)
            if len(entries) < FIRE_BATCH_MAX:
                break
        return fired

    def _enqueue_new(self, ts: timers.TimerStore) -> None:
        cq = self.store.queues.get(timers.TIMER_TOPIC, 0)
        if cq is None:
            return
        offset = max(ts.timer_queue_offset, cq.min_offset_in_queue())
        while True:
            units = cq.read_units(offset, ENQUEUE_BATCH_MAX)
            for unit in units:
                msg = self.store.read_message(unit.commit_offset)
                if msg is not None:
                    self._enqueue_one(ts, unit.commit_offset, msg)
                offset = unit.queue_offset + 1
            ts.set_timer_queue_offset(offset)
            if len(units) < ENQUEUE_BATCH_MAX:
                return

    def _enqueue_one(self, ts: timers.TimerStore, commit_offset: int, msg: Message) -> None:
        out = msg.properties.get(props.TIMER_OUT_MS, "")
        if not out.lstrip("-").isdigit():
            log.warning("timer message at %d has no TIMER_OUT_MS; dropped", commit_offset)
            return
        real_topic = msg.properties.get(props.REAL_TOPIC)
        if ts.enqueue(
            commit_offset,
            msg.store_size,
            int(out),
            msg.store_timestamp_ms,
            timers.topic_hash(real_topic),
        ):
            self.enqueued_total += 1

    def _fire(self, entries: list[timers.TimerEntry], now_ms: int) -> int:
        out: list[Message] = []
        for entry in entries:
            if entry.deleted:
                continue
            msg = self.store.read_message(entry.commit_offset)
            if msg is None:
                log.warning("timer entry at %d: message no longer stored", entry.commit_offset)
                continue
            if entry.rolled:
                out.append(timers.roll_message(msg))
            else:
                out.append(timers.restore_message(msg, entry.enqueue_ms, now_ms))
        for start in range(0, len(out), 64):
            self.store.put_messages(out[start : start + 64])
        self.fired_total += len(out)
        return len(out)

    # --- maintenance ---
    def truncate(self, commit_offset: int) -> None:
        ts = self.timer_store
        if ts is None:
            return
        ts.truncate(commit_offset)
        cq = self.store.queues.get(timers.TIMER_TOPIC, 0)
        top = cq.max_offset_in_queue() if cq is not None else 0
        if ts.timer_queue_offset > top:
            ts.set_timer_queue_offset(top)

    def backlog(self) -> int:
        return self.timer_store.backlog_count() if self.timer_store is not None else 0
