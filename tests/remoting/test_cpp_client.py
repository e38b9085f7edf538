"""The official C++ RocketMQ client (rocketmq-client-cpp, through Apache's Python 4.x client
rocketmq-client-python 0.5.0rc2, unchanged) against a broker's remoting port and name server:
one subprocess runs every scenario of ``e2e/clients/cpp/scenarios.py`` and reports each as a
JSON line; each test asserts one report (and what the broker stored).

``make test`` runs the quick scenarios; ``make e2e-remoting-cpp`` (``GANNET_CPP_CLIENT_FULL=1``)
adds those that wait on the broker's timers: RECONSUME_LATER through %RETRY% to the DLQ, and a
5 s delay level. The client is installed from PyPI into its own directory
(:mod:`tests.remoting.cpp_clients`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.log import records
from gannet.node.transactions.book import CheckLimits

from . import cpp_clients

pytestmark = [
    pytest.mark.timeout(400),
    pytest.mark.skipif(cpp_clients.supported() is not None, reason=str(cpp_clients.supported())),
]
FULL = os.environ.get("GANNET_CPP_CLIENT_FULL") == "1"
PREFIX = "Cpp"
QUICK = [
    "sync_send", "oneway", "orderly", "compressed", "oversize", "restart", "transaction",
    "batch_and_pull", "grpc_interop", "delay",
]  # fmt: skip
SCENARIOS = [*QUICK, "retry"] if FULL else QUICK
DELAY_LEVEL = 2 if FULL else 1  # RocketMQ's levels: 1 s, 5 s, ...
DELAY_S = {1: 1.0, 2: 5.0}
FROM_GRPC = 3
POP_POLLS = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200)
TEXT = "héllo, wörld {}"
ACCOUNTS = {
    "accounts": [
        {
            "access_key": "cpp-app",
            "secret_key": "cpp-secret",
            "allow": [{"actions": ["pub", "sub"], "topics": ["CppAcl*"], "groups": ["CppAcl*"]}],
        }
    ]
}


def _broker(root: Path, **more: Any) -> threads.BrokerThread:
    config = BrokerConfig(
        store=StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH),
        listen_port=0,
        remoting_port=0,
        nameserver_port=0,
        auto_create_topics=True,
        auto_create_groups=True,
        transaction_limits=CheckLimits(check_after_ms=1_000, check_interval_ms=1_000),
        **more,
    )
    # short Pop long polls for the official gRPC consumer
    return threads.start(config, pop=receiving.factory(POP_POLLS))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    running = _broker(tmp_path_factory.mktemp("cpp-client-broker"))
    # the DLQ scenario's group dead-letters after one retry
    running.broker.store.group_configs.put(
        SubscriptionGroupConfig(f"{PREFIX}GDlq", retry_max_times=1)
    )
    yield running
    running.stop()


def _grpc_config(broker: threads.BrokerThread) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials(), request_timeout=5)


@pytest.fixture(scope="module")
def reports(
    broker: threads.BrokerThread, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    # what the C++ consumer is to receive from the official gRPC producer
    producer = Producer(_grpc_config(broker), (f"{PREFIX}FromGrpc",))
    producer.startup()
    try:
        for i in range(FROM_GRPC):
            message = Message()
            message.topic = f"{PREFIX}FromGrpc"
            message.body = f"grpc body {i}".encode()
            message.tag = "TagGrpc"
            message.keys = f"grpc-{i}"
            message.add_property("u-index", str(i))
            message.add_property("u-text", TEXT.format(i))
            producer.send(message)
    finally:
        producer.shutdown()
    options = ["--prefix", PREFIX, "--delay-level", str(DELAY_LEVEL)]
    options += ["--grpc-count", str(FROM_GRPC)]
    home = tmp_path_factory.mktemp("cpp-client-home")
    return cpp_clients.run(broker.broker.nameserver_endpoint, SCENARIOS, home, 300.0, *options)


def ok(reports: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    report = reports[name]
    assert report["ok"], f"{name}: {report['error']}"
    return report


def assert_intact(received: list[dict[str, Any]], topic: str, indexes: list[int], tag: str) -> None:
    """Each message ``i`` of ``indexes`` came back once, with its keys, tag and properties."""
    assert sorted(m["body"] for m in received) == sorted(f"{topic} body {i}" for i in indexes)
    for m in received:
        i = int(m["body"].rsplit(" ", 1)[1])
        assert (m["topic"], m["tags"], m["keys"]) == (topic, tag, f"key-{i} other-{i}")
        assert m["properties"] == {"u-index": str(i), "u-text": TEXT.format(i)}


def stored(broker: threads.BrokerThread, commit_offset: int) -> records.Message:
    message = broker.broker.store.read_message(commit_offset)
    assert message is not None, commit_offset
    return message


def test_sync_send_with_keys_tags_properties_and_a_tag_expression(
    reports: dict[str, dict[str, Any]], broker: threads.BrokerThread
) -> None:
    report = ok(reports, "sync_send")
    assert [s["status"] for s in report["sent"]] == [0] * 6
    topic = report["topic"]
    tagged = [m for m in report["received"] if m["tags"] == "TagA"]
    assert_intact(tagged, topic, [0, 1, 2, 3], "TagA")
    assert_intact([m for m in report["received"] if m["tags"] == "TagB"], topic, [4, 5], "TagB")
    assert report["extra"] == []  # no TagC, nothing twice
    # the send result's id is the message's unique key, which it is received under
    assert sorted(s["msg_id"] for s in report["sent"]) == sorted(
        m["msg_id"] for m in report["received"]
    )
    for m in report["received"]:
        assert stored(broker, m["commit_log_offset"]).uniq_key == m["msg_id"]


def test_oneway_send(reports: dict[str, dict[str, Any]]) -> None:
    report = ok(reports, "oneway")
    assert_intact(report["received"], report["topic"], [0, 1, 2], "TagOneway")


def test_delay_level_holds_the_message_back(reports: dict[str, dict[str, Any]]) -> None:
    report = ok(reports, "delay")
    assert_intact(report["received"], report["topic"], [0], "TagDelay")
    held_ms = report["received"][0]["received_ms"] - report["sent_ms"]
    assert held_ms >= DELAY_S[report["level"]] * 1000 - 50  # the timer's 1 s precision aside


def test_orderly_by_sharding_key_one_queue_per_key_in_order(
    reports: dict[str, dict[str, Any]],
) -> None:
    report = ok(reports, "orderly")

    def sent_bodies(indexes: list[int]) -> list[str]:
        return [f"{report['topic']} body {i}" for i in indexes]

    by_key: dict[str, list[int]] = {}
    for s in report["sent"]:
        by_key.setdefault(s["key"], []).append(s["i"])
    received = {int(m["body"].rsplit(" ", 1)[1]): m for m in report["received"]}
    assert sorted(received) == list(range(12))
    for key, indexes in by_key.items():
        queues = {received[i]["queue_id"] for i in indexes}
        assert len(queues) == 1, (key, queues)
        offsets = [received[i]["queue_offset"] for i in indexes]
        assert offsets == sorted(offsets), key  # stored in send order
        # delivered in that order too (the orderly consumer's callback order)
        order = [m["body"] for m in report["received"] if m["body"] in sent_bodies(indexes)]
        assert order == sent_bodies(indexes)


def test_a_large_body_is_stored_compressed_and_received_whole(
    reports: dict[str, dict[str, Any]], broker: threads.BrokerThread
) -> None:
    report = ok(reports, "compressed")
    (m,) = report["received"]
    assert m["body_intact"]
    assert m["body_bytes"] == report["body_bytes"]
    record = stored(broker, m["commit_log_offset"])
    assert record.sys_flag & records.SYSFLAG_COMPRESSED  # RocketMQ's compressed flag
    assert len(record.body) < report["body_bytes"] // 4  # zlib, as the client sent it


def test_a_message_over_the_broker_limit_is_refused_by_name(
    reports: dict[str, dict[str, Any]],
) -> None:
    report = ok(reports, "oversize")
    assert report["refused"]
    # the client retries and throws its own last error; the broker's refusal reached it
    assert report["remarks"], report["error_text"]
    assert all("at most 4194304 are allowed" in r for r in report["remarks"]), report["remarks"]
    assert all("error code:13" in r for r in report["remarks"])  # MESSAGE_ILLEGAL


def test_offsets_are_committed_and_a_restarted_consumer_gets_only_new_messages(
    reports: dict[str, dict[str, Any]], broker: threads.BrokerThread
) -> None:
    report = ok(reports, "restart")
    assert_intact(report["before"], report["topic"], [0, 1, 2, 3], "TagRestart")
    assert_intact(report["after"], report["topic"], list(range(4, 12)), "TagRestart")
    assert report["extra"] == []
    store = broker.broker.store
    topic, group = report["topic"], f"{PREFIX}GRestart"
    for queue_id in range(8):
        assert store.consumer_offsets.query(group, topic, queue_id) == (
            store.max_offset_in_queue(topic, queue_id)
        ), queue_id


def test_transactions_commit_rollback_and_check_back(
    reports: dict[str, dict[str, Any]], broker: threads.BrokerThread
) -> None:
    report = ok(reports, "transaction")
    assert sorted(m["keys"] for m in report["received"]) == ["tx-check", "tx-commit"]
    assert report["extra"] == []  # never the rolled-back one
    # only the unknown one was checked, with its real topic, and the answer committed it
    assert report["checked"]
    assert {(c["keys"], c["topic"]) for c in report["checked"]} == {("tx-check", report["topic"])}
    messaging = broker.broker.messaging
    assert messaging is not None
    assert messaging.transactions is not None
    assert messaging.transactions.service.pending() == 0


def test_batch_send_and_the_pull_consumer_of_the_c_api(
    reports: dict[str, dict[str, Any]],
) -> None:
    report = ok(reports, "batch_and_pull")
    assert report["sent"]["status"] == 0
    assert report["queue_ids"] == list(range(8))
    assert_intact(report["received"], report["topic"], [0, 1, 2, 3, 4], "TagBatch")
    # a batch goes to one queue, in order
    assert len({m["queue_id"] for m in report["received"]}) == 1
    assert [m["queue_offset"] for m in report["received"]] == [0, 1, 2, 3, 4]


def test_grpc_sent_is_received_by_the_cpp_consumer_and_back(
    reports: dict[str, dict[str, Any]], broker: threads.BrokerThread
) -> None:
    report = ok(reports, "grpc_interop")
    got = sorted(report["received"], key=lambda m: m["keys"])
    assert [(m["body"], m["tags"], m["keys"]) for m in got] == [
        (f"grpc body {i}", "TagGrpc", f"grpc-{i}") for i in range(FROM_GRPC)
    ]
    assert [m["properties"]["u-text"] for m in got] == [TEXT.format(i) for i in range(FROM_GRPC)]
    topic = report["topic"]
    consumer = SimpleConsumer(
        _grpc_config(broker),
        f"{PREFIX}GrpcReader",
        {topic: FilterExpression("*")},
        await_duration=0,
    )
    consumer.startup()
    received: list[Any] = []
    try:
        deadline = time.monotonic() + 60
        while len(received) < 3 and time.monotonic() < deadline:
            batch = consumer.receive(32, 15)
            for message in batch:
                consumer.ack(message)
            received.extend(batch)
    finally:
        consumer.shutdown()
    assert sorted(m.body for m in received) == [f"{topic} body {i}".encode() for i in range(3)]
    for m in received:
        i = int(m.body.decode().rsplit(" ", 1)[1])
        assert (m.tag, sorted(m.keys)) == ("TagToGrpc", [f"key-{i}", f"other-{i}"])
        assert m.properties["u-text"] == TEXT.format(i)


@pytest.mark.skipif(not FULL, reason="waits on the retry timer (10 s): make e2e-remoting-cpp")
def test_reconsume_later_retries_through_the_retry_topic_then_the_dlq(
    reports: dict[str, dict[str, Any]], broker: threads.BrokerThread
) -> None:
    report = ok(reports, "retry")
    topic = report["topic"]
    # delivered, failed, sent back (CONSUMER_SEND_MSG_BACK), delivered again counting one
    assert [m["reconsume_times"] for m in report["retried"]] == [0, 1]
    assert {m["body"] for m in report["retried"]} == {f"{topic} body 0"}
    assert report["retried"][1]["retry_topic"] == topic
    assert report["retried"][1]["received_ms"] - report["retried"][0]["received_ms"] >= 9_000
    # a group with retryMaxTimes 1: the second failure goes to %DLQ%, not back to the consumer
    assert [m["reconsume_times"] for m in report["dlq_group_deliveries"]] == [0, 1]
    assert report["after_dlq"] == []
    store = broker.broker.store
    dlq = f"%DLQ%{PREFIX}GDlq"
    got = store.get_messages(dlq, 0, 0, 8)
    dead = [records.decode(m.data) for m in got.messages]
    assert [(d.body, d.properties.get("DLQ_ORIGIN_TOPIC")) for d in dead] == [
        (f"{topic} body 0".encode(), topic)
    ]


# ---------------------------------------------------------------------- ACL


@pytest.fixture(scope="module")
def acl_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("cpp-client-acl")
    (root / "accounts.json").write_text(json.dumps(ACCOUNTS))
    running = _broker(root / "store", auth_file=root / "accounts.json")
    try:
        options = ["--prefix", "CppAcl", "--access-key", "cpp-app", "--secret-key", "cpp-secret"]
        options += ["--bad-secret-key", "not-the-secret"]
        return cpp_clients.run(
            running.broker.nameserver_endpoint,
            ["oneway", "acl_denied"],
            root / "home",
            120.0,
            *options,
        )
    finally:
        running.stop()


def test_session_credentials_sign_requests_the_broker_accepts(
    acl_reports: dict[str, dict[str, Any]],
) -> None:
    # a signed producer's sends and a signed push consumer's pulls and offsets
    report = ok(acl_reports, "oneway")
    assert_intact(report["received"], report["topic"], [0, 1, 2], "TagOneway")


def test_a_wrong_secret_is_refused_by_name(acl_reports: dict[str, dict[str, Any]]) -> None:
    report = ok(acl_reports, "acl_denied")
    assert report["refused"]
    assert report["remarks"], report["error_text"]
    assert all(
        "the signature does not match for access key 'cpp-app'" in r for r in report["remarks"]
    ), report["remarks"]
