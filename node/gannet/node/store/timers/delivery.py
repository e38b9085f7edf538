"""Delayed delivery wired into the store: park, enqueue, fire, re-put (RocketMQ's
``TimerMessageStore`` services, one thread here).

* Park (on the append path, :meth:`TimerService.route`): a message with ``TIMER_DELIVER_MS``,
  ``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC`` due in the future is stored in ``rmq_sys_wheel_timer``
  queue 0 with ``TIMER_OUT_MS``, ``REAL_TOPIC`` and ``REAL_QID`` (:func:`park_message`).
  A legacy ``DELAY`` level is turned into a delivery time first (levels 1s 5s 10s 30s 1m … 2h)
  and then parked the same way, so delayed messages of both kinds share one persistent wheel.
* Enqueue: the thread reads the timer topic's consume queue from the timer store's persisted
  queue offset (only committed, dispatched messages) and adds each to the wheel. Re-reading
  after a crash is harmless: the timer store ignores commit offsets it already holds.
* Fire: every tick, entries whose second has passed are read back from the commit log,
  restored to their real topic and queue (:func:`restore_message`) and appended; entries
  beyond the wheel's window come back as ROLL entries and are parked again. Only after those
  appends return is the read cursor committed, so a crash repeats a delivery rather than losing
  it (at least once).
* Count (:mod:`~gannet.node.store.timers.pending`): per real-topic hash, the parked messages
  not delivered yet and the latest due time (:meth:`TimerService.pending_of`), rebuilt from the
  wheel when it is opened or truncated. An operator draining the group waits for them.

Rebuilding the figures (:meth:`TimerService._recount`) reads the timer-log units the wheel
still holds, 52 bytes each: a unit carries its real topic's hash and its slot time, and the
slot's end is when the wheel delivers it. The parked message itself is read only where the unit
cannot tell (``TimerService.recount_reads`` counts them):

* a ROLL unit, whose slot is where it rolls, not when it is due, when the unit does not record
  the message's ``TIMER_OUT_MS`` itself (:func:`~gannet.node.store.timers.codecs.roll_due_ms`:
  units written by RocketMQ or an older Gannet), or when it lies in the timer log's tail that
  recovery replayed past the last checkpoint (a crash may have torn that field). The count
  alone would not need the due time; ``last_due_ms`` must never be earlier than the truth;
* a unit with hash 0: a crash can tear a unit after its record size, zeroing the hash (see
  :mod:`~gannet.node.store.timers.codecs`), so the message's ``REAL_TOPIC`` names the key.

Every unit is counted under the key the fire path will later take it off with: the hash of
the message's ``REAL_TOPIC`` when the message is read, the unit's hash when it is not stored
any more. A topic sharing its hash with another reports both topics' messages (too many, never
too few; :mod:`~gannet.node.store.timers.pending` says why that is the chosen trade).

The rebuild runs while the store opens, not in the background: walking the units costs a few
µs each (a million parked messages: seconds, where reading every parked message took over a
minute; ``bench/timer_open.py``), and figures that are right from the first answer need no
"not counted yet" state that every reader (the operator's drain, the revive-queue shrink)
would have to wait out after each restart or leadership change.

Called by :class:`MessageStore` (route, load, start, stop, truncate, backlog).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from gannet.node.store import properties as props
from gannet.node.store import steady_clock
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import MessageIllegal, StoreError
from gannet.node.store.log.commitlog import AppendResult
from gannet.node.store.log.records import Message
from gannet.node.store.queues.consume_queue_store import ConsumeQueueStore
from gannet.node.store.timers.codecs import (
    MAGIC_ROLL,
    TimerEntry,
    TimerUnit,
    floor_to_precision,
    roll_due_ms,
    topic_hash,
)
from gannet.node.store.timers.pending import PendingTimers, TopicTimers
from gannet.node.store.timers.store import TimerStore

log = logging.getLogger(__name__)

TIMER_TOPIC = "rmq_sys_wheel_timer"
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_LONG_TEXT = re.compile(r"[+-]?[0-9]{1,19}")
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,10}")
TICK_MS = 100
ENQUEUE_BATCH_MAX = 1024
FIRE_BATCH_MAX = 1024
_TIMING_KEYS = frozenset(
    (props.DELAY_TIME_LEVEL, props.TIMER_DELAY_SEC, props.TIMER_DELAY_MS, props.TIMER_DELIVER_MS)
)
FLUSH_INTERVAL_MS = 1_000
DISPATCH_WAIT_S = 5.0
"""At most this long the timer thread waits for dispatch when too many delivered copies are
not dispatched yet (:data:`~gannet.node.store.timers.pending.DISPATCHING_MAX`)."""
DELAY_LEVELS_MS = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
    420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
]  # fmt: skip


# --------------------------------------------------------------------------------------------
# Routing (docs/formats/timers.md §4) and message transformation: pure.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimerRouting:
    """Where a delayed message goes: ``deliver_ms`` is the rounded fire time (TIMER_OUT_MS)."""

    deliver_ms: int
    requested_ms: int  # the delivery time asked for, before rounding


def round_deliver_ms(deliver_ms: int, precision_ms: int) -> int:
    """Round down to the precision; an exact multiple loses one more precision unit."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return floor_to_precision(deliver_ms, precision_ms)


