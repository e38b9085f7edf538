"""``gannet message receive`` against a live in-process broker whose long polls last at most
200 ms (so an empty receive answers at once)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.cli.messages import parse_duration_s
from gannet.node.cli.root import main
from gannet.node.store.config import FlushMode, StoreConfig

from .conftest import settle, unique

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    root = tmp_path_factory.mktemp("cli-receive")
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    limits = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200)
    running = threads.start(BrokerConfig(store=store, listen_port=0), pop=receiving.factory(limits))
    yield running
    running.stop()


@pytest.fixture
def gannet(broker):
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> str:
        result = runner.invoke(main, [*args, "--endpoint", broker.endpoint], terminal_width=250)
        assert result.exit_code == code, result.output
        return result.output

    return run


@pytest.fixture
def topic_and_group(gannet) -> tuple[str, str]:
    topic, group = unique("RcvTopic"), unique("RcvGroup")
    gannet("topic", "create", topic, "--queues", "2")
    gannet("group", "create", group)
    return topic, group


def test_receive_prints_and_acks(broker, gannet, topic_and_group) -> None:
    topic, group = topic_and_group
    gannet("message", "send", topic, "hello", "--tag", "TagA", "--key", "k1", "--count", "3")
    settle(broker)
    out = gannet(
        "message", "receive", "--group", group, "--topic", topic, "--count", "5", "--wait", "1s"
    )
    assert "received 3" in out
    assert out.count("hello") == 3
    assert out.count("acked") == 3
    assert "TagA" in out
    assert "k1" in out
    out = gannet("message", "receive", "--group", group, "--topic", topic, "--wait", "0", code=1)
    assert "no message within 0 s" in out


def test_receive_count_and_no_ack_leave_messages_invisible(broker, gannet, topic_and_group) -> None:
    topic, group = topic_and_group
    gannet("message", "send", topic, "body", "--count", "4")
    settle(broker)
    base = ("message", "receive", "--group", group, "--topic", topic, "--wait", "1s")
    out = gannet(*base, "--count", "2", "--no-ack", "--invisible", "1m")
    assert "received 2" in out
    assert out.count("invisible") == 2
    out = gannet(*base, "--count", "10")
    assert "received 2" in out  # the other two are still invisible
    gannet(*base, code=1)


def test_receive_tag_filter(broker, gannet, topic_and_group) -> None:
    topic, group = topic_and_group
    gannet("message", "send", topic, "red", "--tag", "Red")
    gannet("message", "send", topic, "blue", "--tag", "Blue")
    settle(broker)
    out = gannet(
        "message", "receive", "--group", group, "--topic", topic, "--tag", "Blue",
        "--count", "5", "--wait", "500ms",
    )  # fmt: skip
    assert "received 1" in out
    assert "blue" in out
    assert "red" not in out


def test_receive_refusals_and_usage_errors(gannet, topic_and_group) -> None:
    topic, group = topic_and_group
    # Unknown names exit 1 (nothing found), as for `message send`; bad values exit 5.
    out = gannet("message", "receive", "--group", "NoSuchGroup", "--topic", topic, code=1)
    assert "CONSUMER_GROUP_NOT_FOUND" in out
    out = gannet("message", "receive", "--group", group, "--topic", "NoSuchTopic", code=1)
    assert "TOPIC_NOT_FOUND" in out
    out = gannet(
        "message", "receive", "--group", group, "--topic", topic, "--invisible", "1s", code=5
    )
    assert "ILLEGAL_INVISIBLE_TIME" in out
    out = gannet("message", "receive", "--group", group, "--topic", topic, "--wait", "soon", code=2)
    assert "not a duration" in out
    out = gannet("message", "receive", "--topic", topic, code=2)
    assert "--group" in out


def test_receive_from_an_unreachable_broker_exits_4() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    result = CliRunner().invoke(
        main,
        ["message", "receive", "--group", "G", "--topic", "T", "--wait", "0",
         "--endpoint", f"127.0.0.1:{port}"],
    )  # fmt: skip
    assert result.exit_code == 4, result.output
    assert "cannot reach" in result.output


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("1.5", 1.5), (" 0 ", 0.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "abc", "-1s", "inf", "nan", "1d"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration_s(text)
