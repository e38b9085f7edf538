"""The ``gannet`` command as a script sees it: output, tables and exit codes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gannet.node import grpc_logging
from gannet.node.cli.root import main
from gannet.node.store import msgids
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore


def client_id(i: int) -> str:
    """A message id as the official client makes it (34 hex digits, version 01)."""
    return f"0102FC0000000136EC0B1878D1{i:08X}"


def make_store(root: Path, n: int = 30) -> list[int]:
    config = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    offsets = []
    with MessageStore(config).open() as store:
        for i in range(n):
            properties = {"KEYS": f"key{i}", "UNIQ_KEY": client_id(i)}
            msg = Message(topic="CliTopic", body=b"b" * 900, properties=properties)
            offsets.append(store.put_message(msg).wrote_offset)
    return offsets


def test_help_everywhere() -> None:
    runner = CliRunner()
    for args in (
        ["--help"],
        ["store", "--help"],
        ["store", "verify", "--help"],
        ["broker", "run", "--help"],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
        assert "Usage" in result.output


def test_inspect_lists_files_and_queues(tmp_path: Path) -> None:
    make_store(tmp_path)
    result = CliRunner().invoke(main, ["store", "inspect", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "00000000000000000000" in result.output
    assert "CliTopic" in result.output
    assert "clean" in result.output


def test_verify_exit_codes(tmp_path: Path) -> None:
    offsets = make_store(tmp_path)
    runner = CliRunner()
    ok = runner.invoke(main, ["store", "verify", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    assert "store is clean" in ok.output
    path = tmp_path / "commitlog" / "00000000000000000000"
    with open(path, "r+b") as f:
        f.seek(offsets[3] + 120)
        f.write(b"\xff\xff")
    bad = runner.invoke(main, ["store", "verify", str(tmp_path)])
    assert bad.exit_code == 1
    assert "CRC" in bad.output


def test_verify_names_a_record_without_consume_queue_entry(tmp_path: Path) -> None:
    offsets = make_store(tmp_path)
    cq = next((tmp_path / "consumequeue").glob("*/*/00000000000000000000"))
    with open(cq, "r+b") as f:
        f.seek(2 * 20)
        f.write(bytes(20))
    result = CliRunner().invoke(main, ["store", "verify", str(tmp_path), "-o", "json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["records_without_entry"] == 1
    [damage] = report["damage"]
    assert damage["where"] == f"consumequeue/CliTopic/{cq.parent.name}"
    assert damage["from"] == 2
    assert f"commit-log offset {offsets[2]}" in damage["reason"]


def test_get_and_query(tmp_path: Path) -> None:
    offsets = make_store(tmp_path)
    runner = CliRunner()
    got = runner.invoke(main, ["store", "get", str(tmp_path), "--offset", str(offsets[5])])
    assert got.exit_code == 0, got.output
    assert "key5" in got.output
    q = runner.invoke(
        main, ["store", "query", str(tmp_path), "--topic", "CliTopic", "--key", "key7"]
    )
    assert q.exit_code == 0, q.output
    assert "key7" in q.output
    missing = runner.invoke(
        main, ["store", "query", str(tmp_path), "--topic", "CliTopic", "--key", "nope"]
    )
    assert missing.exit_code == 1
    by_qo = runner.invoke(
        main, ["store", "get", str(tmp_path), "--topic", "CliTopic", "--queue-offset", "2"]
    )
    assert by_qo.exit_code == 0
    assert "key2" in by_qo.output
    usage = runner.invoke(main, ["store", "get", str(tmp_path)])
    assert usage.exit_code == 2


def test_not_a_store_directory(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["store", "verify", str(tmp_path)])
    assert result.exit_code == 3
    assert "not a store directory" in result.output


def test_pipeline_group_is_registered() -> None:
    result = CliRunner().invoke(main, ["pipeline", "--help"])
    assert result.exit_code == 0, result.output
    for command in ("export", "rebuild", "verify"):
        assert command in result.output


def test_get_takes_both_kinds_of_message_id(tmp_path: Path) -> None:
    offsets = make_store(tmp_path)
    runner = CliRunner()

    def get(msg_id: str, *more: str) -> list[dict[str, object]]:
        result = runner.invoke(
            main, ["store", "get", str(tmp_path), "--msg-id", msg_id, *more, "-o", "json"]
        )
        assert result.exit_code == 0, result.output
        return list(json.loads(result.stdout))

    by_client_id = get(client_id(4))  # the id every table shows, through the index
    assert [(m["message_id"], m["keys"]) for m in by_client_id] == [(client_id(4), ["key4"])]
    assert get(client_id(4).lower(), "--topic", "CliTopic")[0]["commit_offset"] == offsets[4]
    offset_id = msgids.create_offset_msg_id("127.0.0.1", 10911, offsets[6])
    assert get(offset_id)[0]["keys"] == ["key6"]
    missing = runner.invoke(main, ["store", "get", str(tmp_path), "--msg-id", client_id(999)])
    assert missing.exit_code == 1
    for bad in ("nothex", client_id(1)[:-1], "0102FC0000000136EC0B1878D1000000ZZ"):
        refused = runner.invoke(main, ["store", "get", str(tmp_path), "--msg-id", bad])
        assert refused.exit_code == 2, refused.output
        assert isinstance(refused.exception, SystemExit)  # no traceback
        assert "is not a message id" in refused.stderr
    by_uniq = runner.invoke(
        main, ["store", "query", str(tmp_path), "--topic", "CliTopic", "--uniq-key", client_id(8)]
    )
    assert by_uniq.exit_code == 0, by_uniq.output
    assert "key8" in by_uniq.output


def test_store_tables_and_json_are_whole_when_piped(tmp_path: Path) -> None:
    make_store(tmp_path)
    runner = CliRunner(env={"COLUMNS": "80"})
    got = runner.invoke(
        main, ["store", "query", str(tmp_path), "--topic", "CliTopic", "--key", "key3"]
    )
    assert got.exit_code == 0, got.output
    assert client_id(3) in got.output  # the whole id, although COLUMNS says 80
    inspected = json.loads(
        runner.invoke(main, ["store", "inspect", str(tmp_path), "-o", "json"]).stdout
    )
    assert inspected["clean_shutdown"] is True
    assert inspected["held_by_broker"] is False
    assert {q["topic"] for q in inspected["queues"]} == {"CliTopic"}
    verified = yaml.safe_load(
        runner.invoke(main, ["store", "verify", str(tmp_path), "-o", "yaml"]).stdout
    )
    assert verified["clean"] is True
    assert verified["records_ok"] == 30


def test_pipeline_commands_refuse_a_non_store_directory_before_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "gannet.pipeline.jobs", None)  # importing it would fail
    runner = CliRunner()
    for args in (
        ["pipeline", "verify", str(tmp_path)],
        ["pipeline", "export", str(tmp_path), str(tmp_path / "out")],
        ["pipeline", "rebuild", str(tmp_path), str(tmp_path / "target")],
        ["store", "verify", str(tmp_path)],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 3, (args, result.output)
        assert isinstance(result.exception, SystemExit)
        assert "is not a store directory" in result.stderr


def test_grpc_logging_is_quieted_only_in_the_command_and_unless_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert grpc_logging.is_gannet_command("/x/.venv/bin/gannet")
    assert grpc_logging.is_gannet_command("/x/node/gannet/node/cli/__main__.py")
    assert not grpc_logging.is_gannet_command("/x/.venv/bin/pytest")
    monkeypatch.delenv("GRPC_VERBOSITY", raising=False)
    grpc_logging.quiet_unless_asked(["-v", "status"])
    assert "GRPC_VERBOSITY" not in os.environ  # --verbose: gRPC's own errors show
    grpc_logging.quiet_unless_asked(["status"])
    assert os.environ["GRPC_VERBOSITY"] == "NONE"
    monkeypatch.setenv("GRPC_VERBOSITY", "DEBUG")
    grpc_logging.quiet_unless_asked(["status"])
    assert os.environ["GRPC_VERBOSITY"] == "DEBUG"  # the user's own choice stays
