"""Consumer-group figures per (topic, group), computed at scrape time from the store's consumer
offsets and consume queues and from Pop's in-flight checkpoints.

Definitions (per consume queue ``q`` of a topic, summed over the queues; the group's Pop retry
topics ``%RETRY%<group>_<topic>`` / ``+<topic>`` are folded into ``<topic>``):

* **ready** — stored messages the group has not been handed yet:
  ``max_offset(q) − max(committed(q), min_offset(q), popped_to(q))``, at least 0, where
  ``popped_to`` is the next offset of the latest pop still buffered in memory (its consumer
  offset is committed only once its checkpoint is stored or acked).
* **in flight** — popped and not yet acked: the un-acked bits of every checkpoint Pop still
  tracks (until its revive time; then revive moves the message to the retry topic, where it is
  ready again).
* **lag (messages)** — ready + in flight (RocketMQ's ``consumer_lag_messages``).
* **lag (seconds)** — age of the oldest ready message: now − its store time; 0 when none is
  ready. One commit-log read per queue that has ready messages.
* **retries** / **DLQ** — messages written to the group's retry topics and to ``%DLQ%<group>``:
  the sum of those topics' max queue offsets (queue offsets never go back, so they are
  counters; after a restart they continue from the stored value). Every group the broker
  knows (its subscription group config, created by ``group create``, the operator or a
  client's first heartbeat) or that has a pair exports its DLQ count, 0 before its DLQ topic
  exists: the 0 sample is there from the moment the group exists, so ``increase()`` sees the
  group's first dead letter even when it comes within one scrape interval of the group's first
  receive.

Groups appear once they have a committed offset or a tracked checkpoint; system groups
(``CID_RMQ_SYS_*``) and topics (``rmq_sys_*``) are left out. Bounded: the first
``pairs_max`` (topic, group) pairs by name keep their labels, the rest are summed under
``topic="_other", group="_other"`` (its lag seconds is the maximum). A scrape costs one offset
lookup per queue and pair plus one message read per queue with a backlog.

:func:`figures_of` is pure over a :class:`ConsumerView` (the IO edge is :class:`StoreView`);
:class:`ConsumerCollector` registers on a :class:`~broker_metrics.BrokerMetrics` registry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gannet.node.pop import locks
from gannet.node.pop.service import PopBroker
from gannet.node.store import querying, validation
from gannet.node.store.message_store import MessageStore

log = logging.getLogger(__name__)

PAIRS_MAX = 1000
OTHER = "_other"


@dataclass(slots=True)
class ConsumerFigures:
    """One (topic, group) pair's figures."""

    ready_messages: int = 0
    inflight_messages: int = 0
    lag_seconds: float = 0.0
    retry_messages: int = 0

    @property
    def lag_messages(self) -> int:
        return self.ready_messages + self.inflight_messages

    def absorb(self, other: ConsumerFigures) -> None:
        self.ready_messages += other.ready_messages
        self.inflight_messages += other.inflight_messages
        self.retry_messages += other.retry_messages
        self.lag_seconds = max(self.lag_seconds, other.lag_seconds)


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    """What the store knows about one consume queue for one group."""

    min_offset: int
    max_offset: int
    committed: int
    popped_to: int | None = None

    @property
    def ready_from(self) -> int:
        """The first offset not yet handed to the group."""
        start = max(self.committed, self.min_offset)
        return start if self.popped_to is None else max(start, self.popped_to)

    @property
    def ready(self) -> int:
        return max(0, self.max_offset - self.ready_from)


class ConsumerView(Protocol):
    """The read-only questions :func:`figures_of` asks (the store and Pop answer them)."""

    def pairs(self) -> list[tuple[str, str]]:
        """(consumed topic, group) pairs with committed offsets, system ones excluded."""
        ...

    def queues(self, topic: str, group: str) -> list[tuple[int, QueueOffsets]]: ...

    def store_time_ms(self, topic: str, queue_id: int, offset: int) -> int | None: ...

    def inflight(self) -> dict[tuple[str, str], int]: ...

    def dead_lettered(self) -> dict[str, int]:
        """Messages in ``%DLQ%<group>`` by group."""
        ...

    def groups(self) -> list[str]:
        """Every consumer group with a subscription group config (system groups included;
        :func:`figures_of` leaves them out)."""
        ...


