"""The ``pipeline`` click group: help texts, exit codes, in-place rebuild and its lock check.
Commands reuse the session-wide Spark session (``getOrCreate``)."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gannet.node.cli import pipeline as cli
from gannet.node.store import querying
from gannet.node.store.message_store import MessageStore

from .conftest import BrokerStore

pytestmark = pytest.mark.slow


def _sizes(store: BrokerStore) -> list[str]:
    c = store.config
    return [
        f"--cq-units-per-file={c.consume_queue_units_per_file}",
        f"--index-hash-slots={c.index_hash_slots}",
        f"--index-items-max={c.index_items_max}",
    ]


@pytest.mark.parametrize("command", ["export", "rebuild", "verify"])
def test_every_command_has_help(command: str) -> None:
    result = CliRunner().invoke(cli.pipeline, [command, "--help"])
    assert result.exit_code == 0
    assert "--master" in result.output


def test_verify_exits_1_and_lists_damage(spark, broker_store: BrokerStore, tmp_path: Path) -> None:
    copies = tmp_path / "segments"
    shutil.copytree(broker_store.config.commitlog_dir, copies)
    first = sorted(copies.iterdir())[0]
    data = bytearray(first.read_bytes())
    data[4] ^= 0xFF  # the first record's magic code
    first.write_bytes(bytes(data))
    result = CliRunner().invoke(cli.pipeline, ["verify", str(copies)])
    assert result.exit_code == 1, result.output
    assert "bad magic code" in result.output
    assert "damage found" in result.output


def test_rebuild_in_place_restores_deleted_files(
    spark, broker_store: BrokerStore, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    shutil.copytree(broker_store.config.root_dir, root)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    args = ["rebuild", str(root), "--in-place", *_sizes(broker_store)]
    result = CliRunner().invoke(cli.pipeline, args)
    assert result.exit_code == 0, result.output
    assert "records dispatched" in result.output
    original = broker_store.config.root_dir
    for name in ("consumequeue", "index"):
        expected = [p.read_bytes() for p in sorted((original / name).rglob("*")) if p.is_file()]
        rebuilt = [p.read_bytes() for p in sorted((root / name).rglob("*")) if p.is_file()]
        assert rebuilt == expected
    assert not (root / ".rebuild").exists()
    # The broker opens the rebuilt store and serves reads and key queries from it.
    config = dataclasses.replace(broker_store.config, root_dir=root)
    payments = [w for w in broker_store.written if w.topic == "Payments" and w.consumable]
    with MessageStore(config).open() as store:
        got = store.get_messages("Payments", 0, 0, 1000)
        assert [m.commit_offset for m in got.messages] == [w.commit_offset for w in payments]
        keyed = next(w for w in broker_store.written if w.keys)
        found = querying.by_key(store, keyed.topic, keyed.keys[0])
        assert keyed.commit_offset in [m.physical_offset for m in found.messages]


def test_rebuild_in_place_refuses_a_store_open_in_a_broker(
    broker_store: BrokerStore, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    shutil.copytree(broker_store.config.root_dir, root)
    fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        args = ["rebuild", str(root), "--in-place", *_sizes(broker_store)]
        result = CliRunner().invoke(cli.pipeline, args)
    finally:
        os.close(fd)
    assert result.exit_code == 3
    assert (root / "consumequeue").is_dir()


def test_rebuild_needs_target_or_in_place(broker_store: BrokerStore) -> None:
    result = CliRunner().invoke(cli.pipeline, ["rebuild", str(broker_store.config.root_dir)])
    assert result.exit_code == 2


def test_times_are_iso_8601_or_epoch_milliseconds() -> None:
    convert = cli.TimestampParam().convert
    assert convert("1970-01-02T00:00:00Z", None, None) == 86_400_000
    assert convert("1970-01-02T01:00:00+01:00", None, None) == 86_400_000
    assert convert("1970-01-02 00:00:00", None, None) == 86_400_000  # naive means UTC
    assert convert("1795305600000", None, None) == 1_795_305_600_000
    result = CliRunner().invoke(cli.pipeline, ["export", ".", "out", "--since", "yesterday"])
    assert result.exit_code == 2
    assert "neither ISO 8601 nor epoch milliseconds" in result.output


def test_export_of_several_groups_writes_each_under_its_broker(
    spark, broker_store: BrokerStore, tmp_path: Path
) -> None:
    """``--group NAME=DIR`` twice (two copies of one store): one job, each group's rows
    in ``…/date=<date>/broker=<NAME>/`` (a ``broker`` column), counted once per group."""
    copy = tmp_path / "broker-1"
    shutil.copytree(broker_store.config.root_dir, copy)
    out = tmp_path / "export"
    args = [
        "export", "--group", f"broker-0={broker_store.config.root_dir}",
        "--group", f"broker-1={copy}", str(out), "--topic", "Payments",
    ]  # fmt: skip
    result = CliRunner().invoke(cli.pipeline, args)
    assert result.exit_code == 0, result.output
    assert "broker-0, broker-1" in result.output
    assert {p.name for p in out.rglob("broker=*")} == {"broker=broker-0", "broker=broker-1"}
    payments = [w for w in broker_store.written if w.consumable and w.topic == "Payments"]
    rows = pq.read_table(out).to_pylist()
    for name in ("broker-0", "broker-1"):
        offsets = sorted(r["commit_offset"] for r in rows if r["broker"] == name)
        assert offsets == [w.commit_offset for w in payments]


def test_export_groups_bad_input_is_refused_before_spark(
    broker_store: BrokerStore, tmp_path: Path
) -> None:
    store = str(broker_store.config.root_dir)
    runner = CliRunner()

    def run(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli.pipeline, ["export", *args])
        return result.exit_code, result.output

    code, text = run("--group", f"broker-0={store}", "--group", f"broker-0={tmp_path}", "out")
    assert code == 2
    assert "group broker-0 is given twice" in text
    code, text = run("--group", f"broker-0={tmp_path / 'missing'}", "out")
    assert code == 2
    assert "group broker-0:" in text
    assert "is not a directory" in text
    code, text = run("--group", store, "out")
    assert code == 2
    assert "is not NAME=DIR" in text
    code, text = run("--group", f"broker-0={store}", store, "out")
    assert code == 2
    assert "with --group give only OUTPUT" in text
    code, text = run(store)
    assert code == 2
    assert "give SOURCE and OUTPUT" in text
    empty = tmp_path / "empty"
    empty.mkdir()
    code, text = run(str(empty), "out")
    assert code == 3
    assert "not a store directory" in text
    code, text = run(str(tmp_path / "missing"), "out")
    assert code == 2
    assert "is not a directory" in text
    code, text = run("--group", f"broker-0={store}", "--group", f"broker-1={empty}", "out")
    assert code == 3
    assert "group broker-1:" in text
    assert "not a store directory" in text
    assert not (tmp_path / "out").exists()
