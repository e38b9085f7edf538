"""The Go RocketMQ client (github.com/apache/rocketmq-client-go/v2, remoting protocol) against a
real broker: one process (``e2e/clients/go``) runs every scenario and reports what it saw, one
JSON line each; each test asserts one scenario's report. Skipped only when ``go`` is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.store import msgids
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.transactions.book import CheckLimits

from . import go_clients

RUN_TIMEOUT_S = 120.0
SCENARIOS = (
    "admin", "sync_send", "async_send", "oneway", "batch", "delay", "tag_filter",
    "pull_consumer", "orderly", "transaction", "offset_resume", "retry", "sql_filter",
)  # fmt: skip
TEXT = "héllo, wörld {}"

pytestmark = pytest.mark.skipif(
    shutil.which("go") is None, reason="go is not on PATH: it builds the Go client harness"
)


@pytest.fixture(scope="module")
def go_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    root = tmp_path_factory.mktemp("go-client-broker")
    config = BrokerConfig(
        store=StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH),
        listen_port=0,
        remoting_port=0,
        nameserver_port=0,
        auto_create_topics=True,
        auto_create_groups=True,
        transaction_limits=CheckLimits(check_after_ms=1_000, check_interval_ms=1_000),
    )
    running = threads.start(
        config, pop=receiving.factory(receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200))
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def reports(
    go_broker: threads.BrokerThread, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    program: Path = go_clients.build()
    broker = go_broker.broker
    argv = [str(program), "-namesrv", broker.nameserver_endpoint]
    argv += ["-broker", f"127.0.0.1:{broker.remoting_port}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    by_name = {line["scenario"]: line for line in lines}
    assert done.returncode == 0, done.stderr[-4000:]
    assert sorted(by_name) == sorted(SCENARIOS), done.stderr[-4000:]
    return by_name


def ok(reports: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    report = reports[name]
    assert report["ok"], f"{name}: {report['error']}"
    return report


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return sorted(m["body"] for m in messages)


def assert_sent_intact(messages: list[dict[str, Any]], topic: str, count: int, tag: str) -> None:
    """Every message ``message(topic, i, tag)`` of the program came back once, as sent."""
    assert bodies(messages) == sorted(f"{topic} body {i}" for i in range(count))
    for m in messages:
        i = int(m["body"].rsplit(" ", 1)[1])
        assert (m["topic"], m["tags"]) == (topic, tag)
        assert sorted(m["keys"].split(" ")) == [f"key-{i}", f"other-{i}"]
        assert m["properties"] == {"u-index": str(i), "u-text": TEXT.format(i)}


def test_admin_creates_topics_and_lists_them(reports: dict[str, dict[str, Any]]) -> None:
    report = ok(reports, "admin")
    assert report["topic"] in report["topics"]
    assert report["queue_ids"] == [0, 1, 2]


def test_sync_send_keeps_keys_tags_and_properties(
    reports: dict[str, dict[str, Any]], go_broker: threads.BrokerThread
) -> None:
    report = ok(reports, "sync_send")
    # OffsetMsgID is RocketMQ's offset message id: the broker's remoting address and where the
    # message is stored (MsgID is the client's unique key)
    for s in report["sent"]:
        stored_at = msgids.decode_offset_msg_id(s["offset_msg_id"])
        assert (stored_at.host, stored_at.port) == ("127.0.0.1", go_broker.broker.remoting_port)
        stored = go_broker.broker.store.read_message(stored_at.commit_offset)
        assert stored is not None
        assert (stored.queue_id, stored.queue_offset, stored.uniq_key) == (
            s["queue_id"], s["queue_offset"], s["msg_id"],
        )  # fmt: skip
    assert [s["status"] for s in report["sent"]] == [0] * 4
    assert_sent_intact(report["received"], report["topic"], 4, "TagA")
    # the send result names where each message went, and the id it is received under
    assert sorted(
        (s["queue_id"], s["queue_offset"], s["msg_id"]) for s in report["sent"]
    ) == sorted((m["queue_id"], m["queue_offset"], m["msg_id"]) for m in report["received"])


def test_async_send(reports: dict[str, dict[str, Any]]) -> None:
    report = ok(reports, "async_send")
    assert [s["status"] for s in report["sent"]] == [0] * 5
    assert_sent_intact(report["received"], report["topic"], 5, "TagAsync")


def test_oneway_send(reports: dict[str, dict[str, Any]]) -> None:
    report = ok(reports, "oneway")
    assert_sent_intact(report["received"], report["topic"], 3, "TagOneway")


def test_batch_send_stores_every_message_in_one_queue_in_order(
    reports: dict[str, dict[str, Any]],
) -> None:
    report = ok(reports, "batch")
    assert_sent_intact(report["received"], report["topic"], 5, "TagBatch")
    queue = report["sent"]["queue_id"]
    ordered = sorted(report["received"], key=lambda m: m["queue_offset"])
    assert [m["queue_id"] for m in ordered] == [queue] * 5
    assert [m["body"] for m in ordered] == [f"{report['topic']} body {i}" for i in range(5)]


def test_delay_level_holds_the_message_back(reports: dict[str, dict[str, Any]]) -> None:
    report = ok(reports, "delay")
    assert_sent_intact(report["received"], report["topic"], 1, "TagDelay")
    # level 2 is RocketMQ's 5 s
    assert report["received"][0]["received_ms"] - report["sent_ms"] >= 5_000


def test_push_consumer_tag_filter_gets_each_match_once(reports: dict[str, dict[str, Any]]) -> None:
    report = ok(reports, "tag_filter")
    topic = report["topic"]
    assert bodies(report["received"]) == sorted(f"{topic} body {i}" for i in (0, 2, 3, 5))
    assert {m["tags"] for m in report["received"]} == {"TagA", "TagC"}


def test_pull_consumer_polls_every_message(reports: dict[str, dict[str, Any]]) -> None:
    report = ok(reports, "pull_consumer")
    assert_sent_intact(report["received"], report["topic"], 6, "TagPull")


def test_orderly_consumer_gets_each_order_in_order_from_its_queue(
    reports: dict[str, dict[str, Any]],
) -> None:
    report = ok(reports, "orderly")
    received = report["received"]
    assert len(received) == 18
    for order, queue in report["queue_of_order"].items():
        mine = [m for m in received if m["properties"]["u-order"] == order]
        assert [m["properties"]["u-step"] for m in mine] == [str(s) for s in range(6)]
        assert {m["queue_id"] for m in mine} == {queue}


def test_transactions_commit_roll_back_and_are_checked_back(
    reports: dict[str, dict[str, Any]],
) -> None:
    report = ok(reports, "transaction")
    # local states as the client reports them: 1 commit, 2 rollback, 3 unknown
    assert {k: v["state"] for k, v in report["sent"].items()} == {
        "commit": 1, "rollback": 2, "unknown-then-commit": 3, "unknown-then-rollback": 3,
    }  # fmt: skip
    assert sorted(set(report["checked"])) == ["unknown-then-commit", "unknown-then-rollback"]
    assert bodies(report["received"]) == ["tx commit", "tx unknown-then-commit"]


def test_consumer_offsets_are_resumed_after_a_restart(reports: dict[str, dict[str, Any]]) -> None:
    report = ok(reports, "offset_resume")
    topic = report["topic"]
    assert bodies(report["first"]) == sorted(f"{topic} body {i}" for i in range(4))
    assert bodies(report["second"]) == sorted(f"{topic} body {i}" for i in range(4, 7))


def test_a_message_consumed_later_comes_back_once_from_the_retry_topic(
    reports: dict[str, dict[str, Any]],
) -> None:
    report = ok(reports, "retry")
    topic = report["topic"]
    received = report["received"]
    # each message refused once (CONSUMER_SEND_MSG_BACK, delay level 1), then delivered again
    # with its reconsume count, under its own topic, keys, tags and properties
    assert sorted((m["body"], m["reconsume_times"]) for m in received) == sorted(
        (f"{topic} body {i}", times) for i in range(2) for times in (0, 1)
    )
    assert_sent_intact([m for m in received if m["reconsume_times"] == 1], topic, 2, "TagRetry")
    for again in (m for m in received if m["reconsume_times"] == 1):
        assert again["received_ms"] - again["born_ms"] >= 1_000


def test_sql92_filter(reports: dict[str, dict[str, Any]]) -> None:
    report = ok(reports, "sql_filter")
    topic = report["topic"]
    assert bodies(report["received"]) == sorted(f"{topic} body {i}" for i in (1, 3, 5))
