"""Per-system load drivers, each run inside a load-generator worker process by
:mod:`bench.loadgen.phases`. One produce and one consume function per client family:

- ``rmq_stock_*``: the official ``rocketmq-python-client`` (Producer.send_async, bounded in
  flight; SimpleConsumer.receive(32) + ack per message) — drives Gannet and Apache
  RocketMQ 5's proxy alike.
- ``rmq_raw_*``: Gannet's own generator over raw ``apache.rocketmq.v2`` stubs
  (``rocketmq.grpc_protocol``): ``SendMessage`` with ``batch`` entries, ``batch`` ×
  ``in_flight`` futures; ``ReceiveMessage`` batches acked with one ``AckMessage`` each. Also
  drives both Gannet and RocketMQ (a Telemetry ``Settings`` command is sent first, as the proxy
  requires for receiving).
- ``nats_*``: nats-py JetStream (``js.publish`` awaited per message; pull-consumer fetch + ack).
- ``redis_*``: redis-py asyncio (``XADD`` per message, or a pipeline of ``batch``;
  ``XREADGROUP COUNT 32`` + one ``XACK`` per batch).
- ``kafka_*``: confluent-kafka (librdkafka): one ``produce()`` per message, ``acks=all``,
  ``linger.ms=0`` (stock) or linger/batch settings for ~32 messages per request (batched),
  bounded in flight; a consumer group member committing offsets after each batch of up to 32
  (:func:`kafka_producer_config`, :func:`kafka_consumer_config`).

A worker gets a :class:`WorkerSpec`, gets ready (connects, warms up), waits on the shared
barrier so that the measurement starts for every worker at once, runs, and returns a
:class:`WorkerResult`. Latencies are send→answer per request; for fixed-rate scenarios they are
measured from the actual send (not the scheduled time), which hides queueing if the generator
falls behind — the report says so. The open-loop latency scenarios (L1K, L5K) have their own
drivers, :mod:`bench.loadgen.open_loop`, which measure from the scheduled time.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from bench.loadgen.scenarios import Mode, Scenario
from bench.loadgen.stats import LATENCY_SAMPLE_LIMIT

IDLE_STOP_S = 3.0  # a consumer stops after this long without a message once the goal is close
INVISIBLE_S = 60


class Barrier(Protocol):
    def wait(self, timeout: float | None = None) -> int: ...


class Counter(Protocol):
    """A shared ``multiprocessing.Value('q')``."""

    value: int

    def get_lock(self) -> Any: ...


@dataclass(frozen=True)
class WorkerSpec:
    system: str  # gannet | rocketmq | nats | redis | kafka
    client: str  # rmq_stock | rmq_raw | nats | redis | kafka
    endpoint: str
    scenario: Scenario
    worker: int
    workers: int
    topics: tuple[str, ...]
    group: str
    messages: int  # measured messages for this worker (producers)
    warmup_messages: int
    expected_total: int  # consumers: stop once the group has received this many
    deadline_s: float  # seconds the measured part may take
    cpus: tuple[int, ...] = ()
    run_token: int = 0  # open-loop runs: stamped in every body (bench.loadgen.fixed_rate)


@dataclass
class WorkerResult:
    done: int = 0
    errors: int = 0
    start_s: float = 0.0  # time.monotonic() at measurement start (comparable across processes)
    end_s: float = 0.0  # time of the last completed message
    payload_bytes: int = 0
    latencies_s: list[float] = field(default_factory=list)
    first_error: str = ""
    cpu_start_s: float = 0.0  # time.process_time() at measurement start
    cpu_s: float = 0.0  # this worker process's CPU (all its threads) from start to its last message

    def begin(self) -> None:
        """Start of the measured part: wall clock and this process's CPU clock."""
        self.start_s = time.monotonic()
        self.cpu_start_s = time.process_time()

    # Open-loop runs (bench.loadgen.open_loop): (scheduled, event) times of measured messages,
    # each list bounded by LATENCY_SAMPLE_LIMIT: issued and answered (producers), received
    # (consumers, first delivery only).
    sends: list[tuple[float, float]] = field(default_factory=list)
    acks: list[tuple[float, float]] = field(default_factory=list)
    receives: list[tuple[float, float]] = field(default_factory=list)

    def note(self, timings: list[tuple[float, float]], scheduled_s: float, at_s: float) -> None:
        """Append one (scheduled, event) pair to ``timings`` (one of the lists above)."""
        if len(timings) < LATENCY_SAMPLE_LIMIT:
            timings.append((scheduled_s, at_s))

    def record(self, latency_s: float, count: int, size_bytes: int) -> None:
        self.done += count
        self.payload_bytes += count * size_bytes
        self.end_s = time.monotonic()
        self.cpu_s = time.process_time() - self.cpu_start_s
        if len(self.latencies_s) < LATENCY_SAMPLE_LIMIT:
            self.latencies_s.append(latency_s)

    def fail(self, error: object) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = repr(error)[:500]