def _parse_long(properties: Mapping[str, str], key: str) -> int:
    text = properties[key]
    value = int(text) if _LONG_TEXT.fullmatch(text) else None
    if value is None or not _LONG_MIN <= value <= _LONG_MAX:
        raise MessageIllegal(f"property {key}={text!r} is not a valid integer (Java long)")
    return value


def _requested_deliver_ms(properties: Mapping[str, str], now_ms: int) -> int | None:
    if props.TIMER_DELAY_SEC in properties:
        return now_ms + _parse_long(properties, props.TIMER_DELAY_SEC) * 1000
    if props.TIMER_DELAY_MS in properties:
        return now_ms + _parse_long(properties, props.TIMER_DELAY_MS)
    if props.TIMER_DELIVER_MS in properties:
        return _parse_long(properties, props.TIMER_DELIVER_MS)
    return None


def _has_delay_level(properties: Mapping[str, str]) -> bool:
    level = properties.get(props.DELAY_TIME_LEVEL)
    return level is not None and _INT_TEXT.fullmatch(level) is not None and int(level) > 0


def route_for_timer(
    properties: Mapping[str, str], now_ms: int, config: StoreConfig
) -> TimerRouting | None:
    """Decide whether a message goes to the timer (``docs/formats/timers.md`` §4,
    ``HookUtils.handleScheduleMessage``).

    Returns None when the message is stored directly: no timer property, ``TIMER_OUT_MS``
    already set (already routed), a legacy ``DELAY`` level set (:meth:`TimerService.route` turns
    a level into ``TIMER_DELIVER_MS`` before it calls this), or a delivery time that has come
    (``<= now``). Precedence ``TIMER_DELAY_SEC``, then ``TIMER_DELAY_MS``, then
    ``TIMER_DELIVER_MS``. Raises :class:`MessageIllegal` for an unparsable value or a delay
    beyond ``timer_max_delay_s``. The caller checks that the topic is not already
    :data:`TIMER_TOPIC`.
    """
    if props.TIMER_OUT_MS in properties or _has_delay_level(properties):
        return None
    requested = _requested_deliver_ms(properties, now_ms)
    if requested is None or requested <= now_ms:
        return None
    if requested - now_ms > config.timer_max_delay_s * 1000:
        raise MessageIllegal(
            f"delivery time {requested} is {requested - now_ms} ms away; the limit "
            f"(timerMaxDelaySec) is {config.timer_max_delay_s} s"
        )
    return TimerRouting(round_deliver_ms(requested, config.timer_precision_ms), requested)