@dataclass(slots=True)
class Snapshot:
    """All figures of one scrape."""

    pairs: dict[tuple[str, str], ConsumerFigures] = field(default_factory=dict)
    dead_lettered: dict[str, int] = field(default_factory=dict)


def original_topic(topic: str, group: str) -> tuple[str, bool]:
    """``(topic the group consumes, is a retry topic)`` of a topic the group has offsets on."""
    original = validation.original_topic(topic, group)
    if original is not None:
        return original, True
    if topic == validation.group_retry_topic(group):
        return topic, True
    return topic, False


def _queue_figures(
    view: ConsumerView, topic: str, group: str, now_ms: int, figures: ConsumerFigures
) -> None:
    retry = original_topic(topic, group)[1]
    for queue_id, offsets in view.queues(topic, group):
        if retry:
            figures.retry_messages += offsets.max_offset
        ready = offsets.ready
        if ready <= 0:
            continue
        figures.ready_messages += ready
        stored_ms = view.store_time_ms(topic, queue_id, offsets.ready_from)
        if stored_ms is not None:
            figures.lag_seconds = max(figures.lag_seconds, max(0, now_ms - stored_ms) / 1000)


def figures_of(view: ConsumerView, now_ms: int, *, pairs_max: int = PAIRS_MAX) -> Snapshot:
    """Every pair's figures, bounded to ``pairs_max`` labelled pairs plus ``_other``."""
    by_pair: dict[tuple[str, str], ConsumerFigures] = {}
    for topic, group in view.pairs():
        key = (original_topic(topic, group)[0], group)
        _queue_figures(view, topic, group, now_ms, by_pair.setdefault(key, ConsumerFigures()))
    for (topic, group), count in view.inflight().items():
        if validation.is_system_group(group):
            continue
        key = (original_topic(topic, group)[0], group)
        by_pair.setdefault(key, ConsumerFigures()).inflight_messages += count
    snapshot = Snapshot()
    for index, key in enumerate(sorted(by_pair)):
        if index < pairs_max:
            snapshot.pairs[key] = by_pair[key]
        else:
            snapshot.pairs.setdefault((OTHER, OTHER), ConsumerFigures()).absorb(by_pair[key])
    # A series from the moment the group exists, so increase() sees its first dead letter.
    dead = {group: 0 for group in view.groups() if not validation.is_system_group(group)}
    dead.update({group: 0 for _, group in by_pair})
    dead.update(view.dead_lettered())
    groups = sorted(dead.items())
    for index, (group, count) in enumerate(groups):
        label = group if index < pairs_max else OTHER
        snapshot.dead_lettered[label] = snapshot.dead_lettered.get(label, 0) + count
    return snapshot


