"""The metrics of one broker: a private registry and everything registered on it.

Families (all prefixed ``gannet_``; bounded labels only):

* ``gannet_messages_in_total{topic}``, ``gannet_bytes_in_total{topic}`` — messages and body
  bytes appended by SendMessage. At most ``topics_max`` topic values (1000 by default); later
  topics are counted under ``topic="_other"`` so a topic storm cannot grow the series set.
* ``gannet_messages_out_total{topic, group}``, ``gannet_bytes_out_total{topic, group}`` —
  messages and body bytes handed to consumers (ReceiveMessage, PullMessage). At most
  ``pairs_max`` (topic, group) pairs (1000); later pairs count under ``topic="_other",
  group="_other"``.
* ``gannet_message_size_bytes`` — body size histogram (no topic label: 12 series, not 12 per
  topic).
* ``gannet_consumer_*`` — lag, ready, in flight, retries, DLQ per (topic, group):
  :mod:`consumer_collecting`; ``gannet_pop_*`` — buffer merge and revive queues:
  :mod:`pop_collecting`; ``gannet_raft_*`` — :mod:`raft_collecting` (once :meth:`watch_raft`
  is called by the replication layer).
* ``gannet_rpc_duration_seconds{rpc, code}``, ``gannet_grpc_inflight_requests`` —
  :mod:`instrumenting`.
* ``gannet_store_*`` gauges and ``gannet_cleanup_*_total`` counters — :mod:`store_collecting`.
* ``gannet_broker_info{broker_name, cluster, version}`` and ``gannet_broker_ready`` (1 while
  ``/readyz`` answers 200).
* every sample served over HTTP also carries ``broker="<broker name>"`` (the broker group),
  added once at exposition by :mod:`labelling` (:attr:`BrokerMetrics.exposition`).
* ``process_*`` — prometheus_client's process collector (CPU seconds, resident memory, open
  file descriptors, start time).

The hot paths are :meth:`BrokerMetrics.on_sent` and :meth:`BrokerMetrics.on_received`: one
dict lookup for the tally, then plain additions (and a bisect per sent message;
:mod:`tallies`: no locks, the event-loop thread is the only writer; about 1 µs per message
against 6 µs with prometheus_client's own counters).
``_created`` series are switched off process-wide (they double the series count and no
dashboard uses them).

Created by :class:`gannet.node.broker.serving.Broker`, which hands :meth:`on_sent` and
:meth:`on_received` to the messaging servicer and serves :attr:`exposition` over HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import prometheus_client
from prometheus_client import CollectorRegistry, Info
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from gannet.node.metrics import (
    consumer_collecting,
    instrumenting,
    labelling,
    pop_collecting,
    raft_collecting,
    store_collecting,
    tallies,
    tier_collecting,
)
from gannet.node.pop.service import PopBroker
from gannet.node.protocol.versions import gannet_version
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

TOPICS_MAX = 1000
PAIRS_MAX = 1000
OTHER_TOPIC = "_other"
MESSAGE_SIZE_BUCKETS_BYTES = (
    128.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262144.0,
    1048576.0,
    2097152.0,
    4194304.0,
    16777216.0,
)

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


class HasBody(Protocol):
    """A stored message or a v2 protobuf message: all the receive tally reads."""

    @property
    def body(self) -> bytes: ...


class _TopicTally:
    """Messages and body bytes appended to one topic (event-loop thread writes)."""

    __slots__ = ("bytes", "messages")

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0


class _ReadyCollector:
    """``gannet_broker_ready`` computed at scrape time from the broker's own answer."""

    def __init__(self, not_ready_reason: Callable[[], str | None]) -> None:
        self._not_ready_reason = not_ready_reason

    def collect(self) -> list[Metric]:
        ready = self._not_ready_reason() is None
        doc = "1 while the broker is ready (store recovered, gRPC serving)."
        return [GaugeMetricFamily("gannet_broker_ready", doc, value=int(ready))]


