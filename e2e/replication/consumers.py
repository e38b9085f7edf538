"""Official Python consumers for the failover e2e (:mod:`e2e.replication.failover`).

* :class:`SimpleLoad` — a ``SimpleConsumer`` receiving up to 16 and acking each, all along.
* :class:`PushLoad` — a ``PushConsumer`` whose listener records each delivery (the client acks
  after the listener returns ``SUCCESS``).
* :class:`RemotingLoad` — the official 4.9.8 remoting ``DefaultMQPushConsumer`` or
  ``DefaultLitePullConsumer`` in its own process (``e2e/clients/remoting/FailoverConsumer.java``),
  on every member as name server; it prints each delivery, and commits its offsets to the
  broker as it does by default (:meth:`RemotingLoad.offsets_at_end` checks them).

Both record every delivery of every key with its time. The end check (:meth:`SimpleLoad.settle`,
:meth:`PushLoad.settle`) holds that every acknowledged send reached the consumer: a key never
delivered is missing. A SimpleConsumer key whose ack *raised* and that was never delivered again
is judged on the broker: an ack whose answer was lost in a kill may have taken effect (the old
leader matched it and committed the group's offset past the message before it died; RocketMQ
does the same), so the key is "ack took effect" when the group's committed offset on its queue
is past it on every member (through the log) once the message's invisible time and a revive
margin have passed, and missing otherwise (it should have come back).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.v5.model import Message as ReceivedMessage

from e2e.processes import wait_for
from e2e.replication.clients import CLIENTS, START_TIMEOUT_S, ClientMissing, remoting_lib
from e2e.replication.harness import ProcessGroup
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

INVISIBLE_S = 10
REVIVE_MARGIN_S = 10.0
"""After a message's invisible time, how long its revive may take to deliver it again."""


@dataclass
class Settlement:
    """What became of the acknowledged sends at the consumer."""

    never_delivered: set[str] = field(default_factory=set)
    ack_took_effect: set[str] = field(default_factory=set)
    """Delivered, the ack raised, not delivered again: the group's offset is past them."""
    stuck: set[str] = field(default_factory=set)
    """Delivered, the ack raised, not delivered again, the group's offset is not past them."""
    duplicates: int = 0
    """Deliveries beyond the first of the acknowledged keys (at least once allows them)."""

    @property
    def missing(self) -> set[str]:
        return self.never_delivered | self.stuck


