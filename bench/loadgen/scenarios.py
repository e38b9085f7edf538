"""The benchmark scenarios S1–S9 of ``docs/benchmarks.md`` §2 as data: message size,
topics × queues, producers / consumers, send mode, rate, durability and the bounds (message
count, duration, warm-up, repetitions) of each run. Pure; :mod:`bench.loadgen.run` picks
scenarios from here and the report prints their settings.

Two send modes per system:
- ``stock``: one message per request, as users' clients do (official RocketMQ client
  ``Producer.send_async``; nats-py ``js.publish``; redis-py ``XADD``; confluent-kafka
  ``produce()`` with ``linger.ms=0``), a bounded number in flight.
- ``batched``: ``batch`` messages per request (raw ``SendMessage`` with ``batch`` entries for
  RocketMQ and Gannet; a redis pipeline of ``batch`` XADDs; for NATS, which has no batch publish,
  ``batch`` × in-flight async publishes; for Kafka, librdkafka batches of up to ``batch``
  messages per partition, ``linger.ms=5``).

Open-loop scenarios (``open_loop=True``, ids ``L1K`` and ``L5K``) measure latency at a fixed
rate instead of throughput: producers and consumers run together, each producer sends on a
schedule, and every message's send→ack and send→receive latency runs from its scheduled time
(:mod:`bench.loadgen.fixed_rate`, :mod:`bench.loadgen.open_loop`). Their warm-up messages are
sent on the same schedule just before the measured ones.

``scale`` (``--scale`` of :mod:`bench.loadgen.run`) multiplies the message and warm-up counts;
the effective counts, repetitions and scale travel with every result line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum


class Mode(StrEnum):
    STOCK = "stock"
    BATCHED = "batched"


class Flush(StrEnum):
    ASYNC = "async"  # acknowledged before fsync; flushed within ~0.5-1 s
    SYNC = "sync"  # acknowledged after fdatasync (group commit)


@dataclass(frozen=True)
class Scenario:
    """One load shape. Counts are totals over all producers; every run stops at whichever of
    ``messages`` or ``max_duration_s`` comes first."""

    id: str
    title: str
    message_size_bytes: int
    topics: int
    queues_per_topic: int
    producers: int
    consumers: int
    mode: Mode
    batch: int = 1
    in_flight: int = 64  # per producer: requests awaiting an answer
    rate_msgs_per_s: float | None = None  # None = as fast as possible
    flush: Flush = Flush.ASYNC
    replicas: int = 1
    messages: int = 20_000
    warmup_messages: int = 1_000
    max_duration_s: float = 60.0
    repetitions: int = 3
    consume: bool = True
    purpose: str = ""
    open_loop: bool = False  # producers and consumers together, latency from scheduled sends
    scale: float = 1.0  # factor applied to the defined message and warm-up counts (recorded)

    def __post_init__(self) -> None:
        problems = []
        if self.message_size_bytes < 1:
            problems.append(f"message_size_bytes={self.message_size_bytes} (must be >= 1)")
        if min(self.topics, self.queues_per_topic, self.producers) < 1:
            problems.append("topics, queues_per_topic and producers must be >= 1")
        if self.consumers < 0 or self.batch < 1 or self.in_flight < 1:
            problems.append("consumers >= 0, batch >= 1 and in_flight >= 1 are required")
        if self.mode is Mode.STOCK and self.batch != 1:
            problems.append(f"stock mode sends one message per request, not batch={self.batch}")
        if self.messages < self.producers:
            problems.append(f"messages={self.messages} < producers={self.producers}")
        if self.rate_msgs_per_s is not None and self.rate_msgs_per_s <= 0:
            problems.append(f"rate_msgs_per_s={self.rate_msgs_per_s} (must be > 0)")
        if self.open_loop and (self.rate_msgs_per_s is None or not self.consumers):
            problems.append("an open-loop scenario needs rate_msgs_per_s and consumers")
        elif self.open_loop and self.schedule_s > self.max_duration_s:
            problems.append(
                f"{self.messages + self.warmup_messages} messages at {self.rate_msgs_per_s:g}/s "
                f"take {self.schedule_s:.0f} s, over max_duration_s={self.max_duration_s:g}"
            )
        if self.max_duration_s <= 0 or self.repetitions < 1:
            problems.append("max_duration_s > 0 and repetitions >= 1 are required")
        if not 0 < self.scale <= MAX_SCALE:
            problems.append(f"scale={self.scale} (must be > 0 and <= {MAX_SCALE:g})")
        if problems:
            raise ValueError(f"scenario {self.id}: " + "; ".join(problems))

    @property
    def schedule_s(self) -> float:
        """How long a fixed-rate run's schedule lasts, warm-up included (0 at max rate)."""
        if self.rate_msgs_per_s is None:
            return 0.0
        return (self.messages + self.warmup_messages) / self.rate_msgs_per_s

    @property
    def payload_bytes(self) -> int:
        return self.messages * self.message_size_bytes

    def topic_names(self, run_tag: str) -> list[str]:
        return [f"bench-{self.id}-{run_tag}-{i}" for i in range(self.topics)]

    def share(self, worker: int, workers: int, total: int) -> int:
        """How many of ``total`` messages worker ``worker`` of ``workers`` handles."""
        return total // workers + (1 if worker < total % workers else 0)

    def quick(self) -> Scenario:
        """The same shape with a fifth of the messages, one repetition and a short bound."""
        return dataclasses.replace(
            self.scaled(QUICK_SCALE, repetitions=1), max_duration_s=min(self.max_duration_s, 20.0)
        )

    def scaled(self, scale: float, *, repetitions: int | None = None) -> Scenario:
        """The same shape with message and warm-up counts multiplied by ``scale`` (at least 10
        messages and 1 warm-up message per producer) and, if given, ``repetitions`` instead of
        the scenario's own. ``scale`` on the result records the product of every factor
        applied since the definition."""
        if not 0 < scale <= MAX_SCALE:
            raise ValueError(
                f"scenario {self.id}: scale={scale} (must be > 0 and <= {MAX_SCALE:g})"
            )
        if repetitions is not None and repetitions < 1:
            raise ValueError(f"scenario {self.id}: repetitions={repetitions} (must be >= 1)")
        return dataclasses.replace(
            self,
            messages=max(self.producers * 10, round(self.messages * scale)),
            warmup_messages=max(self.producers, round(self.warmup_messages * scale)),
            repetitions=self.repetitions if repetitions is None else repetitions,
            scale=round(self.scale * scale, 6),
        )

    def settings(self) -> dict[str, object]:
        """The scenario as plain JSON values (for results and the report)."""
        values = dataclasses.asdict(self)
        values["mode"] = self.mode.value
        values["flush"] = self.flush.value
        return values