def park_message(msg: Message, routing: TimerRouting) -> Message:
    """A copy moved to :data:`TIMER_TOPIC` queue 0 with TIMER_OUT_MS, REAL_TOPIC, REAL_QID."""
    parked = msg.copy()
    parked.properties[props.TIMER_OUT_MS] = str(routing.deliver_ms)
    parked.properties[props.REAL_TOPIC] = msg.topic
    parked.properties[props.REAL_QUEUE_ID] = str(msg.queue_id)
    parked.topic = TIMER_TOPIC
    parked.queue_id = 0
    return parked


def restore_message(msg: Message, enqueue_ms: int, dequeue_ms: int) -> Message:
    """A fired copy back in its real topic/queue (REAL_TOPIC/REAL_QID removed).

    TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS are added; TIMER_DELIVER_MS/TIMER_OUT_MS stay.
    """
    real_topic = msg.properties.get(props.REAL_TOPIC)
    real_qid = msg.properties.get(props.REAL_QUEUE_ID)
    if not real_topic:
        raise MessageIllegal(
            f"timer message at commit offset {msg.physical_offset} has no {props.REAL_TOPIC}"
        )
    if real_qid is None or _INT_TEXT.fullmatch(real_qid) is None:
        raise MessageIllegal(
            f"timer message at commit offset {msg.physical_offset} has {props.REAL_QUEUE_ID}="
            f"{real_qid!r}, not an integer"
        )
    restored = msg.copy()
    restored.topic = real_topic
    restored.queue_id = int(real_qid)
    del restored.properties[props.REAL_TOPIC]
    del restored.properties[props.REAL_QUEUE_ID]
    restored.properties[props.TIMER_ENQUEUE_MS] = str(enqueue_ms)
    restored.properties[props.TIMER_DEQUEUE_MS] = str(dequeue_ms)
    return restored


def roll_message(msg: Message) -> Message:
    """A rolled copy: stays in the timer topic, ``TIMER_ROLL_TIMES`` + 1."""
    rolled = msg.copy()
    text = msg.properties.get(props.TIMER_ROLL_TIMES, "0")
    times = int(text) if _INT_TEXT.fullmatch(text) else 0
    rolled.properties[props.TIMER_ROLL_TIMES] = str(times + 1)
    return rolled


# --------------------------------------------------------------------------------------------
# The service: enqueue parked messages, fire due ones.
# --------------------------------------------------------------------------------------------


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

    def dispatched_to(self) -> int:
        """The commit-log offset dispatch has reached (consume queues written below it)."""
        ...

    def wait_dispatched(self, offset: int, timeout_s: float = 5.0) -> bool: ...