class StoreView:
    """:class:`ConsumerView` over a live store and its Pop broker (any thread)."""

    def __init__(self, store: MessageStore, pop: PopBroker | None) -> None:
        self.store = store
        self.pop = pop

    def pairs(self) -> list[tuple[str, str]]:
        offsets = self.store.consumer_offsets
        return [
            (topic, group)
            for group in offsets.groups()
            if not validation.is_system_group(group)
            for topic in offsets.topics_of(group)
            if not validation.is_system_topic(topic)
        ]

    def queues(self, topic: str, group: str) -> list[tuple[int, QueueOffsets]]:
        store = self.store
        committed = store.consumer_offsets.query_all(group, topic)
        config = store.topic_configs.get(topic)
        queue_ids = set(committed)
        if config is not None:
            queue_ids.update(range(config.read_queue_nums))
        buffer = self.pop.ctx.buffer if self.pop is not None else None
        out = []
        for queue_id in sorted(queue_ids):
            popped_to = None
            if buffer is not None:
                popped_to = buffer.latest_next_begin(locks.lock_key(topic, group, queue_id))
            offsets = QueueOffsets(
                min_offset=store.min_offset_in_queue(topic, queue_id),
                max_offset=store.max_offset_in_queue(topic, queue_id),
                committed=committed.get(queue_id, -1),
                popped_to=popped_to,
            )
            out.append((queue_id, offsets))
        return out

    def store_time_ms(self, topic: str, queue_id: int, offset: int) -> int | None:
        message = querying.by_queue_offset(self.store, topic, queue_id, offset)
        return message.store_timestamp_ms if message is not None else None

    def inflight(self) -> dict[tuple[str, str], int]:
        if self.pop is None:
            return {}
        return self.pop.ctx.buffer.inflight_messages()

    def dead_lettered(self) -> dict[str, int]:
        out: dict[str, int] = {}
        prefix = validation.DLQ_TOPIC_PREFIX
        for config in self.store.topic_configs.list():
            name = config.topic_name
            if name.startswith(prefix) and len(name) > len(prefix):
                total = sum(
                    self.store.max_offset_in_queue(name, q) for q in range(config.read_queue_nums)
                )
                out[name[len(prefix) :]] = total
        return out

    def groups(self) -> list[str]:
        return [config.group_name for config in self.store.group_configs.list()]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ConsumerCollector:
    """Exports a :class:`Snapshot` per scrape while ``is_open()``; ``pop()`` may be None."""

    def __init__(
        self,
        store: MessageStore,
        pop: Callable[[], PopBroker | None],
        is_open: Callable[[], bool],
        *,
        pairs_max: int = PAIRS_MAX,
    ) -> None:
        self._store = store
        self._pop = pop
        self._is_open = is_open
        self._pairs_max = pairs_max

    def collect(self) -> Iterator[Metric]:
        if not self._is_open():
            return
        try:
            snapshot = figures_of(
                StoreView(self._store, self._pop()), _now_ms(), pairs_max=self._pairs_max
            )
        except Exception:  # the store closed under the scrape
            log.debug("consumer figures unavailable", exc_info=True)
            return
        yield from families(snapshot)


def families(snapshot: Snapshot) -> list[Metric]:
    """The metric families of one snapshot."""
    labels = ["topic", "group"]
    ready = GaugeMetricFamily(
        "gannet_consumer_ready_messages",
        "Stored messages not yet handed to the group, by topic and group.",
        labels=labels,
    )
    inflight = GaugeMetricFamily(
        "gannet_consumer_inflight_messages",
        "Messages popped by the group and not yet acked (invisible), by topic and group.",
        labels=labels,
    )
    lag = GaugeMetricFamily(
        "gannet_consumer_lag_messages",
        "Messages not yet consumed (ready + in flight), by topic and group.",
        labels=labels,
    )
    lag_s = GaugeMetricFamily(
        "gannet_consumer_lag_seconds",
        "Age of the oldest ready message (now - its store time; 0 when none), by topic and group.",
        labels=labels,
    )
    retries = CounterMetricFamily(
        "gannet_consumer_retry_messages",
        "Messages written to the group's retry topics for a topic (redeliveries).",
        labels=labels,
    )
    dlq = CounterMetricFamily(
        "gannet_consumer_dlq_messages",
        "Messages written to the group's dead-letter topic %DLQ%<group>.",
        labels=["group"],
    )
    for (topic, group), f in snapshot.pairs.items():
        values = [topic, group]
        ready.add_metric(values, f.ready_messages)
        inflight.add_metric(values, f.inflight_messages)
        lag.add_metric(values, f.lag_messages)
        lag_s.add_metric(values, f.lag_seconds)
        retries.add_metric(values, f.retry_messages)
    for group, count in snapshot.dead_lettered.items():
        dlq.add_metric([group], count)
    return [ready, inflight, lag, lag_s, retries, dlq]
