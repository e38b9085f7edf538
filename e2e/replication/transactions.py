"""Transactional messages through crashes, as the official Python client sees them.

One broker process, or a 3-member Raft group (:class:`~e2e.replication.harness.ProcessGroup`),
with short transaction checks (``--transaction-timeout-ms``/``--transaction-check-interval-ms``
:data:`CHECK_MS`). :func:`run`:

1. **producer crash before commit** — a producer process sends two half messages (bodies
   ``commit-…`` and ``rollback-…``) and is SIGKILLed before it ends either;
2. **broker crash between half message and commit** — this process's producer sends a half
   message ``live-…``; the leader is SIGKILLed (a single node is SIGKILLed and started again);
   the producer then commits (retried until answered: a retry of a commit that did land is
   answered OK without a second write);
3. **check-back** — a new producer of the topic (the restarted application) joins; both live
   producers share a ``TransactionChecker`` that answers COMMIT for ``commit-…`` and ROLLBACK
   otherwise; the broker (the new leader's check records, offered by whichever member holds a
   producer's Telemetry stream, to any producer of the topic, as RocketMQ) asks about the two
   orphans.

Then a consumer must receive exactly ``commit-…`` and ``live-…``, each once, and nothing more
for :data:`QUIET_S` (a duplicate from a replayed or re-checked transaction would show here).

Used by ``tests/replication/test_transactions_e2e.py`` (``make test``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

from e2e.processes import wait_for
from e2e.replication.harness import ProcessGroup
from gannet.node.protocol.gen import admin_pb2

CHECK_MS = 1_000
CHECK_MAX = 30
QUIET_S = 3.0
"""Listen this long after the last expected message: three check intervals."""
COMMIT_RETRY_S = 30.0
REQUEST_TIMEOUT_S = 10
TOPIC = "TxE2E"
GROUP = "TxE2EGroup"

_CRASHING_PRODUCER = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker

class Never(TransactionChecker):
    def check(self, message):
        return None

endpoints, topic, tag = sys.argv[1:4]
config = ClientConfiguration(endpoints, Credentials(), request_timeout=10)
producer = Producer(config, (topic,), Never())
producer.startup()
for body in (f"commit-{tag}", f"rollback-{tag}"):
    msg = Message()
    msg.topic, msg.body = topic, body.encode()
    receipt = producer.send(msg, producer.begin_transaction())
    print(json.dumps([body, receipt.message_id, receipt.transaction_id]), flush=True)
time.sleep(3600)
"""


class Checker(TransactionChecker):  # type: ignore[misc]
    """COMMIT for ``commit-…`` bodies, ROLLBACK for the rest; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[bytes] = []
        self.lock = threading.Lock()

    def check(self, message: Any) -> Any:
        with self.lock:
            self.asked.append(bytes(message.body))
        if bytes(message.body).startswith(b"commit-"):
            return TransactionResolution.COMMIT
        return TransactionResolution.ROLLBACK


@dataclass
class Outcome:
    received: dict[bytes, int] = field(default_factory=dict)
    """Body → times a consumer received it."""
    asked: list[bytes] = field(default_factory=list)
    """Bodies the producers' checker was asked about."""
    killed: int = 0
    """The broker SIGKILLed between half message and commit."""
    commit_attempts: int = 0


def _extra_args() -> tuple[str, ...]:
    return (
        "--transaction-timeout-ms", str(CHECK_MS),
        "--transaction-check-interval-ms", str(CHECK_MS),
        "--transaction-check-max", str(CHECK_MAX),
    )  # fmt: skip


def _create(group: ProcessGroup, node_id: int) -> None:
    deadline = time.monotonic() + 30
    requests: list[tuple[str, object]] = [
        (
            "CreateTopic",
            admin_pb2.CreateTopicRequest(
                name=TOPIC, queue_nums=2, message_type=admin_pb2.TRANSACTION
            ),
        ),
        ("CreateGroup", admin_pb2.CreateGroupRequest(name=GROUP)),
    ]
    for method, request in requests:
        while True:
            target = group.leader() if group.replicated else node_id
            try:
                group.admin_call(target, method, request)
                break
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                    break
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def _endpoints(group: ProcessGroup) -> str:
    return ";".join(group.client_endpoint(i) for i in group.alive())