class TimerService:
    def __init__(self, store: TimerHost) -> None:
        self.store = store
        self.timer_store: TimerStore | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired_total = 0
        self._fired_end = 0  # commit-log end of the last re-put
        self.enqueued_total = 0
        self.pending = PendingTimers()
        self.recount_reads = 0  # parked messages the last rebuild of the figures had to read
        self._work = threading.Lock()  # one enqueue/fire pass at a time (timer thread, admin)

    # --- lifecycle ---
    def load(self, commit_log_end: int) -> None:
        self.timer_store = TimerStore.open(self.store.config, commit_log_max_offset=commit_log_end)
        self._recount(self.timer_store)

    @property
    def running(self) -> bool:
        """True while the timer thread runs (on a Raft group: this member leads)."""
        return self._thread is not None

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
        if msg.topic == TIMER_TOPIC or _TIMING_KEYS.isdisjoint(msg.properties):
            return msg  # the common case: no property that asks for a delay
        level = msg.properties.get(props.DELAY_TIME_LEVEL)
        if level is not None and level.isdigit() and int(level) > 0:
            index = min(int(level), len(DELAY_LEVELS_MS)) - 1
            msg.properties[props.TIMER_DELIVER_MS] = str(now_ms + DELAY_LEVELS_MS[index])
            del msg.properties[props.DELAY_TIME_LEVEL]
        routing = route_for_timer(msg.properties, now_ms, self.store.config)
        if routing is None:
            return msg
        return park_message(msg, routing)

    # --- the thread ---
    def _run(self) -> None:
        last_flush = time.monotonic()
        while not self._stop.wait(TICK_MS / 1000):
            try:
                self.tick(steady_clock.now_ms())
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
        with self._work:
            return self._tick(now_ms)

    def _tick(self, now_ms: int) -> int:
        ts = self.timer_store
        if ts is None:
            return 0
        self._enqueue_new(ts)
        fired = 0
        while True:
            entries = ts.due_entries(now_ms, FIRE_BATCH_MAX)
            if not entries:
                read_ms = ts.read_time_ms  # empty slots stepped over: handled as well
                if read_ms is not None:
                    ts.commit_read(read_ms)
                break
            try:
                fired += self._fire(entries, now_ms)
            except BaseException:
                ts.rewind()  # not delivered: due again at the next tick
                raise
            read_ms = ts.read_time_ms
            if read_ms is not None:
                ts.commit_read(read_ms)
            if len(entries) < FIRE_BATCH_MAX:
                break
        return fired

    def _enqueue_new(self, ts: TimerStore) -> None:
        cq = self.store.queues.get(TIMER_TOPIC, 0)
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

    def _enqueue_one(self, ts: TimerStore, commit_offset: int, msg: Message) -> None:
        out = msg.properties.get(props.TIMER_OUT_MS, "")
        if not out.lstrip("-").isdigit():
            log.warning("timer message at %d has no TIMER_OUT_MS; dropped", commit_offset)
            return
        thash = topic_hash(msg.properties.get(props.REAL_TOPIC))
        if ts.enqueue(commit_offset, msg.store_size, int(out), msg.store_timestamp_ms, thash):
            self.enqueued_total += 1
            self.pending.added(thash, self._due_ms(int(out)), commit_offset)

    def _due_ms(self, timer_out_ms: int) -> int:
        """When the wheel delivers a message of this TIMER_OUT_MS (its slot's end)."""
        precision = self.store.config.timer_precision_ms
        return floor_to_precision(timer_out_ms, precision) + precision

    def _fire(self, entries: list[TimerEntry], now_ms: int) -> int:
        out: list[Message] = []
        keys: list[int] = []  # the real-topic hash of each message of ``out``
        for entry in entries:
            if entry.deleted:
                continue
            msg = self.store.read_message(entry.commit_offset)
            if msg is None:
                log.warning("timer entry at %d: message no longer stored", entry.commit_offset)
                self.pending.dropped(entry.topic_hash)
                continue
            keys.append(topic_hash(msg.properties.get(props.REAL_TOPIC)))
            if entry.rolled:
                out.append(roll_message(msg))
            else:
                out.append(restore_message(msg, entry.enqueue_ms, now_ms))
        for start in range(0, len(out), 64):
            batch = out[start : start + 64]
            results = self.store.put_messages(batch)
            self._fired_end = max(self._fired_end, results[-1].end_offset)
            dispatched = self.store.dispatched_to()
            for msg, key, result in zip(batch, keys[start:], results, strict=False):
                if msg.topic == TIMER_TOPIC:
                    self.pending.rolled(key, result.wrote_offset)
                else:
                    self.pending.delivered(key, result.end_offset, dispatched)
            if self.pending.dispatching_full:  # a bound: let dispatch catch up first
                self.store.wait_dispatched(results[-1].end_offset, DISPATCH_WAIT_S)
        self.fired_total += len(out)
        return len(out)

    def delivered_until(self, now_ms: int) -> bool:
        """True when every parked message due by ``now_ms`` has been re-put and is readable:
        the wheel holds the timer topic to its dispatched end, its read cursor has passed
        ``now_ms``, and dispatch has passed the last re-put. Pop's revive relies on it: an ACK
        still parked must not let its checkpoint be revived. A wheel not read since the store
        opened (a Raft member that has not led yet, a new leader before its first tick) is
        not: the previous leader's parked records may be due in it."""
        through = self.delivered_through_ms()
        return through is not None and through >= now_ms

    def delivered_through_ms(self) -> int | None:
        """The last time by which every parked message due has been re-put and is readable
        (:meth:`delivered_until` for any ``now_ms`` up to it); None when that is not known:
        parked records not yet in the wheel, a wheel not read since the store opened, or
        dispatch behind the last re-put. Revive uses it rather than ``now``: the wheel is read
        once per tick, so between ticks its cursor may lag ``now`` by a slot, and a revive pass
        that asked only "delivered until now?" could keep landing in that lag."""
        ts = self.timer_store
        if ts is None:
            return 2**63 - 1
        # Read first: the timer thread sets ``_fired_end`` before it commits the read time,
        # so every re-put of a slot before this time is covered by the check below. The read
        # cursor would not do: ``due_entries`` moves it past the slots it returns before
        # their re-put (on a Raft group a proposal and its commit) has returned (seed 1002).
        through = ts.handled_through_ms()
        cq = self.store.queues.get(TIMER_TOPIC, 0)
        parked_end = cq.max_offset_in_queue() if cq is not None else 0
        if ts.timer_queue_offset < parked_end or self.store.dispatched_to() < self._fired_end:
            return None
        return through

    # --- figures ---
    def pending_of(self, topic: str) -> TopicTimers:
        """The delayed messages of ``topic`` not delivered yet. While the timer thread runs,
        parked messages already dispatched are taken into the wheel first, so the figure
        holds every delayed message dispatch has reached."""
        if self.running:
            with self._work:
                if self.timer_store is not None:
                    self._enqueue_new(self.timer_store)
        return self.pending.of(topic, self.store.dispatched_to())

    def _recount(self, ts: TimerStore) -> None:
        """Rebuild the figures from the units the wheel holds (module docstring)."""
        self.recount_reads = 0
        self.pending.rebuilt(self._recounted(ts))

    def _recounted(self, ts: TimerStore) -> Iterator[tuple[int, int]]:
        """(key, due ms) of every unit the wheel holds, streamed (millions: no list)."""
        precision = self.store.config.timer_precision_ms
        torn = ts.replayed_tail
        for pos, fields in ts.pending_unit_fields():
            _, magic, enqueue_ms, delay_ms, _, _, thash, _ = fields
            if thash != 0 and not magic & MAGIC_ROLL:  # the common case, kept cheap
                yield thash, enqueue_ms + delay_ms + precision  # its slot's end
                continue
            unit = TimerUnit(*fields)
            out = roll_due_ms(unit) if pos not in torn else None
            if thash != 0 and out is not None:
                yield thash, max(unit.fire_ms + precision, self._due_ms(out))
            else:
                self.recount_reads += 1
                yield self._recount_from_message(unit)

    def _recount_from_message(self, unit: TimerUnit) -> tuple[int, int]:
        """(key, due ms) of a unit that cannot tell them itself, from its parked message."""
        slot_end_ms = unit.fire_ms + self.store.config.timer_precision_ms
        msg = self.store.read_message(unit.commit_offset)
        if msg is None:
            return unit.topic_hash, slot_end_ms  # the fire path drops it under this key
        key = topic_hash(msg.properties.get(props.REAL_TOPIC))
        out = msg.properties.get(props.TIMER_OUT_MS, "")
        if unit.magic & MAGIC_ROLL and out.lstrip("-").isdigit():
            return key, max(slot_end_ms, self._due_ms(int(out)))
        return key, slot_end_ms

    # --- maintenance ---
    def truncate(self, commit_offset: int) -> None:
        ts = self.timer_store
        if ts is None:
            return
        ts.truncate(commit_offset)
        cq = self.store.queues.get(TIMER_TOPIC, 0)
        top = cq.max_offset_in_queue() if cq is not None else 0
        if ts.timer_queue_offset > top:
            ts.set_timer_queue_offset(top)
        self._recount(ts)

    def backlog(self) -> int:
        return self.timer_store.backlog_count() if self.timer_store is not None else 0