class Deliveries:
    """Every delivery of every key, with the times; thread-safe, awaitable."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.last_at: dict[str, float] = {}
        self.times: list[float] = []
        self.progress = threading.Condition()

    def note(self, key: str) -> None:
        with self.progress:
            now = time.monotonic()
            self.count[key] = self.count.get(key, 0) + 1
            self.last_at[key] = now
            self.times.append(now)
            self.progress.notify_all()

    def first_after(self, moment: float, timeout_s: float) -> float | None:
        with self.progress:
            self.progress.wait_for(lambda: bool(self.times) and self.times[-1] > moment, timeout_s)
            return next((t for t in self.times if t > moment), None)

    def wait_all(self, keys: set[str], timeout_s: float) -> set[str]:
        """The keys of ``keys`` not delivered within ``timeout_s``."""
        with self.progress:
            self.progress.wait_for(lambda: keys <= self.count.keys(), timeout_s)
            return keys - self.count.keys()

    def longest_silence(self, since: float) -> float:
        """The longest time without a delivery from ``since`` until now."""
        with self.progress:
            moments = [since, *(t for t in self.times if t > since), time.monotonic()]
        return max(b - a for a, b in itertools.pairwise(moments))

    def duplicates(self, keys: set[str]) -> int:
        with self.progress:
            return sum(self.count.get(k, 1) - 1 for k in keys)


def _endpoints(group: ProcessGroup) -> str:
    return ";".join(group.client_endpoint(i) for i in group.ids)


class SimpleLoad(threading.Thread):
    """One official SimpleConsumer on every member's endpoint: receive up to 16, ack each."""

    def __init__(self, group: ProcessGroup, topic: str, consumer_group: str) -> None:
        super().__init__(name="failover-consumer", daemon=True)
        self.group = group
        self.topic = topic
        self.consumer_group = consumer_group
        self.consumer = SimpleConsumer(
            ClientConfiguration(_endpoints(group), Credentials(), request_timeout=3),
            consumer_group,
            {topic: FilterExpression("*")},
            await_duration=5,  # the broker long-polls at least 5 s
        )
        self.deliveries = Deliveries()
        self.acked_keys: set[str] = set()
        self.acks: list[tuple[float, float]] = []
        """When each successful ack began and was answered (monotonic)."""
        self.ack_failures: dict[str, str] = {}
        """The last ack failure of each key whose ack raised (for the report)."""
        self.failures = 0
        self.done = threading.Event()
        self.progress = threading.Condition()

    def start(self) -> None:
        """Start the consumer, then the receiving thread."""
        self.consumer.startup()
        super().start()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                messages = self.consumer.receive(16, INVISIBLE_S)
            except Exception:  # the client's retries ran out: poll again
                self.failures += 1
                continue
            for message in messages:
                key = bytes(message.body).decode()
                self.deliveries.note(key)
                began = time.monotonic()
                try:
                    self.consumer.ack(message)
                except Exception as exc:  # comes back after its invisible time, or took effect
                    self.failures += 1
                    with self.progress:
                        self.ack_failures[key] = f"{type(exc).__name__}: {exc}"[:200]
                    continue
                with self.progress:
                    self.acked_keys.add(key)
                    self.acks.append((began, time.monotonic()))
                    self.progress.notify_all()

    def first_ack_after(self, moment: float, timeout_s: float) -> float | None:
        """When the first ack begun after ``moment`` was answered (None: none in time)."""
        with self.progress:
            self.progress.wait_for(lambda: bool(self.acks) and self.acks[-1][0] > moment, timeout_s)
            return next((done for began, done in self.acks if began > moment), None)

    def settle(self, keys: set[str], timeout_s: float) -> Settlement:
        """Wait until every key was delivered and every failed ack was delivered again or
        may have taken effect (module docstring); call before :meth:`stop`."""
        result = Settlement(never_delivered=self.deliveries.wait_all(keys, timeout_s))
        with self.progress:
            pending = (keys & self.ack_failures.keys()) - self.acked_keys
            last = max((self.deliveries.last_at[k] for k in pending), default=0.0)
            until = last + INVISIBLE_S + REVIVE_MARGIN_S
            self.progress.wait_for(
                lambda: pending <= self.acked_keys, max(0.0, until - time.monotonic())
            )
            pending -= self.acked_keys
        if pending:
            committed = _committed_offsets(self.group, self.consumer_group)
            for key in pending:
                queue_id, offset = _position(self.group, self.topic, key)
                passed = committed.get((self.topic, queue_id), -1) > offset
                (result.ack_took_effect if passed else result.stuck).add(key)
        result.duplicates = self.deliveries.duplicates(keys)
        return result

    def stop(self) -> None:
        self.done.set()
        self.join(30)
        self.consumer.shutdown()


class _Listener(MessageListener):  # type: ignore[misc]
    def __init__(self, deliveries: Deliveries) -> None:
        self.deliveries = deliveries

    def consume(self, message: ReceivedMessage) -> ConsumeResult:
        self.deliveries.note(bytes(message.body).decode())
        return ConsumeResult.SUCCESS


class PushLoad:
    """One official PushConsumer on every member's endpoint; its listener records deliveries."""

    def __init__(self, group: ProcessGroup, topic: str, consumer_group: str) -> None:
        self.deliveries = Deliveries()
        self.consumer = PushConsumer(
            ClientConfiguration(_endpoints(group), Credentials(), request_timeout=3),
            consumer_group,
            _Listener(self.deliveries),
            {topic: FilterExpression("*")},
        )

    def start(self) -> None:
        self.consumer.startup()

    def first_delivery_after(self, moment: float, timeout_s: float) -> float | None:
        return self.deliveries.first_after(moment, timeout_s)

    def settle(self, keys: set[str], timeout_s: float) -> Settlement:
        """Every key delivered at least once (the client acks by itself: an ack it lost
        brings the message back after its invisible time)."""
        missing = self.deliveries.wait_all(keys, timeout_s)
        return Settlement(never_delivered=missing, duplicates=self.deliveries.duplicates(keys))

    def stop(self) -> None:
        self.consumer.shutdown()


