"""Open-loop load drivers for the fixed-rate latency scenarios (``L1K``, ``L5K``): producers
send on a schedule and consumers receive at the same time, each through the system's usual
client, as the throughput drivers of :mod:`bench.loadgen.drivers` do:

- ``rmq_stock``: the official ``rocketmq-python-client`` — ``Producer.send_async`` and a
  ``SimpleConsumer`` that receives up to 32 and acks each message before receiving again
  (Gannet and Apache RocketMQ's proxy alike);
- ``kafka``: confluent-kafka — ``produce()`` with ``acks=all`` and ``linger.ms=0``, and a
  consumer-group member that commits its offsets (synchronously) after each batch of up to 32
  before polling again, the at-least-once pattern of both clients' documentation.

Run by :func:`bench.loadgen.phases.run_open_loop` in worker processes. A producer sends
``warmup_messages`` and then ``messages`` measured messages, message ``i`` due at
``start + i / (rate / producers)``; it sleeps only until the next message is due and waits
only when its window of ``in_flight`` unanswered sends is full (a bound, so a broker that stops
answering cannot grow the client's queue without limit; the wait is charged to the messages,
since their latency runs from their scheduled time). Each body carries a
:func:`bench.loadgen.fixed_rate.stamp`; a consumer records (scheduled, received) for every
measured message of this run (the first delivery of each) and stops once the group has all of
them, after ``deadline_s``, or when nothing arrived for :data:`IDLE_STOP_S` after the schedule
ended.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.loadgen import drivers, fixed_rate
from bench.loadgen.drivers import Barrier, Counter, WorkerResult, WorkerSpec
from bench.loadgen.stats import LATENCY_SAMPLE_LIMIT

IDLE_STOP_S = 3.0
CONNECT_SENDS = 8  # unmeasured sends before the barrier: connections and routes are warm
RECEIVE_BATCH = 32


def _rate_per_producer(spec: WorkerSpec) -> float:
    rate = spec.scenario.rate_msgs_per_s
    if rate is None:
        raise ValueError(f"scenario {spec.scenario.id} has no rate: not an open-loop scenario")
    return rate / spec.workers


def _body(spec: WorkerSpec, filler: bytes, sequence: int, due_s: float, measured: bool) -> bytes:
    mark = fixed_rate.Stamp(spec.run_token, measured, spec.worker, sequence, int(due_s * 1e9))
    return fixed_rate.stamp(filler, mark)


Send = Callable[[int, float, bool], None]  # (sequence, due time, measured)


def _schedule(
    spec: WorkerSpec,
    barrier: Barrier,
    result: WorkerResult,
    send: Send,
    wait_until: Callable[[float], None],
) -> None:
    """The measured part of a producer: release with the others, then send every warm-up and
    measured message at its due time (``wait_until`` waits, serving the client meanwhile)."""
    barrier.wait(timeout=120)
    result.begin()
    start = result.start_s
    rate = _rate_per_producer(spec)
    for i in range(spec.warmup_messages + spec.messages):
        due = fixed_rate.due_s(start, i, rate)
        wait_until(due)
        send(CONNECT_SENDS + i, due, i >= spec.warmup_messages)


class _Receipts:
    """What a consumer has seen: first deliveries of this run's measured messages."""

    def __init__(self, spec: WorkerSpec, result: WorkerResult) -> None:
        self.spec, self.result = spec, result
        self.seen: set[tuple[int, int]] = set()

    def note(self, body: bytes, at_s: float) -> bool:
        """Record ``body`` received at ``at_s``; True when it is a new measured message."""
        try:
            mark = fixed_rate.read_stamp(body)
        except fixed_rate.StampError as exc:
            self.result.fail(exc)
            return False
        if mark.run_token != self.spec.run_token or not mark.measured:
            return False
        key = (mark.producer, mark.sequence)
        if key in self.seen:
            return False
        if len(self.seen) < LATENCY_SAMPLE_LIMIT:
            self.seen.add(key)
        self.result.note(self.result.receives, mark.scheduled_s, at_s)
        self.result.record(at_s - mark.scheduled_s, 1, self.spec.scenario.message_size_bytes)
        return True


def _consume_loop(
    spec: WorkerSpec, counter: Counter, result: WorkerResult, receive: Callable[[], tuple[int, int]]
) -> None:
    """Call ``receive`` (→ messages received, of which new measured ones) until the group has
    every measured message, the deadline passes, or nothing came for IDLE_STOP_S once the
    producers' schedule is over (a rebalance or a slow broker may pause deliveries for longer
    while messages are still being sent)."""
    schedule_end_s = result.start_s + spec.scenario.schedule_s
    last_message = time.monotonic()
    while time.monotonic() - result.start_s < spec.deadline_s:
        if counter.value >= spec.expected_total:
            return
        try:
            got, measured = receive()
        except Exception as exc:
            result.fail(exc)
            got = measured = 0
        now = time.monotonic()
        if measured:
            with counter.get_lock():
                counter.value += measured
        if got:
            last_message = now
        elif now - max(last_message, schedule_end_s) > IDLE_STOP_S:
            return


# --- official RocketMQ client --------------------------------------------------------------