KIB = 1024
QUICK_SCALE = 0.2
MAX_SCALE = 100.0

SCENARIOS: dict[str, Scenario] = {
    s.id: s
    for s in [
        Scenario(
            "S1",
            "1 topic, 1 queue, 1 KiB, stock client",
            KIB,
            1,
            1,
            1,
            1,
            Mode.STOCK,
            messages=10_000,
            purpose="single-queue ordered ceiling; per-RPC cost",
        ),
        Scenario(
            "S2",
            "1 topic, 16 queues, 1 KiB, 4p/4c, stock client",
            KIB,
            1,
            16,
            4,
            4,
            Mode.STOCK,
            messages=20_000,
            in_flight=16,
            purpose="headline stock-client throughput",
        ),
        Scenario(
            "S3",
            "1 topic, 16 queues, 100 B, batch 32",
            100,
            1,
            16,
            4,
            4,
            Mode.BATCHED,
            batch=32,
            in_flight=4,
            messages=200_000,
            warmup_messages=10_000,
            purpose="per-message overhead once the RPC cost is amortised",
        ),
        Scenario(
            "S4",
            "fixed 2,000 msgs/s, 1 KiB, 4p/4c",
            KIB,
            1,
            16,
            4,
            4,
            Mode.STOCK,
            in_flight=16,
            rate_msgs_per_s=2_000,
            messages=20_000,
            max_duration_s=30,
            purpose="publish latency percentiles at a sustainable load",
        ),
        Scenario(
            "S5",
            "durable: sync flush, 1 KiB, 16p, batch 32",
            KIB,
            1,
            16,
            4,
            4,
            Mode.BATCHED,
            batch=32,
            in_flight=4,
            flush=Flush.SYNC,
            messages=100_000,
            warmup_messages=5_000,
            purpose="durability cost (fdatasync + group commit)",
        ),
        Scenario(
            "S6",
            "replicated R3, 1 KiB, batch 32",
            KIB,
            1,
            16,
            4,
            4,
            Mode.BATCHED,
            batch=32,
            in_flight=4,
            replicas=3,
            flush=Flush.SYNC,
            messages=100_000,
            warmup_messages=5_000,
            purpose="replication cost vs S5 (sync flush: with async flush `gannet cluster up` "
            "committed nothing within 5 s on 2026-11-22)",
        ),
        Scenario(
            "S7",
            "backlog drain, 1 KiB, batch 32",
            KIB,
            1,
            16,
            4,
            4,
            Mode.BATCHED,
            batch=32,
            in_flight=4,
            messages=200_000,
            warmup_messages=5_000,
            purpose="read path: produce a backlog with consumers stopped, then drain it",
        ),
        Scenario(
            "S8",
            "100 topics × 4 queues, fixed 2,000 msgs/s",
            KIB,
            100,
            4,
            8,
            8,
            Mode.STOCK,
            in_flight=8,
            rate_msgs_per_s=2_000,
            messages=20_000,
            max_duration_s=30,
            purpose="metadata / many files / routes overhead",
        ),
        Scenario(
            "S9",
            "large messages, 64 KiB, 1p/1c",
            64 * KIB,
            1,
            1,
            1,
            1,
            Mode.STOCK,
            in_flight=8,
            messages=2_000,
            warmup_messages=100,
            purpose="MB/s and per-message cost of large bodies",
        ),
        Scenario(
            "L500",
            "fixed 500 msgs/s open loop, send→receive latency, 1 KiB, 4p/4c",
            KIB,
            1,
            16,
            4,
            4,
            Mode.STOCK,
            in_flight=64,
            rate_msgs_per_s=500,
            messages=10_000,
            warmup_messages=1_000,
            max_duration_s=60,
            open_loop=True,
            purpose="a rate the official Python RocketMQ client sustains on one core (sending, "
            "receiving and acking about 1,300 µs of its CPU per message), so Gannet and RocketMQ "
            "get percentiles beside Kafka",
        ),
        Scenario(
            "L1K",
            "fixed 1,000 msgs/s open loop, send→receive latency, 1 KiB, 4p/4c",
            KIB,
            1,
            16,
            4,
            4,
            Mode.STOCK,
            in_flight=64,
            rate_msgs_per_s=1_000,
            messages=20_000,
            warmup_messages=2_000,
            max_duration_s=60,
            open_loop=True,
            purpose="the latency users compare brokers by (the official Python RocketMQ client "
            "cannot send and receive this many on one core: its rows show the rate it reached)",
        ),
        Scenario(
            "L5K",
            "fixed 5,000 msgs/s open loop, send→receive latency, 1 KiB, 4p/4c",
            KIB,
            1,
            16,
            4,
            4,
            Mode.STOCK,
            in_flight=64,
            rate_msgs_per_s=5_000,
            messages=50_000,
            warmup_messages=10_000,
            max_duration_s=60,
            open_loop=True,
            purpose="the same latency at five times the rate: where the tail grows first",
        ),
    ]
}

