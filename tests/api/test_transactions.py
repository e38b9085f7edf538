"""Transactional messages with the official Producer: half messages stay invisible until
EndTransaction COMMIT, ROLLBACK drops them, an orphaned half message is resolved through the
producer's TransactionChecker (RecoverOrphanedTransactionCommand over Telemetry), and bad
EndTransaction requests are answered with INVALID_TRANSACTION_ID / BAD_REQUEST."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
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
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.api import receiving, transactions
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2
from gannet.node.store import properties as props
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log import records
from gannet.node.transactions import records as transaction_records
from gannet.node.transactions import service as transaction_service
from gannet.node.transactions.book import Resolution

from .conftest import settle, unique

pytestmark = pytest.mark.timeout(60)

QUICK = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    root = tmp_path_factory.mktemp("tx-broker")
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    running = threads.start(BrokerConfig(store=store, listen_port=0), pop=receiving.factory(QUICK))
    assert running.broker.messaging is not None
    handler = running.broker.messaging.transactions
    assert handler is not None
    handler.service.limits = transaction_service.TransactionLimits(
        check_after_ms=300, check_interval_ms=300, check_max=3
    )
    yield running
    running.stop()


class Checker(TransactionChecker):  # type: ignore[misc]
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.checked: list[Any] = []
        self.called = threading.Event()

    def check(self, message: Any) -> Any:
        self.checked.append(message)
        self.called.set()
        return self.answer


@pytest.fixture
def clients() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for client in reversed(started):
        client.shutdown()


def _setup(broker, admin, clients, checker: Checker) -> tuple[str, Any, Any]:
    topic, group = unique("Tx"), unique("TxG")
    admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=2, message_type=admin_pb2.TRANSACTION)
    )
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group))
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,), checker)
    producer.startup()
    clients.append(producer)
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=0)
    consumer.startup()
    clients.append(consumer)
    return topic, producer, consumer


def _message(topic: str, body: bytes) -> Message:
    msg = Message()
    msg.topic, msg.body, msg.tag, msg.keys = topic, body, "TxTag", "tx-key"
    msg.add_property("order", "42")
    return msg


def _receive(consumer: Any, timeout_s: float) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while not got and time.monotonic() < deadline:
        got = consumer.receive(32, 15)
    return got


UNDECIDED = TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
"""A checker that never ends the transaction: a check (after 300 ms) cannot race the test."""


def test_commit_makes_the_half_message_visible(broker, admin, clients) -> None:
    topic, producer, consumer = _setup(broker, admin, clients, Checker(UNDECIDED))
    transaction = producer.begin_transaction()
    receipt = producer.send(_message(topic, b"paid"), transaction)
    assert len(receipt.transaction_id) == 16
    settle(broker)
    assert _receive(consumer, 0.6) == []  # a half message is invisible
    transaction.commit()
    settle(broker)
    [got] = _receive(consumer, 5)
    assert (got.message_id, got.body, got.tag) == (receipt.message_id, b"paid", "TxTag")
    assert got.properties == {"order": "42"}
    assert list(got.keys) == ["tx-key"]
    consumer.ack(got)


def test_rollback_drops_the_half_message(broker, admin, clients) -> None:
    topic, producer, consumer = _setup(broker, admin, clients, Checker(UNDECIDED))
    transaction = producer.begin_transaction()
    producer.send(_message(topic, b"cancelled"), transaction)
    transaction.rollback()
    settle(broker)
    assert _receive(consumer, 1.0) == []  # and no check asks about it later
    service = broker.broker.messaging.transactions.service
    assert service.rolled_back_total >= 1


def test_orphaned_half_message_is_resolved_by_the_checker(broker, admin, clients) -> None:
    checker = Checker(TransactionResolution.COMMIT)
    topic, producer, consumer = _setup(broker, admin, clients, checker)
    transaction = producer.begin_transaction()
    receipt = producer.send(_message(topic, b"orphan"), transaction)  # never ended
    assert checker.called.wait(15), "the broker never asked the producer's checker"
    [asked] = checker.checked[:1]
    assert (asked.message_id, asked.topic, asked.body) == (receipt.message_id, topic, b"orphan")
    [got] = _receive(consumer, 10)  # the checker said COMMIT
    assert got.message_id == receipt.message_id
    consumer.ack(got)


def test_unresolved_orphan_is_discarded_after_the_checks(broker, admin, clients) -> None:
    checker = Checker(TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
    topic, producer, consumer = _setup(broker, admin, clients, checker)
    producer.send(_message(topic, b"undecided"), producer.begin_transaction())
    service = broker.broker.messaging.transactions.service
    before = service.abandoned_total
    deadline = time.monotonic() + 15
    while service.abandoned_total == before:
        assert time.monotonic() < deadline, "never abandoned"
        time.sleep(0.05)
    assert len(checker.checked) >= 3
    assert _receive(consumer, 0.5) == []
    store = broker.broker.store  # kept for inspection, as RocketMQ's resolveDiscardMsg does
    end = store.max_offset_in_queue(transaction_records.DISCARD_TOPIC, 0)
    [kept] = store.get_messages(transaction_records.DISCARD_TOPIC, 0, end - 1, 1).messages
    assert records.decode(kept.data).body == b"undecided"


def _half(messaging, topic: str, message_id: str) -> str:
    msg = definition_pb2.Message(body=b"x")
    msg.topic.name = topic
    msg.system_properties.message_id = message_id
    msg.system_properties.message_type = definition_pb2.TRANSACTION
    reply = messaging.SendMessage(service_pb2.SendMessageRequest(messages=[msg]), timeout=5)
    assert reply.status.code == Code.OK, reply.status
    return str(reply.entries[0].transaction_id)


def test_bad_end_transaction_requests(broker, messaging, admin) -> None:
    topic = unique("TxW")
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, message_type=admin_pb2.TRANSACTION))
    transaction_id = _half(messaging, topic, "0102FC000000013E000B13F97D00000077")

    def end(**fields: Any) -> definition_pb2.Status:
        request = service_pb2.EndTransactionRequest(
            transaction_id=fields.pop("transaction_id", transaction_id),
            message_id=fields.pop("message_id", "0102FC000000013E000B13F97D00000077"),
            resolution=fields.pop("resolution", definition_pb2.COMMIT),
        )
        request.topic.name = fields.pop("topic", topic)
        return messaging.EndTransaction(request, timeout=5).status

    for bad in ("", "zz", "0000000000000001", "7FFFFFFFFFFFFFFF", "not-hex-at-all!!"):
        status = end(transaction_id=bad)
        assert status.code == Code.INVALID_TRANSACTION_ID, (bad, status)
        assert "transaction_id" in status.message
    assert end(message_id="other").code == Code.INVALID_TRANSACTION_ID
    other = unique("TxO")
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=other, message_type=admin_pb2.TRANSACTION))
    assert end(topic=other).code == Code.INVALID_TRANSACTION_ID
    assert end(topic="NoSuchTopic").code == Code.TOPIC_NOT_FOUND
    status = end(resolution=definition_pb2.TRANSACTION_RESOLUTION_UNSPECIFIED)
    assert (status.code, "resolution" in status.message) == (Code.BAD_REQUEST, True)
    assert end().code == Code.OK
    assert end().code == Code.OK  # a retried commit: answered, not written again
    again = end(resolution=definition_pb2.ROLLBACK)
    assert again.code == Code.INVALID_TRANSACTION_ID
    assert "already" in again.message


def test_a_retried_transactional_send_gets_the_open_transaction(broker, messaging, admin) -> None:
    topic = unique("TxD")
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, message_type=admin_pb2.TRANSACTION))
    first = _half(messaging, topic, "0102FC000000013E000B13F97D000000D1")
    settle(broker)
    assert _half(messaging, topic, "0102FC000000013E000B13F97D000000D1") == first
    service = broker.broker.messaging.transactions.service
    assert transaction_service.parse_transaction_id(first) in service.book.pending_offsets()


def test_transactional_send_rules(broker, messaging, admin, make_topic) -> None:
    normal = make_topic()
    msg = definition_pb2.Message(body=b"x")
    msg.topic.name = normal
    msg.system_properties.message_id = "0102FC000000013E000B13F97D00000088"
    msg.system_properties.message_type = definition_pb2.TRANSACTION
    reply = messaging.SendMessage(service_pb2.SendMessageRequest(messages=[msg]), timeout=5)
    assert reply.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE  # NORMAL topic
    topic = unique("TxR")
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, message_type=admin_pb2.TRANSACTION))
    msg.topic.name = topic
    two = service_pb2.SendMessageRequest(messages=[msg, msg])
    reply = messaging.SendMessage(two, timeout=5)
    assert (reply.status.code, "alone" in reply.status.message) == (Code.BAD_REQUEST, True)
    msg.system_properties.message_group = "g"
    reply = messaging.SendMessage(service_pb2.SendMessageRequest(messages=[msg]), timeout=5)
    assert reply.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_pending_half_messages_are_recovered_from_the_store(broker, messaging, admin) -> None:
    topic = unique("TxS")
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, message_type=admin_pb2.TRANSACTION))
    open_id = _half(messaging, topic, "0102FC000000013E000B13F97D00000099")
    ended_id = _half(messaging, topic, "0102FC000000013E000B13F97D0000009A")
    request = service_pb2.EndTransactionRequest(
        transaction_id=ended_id,
        message_id="0102FC000000013E000B13F97D0000009A",
        resolution=definition_pb2.ROLLBACK,
    )
    request.topic.name = topic
    assert messaging.EndTransaction(request, timeout=5).status.code == Code.OK
    settle(broker)
    fresh = transaction_service.TransactionService(broker.broker.store, listen=False)  # a restart
    pending = fresh.book.pending_offsets()
    assert transaction_service.parse_transaction_id(open_id) in pending
    assert transaction_service.parse_transaction_id(ended_id) not in pending


def test_too_many_open_transactions_are_refused(broker, messaging, admin) -> None:
    topic = unique("TxM")
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, message_type=admin_pb2.TRANSACTION))
    service = broker.broker.messaging.transactions.service
    saved = service.limits
    service.limits = dataclasses.replace(saved, pending_max=service.pending())
    try:
        msg = definition_pb2.Message(body=b"x")
        msg.topic.name = topic
        msg.system_properties.message_id = "0102FC000000013E000B13F97D000000AB"
        msg.system_properties.message_type = definition_pb2.TRANSACTION
        reply = messaging.SendMessage(service_pb2.SendMessageRequest(messages=[msg]), timeout=5)
        assert reply.status.code == Code.TOO_MANY_REQUESTS
        assert "transactions are open" in reply.status.message
    finally:
        service.limits = saved


def _end(messaging, topic: str, message_id: str, transaction_id: str) -> definition_pb2.Status:
    request = service_pb2.EndTransactionRequest(
        transaction_id=transaction_id, message_id=message_id, resolution=definition_pb2.COMMIT
    )
    request.topic.name = topic
    return messaging.EndTransaction(request, timeout=5).status


def _stored(broker, topic: str) -> int:
    """Messages in ``topic``'s consume queues (after dispatch)."""
    settle(broker)
    store = broker.broker.store
    return sum(store.max_offset_in_queue(topic, q) for q in range(2))