class BrokerMetrics:
    """One broker's registry and its send tallies (a collector on that registry).

    Invariant: at most ``topics_max`` + 1 topic label values.
    """

    def __init__(self, *, topics_max: int = TOPICS_MAX, pairs_max: int = PAIRS_MAX) -> None:
        self.registry = CollectorRegistry()
        self.exposition: CollectorRegistry = self.registry
        """What ``/metrics`` serves: :attr:`registry`, with ``broker`` once it is described."""
        self.topics_max = topics_max
        self.pairs_max = pairs_max
        self._out: dict[tuple[str, str], _TopicTally] = {}
        self.rpc = instrumenting.RpcMeter()
        self.registry.register(self.rpc)
        self.cleanup = store_collecting.CleanupTally(self.registry)
        self._topics: dict[str, _TopicTally] = {}
        self._sizes = tallies.HistogramTally(MESSAGE_SIZE_BUCKETS_BYTES)
        self.registry.register(self)
        prometheus_client.ProcessCollector(registry=self.registry)

    def describe_broker(self, *, broker_name: str, cluster: str) -> None:
        info = Info("gannet_broker", "This broker's name and version.", registry=self.registry)
        info.info({"broker_name": broker_name, "cluster": cluster, "version": gannet_version()})
        labels = {labelling.BROKER_LABEL: broker_name}
        self.exposition = labelling.LabelledRegistry(self.registry, labels)

    def watch_store(self, store: MessageStore, is_open: Callable[[], bool]) -> None:
        """Export ``store``'s gauges at scrape time and count its cleanup runs."""
        self.registry.register(store_collecting.StoreCollector(store, is_open))
        self.registry.register(tier_collecting.TierCollector(lambda: store.reads.tier))
        self.cleanup.attach(store.cleaner)

    def watch_readiness(self, not_ready_reason: Callable[[], str | None]) -> None:
        self.registry.register(_ReadyCollector(not_ready_reason))

    def watch_consumers(
        self, store: MessageStore, pop: Callable[[], PopBroker | None], is_open: Callable[[], bool]
    ) -> None:
        """Export consumer lag/ready/in-flight/retries/DLQ and Pop's figures at scrape time."""
        self.registry.register(
            consumer_collecting.ConsumerCollector(store, pop, is_open, pairs_max=self.pairs_max)
        )
        self.registry.register(pop_collecting.PopCollector(pop, is_open))

    def watch_raft(self, raft_status: raft_collecting.RaftStatusSource) -> None:
        """Export ``gannet_raft_*`` from ``raft_status()`` (None: not replicating)."""
        self.registry.register(raft_collecting.RaftCollector(raft_status))

    def _new_topic(self, topic: str) -> _TopicTally:
        if len(self._topics) >= self.topics_max:
            topic = OTHER_TOPIC
            tally = self._topics.get(topic)
            if tally is not None:
                return tally
        tally = self._topics[topic] = _TopicTally()
        return tally

    def on_sent(self, topic: str, messages: Sequence[Message]) -> None:
        """Count messages just appended to ``topic`` (event-loop thread only; keep it cheap)."""
        tally = self._topics.get(topic) or self._new_topic(topic)
        total_bytes = 0
        for message in messages:
            size = len(message.body)
            total_bytes += size
            self._sizes.observe(size)
        tally.messages += len(messages)
        tally.bytes += total_bytes

    def _new_pair(self, key: tuple[str, str]) -> _TopicTally:
        if len(self._out) >= self.pairs_max:
            key = (OTHER_TOPIC, OTHER_TOPIC)
            tally = self._out.get(key)
            if tally is not None:
                return tally
        tally = self._out[key] = _TopicTally()
        return tally

    def on_received(self, topic: str, group: str, messages: Sequence[HasBody]) -> None:
        """Count messages handed to ``group`` by ReceiveMessage or PullMessage (event-loop
        thread only; keep it cheap)."""
        key = (topic, group)
        tally = self._out.get(key) or self._new_pair(key)
        tally.messages += len(messages)
        tally.bytes += sum(len(message.body) for message in messages)

    def collect(self) -> list[Metric]:
        """The send and receive families, built from the tallies at scrape time (HTTP
        thread)."""
        messages = CounterMetricFamily(
            "gannet_messages_in", "Messages appended by SendMessage, by topic.", labels=["topic"]
        )
        body_bytes = CounterMetricFamily(
            "gannet_bytes_in",
            "Message body bytes appended by SendMessage, by topic.",
            labels=["topic"],
        )
        for topic, tally in list(self._topics.items()):
            messages.add_metric([topic], tally.messages)
            body_bytes.add_metric([topic], tally.bytes)
        sizes = HistogramMetricFamily(
            "gannet_message_size_bytes", "Body size of the messages appended by SendMessage."
        )
        self._sizes.add_to(sizes, [])
        out_messages = CounterMetricFamily(
            "gannet_messages_out",
            "Messages handed to consumers (ReceiveMessage, PullMessage), by topic and group.",
            labels=["topic", "group"],
        )
        out_bytes = CounterMetricFamily(
            "gannet_bytes_out",
            "Message body bytes handed to consumers (Receive/PullMessage), by topic and group.",
            labels=["topic", "group"],
        )
        for (topic, group), tally in list(self._out.items()):
            out_messages.add_metric([topic, group], tally.messages)
            out_bytes.add_metric([topic, group], tally.bytes)
        return [messages, body_bytes, sizes, out_messages, out_bytes]
