"""What the ``gannet`` command prints against a live broker: ``-o json|yaml``, whole ids and
times when piped, the send table's queue, one-line creates, the group table, reserved topic
names, the reset-offset plan, ``cluster status`` on ``GANNET_ENDPOINT``, and a store a broker
holds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import grpc
import pytest
import yaml
from click.testing import CliRunner

from gannet.node.cli.root import main
from gannet.node.protocol.gen import admin_pb2
from gannet.node.testing import small_stores

from .conftest import settle, unique

CLIENT_ID = re.compile(r"\b01[0-9A-F]{32}\b")


@pytest.fixture
def gannet(broker):
    """The command as a script runs it: stdout is no terminal, and COLUMNS says 80."""
    runner = CliRunner(env={"COLUMNS": "80", "GANNET_ENDPOINT": broker.endpoint})

    def run(*args: str, code: int = 0) -> str:
        result = runner.invoke(main, list(args))
        assert result.exit_code == code, result.output
        return result.output

    return run


def test_version(gannet) -> None:
    assert re.fullmatch(r"gannet, version \d+\.\d+\.\d+\S*\n", gannet("--version"))


def test_piped_tables_are_never_cut_at_80_columns(gannet, broker) -> None:
    topic = unique("CliPipedOutputWithAVeryLongTopicName")
    gannet("topic", "create", topic, "--queues", "1")
    sent = gannet("message", "send", topic, "a body that is long enough to need some room")
    ids = CLIENT_ID.findall(sent)
    assert len(ids) == 1, sent
    settle(broker)
    found = gannet("message", "query", topic, "--since", "0")
    assert ids[0] in found  # whole, not 0102FC0000…
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}", found), found  # whole time
    assert "…" not in found
    assert max(len(line) for line in found.splitlines()) > 80


def test_json_and_yaml_carry_the_table_fields(gannet, broker) -> None:
    topic, group = unique("CliJson"), unique("CliJsonG")
    gannet("topic", "create", topic, "--queues", "2", "--type", "fifo")
    gannet("group", "create", group)
    sent = json.loads(
        gannet("message", "send", topic, "[red]x", "--message-group", "g", "-o", "json")
    )
    assert [set(row) for row in sent] == [{"message_id", "queue", "offset"}]
    assert CLIENT_ID.fullmatch(sent[0]["message_id"])
    settle(broker)
    topics = json.loads(gannet("topic", "list", "-o", "json"))
    mine = next(t for t in topics if t["name"] == topic)
    assert mine == {
        "name": topic,
        "read_queues": 2,
        "write_queues": 2,
        "perm": "rw",
        "message_type": "FIFO",
    }
    described = yaml.safe_load(gannet("topic", "describe", topic, "-o", "yaml"))
    assert [q["queue"] for q in described["queues"]] == [0, 1]
    assert sum(q["messages"] for q in described["queues"]) == 1
    assert described["not_delivered"] == {
        "delayed_messages": 0,
        "delayed_last_due_ms": None,
        "prepared_transactions": 0,
    }
    groups = yaml.safe_load(gannet("group", "list", "-o", "yaml"))
    mine_group = next(g for g in groups if g["name"] == group)
    assert mine_group["fifo"] is False
    assert mine_group["consume_enabled"] is True
    assert mine_group["retry_max_times"] == 16
    found = json.loads(
        gannet("message", "query", topic, "--id", sent[0]["message_id"], "-o", "json")
    )
    assert found[0]["body"] == "[red]x"  # raw text, not read as markup
    assert found[0]["queue"] == sent[0]["queue"]
    status = json.loads(gannet("status", "-o", "json"))
    assert set(status) == {"broker", "store", "raft"}
    assert status["broker"]["endpoint"] == broker.endpoint
    assert status["store"]["max_offset"] > 0
    assert status["raft"]["role"] == "leader"
    revive = json.loads(gannet("pop", "revive-queues", "-o", "json"))
    assert revive["active_count"] == len([q for q in revive["queues"] if q["state"] == "active"])


def test_message_send_prints_the_queue_and_create_prints_one_line(gannet, broker) -> None:
    topic = unique("CliSendQueue")
    created = gannet("topic", "create", topic, "--queues", "3")
    assert created == f"created topic {topic}: 3 queues, NORMAL, perm rw\n"
    rows = json.loads(gannet("message", "send", topic, "x", "--count", "3", "-o", "json"))
    assert sorted(r["queue"] for r in rows) == [0, 1, 2]  # round robin over the three queues
    assert [r["offset"] for r in rows] == [0, 0, 0]
    table = gannet("message", "send", topic, "y")
    assert "queue" in table
    assert re.search(r"│ 01[0-9A-F]{32} │\s+\d │\s+1 │", table), table


def test_topic_attributes_are_set_changed_and_removed_by_the_cli(gannet) -> None:
    topic = unique("CliTierRetention")
    attribute = "gannet.tier.remote.retention.s"
    created = gannet("topic", "create", topic, "--queues", "1", "--attribute", f"{attribute}=0")
    assert created == f"created topic {topic}: 1 queues, NORMAL, perm rw, {attribute}=0\n"
    changed = gannet("topic", "update", topic, "--attribute", f"+{attribute}=60")
    assert changed.endswith(f"{attribute}=60\n")
    removed = gannet("topic", "update", topic, f"--attribute=-{attribute}")
    assert removed == f"updated topic {topic}: 1 queues, NORMAL, perm rw\n"
    assert "is not NAME=VALUE" in gannet("topic", "create", topic, "--attribute", "x", code=2)
    assert "use +NAME=VALUE to set" in gannet("topic", "update", topic, "--attribute", "y", code=2)
    refused = gannet("topic", "update", topic, "--attribute", "+message.type=FIFO", code=5)
    assert "cannot be set here" in refused


def test_group_table_right_aligns_numbers_and_says_yes_no(gannet) -> None:
    group = unique("CliGroupTable")
    assert gannet("group", "create", group, "--fifo") == (
        f"created group {group}: fifo yes, retry max times 16\n"
    )
    listed = gannet("group", "list")
    row = next(line for line in listed.splitlines() if group in line)
    assert "True" not in listed
    assert "False" not in listed
    assert re.search(rf"│ {re.escape(group)}\s+│ yes\s+│\s+16 │ yes\s+│", row), row


@pytest.mark.parametrize("name", ["DefaultCluster", "broker-a", "%RETRY%OrderWorkers", "%DLQ%X"])
def test_reserved_topic_names_are_refused_by_cli_and_admin_api(gannet, admin, name) -> None:
    out = gannet("topic", "create", name, code=5)
    assert "INVALID_ARGUMENT" in out
    assert "pick another name" in out
    with pytest.raises(grpc.RpcError) as refused:
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=name))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    listed = json.loads(gannet("topic", "list", "--all", "-o", "json"))
    assert name not in [t["name"] for t in listed]


def test_reset_offset_shows_the_plan_and_applies_only_with_execute(gannet, broker) -> None:
    topic, group = unique("CliPlan"), unique("CliPlanG")
    gannet("topic", "create", topic, "--queues", "1")
    gannet("group", "create", group)
    gannet("message", "send", topic, "m", "--count", "4")
    settle(broker)
    gannet("group", "reset-offset", group, topic, "--to-offset", "4", "--execute")
    plan = json.loads(
        gannet("group", "reset-offset", group, topic, "--to-offset", "1", "-o", "json")
    )
    assert plan["executed"] is False
    assert plan["queues"] == [
        {
            "broker": "",  # one broker group: the answer names none
            "topic": topic,
            "queue": 0,
            "committed": 1,
            "max_offset": 4,
            "lag": 3,
            "committed_before": 4,
            "lag_before": 0,
        }
    ]
    assert "total lag: 0" in gannet("group", "describe", group)  # nothing changed
    gannet("group", "reset-offset", group, topic, "--to-offset", "1", "--execute")
    assert "total lag: 3" in gannet("group", "describe", group)


def test_cluster_status_asks_gannet_endpoint(gannet, broker) -> None:
    out = gannet("cluster", "status")
    assert "Raft group (1 endpoint)" in out
    assert broker.endpoint in out
    members = json.loads(gannet("cluster", "status", "-o", "json"))
    assert [m["endpoint"] for m in members] == [broker.endpoint]
    assert members[0]["status"]["role"] == "leader"


def test_store_a_broker_holds_is_named_so(gannet, broker) -> None:
    root = str(broker.broker.config.store.root_dir)
    inspected = gannet("store", "inspect", root)
    assert "held by a running broker" in inspected
    assert "ABNORMAL" not in inspected
    assert json.loads(gannet("store", "inspect", root, "-o", "json"))["held_by_broker"] is True
    queried = gannet("store", "query", root, "--topic", "T", "--key", "k", code=3)
    assert "held by a running broker" in queried
    assert "--data-dir" not in queried


def _gannet_process(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command in a fresh interpreter (gRPC reads its log level when it loads)."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    return subprocess.run(
        [sys.executable, "-m", "gannet.node.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


C_CORE_NOISE = ("absl::InitializeLog", "ssl_transport_security", "E0000", "I0000", "add_port.cc")


def test_grpc_core_logging_stays_quiet_unless_verbose(broker, tmp_path) -> None:
    tls_to_plaintext = ["topic", "list", "--endpoint", broker.endpoint, "--tls"]
    quiet = _gannet_process(*tls_to_plaintext)
    assert quiet.returncode == 4, quiet.stderr
    assert quiet.stderr.count("\n") == 1, quiet.stderr
    assert "cannot reach a broker" in quiet.stderr
    verbose = _gannet_process("--verbose", *tls_to_plaintext)
    assert any(noise in verbose.stderr for noise in C_CORE_NOISE), verbose.stderr  # asked for
    used_port = ["broker", "run", "--data-dir", str(tmp_path / "store"), "--metrics-listen", ""]
    used_port += small_stores.BROKER_ARGS
    taken = _gannet_process(*used_port, "--listen", broker.endpoint)
    assert taken.returncode == 3, taken.stderr
    assert not any(noise in taken.stderr for noise in C_CORE_NOISE), taken.stderr
    assert taken.stderr.startswith("cannot serve: cannot listen on"), taken.stderr
    assert taken.stderr.count("\n") == 1, taken.stderr