def rmq_stock_produce(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    scenario, result = spec.scenario, WorkerResult()
    producer = Producer(ClientConfiguration(spec.endpoint, Credentials(), request_timeout=10),
                        spec.topics)  # fmt: skip
    producer.startup()
    filler = os.urandom(scenario.message_size_bytes)
    window = threading.BoundedSemaphore(scenario.in_flight)
    lock = threading.Lock()

    def send(sequence: int, due: float, measured: bool) -> None:
        message = Message()
        message.topic = spec.topics[sequence % len(spec.topics)]
        message.body = _body(spec, filler, sequence, due, measured)
        window.acquire()
        issued = time.monotonic()

        def done(future: Any) -> None:
            at = time.monotonic()
            with lock:
                if future.exception() is not None:
                    result.fail(future.exception())
                elif measured:
                    result.note(result.acks, due, at)
                    result.record(at - due, 1, scenario.message_size_bytes)
            window.release()

        if measured:
            with lock:
                result.note(result.sends, due, issued)
        try:
            producer.send_async(message).add_done_callback(done)
        except Exception as exc:
            window.release()
            with lock:
                result.fail(exc)

    def wait_until(due: float) -> None:
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    try:
        for sequence in range(CONNECT_SENDS):
            send(sequence, time.monotonic(), False)
        drivers._drain(window, scenario.in_flight)
        _schedule(spec, barrier, result, send, wait_until)
        drivers._drain(window, scenario.in_flight)
    finally:
        producer.shutdown()
    return result


def rmq_stock_consume(spec: WorkerSpec, barrier: Barrier, counter: Counter) -> WorkerResult:
    result = WorkerResult()
    consumer = drivers.stock_simple_consumer(spec)
    receipts = _Receipts(spec, result)

    def receive() -> tuple[int, int]:
        messages = consumer.receive(RECEIVE_BATCH, drivers.INVISIBLE_S)
        at = time.monotonic()
        measured = sum(receipts.note(m.body, at) for m in messages)
        for message in messages:
            consumer.ack(message)
        return len(messages), measured

    try:
        barrier.wait(timeout=120)
        result.begin()
        _consume_loop(spec, counter, result, receive)
    finally:
        consumer.shutdown()
    return result


# --- Apache Kafka (confluent-kafka) ---------------------------------------------------------


def kafka_produce(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    from confluent_kafka import Producer  # type: ignore[import-not-found,unused-ignore]

    scenario, result = spec.scenario, WorkerResult()
    producer = Producer(drivers.kafka_producer_config(spec))
    filler = os.urandom(scenario.message_size_bytes)
    limit = drivers.kafka_in_flight(scenario)
    outstanding = 0

    def send(sequence: int, due: float, measured: bool) -> None:
        nonlocal outstanding
        while outstanding >= limit:
            producer.poll(0.05)  # runs delivery callbacks, which lower ``outstanding``
        body = _body(spec, filler, sequence, due, measured)

        def done(err: Any, _msg: Any) -> None:
            nonlocal outstanding
            outstanding -= 1
            if err is not None:
                result.fail(err)
            elif measured:
                at = time.monotonic()
                result.note(result.acks, due, at)
                result.record(at - due, 1, scenario.message_size_bytes)

        if measured:
            result.note(result.sends, due, time.monotonic())
        drivers.kafka_produce_one(
            producer, spec.topics[sequence % len(spec.topics)], body, done, 0.01
        )
        outstanding += 1
        producer.poll(0)

    def wait_until(due: float) -> None:
        # Serve delivery reports while waiting, so that an answer is timed when it comes.
        while (delay := due - time.monotonic()) > 0:
            producer.poll(delay)

    for sequence in range(CONNECT_SENDS):
        send(sequence, time.monotonic(), False)
    producer.flush(30)
    _schedule(spec, barrier, result, send, wait_until)
    deadline = time.monotonic() + 60
    while outstanding and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.flush(10)
    return result


def kafka_consume(spec: WorkerSpec, barrier: Barrier, counter: Counter) -> WorkerResult:
    from confluent_kafka import Consumer  # type: ignore[import-not-found,unused-ignore]

    result = WorkerResult()
    consumer = Consumer(drivers.kafka_consumer_config(spec))
    receipts = _Receipts(spec, result)
    started = False

    def on_assign(c: Any, partitions: list[Any]) -> None:
        # Hold partitions paused until the barrier: the connect sends are not read early.
        c.incremental_assign(partitions)
        if not started and partitions:
            c.pause(partitions)

    def receive() -> tuple[int, int]:
        first = consumer.poll(1.0)
        if first is None:
            return 0, 0
        at = time.monotonic()
        messages = [first, *consumer.consume(RECEIVE_BATCH - 1, timeout=0)]
        good = [m for m in messages if m.error() is None]
        for m in messages:
            if m.error() is not None:
                result.fail(m.error())
        measured = sum(receipts.note(m.value() or b"", at) for m in good)
        if good:
            consumer.commit(asynchronous=False)
        return len(good), measured

    consumer.subscribe(list(spec.topics), on_assign=on_assign)
    try:
        drivers._kafka_wait_assignment(spec, consumer)
        barrier.wait(timeout=120)
        started = True
        result.begin()
        assigned = consumer.assignment()
        if assigned:
            consumer.resume(assigned)
        _consume_loop(spec, counter, result, receive)
    finally:
        consumer.close()
    return result


PRODUCERS: dict[str, Callable[[WorkerSpec, Barrier], WorkerResult]] = {
    "rmq_stock": rmq_stock_produce,
    "kafka": kafka_produce,
}
CONSUMERS: dict[str, Callable[[WorkerSpec, Barrier, Counter], WorkerResult]] = {
    "rmq_stock": rmq_stock_consume,
    "kafka": kafka_consume,
}
