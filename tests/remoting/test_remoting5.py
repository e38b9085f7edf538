"""The official RocketMQ 5.x remoting Java client, unchanged (rocketmq-client 5.3.3), against a
broker's name-server and remoting ports, in one JVM (``Remoting5Clients.java``): DefaultMQProducer
sends; TransactionMQProducer commit, rollback and a check-back (the listener answers UNKNOW, the
broker's CHECK_TRANSACTION_STATE reaches the producer over its connection and its answer
commits); and the transactions seen from the store and from the official Python gRPC client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.store import msgids
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.log import records
from gannet.node.transactions.book import CheckLimits

from . import java5_clients

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
PREFIX = "R5"
QUICK = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200)
# a half message is checked 3 s after it was stored (long enough for the oneway commit and
# rollback to arrive on a busy machine: only the UNKNOW one may be checked), again every 2 s
CHECKS = CheckLimits(check_after_ms=3_000, check_interval_ms=2_000)
AWAIT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    root = tmp_path_factory.mktemp("remoting5-broker")
    config = BrokerConfig(
        store=StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH),
        listen_port=0,
        remoting_port=0,
        nameserver_port=0,
        auto_create_topics=True,
        auto_create_groups=True,
        transaction_limits=CHECKS,
        metrics_listen="127.0.0.1:0",
    )
    running = threads.start(config, pop=receiving.factory(QUICK))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def lines(broker: threads.BrokerThread, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Every scenario, one JVM."""
    logs = tmp_path_factory.mktemp("rocketmq5-client-logs")
    # the orderpop scenario's group consumes orderly (FIFO)
    orderly = SubscriptionGroupConfig(f"{PREFIX}OrdG", consume_message_orderly=True)
    broker.broker.store.group_configs.put(orderly)
    return java5_clients.run(
        logs, broker.broker.nameserver_endpoint, PREFIX, "send", "tx", "pop", "batchack",
        "ids", "sqlquote", "orderpop",
    )  # fmt: skip


def _keys_in(broker: threads.BrokerThread, topic: str) -> list[str]:
    store = broker.broker.store
    config = store.topic_configs.get(topic)
    if config is None:
        return []
    keys = []
    for queue in range(config.read_queue_nums):
        got = store.get_messages(topic, queue, 0, 64)
        keys += [" ".join(records.decode(m.data).keys) for m in got.messages]
    return sorted(keys)


def _transactions(broker: threads.BrokerThread) -> Any:
    servicer = broker.broker.messaging
    assert servicer is not None
    assert servicer.transactions is not None
    return servicer.transactions


def _await(condition: Any, what: str) -> None:
    deadline = time.monotonic() + AWAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {AWAIT_S} s")
        time.sleep(0.05)


def test_sends_of_the_5x_producer(lines: list[str]) -> None:
    sent = [line.split(" ") for line in lines if line.startswith("sent ")]
    assert [s[1] for s in sent] == [f"{PREFIX}-send-{i}" for i in range(4)]
    assert "ok send" in lines


def test_commit_rollback_and_check_back(broker: threads.BrokerThread, lines: list[str]) -> None:
    assert "ok tx" in lines, lines
    halves = {line.split(" ")[1]: line.split(" ")[2:] for line in lines if line.startswith("half ")}
    assert halves[f"{PREFIX}-commit"][0] == "COMMIT_MESSAGE"
    assert halves[f"{PREFIX}-rollback"][0] == "ROLLBACK_MESSAGE"
    assert halves[f"{PREFIX}-check"][0] == "UNKNOW"
    checked = [line.split(" ") for line in lines if line.startswith("checked ")]
    # the check reached the producer with the real topic; only the UNKNOW one was checked
    assert [c[1:3] for c in checked] == [[f"{PREFIX}-check", f"{PREFIX}Tx"]]
    handler = _transactions(broker)
    _await(lambda: handler.service.pending() == 0, "every transaction resolved")
    assert _keys_in(broker, f"{PREFIX}Tx") == [f"{PREFIX}-check", f"{PREFIX}-commit"]
    assert handler.service.committed_total == 2
    assert handler.service.rolled_back_total == 1
    requests = broker.broker.remoting_requests
    assert requests is not None
    assert requests.transactions.checks_sent_total >= 1


def test_committed_over_remoting_received_over_grpc(
    broker: threads.BrokerThread, lines: list[str]
) -> None:
    assert "ok tx" in lines
    handler = _transactions(broker)
    _await(lambda: handler.service.pending() == 0, "every transaction resolved")
    config = ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)
    consumer = SimpleConsumer(
        config, "R5GrpcReader", {f"{PREFIX}Tx": FilterExpression("*")}, await_duration=0
    )
    consumer.startup()
    got: list[Any] = []
    try:
        deadline = time.monotonic() + AWAIT_S
        while len(got) < 2 and time.monotonic() < deadline:
            batch = consumer.receive(32, 15)
            for message in batch:
                consumer.ack(message)
            got.extend(batch)
    finally:
        consumer.shutdown()
    assert sorted(k for m in got for k in m.keys) == [f"{PREFIX}-check", f"{PREFIX}-commit"]
    assert {m.body for m in got} == {
        f"body {PREFIX}-check".encode(),
        f"body {PREFIX}-commit".encode(),
    }