class RemotingLoad(threading.Thread):
    """A 4.9.8 remoting consumer process (``mode`` "push" or "lite"); its lines are deliveries."""

    def __init__(
        self, group: ProcessGroup, topic: str, consumer_group: str, mode: str, log_path: Path
    ) -> None:
        super().__init__(name=f"failover-remoting-{mode}", daemon=True)
        if shutil.which("java") is None:
            raise ClientMissing("java is not installed; it runs the remoting client")
        self.group = group
        self.topic = topic
        self.consumer_group = consumer_group
        self.mode = mode
        self.deliveries = Deliveries()
        self.queue_times: dict[int, list[float]] = {}
        """When each queue's messages were delivered (monotonic), by queue id."""
        self.ready = threading.Event()
        self.stopped = threading.Event()
        source = CLIENTS / "remoting" / "FailoverConsumer.java"
        name_servers = ";".join(group.remoting_endpoint(i) for i in group.ids)
        properties = [
            "-Drocketmq.client.logLevel=WARN",
            f"-Drocketmq.client.logRoot={log_path.parent}",
        ]
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            ["java", *properties, "-cp", f"{remoting_lib()}/*", str(source), mode,
             name_servers, topic, consumer_group],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )  # fmt: skip

    def run(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            fields = raw.decode(errors="replace").split()
            if fields[:1] == ["ready"]:
                self.ready.set()
            elif fields[:1] == ["got"] and len(fields) == 5:
                with self.deliveries.progress:
                    self.queue_times.setdefault(int(fields[2]), []).append(time.monotonic())
                self.deliveries.note(fields[1])
            elif fields[:1] == ["stopped"]:
                self.stopped.set()

    def start(self) -> None:
        """Start reading its lines; return once its consumer is up."""
        super().start()
        if not self.ready.wait(START_TIMEOUT_S):
            raise AssertionError(
                f"the remoting {self.mode} consumer did not start in {START_TIMEOUT_S:.0f} s "
                f"(exit code {self.process.poll()}; its stderr is in {self._log.name})"
            )

    def first_delivery_after(self, moment: float, timeout_s: float) -> float | None:
        return self.deliveries.first_after(moment, timeout_s)

    def longest_queue_silence(self, since: float) -> float:
        """The longest time any one queue went without a delivery from ``since`` until now (a
        consumer steered to a member that died stalls on its queues only)."""
        with self.deliveries.progress:
            now = time.monotonic()
            return max(
                (
                    max(
                        b - a
                        for a, b in itertools.pairwise([since, *(t for t in ts if t > since), now])
                    )
                    for ts in self.queue_times.values()
                ),
                default=0.0,
            )

    def settle(self, keys: set[str], timeout_s: float) -> Settlement:
        """Every key delivered at least once; duplicates counted."""
        missing = self.deliveries.wait_all(keys, timeout_s)
        return Settlement(never_delivered=missing, duplicates=self.deliveries.duplicates(keys))

    def stop(self) -> None:
        """Close its input: it shuts the consumer down, which commits its offsets."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.join(10)
        self._log.close()
        assert self.stopped.is_set(), f"the consumer did not shut down ({self._log.name})"

    def offsets_at_end(self, timeout_s: float) -> dict[int, int]:
        """Once the consumer is stopped: wait until every member holds the group's committed
        offset at the end of each queue of the topic (everything consumed, and the commits
        replicated); the lag per member when that does not happen in time (empty: it did)."""
        lags: dict[int, int] = {}

        def at_end() -> bool:
            lags.clear()
            for node_id in self.group.ids:
                reply = self.group.admin_call(
                    node_id, "DescribeGroup",
                    admin_pb2.DescribeGroupRequest(name=self.consumer_group),
                )  # fmt: skip
                assert isinstance(reply, admin_pb2.DescribeGroupResponse)
                committed = {q.queue_id: q for q in reply.queues if q.topic == self.topic}
                topic = self.group.admin_call(
                    node_id, "DescribeTopic", admin_pb2.DescribeTopicRequest(name=self.topic)
                )
                assert isinstance(topic, admin_pb2.DescribeTopicResponse)
                lag = 0
                for queue in topic.queues:
                    held = committed.get(queue.queue_id)
                    offset = held.committed_offset if held is not None else -1
                    lag += queue.max_offset - max(offset, 0)
                if lag:
                    lags[node_id] = lag
            return not lags

        with contextlib.suppress(AssertionError):
            wait_for(at_end, timeout_s, "the group's offsets at the end of every queue", 0.5)
        return dict(lags)


def _committed_offsets(group: ProcessGroup, consumer_group: str) -> dict[tuple[str, int], int]:
    """The group's committed offset of each queue as every member knows it (the lowest): an
    offset the leader holds only in memory, not through the log, does not count."""
    lowest: dict[tuple[str, int], int] = {}
    for node_id in group.ids:
        reply = group.admin_call(
            node_id, "DescribeGroup", admin_pb2.DescribeGroupRequest(name=consumer_group)
        )
        assert isinstance(reply, admin_pb2.DescribeGroupResponse)
        for q in reply.queues:
            key = (q.topic, q.queue_id)
            lowest[key] = min(lowest.get(key, q.committed_offset), q.committed_offset)
    return lowest


def _position(group: ProcessGroup, topic: str, key: str) -> tuple[int, int]:
    """Queue id and queue offset of the message with ``key`` (on the leader)."""
    with group.channel(group.current_leader()) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        found = ProcessGroup.query_key(stub, topic, key)
    assert found, f"{key} is not stored"
    return int(found[0].queue_id), int(found[0].queue_offset)