def _crashing_producer(endpoints: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_PRODUCER, endpoints, TOPIC, "orphan"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for _ in range(2):
        line = process.stdout.readline()
        if not line:
            process.kill()
            raise RuntimeError("the crashing producer ended before sending its half messages")
        json.loads(line)
    return process


def _commit_until_answered(transaction: Any) -> int:
    deadline = time.monotonic() + COMMIT_RETRY_S
    attempts = 0
    while True:
        attempts += 1
        try:
            transaction.commit()
            return attempts
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _consume(endpoints: str, expected: set[bytes], outcome: Outcome, timeout_s: float) -> None:
    config = ClientConfiguration(endpoints, Credentials(), request_timeout=REQUEST_TIMEOUT_S)
    consumer = SimpleConsumer(config, GROUP, {TOPIC: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    try:
        deadline = time.monotonic() + timeout_s
        quiet_until = None
        while True:
            now = time.monotonic()
            if quiet_until is None and expected <= set(outcome.received):
                quiet_until = now + QUIET_S
            if quiet_until is not None and now > quiet_until:
                return
            if now > deadline:
                return
            try:
                got = consumer.receive(16, 60)
            except Exception:
                time.sleep(0.2)
                continue
            for message in got:
                body = bytes(message.body)
                outcome.received[body] = outcome.received.get(body, 0) + 1
                consumer.ack(message)
    finally:
        consumer.shutdown()


def run(root: Path, size: int) -> Outcome:
    """The scenario on ``size`` brokers (1: one unreplicated broker); see the module doc."""
    group = ProcessGroup(root, size, replicated=size > 1, extra_args=_extra_args())
    outcome = Outcome()
    producers: list[Producer] = []
    crashing: subprocess.Popen[str] | None = None
    try:
        group.start()
        _create(group, 1)
        endpoints = _endpoints(group)
        config = ClientConfiguration(endpoints, Credentials(), request_timeout=REQUEST_TIMEOUT_S)
        # 1. a producer crashes with two open transactions
        crashing = _crashing_producer(endpoints)
        crashing.kill()
        crashing.wait(10)
        # 2. a broker crash between half message and commit
        checker = Checker()  # the broker may ask any producer of the topic: both share it
        live = Producer(config, (TOPIC,), checker)
        live.startup()
        producers.append(live)
        message = Message()
        message.topic, message.body = TOPIC, b"live-1"
        transaction = live.begin_transaction()
        live.send(message, transaction)
        outcome.killed = group.current_leader() if group.replicated else 1
        group.kill(outcome.killed)
        if not group.replicated:
            group.start(1)
        else:
            group.leader()
        outcome.commit_attempts = _commit_until_answered(transaction)
        # 3. the restarted application's producer answers the checks of the orphans
        restarted = Producer(
            ClientConfiguration(_endpoints(group), Credentials(), request_timeout=10),
            (TOPIC,),
            checker,
        )
        restarted.startup()
        producers.append(restarted)
        try:
            wait_for(
                lambda: {b"commit-orphan", b"rollback-orphan"} <= set(checker.asked),
                30,
                "the broker to ask the new producer about both orphaned transactions",
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; asked {checker.asked}, killed {outcome.killed}, alive "
                f"{group.alive()}, logs in {root}"
            ) from None
        _consume(_endpoints(group), {b"commit-orphan", b"live-1"}, outcome, 30)
        outcome.asked = list(checker.asked)
        return outcome
    finally:
        if crashing is not None and crashing.poll() is None:
            crashing.kill()
            crashing.wait(10)
        for producer in producers:
            with contextlib.suppress(Exception):
                producer.shutdown()
        group.close()
