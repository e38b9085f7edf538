"""The ``pipeline`` click group: help texts, exit codes, in-place rebuild and its lock check.
Commands reuse the session-wide Spark session (``getOrCreate``)."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
from pathlib import Path

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