def test_a_send_retried_after_its_commit_is_not_stored_twice(broker, messaging, admin) -> None:
    """Issue 34, seed 1002: the client's resend of a half message whose transaction is
    committed gets the original answer, and its commit writes nothing more."""
    topic = unique("TxC")
    admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=2, message_type=admin_pb2.TRANSACTION)
    )
    message_id = "0102FC000000013E000B13F97D000000C1"
    first = _half(messaging, topic, message_id)
    assert _end(messaging, topic, message_id, first).code == Code.OK
    settle(broker)
    again = _half(messaging, topic, message_id)
    assert again == first
    assert _end(messaging, topic, message_id, again).code == Code.OK
    assert _stored(broker, topic) == 1


def _second_half(broker, transaction_id: str) -> str:
    """Store the half message of ``transaction_id`` again (the other real queue), as a resend
    answered with an error but committed would: the send path's dedup is not asked."""
    store = broker.broker.store
    half = store.read_message(transaction_service.parse_transaction_id(transaction_id))
    assert half is not None
    half.properties[props.REAL_QUEUE_ID] = str(1 - int(half.properties[props.REAL_QUEUE_ID]))
    [result], _ = store.put_messages_nowait([half])
    settle(broker)
    return transaction_records.transaction_id_of(result.wrote_offset)