def _body(size_bytes: int, worker: int) -> bytes:
    return os.urandom(size_bytes)  # incompressible, per docs/benchmarks.md §1


def _pace(scenario: Scenario, workers: int, start_s: float, sent: int) -> None:
    """Sleep until message ``sent`` is due under a fixed rate (no-op at max rate)."""
    if scenario.rate_msgs_per_s is None:
        return
    due = start_s + sent / (scenario.rate_msgs_per_s / workers)
    delay = due - time.monotonic()
    if delay > 0:
        time.sleep(delay)


# --- official RocketMQ client --------------------------------------------------------------


def rmq_stock_produce(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    scenario, result = spec.scenario, WorkerResult()
    config = ClientConfiguration(spec.endpoint, Credentials(), request_timeout=10)
    producer = Producer(config, spec.topics)
    producer.startup()
    body = _body(scenario.message_size_bytes, spec.worker)
    window = threading.BoundedSemaphore(scenario.in_flight)
    lock = threading.Lock()

    def send(i: int, measured: bool) -> None:
        message = Message()
        message.topic = spec.topics[i % len(spec.topics)]
        message.body = body
        window.acquire()
        t0 = time.monotonic()

        def done(future: Any) -> None:
            latency = time.monotonic() - t0
            with lock:
                if future.exception() is not None:
                    result.fail(future.exception())
                elif measured:
                    result.record(latency, 1, scenario.message_size_bytes)
            window.release()

        try:
            producer.send_async(message).add_done_callback(done)
        except Exception as exc:
            window.release()
            with lock:
                result.fail(exc)

    try:
        for i in range(spec.warmup_messages):
            send(i, measured=False)
        _drain(window, scenario.in_flight)
        barrier.wait(timeout=120)
        result.start_s = deadline_base = time.monotonic()
        for i in range(spec.messages):
            if time.monotonic() - deadline_base > spec.deadline_s:
                break
            _pace(scenario, spec.workers, deadline_base, i)
            send(i, measured=True)
        _drain(window, scenario.in_flight)
    finally:
        producer.shutdown()
    return result


def _drain(window: threading.BoundedSemaphore, size: int, timeout_s: float = 60) -> None:
    """Wait until every request of a window is answered (then give the slots back)."""
    deadline = time.monotonic() + timeout_s
    taken = 0
    while taken < size and window.acquire(timeout=max(0.0, deadline - time.monotonic())):
        taken += 1
    for _ in range(taken):
        window.release()


def stock_simple_consumer(spec: WorkerSpec) -> Any:
    """The official client's SimpleConsumer of ``spec``'s group on its topics, started."""
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    config = ClientConfiguration(spec.endpoint, Credentials(), request_timeout=10)
    subscriptions = {t: FilterExpression("*") for t in spec.topics}
    consumer = SimpleConsumer(config, spec.group, subscriptions, await_duration=1)
    consumer.startup()
    return consumer


def rmq_stock_consume(spec: WorkerSpec, barrier: Barrier, counter: Counter) -> WorkerResult:
    result = WorkerResult()
    consumer = stock_simple_consumer(spec)
    size = spec.scenario.message_size_bytes
    try:
        barrier.wait(timeout=120)
        result.begin()

        def receive() -> int:
            t0 = time.monotonic()
            messages = consumer.receive(32, INVISIBLE_S)
            for message in messages:  # ack_async of client 5.1.2 returns None: ack one by one
                consumer.ack(message)
            if messages:
                result.record(time.monotonic() - t0, len(messages), size)
            return len(messages)

        _consume_loop(spec, counter, result, receive)
    finally:
        consumer.shutdown()
    return result


def _consume_loop(
    spec: WorkerSpec, counter: Counter, result: WorkerResult, receive: Callable[[], int]
) -> None:
    """Call ``receive`` until the group has all expected messages, the deadline passes, or
    nothing came for IDLE_STOP_S."""
    last_message = time.monotonic()
    while time.monotonic() - result.start_s < spec.deadline_s:
        if counter.value >= spec.expected_total:
            return
        try:
            got = receive()
        except Exception as exc:
            result.fail(exc)
            got = 0
        now = time.monotonic()
        if got:
            last_message = now
            with counter.get_lock():
                counter.value += got
        elif now - last_message > IDLE_STOP_S:
            return


# --- raw apache.rocketmq.v2 stubs ----------------------------------------------------------


def _rmq_metadata() -> tuple[tuple[str, str], ...]:
    client_id = f"bench@{os.getpid()}@{uuid.uuid4().hex[:8]}"
    return (
        ("x-mq-client-id", client_id),
        ("x-mq-language", "PYTHON"),
        ("x-mq-protocol", "GRPC_V2"),
        ("x-mq-client-version", "5.1.2"),
    )


def _channel(endpoint: str) -> Any:
    import grpc

    options = [
        ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ]
    return grpc.insecure_channel(endpoint, options=options)


def rmq_raw_produce(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

    scenario, result = spec.scenario, WorkerResult()
    metadata = _rmq_metadata()
    channel = _channel(spec.endpoint)
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    body = _body(scenario.message_size_bytes, spec.worker)
    window = threading.BoundedSemaphore(scenario.in_flight)
    lock = threading.Lock()
    prefix = uuid.uuid4().hex[:16].upper()
    counter = 0

    def request(topic: str, count: int) -> Any:
        nonlocal counter
        req = service_pb2.SendMessageRequest()
        for _ in range(count):
            counter += 1
            msg = req.messages.add()
            msg.topic.name = topic
            msg.body = body
            props = msg.system_properties
            props.message_id = f"{prefix}{counter:016X}"
            props.message_type = definition_pb2.NORMAL
            props.body_encoding = definition_pb2.IDENTITY
            props.born_host = "127.0.0.1"
            props.born_timestamp.GetCurrentTime()
        return req

    def send(i: int, count: int, measured: bool) -> None:
        req = request(spec.topics[i % len(spec.topics)], count)
        window.acquire()
        t0 = time.monotonic()
        future = stub.SendMessage.future(req, metadata=metadata, timeout=30)

        def done(f: Any) -> None:
            latency = time.monotonic() - t0
            with lock:
                try:
                    reply = f.result()
                    if reply.status.code != Code.OK:
                        result.fail(f"{reply.status.code} {reply.status.message}")
                    elif measured:
                        result.record(latency, count, scenario.message_size_bytes)
                except Exception as exc:
                    result.fail(exc)
            window.release()

        future.add_done_callback(done)

    try:
        batches = max(1, spec.warmup_messages // scenario.batch)
        for i in range(batches):
            send(i, scenario.batch, measured=False)
        _drain(window, scenario.in_flight)
        barrier.wait(timeout=120)
        result.begin()
        sent = 0
        i = 0
        while sent < spec.messages and time.monotonic() - result.start_s < spec.deadline_s:
            count = min(scenario.batch, spec.messages - sent)
            _pace(scenario, spec.workers, result.start_s, sent)
            send(i, count, measured=True)
            sent += count
            i += 1
        _drain(window, scenario.in_flight)
    finally:
        channel.close()
    return result


def _settings_stream(spec: WorkerSpec, stub: Any, metadata: Any) -> Callable[[], None]:
    """Open the Telemetry stream and announce this consumer's settings (the RocketMQ proxy
    refuses ReceiveMessage from clients without settings). Returns a closer."""
    from rocketmq.grpc_protocol import definition_pb2, service_pb2

    commands: queue.Queue[Any] = queue.Queue(maxsize=8)
    settings = definition_pb2.Settings(
        client_type=definition_pb2.SIMPLE_CONSUMER,
        subscription=definition_pb2.Subscription(
            group=definition_pb2.Resource(name=spec.group),
            subscriptions=[
                definition_pb2.SubscriptionEntry(
                    topic=definition_pb2.Resource(name=t),
                    expression=definition_pb2.FilterExpression(
                        type=definition_pb2.TAG, expression="*"
                    ),
                )
                for t in spec.topics
            ],
        ),
    )
    settings.request_timeout.FromSeconds(10)
    settings.subscription.long_polling_timeout.FromSeconds(1)
    host, _, port = spec.endpoint.rpartition(":")
    settings.access_point.scheme = definition_pb2.IPv4
    settings.access_point.addresses.add(host=host, port=int(port))
    commands.put(service_pb2.TelemetryCommand(settings=settings))

    def requests() -> Iterator[Any]:
        while True:
            item = commands.get()
            if item is None:
                return
            yield item

    call = stub.Telemetry(requests(), metadata=metadata)
    first = next(iter(call))  # the broker answers with its view of the settings
    del first

    def close() -> None:
        commands.put(None)
        call.cancel()

    return close


def rmq_raw_consume(spec: WorkerSpec, barrier: Barrier, counter: Counter) -> WorkerResult:
    from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

    result = WorkerResult()
    metadata = _rmq_metadata()
    channel = _channel(spec.endpoint)
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    close_settings = _settings_stream(spec, stub, metadata)
    host, _, port = spec.endpoint.rpartition(":")
    endpoints = definition_pb2.Endpoints(
        scheme=definition_pb2.IPv4, addresses=[definition_pb2.Address(host=host, port=int(port))]
    )
    queues: list[Any] = []
    for topic in spec.topics:
        route = stub.QueryRoute(
            service_pb2.QueryRouteRequest(
                topic=definition_pb2.Resource(name=topic), endpoints=endpoints
            ),
            metadata=metadata,
            timeout=10,
        )
        if route.status.code != Code.OK:
            raise RuntimeError(f"QueryRoute {topic}: {route.status.code} {route.status.message}")
        queues.extend(q for q in route.message_queues if q.permission in (2, 4))  # READ, RW
    if not queues:
        raise RuntimeError(f"no readable queues for {spec.topics}")
    size = spec.scenario.message_size_bytes
    group = definition_pb2.Resource(name=spec.group)
    turn = spec.worker

    def receive() -> int:
        nonlocal turn
        mq = queues[turn % len(queues)]
        turn += 1
        req = service_pb2.ReceiveMessageRequest(
            group=group,
            message_queue=mq,
            filter_expression=definition_pb2.FilterExpression(
                type=definition_pb2.TAG, expression="*"
            ),
            batch_size=32,
            auto_renew=False,
        )
        req.invisible_duration.FromSeconds(INVISIBLE_S)
        req.long_polling_timeout.FromSeconds(1)
        t0 = time.monotonic()
        entries = []
        for frame in stub.ReceiveMessage(req, metadata=metadata, timeout=15):
            if frame.WhichOneof("content") == "message":
                m = frame.message
                entries.append(
                    service_pb2.AckMessageEntry(
                        message_id=m.system_properties.message_id,
                        receipt_handle=m.system_properties.receipt_handle,
                    )
                )
        if not entries:
            return 0
        reply = stub.AckMessage(
            service_pb2.AckMessageRequest(group=group, topic=mq.topic, entries=entries),
            metadata=metadata,
            timeout=15,
        )
        if reply.status.code != Code.OK:
            result.fail(f"ack {reply.status.code} {reply.status.message}")
        result.record(time.monotonic() - t0, len(entries), size)
        return len(entries)

    try:
        barrier.wait(timeout=120)
        result.begin()
        _consume_loop(spec, counter, result, receive)
    finally:
        close_settings()
        channel.close()
    return result


# --- NATS JetStream ------------------------------------------------------------------------


def nats_produce(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    return asyncio.run(_nats_produce(spec, barrier))


async def _nats_produce(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    import nats

    scenario, result = spec.scenario, WorkerResult()
    nc = await nats.connect(spec.endpoint, max_reconnect_attempts=0)
    js = nc.jetstream(timeout=30)
    body = _body(scenario.message_size_bytes, spec.worker)
    # NATS has no batch publish: "batched" means batch x in_flight publishes outstanding.
    tasks = scenario.in_flight * (scenario.batch if scenario.mode is Mode.BATCHED else 1)
    try:
        await _async_load(
            spec,
            barrier,
            result,
            tasks,
            lambda i: js.publish(spec.topics[i % len(spec.topics)], body),
            1,
        )
    finally:
        await nc.close()
    return result


async def _async_load(
    spec: WorkerSpec,
    barrier: Barrier,
    result: WorkerResult,
    tasks: int,
    call: Callable[[int], Any],
    per_call: int,
) -> None:
    """``tasks`` coroutines issue ``call(i)`` (each carrying ``per_call`` messages): the warm-up
    first, then the barrier, then the measured messages (paced for fixed-rate scenarios)."""
    scenario = spec.scenario
    size = scenario.message_size_bytes

    async def run(total: int, measured: bool) -> None:
        issued = 0
        start = time.monotonic()

        async def one_task() -> None:
            nonlocal issued
            while issued < total:
                if measured and time.monotonic() - start > spec.deadline_s:
                    return
                i = issued
                issued += per_call
                if scenario.rate_msgs_per_s is not None and measured:
                    due = start + i / (scenario.rate_msgs_per_s / spec.workers)
                    if due > time.monotonic():
                        await asyncio.sleep(due - time.monotonic())
                t0 = time.monotonic()
                try:
                    await call(i)
                except Exception as exc:
                    result.fail(exc)
                    continue
                if measured:
                    result.record(time.monotonic() - t0, min(per_call, total - i), size)

        await asyncio.gather(*(one_task() for _ in range(tasks)))

    await run(spec.warmup_messages, measured=False)
    await asyncio.get_running_loop().run_in_executor(None, lambda: barrier.wait(timeout=120))
    result.begin()
    await run(spec.messages, measured=True)


def nats_consume(spec: WorkerSpec, barrier: Barrier, counter: Counter) -> WorkerResult:
    return asyncio.run(_nats_consume(spec, barrier, counter))


async def _nats_consume(spec: WorkerSpec, barrier: Barrier, counter: Counter) -> WorkerResult:
    import nats
    from nats.errors import TimeoutError as NatsTimeout

    result = WorkerResult()
    nc = await nats.connect(spec.endpoint, max_reconnect_attempts=0)
    js = nc.jetstream(timeout=30)
    subs = [
        await js.pull_subscribe(t, durable=f"{spec.group}-{i}") for i, t in enumerate(spec.topics)
    ]
    size = spec.scenario.message_size_bytes
    turn = spec.worker
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: barrier.wait(timeout=120))
    result.begin()
    last_message = time.monotonic()
    try:
        while time.monotonic() - result.start_s < spec.deadline_s:
            if counter.value >= spec.expected_total:
                break
            sub = subs[turn % len(subs)]
            turn += 1
            t0 = time.monotonic()
            try:
                messages = await sub.fetch(32, timeout=1)
            except (TimeoutError, NatsTimeout):  # nats-py raises either when idle
                messages = []
            for m in messages:
                await m.ack()
            now = time.monotonic()
            if messages:
                last_message = now
                result.record(now - t0, len(messages), size)
                with counter.get_lock():
                    counter.value += len(messages)
            elif now - last_message > IDLE_STOP_S:
                break
        await nc.flush()
    finally:
        await nc.close()
    return result


# --- Redis Streams -------------------------------------------------------------------------


def redis_produce(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    return asyncio.run(_redis_produce(spec, barrier))


async def _redis_produce(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    import redis.asyncio as aioredis

    scenario, result = spec.scenario, WorkerResult()
    host, _, port = spec.endpoint.rpartition(":")
    client = aioredis.Redis(host=host, port=int(port), max_connections=scenario.in_flight)
    body = _body(scenario.message_size_bytes, spec.worker)
    topics = spec.topics

    async def one(i: int) -> None:
        await client.xadd(topics[i % len(topics)], {"b": body})

    async def batch(i: int) -> None:
        pipe = client.pipeline(transaction=False)
        for _ in range(scenario.batch):
            pipe.xadd(topics[i % len(topics)], {"b": body})
        await pipe.execute()

    try:
        if scenario.mode is Mode.BATCHED:
            await _async_load(spec, barrier, result, scenario.in_flight, batch, scenario.batch)
        else:
            await _async_load(spec, barrier, result, scenario.in_flight, one, 1)
    finally:
        await client.aclose()
    return result


def redis_consume(spec: WorkerSpec, barrier: Barrier, counter: Counter) -> WorkerResult:
    return asyncio.run(_redis_consume(spec, barrier, counter))


async def _redis_consume(spec: WorkerSpec, barrier: Barrier, counter: Counter) -> WorkerResult:
    import redis.asyncio as aioredis

    result = WorkerResult()
    host, _, port = spec.endpoint.rpartition(":")
    client = aioredis.Redis(host=host, port=int(port))
    name = f"c{spec.worker}"
    size = spec.scenario.message_size_bytes
    turn = spec.worker
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: barrier.wait(timeout=120))
    result.begin()
    last_message = time.monotonic()
    try:
        while time.monotonic() - result.start_s < spec.deadline_s:
            if counter.value >= spec.expected_total:
                break
            topic = spec.topics[turn % len(spec.topics)]
            turn += 1
            t0 = time.monotonic()
            reply: Any = await client.xreadgroup(
                spec.group, name, {topic: ">"}, count=32, block=1000
            )
            ids = [entry_id for _, entries in reply or [] for entry_id, _ in entries]
            if ids:
                await client.xack(topic, spec.group, *ids)
            now = time.monotonic()
            if ids:
                last_message = now
                result.record(now - t0, len(ids), size)
                with counter.get_lock():
                    counter.value += len(ids)
            elif now - last_message > IDLE_STOP_S:
                break
    finally:
        await client.aclose()
    return result


# --- Apache Kafka (confluent-kafka / librdkafka) --------------------------------------------

KAFKA_BATCH_LINGER_MS = 5
KAFKA_ASSIGN_TIMEOUT_S = 30.0
KAFKA_ASSIGN_SETTLE_S = 1.0


def kafka_producer_config(spec: WorkerSpec) -> dict[str, Any]:
    """librdkafka settings of a producer. Both modes: ``acks=all``, idempotence off (as the
    other clients: no dedup), one ``produce()`` per message, the number of messages awaiting
    their delivery report bounded by the driver (see :func:`kafka_in_flight`).

    - stock: ``linger.ms=0``: a request leaves as soon as the client has a message. librdkafka
      still puts messages that queued up while a request was in flight into the next request;
      that is how its users see it, so it is not prevented.
    - batched: ``linger.ms=5``, ``batch.num.messages=batch`` (32) and ``batch.size`` room for
      ``batch`` messages: a request per partition carries up to 32 messages, the counterpart
      of a 32-entry ``SendMessage`` or a 32-XADD pipeline."""
    scenario = spec.scenario
    config: dict[str, Any] = {
        "bootstrap.servers": spec.endpoint,
        "acks": "all",
        "enable.idempotence": False,
        "message.timeout.ms": 30_000,
        "queue.buffering.max.messages": max(1000, kafka_in_flight(scenario) * 2),
    }
    if scenario.mode is Mode.BATCHED:
        config.update(
            {
                "linger.ms": KAFKA_BATCH_LINGER_MS,
                "batch.num.messages": scenario.batch,
                "batch.size": scenario.batch * (scenario.message_size_bytes + 128),
            }
        )
    else:
        config["linger.ms"] = 0
    return config


def kafka_in_flight(scenario: Scenario) -> int:
    """Messages a producer may have awaiting delivery: ``in_flight`` requests' worth."""
    return scenario.in_flight * (scenario.batch if scenario.mode is Mode.BATCHED else 1)


def kafka_produce_one(
    producer: Any, topic: str, body: bytes, done: Callable[..., None], wait_s: float
) -> None:
    """``producer.produce`` once, serving delivery reports for ``wait_s`` while its local queue
    is full (BufferError)."""
    while True:
        try:
            producer.produce(topic, body, on_delivery=done)
            return
        except BufferError:
            producer.poll(wait_s)


def kafka_produce(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    from confluent_kafka import Producer  # type: ignore[import-not-found,unused-ignore]

    scenario, result = spec.scenario, WorkerResult()
    producer = Producer(kafka_producer_config(spec))
    body = _body(scenario.message_size_bytes, spec.worker)
    limit = kafka_in_flight(scenario)
    outstanding = 0
    measuring = False

    def send(i: int) -> None:
        nonlocal outstanding
        while outstanding >= limit:
            producer.poll(1.0)  # runs delivery callbacks, which lower ``outstanding``
        t0 = time.monotonic()
        measured = measuring

        def done(err: Any, _msg: Any) -> None:
            nonlocal outstanding
            outstanding -= 1
            if err is not None:
                result.fail(err)
            elif measured:
                result.record(time.monotonic() - t0, 1, scenario.message_size_bytes)

        kafka_produce_one(producer, spec.topics[i % len(spec.topics)], body, done, 0.1)
        outstanding += 1
        producer.poll(0)

    def drain() -> None:
        deadline = time.monotonic() + 60
        while outstanding and time.monotonic() < deadline:
            producer.poll(0.5)

    for i in range(spec.warmup_messages):
        send(i)
    drain()
    barrier.wait(timeout=120)
    measuring = True
    result.begin()
    for i in range(spec.messages):
        if time.monotonic() - result.start_s > spec.deadline_s:
            break
        _pace(scenario, spec.workers, result.start_s, i)
        send(i)
    drain()
    producer.flush(10)
    return result


def kafka_consumer_config(spec: WorkerSpec) -> dict[str, Any]:
    """A member of consumer group ``spec.group`` (KIP-848 protocol), offsets committed by the
    driver: ``enable.auto.commit=false`` and a synchronous ``commit()`` after every batch of
    up to 32 messages. Kafka's ack is that offset commit per partition: it acknowledges
    everything up to an offset, not message by message as a Pop ack does, and a message is
    not hidden from other members while in process (each partition has one reader)."""
    return {
        "bootstrap.servers": spec.endpoint,
        "group.id": spec.group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }


def kafka_consume(spec: WorkerSpec, barrier: Barrier, counter: Counter) -> WorkerResult:
    from confluent_kafka import Consumer  # type: ignore[import-not-found,unused-ignore]

    result = WorkerResult()
    consumer = Consumer(kafka_consumer_config(spec))
    size = spec.scenario.message_size_bytes
    started = False

    def on_assign(c: Any, partitions: list[Any]) -> None:
        # Before the barrier, hold new partitions paused so that librdkafka does not prefetch
        # messages outside the measured (and metered) window.
        c.incremental_assign(partitions)
        if not started and partitions:
            c.pause(partitions)

    consumer.subscribe(list(spec.topics), on_assign=on_assign)
    try:
        _kafka_wait_assignment(spec, consumer)
        barrier.wait(timeout=120)
        started = True
        result.begin()
        assigned = consumer.assignment()
        if assigned:
            consumer.resume(assigned)

        def receive() -> int:
            # Wait up to 1 s for one message, then take what is already fetched, up to 32 in
            # all (as XREADGROUP COUNT 32 BLOCK 1000 does): consume(32, timeout) alone would
            # hold a partial last batch until its timeout and count that wait as work.
            t0 = time.monotonic()
            first = consumer.poll(1.0)
            if first is None:
                return 0
            messages = [first, *consumer.consume(31, timeout=0)]
            good = [m for m in messages if m.error() is None]
            for m in messages:
                if m.error() is not None:
                    result.fail(m.error())
            if not good:
                return 0
            consumer.commit(asynchronous=False)
            result.record(time.monotonic() - t0, len(good), size)
            return len(good)

        _consume_loop(spec, counter, result, receive)
    finally:
        consumer.close()
    return result


def _kafka_wait_assignment(spec: WorkerSpec, consumer: Any) -> None:
    """Poll until this member's assignment has not changed for KAFKA_ASSIGN_SETTLE_S (the group
    has settled), or give up after KAFKA_ASSIGN_TIMEOUT_S (a member may get no partitions when
    the group has more members than partitions). Partitions stay paused, so nothing is read."""
    deadline = time.monotonic() + KAFKA_ASSIGN_TIMEOUT_S
    last: list[tuple[str, int]] = []
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            raise RuntimeError("a paused partition delivered a message before the barrier")
        now = [(p.topic, p.partition) for p in consumer.assignment()]
        if now != last:
            last, stable_since = now, time.monotonic()
        elif now and time.monotonic() - stable_since >= KAFKA_ASSIGN_SETTLE_S:
            return


PRODUCERS: dict[str, Callable[[WorkerSpec, Barrier], WorkerResult]] = {
    "rmq_stock": rmq_stock_produce,
    "rmq_raw": rmq_raw_produce,
    "nats": nats_produce,
    "redis": redis_produce,
    "kafka": kafka_produce,
}
CONSUMERS: dict[str, Callable[[WorkerSpec, Barrier, Counter], WorkerResult]] = {
    "rmq_stock": rmq_stock_consume,
    "rmq_raw": rmq_raw_consume,
    "nats": nats_consume,
    "redis": redis_consume,
    "kafka": kafka_consume,
}