QUICK_IDS = ("S1", "S3")


def order(scenario_id: str) -> int:
    """Where ``scenario_id`` sorts in reports: the order of :data:`SCENARIOS` (unknown ids,
    from older result lines, last)."""
    ids = list(SCENARIOS)
    return ids.index(scenario_id) if scenario_id in ids else len(ids)


def select(
    ids: list[str],
    *,
    quick: bool,
    scale: float | None = None,
    repetitions: int | None = None,
) -> list[Scenario]:
    """Scenarios by id (``["all"]`` for every one), shrunk by :meth:`Scenario.quick` if asked,
    or with counts multiplied by ``scale`` and/or ``repetitions`` overridden
    (:meth:`Scenario.scaled`). ``quick`` fixes both, so it cannot be combined with them."""
    if quick and (scale is not None or repetitions is not None):
        raise ValueError("quick already means scale 0.2 and 1 repetition; give one or the other")
    wanted = list(SCENARIOS) if ids == ["all"] else ids
    unknown = [i for i in wanted if i not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    chosen = [SCENARIOS[i] for i in wanted]
    if quick:
        return [s.quick() for s in chosen]
    if scale is None and repetitions is None:
        return chosen
    return [s.scaled(1.0 if scale is None else scale, repetitions=repetitions) for s in chosen]