def test_two_halves_of_one_id_commit_one_message(broker, messaging, admin) -> None:
    """Both half messages of one id ended COMMIT (the client's END, then a check answer for
    the other): the topic holds the message once; the second end writes its op record only."""
    topic = unique("TxH")
    admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=2, message_type=admin_pb2.TRANSACTION)
    )
    message_id = "0102FC000000013E000B13F97D000000C2"
    first = _half(messaging, topic, message_id)
    second = _second_half(broker, first)
    assert second != first
    assert _end(messaging, topic, message_id, first).code == Code.OK
    assert _end(messaging, topic, message_id, second).code == Code.OK
    assert _end(messaging, topic, message_id, second).code == Code.OK  # a retry: OK, no write
    assert _stored(broker, topic) == 1
    book = broker.broker.messaging.transactions.service.book
    pending = book.pending_offsets()
    assert transaction_service.parse_transaction_id(second) not in pending


def test_checks_committing_two_halves_of_one_id_store_it_once(broker, admin, clients) -> None:
    """The seed-1002 shape: two half messages of one id, neither ended by the client, both
    committed by the producer's TransactionChecker: the topic holds the message once."""
    checker = Checker(TransactionResolution.COMMIT)
    topic, producer, consumer = _setup(broker, admin, clients, checker)
    transaction = producer.begin_transaction()
    sent = producer.send(_message(topic, b"once"), transaction)
    first = str(sent.transaction_id)
    second = _second_half(broker, first)
    service = broker.broker.messaging.transactions.service
    halves = {transaction_service.parse_transaction_id(t) for t in (first, second)}
    deadline = time.monotonic() + 20
    while halves & service.book.pending_offsets():
        assert time.monotonic() < deadline, "the checks did not end both transactions"
        checker.called.wait(0.1)  # a condition polled to its deadline: the check answers
    assert len(checker.checked) >= 2
    assert _stored(broker, topic) == 1
    got = _receive(consumer, 5)
    assert [m.body for m in got] == [b"once"]