def test_push_consumer_in_pop_mode_with_tags_ack_and_retry(
    broker: threads.BrokerThread, lines: list[str]
) -> None:
    assert "ok pop" in lines, lines
    popped = [line.split(" ")[1:] for line in lines if line.startswith("popped ")]
    keys = [key for key, *_ in popped]
    # TagA only; the failed one twice (its second delivery counts one reconsume), others once
    assert sorted(keys) == sorted(
        [f"{PREFIX}-pop-0", f"{PREFIX}-pop-1", f"{PREFIX}-pop-1", f"{PREFIX}-pop-2"]
    )
    assert {tag for _, tag, *_ in popped} == {"TagA"}
    again = [times for key, _, times, *_ in popped if key == f"{PREFIX}-pop-1"]
    assert again == ["0", "1"]
    # consumed by Pop over remoting: popped, the failure an invisible-time change, acks
    requests = broker.broker.remoting_requests
    assert requests is not None
    assert requests.popping.popped_total >= 4
    assert requests.popping.changed_total >= 1
    assert requests.popping.acked_total >= 3


def test_batch_ack_of_popped_messages(broker: threads.BrokerThread, lines: list[str]) -> None:
    """BATCH_ACK_MESSAGE as the client's batchAckMessageAsync writes it (bit sets per
    checkpoint) acks exactly the messages it names: a single ack of each of them afterwards
    finds it gone, the message left out is still there to ack."""
    assert "ok batchack" in lines, lines
    assert "batch-acked OK" in lines
    after = [line.split(" ")[1:] for line in lines if line.startswith("acked-after ")]
    assert after == [
        [f"{PREFIX}-batch-0", "NO_EXIST"],
        [f"{PREFIX}-batch-1", "NO_EXIST"],
        [f"{PREFIX}-batch-2", "OK"],
    ]
    # counted in /metrics as gRPC Pop calls are (metrics/remoting_collecting.py)
    metrics = broker.broker.metrics
    assert metrics is not None

    def sample(name: str, labels: dict[str, str]) -> float:
        value = metrics.registry.get_sample_value(name, labels)
        assert value is not None, (name, labels)
        return value

    assert sample("gannet_remoting_pop_requests_total", {"request": "batch_ack"}) == 1.0
    assert sample("gannet_remoting_pop_requests_total", {"request": "ack"}) >= 3 + 3
    assert sample("gannet_remoting_pop_messages_total", {"result": "popped"}) >= 4 + 3
    assert sample("gannet_remoting_pop_messages_total", {"result": "acked"}) >= 3 + 2 + 1


def test_send_results_name_the_offset_message_id_and_the_unique_key(
    broker: threads.BrokerThread, lines: list[str]
) -> None:
    """SendResult.getOffsetMsgId() is RocketMQ's offset message id (the broker's remoting
    address and the commit-log offset: what viewMessage dials), getMsgId() the unique key
    (found by queryMessageByUniqKey), for a send and each message of a batch."""
    assert "ok ids" in lines, lines
    keys = [f"{PREFIX}-ids-{i}" for i in range(3)]
    ids = dict(line.split(" ")[1:] for line in lines if line.startswith("ids "))
    remoting = f"127.0.0.1:{broker.broker.remoting_port}"
    for key in keys:
        decoded = msgids.decode_offset_msg_id(ids[key])
        assert f"{decoded.host}:{decoded.port}" == remoting
        stored = broker.broker.store.read_message(decoded.commit_offset)
        assert stored is not None
        assert stored.keys == [key]
        assert f"viewed {key} {key} true" in lines
        assert f"queried {key} {key}" in lines


def test_a_backquoted_sql92_subscription_is_refused_at_start(lines: list[str]) -> None:
    """RocketMQ's SQL92 has no quoted identifiers: the consumer's start() fails with the
    broker's SUBSCRIPTION_PARSE_FAILED (23) naming the character, not a consumer that silently
    gets nothing."""
    assert "ok sqlquote" in lines, lines
    refused = [line for line in lines if line.startswith("refused ")]
    assert len(refused) == 1
    assert refused[0].startswith("refused 23 ")
    assert "no quoted identifiers" in refused[0]


def test_a_retry_topic_route_is_created_with_one_queue(
    broker: threads.BrokerThread, lines: list[str]
) -> None:
    """A push consumer asks the route of %RETRY%<group> at start (its retry subscription):
    auto-created with 1 queue, RocketMQ's retryQueueNums, not an ordinary topic's 8."""
    assert "ok sqlquote" in lines, lines
    config = broker.broker.store.topic_configs.get(f"%RETRY%{PREFIX}QuoteG")
    assert config is not None
    assert (config.read_queue_nums, config.write_queue_nums) == (1, 1)


def test_an_orderly_pop_answers_how_often_a_message_was_consumed(lines: list[str]) -> None:
    """An orderly Pop (order=true) of a message popped before and not acked: the answer's
    orderCountInfo makes the 5.x client show reconsumeTimes 1 (the record says 0: an orderly
    message is popped again from its queue, not from a retry copy)."""
    assert "ok orderpop" in lines, lines
    popped = [line.split(" ")[1:] for line in lines if line.startswith("orderpop ")]
    key = f"{PREFIX}-ord-0"
    assert popped == [["1", key, "0"], ["2", key, "1"]]
    assert "orderpop-acked OK" in lines
