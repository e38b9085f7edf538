"""``gannet broker run`` on a store whose commit log is damaged below its flushed offset: refused
with exit code 3 and one message naming the file, the offset, the bytes and ``--force-recover``;
with ``--force-recover`` the broker starts and the cut bytes are kept under ``quarantine/``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from gannet.node.broker import serving
from gannet.node.cli import broker, exits
from gannet.node.cli import root as cli
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

FILE_SIZE_MB = 1


def damaged_store(root: Path) -> tuple[Path, int]:
    """A cleanly closed store with 1 MiB commit-log files and one flipped bit in record 3."""
    config = StoreConfig(  # what `broker run --file-size-mb 1` opens (the index comes later)
        root,
        flush_mode=FlushMode.SYNC_FLUSH,
        commitlog_file_size_bytes=FILE_SIZE_MB * 1024 * 1024,
        index_enabled=False,
    )
    with MessageStore(config).open() as store:
        results = [store.put_message(Message(topic="T", body=b"y" * 800)) for _ in range(8)]
    segment = root / "commitlog" / f"{0:020d}"
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    position = results[3].wrote_offset + random.Random(seed).randrange(100, 700)
    with open(segment, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x01]))
    return segment, results[3].wrote_offset


def run(root: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli.main,
        [
            "broker",
            "run",
            "--data-dir",
            str(root),
            "--file-size-mb",
            str(FILE_SIZE_MB),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--event-loop",
            "asyncio",
            *extra,
        ],
    )
    return result.exit_code, result.output


def test_damaged_store_is_refused_with_one_clear_message(tmp_path: Path) -> None:
    segment, offset = damaged_store(tmp_path)
    before = segment.read_bytes()
    code, output = run(tmp_path)
    assert code == exits.EXIT_STORE_UNAVAILABLE, output
    assert "Traceback" not in output
    text = " ".join(output.split())  # rich wraps long lines
    assert "recovery refused" in text
    assert segment.name in text
    assert f"offset {offset:,}" in text
    assert "--force-recover" in text
    assert segment.read_bytes() == before


def test_force_recover_starts_and_keeps_the_cut_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment, offset = damaged_store(tmp_path)
    seen: dict[str, object] = {}

    async def start_and_stop(running: serving.Broker) -> None:
        await running.start()
        seen["force"] = running.config.store.force_recover
        seen["recovered_to"] = (
            running.store.recovery.process_offset if running.store.recovery else -1
        )
        await running.stop()

    monkeypatch.setattr(broker, "_serve", start_and_stop)
    code, output = run(tmp_path, "--force-recover")
    assert code == 0, output
    assert seen == {"force": True, "recovered_to": offset}
    kept = tmp_path / "quarantine" / f"{segment.name}.truncated-{offset}"
    assert kept.stat().st_size > 0