def test_a_resend_while_its_half_is_in_flight_waits_for_it(broker) -> None:
    """The original half message is appended but not committed yet, and its caller went away
    (its client's deadline): the resend of the same id waits for that append's outcome and
    gets its answer; nothing is appended twice."""
    answer = service_pb2.SendMessageResponse(status=definition_pb2.Status(code=Code.OK))
    answer.entries.add(message_id="M-inflight", transaction_id="00000000000000AB", offset=3)

    async def scenario() -> None:
        async def commit(_: object) -> None:
            return None

        handler = transactions.TransactionHandler(
            broker.broker.store, str, commit, is_leader=lambda: False
        )
        started, release = asyncio.Event(), asyncio.Event()
        appends: list[int] = []

        async def append() -> service_pb2.SendMessageResponse:
            appends.append(1)
            started.set()
            await release.wait()  # in flight: appended, the commit not reached yet
            return answer

        try:
            original = asyncio.ensure_future(handler.send_once("TxF", ("M-inflight",), append))
            await started.wait()
            original.cancel()  # the original's caller went away
            resend = asyncio.ensure_future(handler.send_once("TxF", ("M-inflight",), append))
            await asyncio.sleep(0)  # the resend runs up to its first wait
            release.set()
            assert await resend == answer
            assert appends == [1]
        finally:
            handler.begin_shutdown()
            handler.service.close()

    asyncio.run(scenario())


def test_after_a_restart_a_committed_id_is_found_in_the_index(broker, messaging, admin) -> None:
    """The book of a restarted member does not know the ids committed before: committing a
    second half message of such an id writes its op record only (the index has the copy)."""
    topic = unique("TxI")
    admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=2, message_type=admin_pb2.TRANSACTION)
    )
    message_id = "0102FC000000013E000B13F97D000000C3"
    first = _half(messaging, topic, message_id)
    second = _second_half(broker, first)
    assert _end(messaging, topic, message_id, first).code == Code.OK
    settle(broker)
    fresh = transaction_service.TransactionService(broker.broker.store, listen=False)  # a restart
    prepared = fresh.prepare_end(topic, message_id, second, Resolution.COMMIT)
    assert prepared is not None
    offset, writes = prepared
    fresh.book.end_failed(offset)
    assert [w.topic for w in writes] == [transaction_records.OP_TOPIC]
