"""``gannet topic|group|message|status`` against a live in-process broker."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gannet.node.cli.root import main

from .conftest import settle, unique


@pytest.fixture
def gannet(broker):
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> str:
        result = runner.invoke(main, [*args, "--endpoint", broker.endpoint], terminal_width=200)
        assert result.exit_code == code, result.output
        return result.output

    return run


def test_help_everywhere() -> None:
    runner = CliRunner()
    for args in (
        ["topic"],
        ["topic", "create"],
        ["topic", "update"],
        ["topic", "delete"],
        ["topic", "list"],
        ["topic", "describe"],
        ["group"],
        ["group", "create"],
        ["group", "delete"],
        ["group", "list"],
        ["group", "describe"],
        ["group", "reset-offset"],
        ["message"],
        ["message", "send"],
        ["message", "receive"],
        ["message", "query"],
        ["pop"],
        ["pop", "revive-queues"],
        ["status"],
        ["broker", "run"],
    ):
        result = runner.invoke(main, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)
        assert "Usage" in result.output


def test_topic_round_trip(gannet) -> None:
    name = unique("CliTopic")
    assert "created" in gannet("topic", "create", name, "--queues", "2", "--type", "fifo")
    gannet("topic", "create", name, code=5)  # already exists
    assert name in gannet("topic", "list")
    out = gannet("topic", "update", name, "--queues", "3")
    assert "updated" in out
    gannet("topic", "update", name, "--queues", "1", code=5)  # shrinking is refused
    described = gannet("topic", "describe", name)
    assert "FIFO" in described
    assert "queues of" in described
    assert "not delivered yet: 0 delayed messages, 0 prepared transactions" in described
    gannet("topic", "delete", name, "--yes")
    gannet("topic", "describe", name, code=1)
    gannet("topic", "create", "bad name!", code=5)


def test_group_round_trip_and_reset(gannet, broker) -> None:
    topic, group = unique("CliT"), unique("CliG")
    gannet("topic", "create", topic, "--queues", "1")
    assert "created" in gannet("group", "create", group, "--fifo")
    assert group in gannet("group", "list")
    for _ in range(3):
        gannet("message", "send", topic, "payload")
    settle(broker)
    plan = gannet("group", "reset-offset", group, topic, "--to-offset", "1")
    assert "dry run: nothing changed; add --execute" in plan
    assert "total lag: 0" in gannet("group", "describe", group)  # the plan changed nothing
    out = gannet("group", "reset-offset", group, topic, "--to-offset", "1", "--execute")
    assert f"offsets of {group} reset" in out
    described = gannet("group", "describe", group)
    assert "total lag: 2" in described
    gannet("group", "reset-offset", group, topic, "--to-time", "0", "--execute")
    assert "total lag: 3" in gannet("group", "describe", group)
    gannet("group", "reset-offset", group, topic, code=2)  # neither --to-time nor --to-offset
    gannet("group", "delete", group, "--yes")
    gannet("group", "describe", group, code=1)


def test_message_send_and_query(gannet, broker) -> None:
    topic = unique("CliMsg")
    gannet("topic", "create", topic)
    out = gannet(
        "message",
        "send",
        topic,
        "hello world",
        "--tag",
        "TagA",
        "--key",
        "order-7",
        "--property",
        "color=blue",
    )
    message_id = next(line.split()[1] for line in out.splitlines() if "01" in line and "│" in line)
    settle(broker)
    assert "hello world" in gannet("message", "query", topic, "--key", "order-7")
    assert "hello world" in gannet("message", "query", topic, "--id", message_id)
    assert "hello world" in gannet("message", "query", topic, "--since", "0")
    gannet("message", "query", topic, "--key", "nothing-here", code=1)
    gannet("message", "send", "NoSuchTopic", "x", code=1)
    gannet("message", "send", topic, "x", "--property", "UNIQ_KEY=x", code=5)


def test_status(gannet) -> None:
    out = gannet("status")
    assert "broker-a" in out
    assert "store.max_offset" in out


def test_unreachable_broker_exits_4() -> None:
    result = CliRunner().invoke(main, ["status", "--endpoint", "127.0.0.1:1"])
    assert result.exit_code == 4, result.output
    assert "cannot reach" in result.output


def test_message_send_fifo_and_delayed(gannet) -> None:
    fifo, delayed = unique("CliFifo"), unique("CliDelay")
    gannet("topic", "create", fifo, "--type", "fifo")
    gannet("topic", "create", delayed, "--type", "delay")
    gannet("message", "send", fifo, "in order", "--message-group", "g1", "--count", "3")
    gannet("message", "send", fifo, "no group", code=5)  # NORMAL into a FIFO topic
    gannet("message", "send", delayed, "later", "--delay-ms", "60000")
    gannet("message", "send", delayed, "too late", "--delay-ms", str(2 * 86_400_000), code=5)
