"""The ``gannet`` command as a script sees it: output, tables and exit codes."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from gannet.node.cli import main
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.message_store import MessageStore
from gannet.node.store.records import Message


def make_store(root: Path, n: int = 30) -> list[int]:
    config = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    offsets = []
    with MessageStore(config).open() as store:
        for i in range(n):
            msg = Message(topic="CliTopic", body=b"b" * 900, properties={"KEYS": f"key{i}"})
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
