"""``DescribeTopic``'s figures of messages a broker group holds outside a topic's queues, which
an operator's drain waits for: delayed messages in the timer wheel and prepared transactions.
Also what happens to them when the topic is read-only (a draining group): a delayed message
still comes due into its queue, and a commit still lands."""

from __future__ import annotations

import dataclasses
import time

from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.protocol.gen import admin_pb2
from gannet.node.store.configs.topics import PERM_READ
from gannet.node.transactions import service as transaction_service

from .conftest import settle, unique

READ_ONLY = PERM_READ


def _send(messaging, topic: str, message_id: str, **system: object) -> str:
    msg = definition_pb2.Message(body=b"x")
    msg.topic.name = topic
    msg.system_properties.message_id = message_id
    for name, value in system.items():
        if name == "delivery_ms":
            msg.system_properties.delivery_timestamp.FromMilliseconds(int(value))  # type: ignore[call-overload]
        else:
            setattr(msg.system_properties, name, value)
    reply = messaging.SendMessage(service_pb2.SendMessageRequest(messages=[msg]), timeout=5)
    assert reply.status.code == Code.OK, reply.status
    return str(reply.entries[0].transaction_id)


def _end(messaging, topic: str, message_id: str, transaction_id: str, resolution: int) -> None:
    request = service_pb2.EndTransactionRequest(
        transaction_id=transaction_id, message_id=message_id, resolution=resolution
    )
    request.topic.name = topic
    assert messaging.EndTransaction(request, timeout=5).status.code == Code.OK


def _stored(admin, topic: str) -> int:
    described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic))
    return sum(q.max_offset - q.min_offset for q in described.queues)


def _due_ms(broker) -> int:
    """A delivery time ten minutes past both the clock and the wheel's read time: the wheel's
    own thread cannot reach it while the test runs, however slow the machine, and a test that
    ran before and moved the wheel on with a virtual tick is behind it. The tests fire their
    messages with such ticks of their own. (Inside the test wheel's 30-minute roll window, so
    one tick fires it.)"""
    timer_store = broker.broker.store.timers.timer_store
    read_ms = timer_store.read_time_ms if timer_store is not None else None
    return max(int(time.time() * 1000), read_ms or 0) + 600_000


def test_delayed_messages_are_counted_until_due_and_delivered_into_a_read_only_queue(
    broker, messaging, admin
) -> None:
    topic = unique("Later")
    admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=1, message_type=admin_pb2.DELAY)
    )
    due_ms = _due_ms(broker)
    for i in range(2):
        _send(messaging, topic, f"0102FC000000013E000B13F97D0000D0{i:02X}", delivery_ms=due_ms)
    settle(broker)
    described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic))
    assert described.delayed_counted
    assert described.delayed_messages == 2
    assert due_ms <= described.delayed_last_due_ms <= due_ms + 2_000
    assert _stored(admin, topic) == 0
    # The group drains: its queues are read-only. The wheel still delivers into them.
    admin.UpdateTopic(admin_pb2.UpdateTopicRequest(name=topic, perm=READ_ONLY))
    store = broker.broker.store
    store.timers.tick(described.delayed_last_due_ms + 1_000)  # the timer thread's own call
    settle(broker)
    assert _stored(admin, topic) == 2
    described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic))
    assert (described.delayed_messages, described.delayed_last_due_ms) == (0, 0)


def test_prepared_transactions_are_counted_until_ended_and_a_commit_lands_read_only(
    broker, messaging, admin
) -> None:
    handler = broker.broker.messaging.transactions
    limits = handler.service.limits
    handler.service.limits = dataclasses.replace(limits, check_after_ms=600_000)  # no checks
    try:
        topic = unique("Pay")
        admin.CreateTopic(
            admin_pb2.CreateTopicRequest(
                name=topic, queue_nums=1, message_type=admin_pb2.TRANSACTION
            )
        )
        ids = [f"0102FC000000013E000B13F97D0000E0{i:02X}" for i in range(3)]
        tx = [_send(messaging, topic, m, message_type=definition_pb2.TRANSACTION) for m in ids]
        settle(broker)
        described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic))
        assert described.prepared_transactions == 3
        # A restart rebuilds the open transactions from the store.
        fresh = transaction_service.TransactionService(broker.broker.store, listen=False)
        assert fresh.book.pending_of(topic) == 3
        admin.UpdateTopic(admin_pb2.UpdateTopicRequest(name=topic, perm=READ_ONLY))
        _end(messaging, topic, ids[0], tx[0], definition_pb2.COMMIT)
        _end(messaging, topic, ids[1], tx[1], definition_pb2.ROLLBACK)
        settle(broker)
        assert _stored(admin, topic) == 1  # the commit landed in the read-only queue
        described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic))
        assert described.prepared_transactions == 1
        _end(messaging, topic, ids[2], tx[2], definition_pb2.COMMIT)
        described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic))
        assert described.prepared_transactions == 0
    finally:
        handler.service.limits = limits


def test_a_delivered_delayed_message_stays_counted_until_it_is_in_its_queue(
    broker, messaging, admin
) -> None:
    """The wheel has appended the message's copy but dispatch has not written its queue entry
    yet: ``DescribeTopic`` must not answer 0 delayed and 0 stored (a drain would delete the
    group in that gap). It waits for dispatch a moment, then says the count is unknown."""
    topic = unique("Gap")
    admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=1, message_type=admin_pb2.DELAY)
    )
    due_ms = _due_ms(broker)
    _send(messaging, topic, "0102FC000000013E000B13F97D0000D100", delivery_ms=due_ms)
    settle(broker)
    store = broker.broker.store
    with store.dispatch.paused():  # dispatch cannot run: the copy is appended, not dispatched
        assert store.timers.tick(due_ms + 2_000) == 1
        held = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic))
        assert sum(q.max_offset for q in held.queues) == 0
        assert held.delayed_messages == 1
        assert not held.delayed_counted  # dispatch did not catch up: the drain keeps waiting
    settle(broker)
    done = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic))
    assert (done.delayed_counted, done.delayed_messages, _stored(admin, topic)) == (True, 0, 1)
