"""Pop housekeeping figures at scrape time: the in-flight buffer (buffer merge), long-polling
waiters and every revive queue.

Per revive queue ``queue`` (ids 0 … read count − 1 of ``rmq_sys_REVIVE_LOG_<cluster>``):

* ``gannet_pop_revive_in_messages_total`` — CK and ACK messages delivered into the queue (its
  max queue offset: queue offsets never go back, so this is a counter that survives restarts);
* ``gannet_pop_revive_out_messages_total{result}`` — messages the revive passes of this process
  wrote back: ``retry`` (to the retry topic), ``dlq`` (past the group's max retries) and
  ``re_put`` (a failed write parked again as a new checkpoint);
* ``gannet_pop_revive_lag_messages`` — messages after the revive progress (max offset − progress
  − 1), and ``gannet_pop_revive_lag_seconds`` — age of the first of them (now − its store
  time; a checkpoint reaches the queue at its revive time, so this is how late revive runs).

Buffer merge (``merging.InflightBuffer``): ``gannet_pop_checkpoints_tracked`` (every checkpoint
until its revive time), ``gannet_pop_checkpoints_buffered`` (only in memory, not yet written),
``gannet_pop_offset_queues`` and ``gannet_pop_checkpoints_dropped_without_write_total`` (fully
acked before they had to be written: the saving of buffer merge). ``gannet_pop_poll_waiters``
counts ReceiveMessage long polls waiting for a message (the Pop request queue).

Bounded: one series per revive queue (a handful) and three result values. Reads
``PopBroker.statistics()``, ``PopBroker.revivers()`` and the store; registered by
:class:`~gannet.node.metrics.broker_metrics.BrokerMetrics`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gannet.node.pop import revive_log
from gannet.node.pop.service import PopBroker
from gannet.node.store import querying, validation

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReviveQueueFigures:
    queue_id: int
    in_messages: int
    progress: int
    revived: int
    dead_lettered: int
    re_put: int
    lag_seconds: float

    @property
    def lag_messages(self) -> int:
        return max(0, self.in_messages - self.progress - 1)


def revive_figures(pop: PopBroker, now_ms: int) -> list[ReviveQueueFigures]:
    store = pop.store
    topic = revive_log.revive_topic(store)
    config = store.topic_configs.get(topic)
    count = config.read_queue_nums if config is not None else 0
    services = pop.revivers()
    out = []
    for queue_id in range(count):
        service = services.get(queue_id)
        top = store.max_offset_in_queue(topic, queue_id)
        progress = store.consumer_offsets.query(validation.REVIVE_GROUP, topic, queue_id)
        first = max(progress + 1, store.min_offset_in_queue(topic, queue_id))
        lag_s = 0.0
        if first < top:
            message = querying.by_queue_offset(store, topic, queue_id, first)
            if message is not None:
                lag_s = max(0, now_ms - message.store_timestamp_ms) / 1000
        out.append(
            ReviveQueueFigures(
                queue_id=queue_id,
                in_messages=top,
                progress=first - 1,
                revived=service.revived_total if service else 0,
                dead_lettered=service.dead_lettered_total if service else 0,
                re_put=service.re_put_total if service else 0,
                lag_seconds=lag_s,
            )
        )
    return out


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def families(pop: PopBroker, now_ms: int) -> list[Metric]:
    s = pop.statistics()
    out: list[Metric] = [
        _gauge(
            "gannet_pop_checkpoints_tracked",
            "Pop checkpoints tracked in memory until their revive time (buffer merge).",
            s.tracked_checkpoints,
        ),
        _gauge(
            "gannet_pop_checkpoints_buffered",
            "Pop checkpoints held only in memory, not yet written to the revive queue.",
            s.buffered_checkpoints,
        ),
        _gauge(
            "gannet_pop_offset_queues",
            "Queues (topic, group, queue id) with pops waiting to commit their offset.",
            s.offset_queues,
        ),
        CounterMetricFamily(
            "gannet_pop_checkpoints_dropped_without_write",
            "Pop checkpoints fully acked in memory and never written (buffer merge savings).",
            value=s.checkpoints_dropped_without_write_total,
        ),
        _gauge(
            "gannet_pop_poll_waiters",
            "ReceiveMessage long polls waiting for a message.",
            s.poll_waiters,
        ),
        _gauge(
            "gannet_pop_revive_queues",
            "Revive queues written to (the configured revive-queue count).",
            s.revive_write_queues,
        ),
    ]
    revive_in = CounterMetricFamily(
        "gannet_pop_revive_in_messages",
        "Checkpoint and ack messages delivered into a revive queue.",
        labels=["queue"],
    )
    revive_out = CounterMetricFamily(
        "gannet_pop_revive_out_messages",
        "Messages written back by revive (retry topic, DLQ, or re-put), by revive queue.",
        labels=["queue", "result"],
    )
    lag = GaugeMetricFamily(
        "gannet_pop_revive_lag_messages",
        "Revive-queue messages after the revive progress.",
        labels=["queue"],
    )
    lag_s = GaugeMetricFamily(
        "gannet_pop_revive_lag_seconds",
        "Age of the first revive-queue message not yet handled (0 when none).",
        labels=["queue"],
    )
    for f in revive_figures(pop, now_ms):
        queue = str(f.queue_id)
        revive_in.add_metric([queue], f.in_messages)
        revive_out.add_metric([queue, "retry"], f.revived)
        revive_out.add_metric([queue, "dlq"], f.dead_lettered)
        revive_out.add_metric([queue, "re_put"], f.re_put)
        lag.add_metric([queue], f.lag_messages)
        lag_s.add_metric([queue], f.lag_seconds)
    return [*out, revive_in, revive_out, lag, lag_s]


class PopCollector:
    """Exports :func:`families` per scrape while ``pop()`` returns a broker."""

    def __init__(self, pop: Callable[[], PopBroker | None], is_open: Callable[[], bool]) -> None:
        self._pop = pop
        self._is_open = is_open

    def collect(self) -> Iterator[Metric]:
        pop = self._pop()
        if pop is None or not self._is_open():
            return
        try:
            found = families(pop, time.time_ns() // 1_000_000)
        except Exception:  # the store closed under the scrape
            log.debug("pop figures unavailable", exc_info=True)
            return
        yield from found
