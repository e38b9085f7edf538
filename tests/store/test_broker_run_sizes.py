"""``gannet broker run --file-size-mb/--index-hash-slots`` and ``cluster up``'s same options:
the store file sizes a broker preallocates (small ones for tests, RocketMQ's by default)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gannet.node.broker import serving
from gannet.node.cli import broker
from gannet.node.cli import root as cli
from gannet.node.cli.cluster import commands as cluster
from gannet.node.store.config import StoreConfig
from gannet.node.store.queues.index_files import index_file_size_bytes
from gannet.node.testing import small_stores


def _configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> StoreConfig:
    """The store settings ``broker run`` builds from its options (nothing is opened)."""
    seen: list[StoreConfig] = []

    async def record(running: serving.Broker) -> None:
        seen.append(running.config.store)

    monkeypatch.setattr(broker, "_serve", record)
    args = ["broker", "run", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0"]
    result = CliRunner().invoke(cli.main, [*args, "--metrics-listen", "", *extra])
    assert result.exit_code == 0, result.output
    return seen[0]


def test_the_defaults_are_rocketmqs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _configs(tmp_path, monkeypatch)
    defaults = StoreConfig(root_dir=tmp_path)
    assert config.commitlog_file_size_bytes == defaults.commitlog_file_size_bytes == 1 << 30
    assert (config.index_hash_slots, config.index_items_max) == (5_000_000, 20_000_000)
    assert config.index_hash_slots == defaults.index_hash_slots == broker.INDEX_HASH_SLOTS_DEFAULT
    assert config.index_items_max == defaults.index_items_max


def test_small_store_options_make_small_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _configs(tmp_path, monkeypatch, *small_stores.BROKER_ARGS)
    assert config.commitlog_file_size_bytes == small_stores.FILE_SIZE_MB << 20
    assert config.index_hash_slots == small_stores.INDEX_HASH_SLOTS
    assert config.index_items_max == 4 * small_stores.INDEX_HASH_SLOTS
    assert index_file_size_bytes(config.index_hash_slots, config.index_items_max) < 2 << 20


@pytest.mark.parametrize("slots", ["15", "50000001", "many"])
def test_an_index_size_out_of_range_is_a_usage_error(tmp_path: Path, slots: str) -> None:
    args = ["broker", "run", "--data-dir", str(tmp_path), "--index-hash-slots", slots]
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 2
    assert "--index-hash-slots" in result.output
    assert not tmp_path.joinpath("index").exists()


def test_cluster_members_get_the_sizes_only_when_given(tmp_path: Path) -> None:
    peers = cluster.plan(3, "127.0.0.1", 18081)
    default = cluster.broker_argv(peers[0], peers, tmp_path, "sync", None)
    assert "--file-size-mb" not in default
    assert "--index-hash-slots" not in default
    small = cluster.broker_argv(
        peers[0], peers, tmp_path, "sync", None, file_size_mb=16, index_hash_slots=4096
    )
    assert small[small.index("--file-size-mb") + 1] == "16"
    assert small[small.index("--index-hash-slots") + 1] == "4096"


def test_cluster_up_takes_the_sizes(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli.main, ["cluster", "up", "--help"])
    assert "--file-size-mb" in result.output
    assert "--index-hash-slots" in result.output
    bad = ["cluster", "up", "--data-root", str(tmp_path / "c"), "--index-hash-slots", "3"]
    result = CliRunner().invoke(cli.main, bad)
    assert result.exit_code == 2
    assert not (tmp_path / "c").exists()
