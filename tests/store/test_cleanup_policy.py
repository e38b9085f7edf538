"""Cleanup under disk pressure never deletes unconsumed messages unless told to (``cleaning``).

The disk usage is injected (``CleanService.ratio_probe``; the pure core takes the ratio), never
produced by filling the disk. The report this answers: on a disk 88 % full, a broker deleted
three of its four commit-log files 30 s after start and 2,387 of 3,000 unconsumed messages.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest

from gannet.node.api import store_statuses
from gannet.node.broker import serving
from gannet.node.cli import broker
from gannet.node.cli import root as cli
from gannet.node.metrics.store_collecting import CleanupTally
from gannet.node.protocol import statuses
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import DiskFull
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.upkeep import cleaning
from gannet.node.store.upkeep.cleaning import Candidate, CleanPolicy, plan_deletion, space_state

TOPIC = "Orders"
POLICY = CleanPolicy(72.0, "04", 75, 0.90, 0.85)


def noon_ms() -> int:
    """A local time outside deleteWhen ("04"): only disk pressure can trigger a deletion."""
    when = dt.datetime.now().astimezone().replace(hour=12, minute=0, second=0, microsecond=0)
    return int(when.timestamp() * 1000)


def open_store(root: Path, **kw: object) -> MessageStore:
    kw.setdefault("flush_mode", FlushMode.SYNC_FLUSH)
    return MessageStore(StoreConfig.for_tests(root, **kw)).open()


def fill(store: MessageStore, n: int = 240) -> None:
    """``n`` messages of ~1 kB over queues 0 and 1 of TOPIC: five 64 KiB files."""
    last = None
    for i in range(n):
        last = store.put_message(Message(topic=TOPIC, body=b"o" * 1000, queue_id=i % 2))
    assert last is not None
    assert store.wait_dispatched(last.end_offset)
    assert len(store.commitlog.files.files) >= 4


def writes_refused(store: MessageStore) -> bool:
    return store.disk_full


# ---------------------------------------------------------------------------- pure core
@pytest.mark.parametrize(
    ("ratio", "expected"),
    [
        (0.50, (False, False, False, False)),
        (0.80, (True, False, False, False)),
        (0.88, (True, True, True, False)),
        (0.95, (True, True, True, True)),
    ],
)
def test_space_state_follows_the_ratios(ratio: float, expected: tuple[bool, ...]) -> None:
    s = space_state(ratio, POLICY, forcibly_enabled=True)
    assert (s.space_delete, s.clean_at_once, s.forcibly, s.warning) == expected


def test_ratios_above_rocketmqs_caps_are_honoured() -> None:
    raised = CleanPolicy(72.0, "04", 75, 0.97, 0.95)
    assert not space_state(0.88, raised, forcibly_enabled=True).forcibly
    assert space_state(0.96, raised, forcibly_enabled=True).forcibly


def candidates(n: int, *, expired: int = 0, now: int = 10**12) -> list[Candidate]:
    old, new = now - 100 * 3_600_000, now - 1_000
    return [Candidate(i * 100, 100, old if i < expired else new) for i in range(n)]


def test_plan_keeps_the_first_file_with_unconsumed_messages() -> None:
    consumed_below = 250  # every group has consumed the first two files and half the third

    def unconsumed(end: int) -> dict[str, int]:
        return {"G": end - consumed_below} if end > consumed_below else {}

    plan = plan_deletion(
        candidates(4),
        now_ms=10**12,
        reserved_ms=72 * 3_600_000,
        clean_at_once=True,
        delete_unconsumed=False,
        files_max=10,
        unconsumed_below=unconsumed,
    )
    assert (plan.delete, plan.kept_unconsumed) == (2, {"G": 50})
    forced = plan_deletion(
        candidates(4),
        now_ms=10**12,
        reserved_ms=72 * 3_600_000,
        clean_at_once=True,
        delete_unconsumed=True,
        files_max=10,
        unconsumed_below=unconsumed,
    )
    assert (forced.delete, forced.kept_unconsumed) == (4, {})


def test_plan_deletes_expired_files_whatever_their_consumers() -> None:
    plan = plan_deletion(
        candidates(4, expired=2),
        now_ms=10**12,
        reserved_ms=72 * 3_600_000,
        clean_at_once=False,
        delete_unconsumed=False,
        files_max=10,
        unconsumed_below=lambda end: {"G": 1},
    )
    assert (plan.delete, plan.kept_unconsumed) == (2, {})


# ---------------------------------------------------------------------------- the store
def test_88_percent_full_disk_refuses_writes_and_deletes_nothing_unconsumed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with open_store(tmp_path) as store:
        fill(store)
        store.consumer_offsets.commit("Workers", TOPIC, 0, 3)  # a group that is behind
        store.consumer_offsets.commit("Workers", TOPIC, 1, 2)
        files_before = [f.path.name for f in store.commitlog.files.files]
        store.cleaner.ratio_probe = lambda path: 0.88
        with caplog.at_level(logging.ERROR, logger="gannet.node.store.upkeep.cleaning"):
            result = store.cleaner.run(manual=False, now_ms=noon_ms())
        assert result.reason == "space"
        assert result.commitlog_files_deleted == 0
        assert [f.path.name for f in store.commitlog.files.files] == files_before
        assert result.kept_unconsumed["Workers"] > 0
        assert store.disk_full
        with pytest.raises(DiskFull) as refused:
            store.put_message(Message(topic=TOPIC, body=b"new"))
        text = str(refused.value)
        assert "disk full" in text
        assert "88%" in text
        assert "clean-forcibly ratio (85%)" in text
        assert "Workers" in text
        assert "--delete-unconsumed" in text
        answer = store_statuses.from_store_error(refused.value)  # what a v2 SendMessage answers
        assert answer.code == statuses.INTERNAL_SERVER_ERROR  # the proxy's SERVICE_NOT_AVAILABLE
        assert answer.message.startswith("service not available now: disk full")
        assert any("disk full" in r.getMessage() for r in caplog.records)
        got = store.get_messages(TOPIC, 0, 0, 4)
        assert got.status is GetStatus.FOUND  # reads go on


def test_consumed_files_are_deleted_under_pressure_and_writes_resume(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with open_store(tmp_path) as store:
        fill(store)
        store.cleaner.ratio_probe = lambda path: 0.88
        store.cleaner.run(manual=False, now_ms=noon_ms())
        assert writes_refused(store)  # nobody has consumed anything yet
        for queue_id in (0, 1):  # the group catches up
            end = store.max_offset_in_queue(TOPIC, queue_id)
            store.consumer_offsets.commit("Workers", TOPIC, queue_id, end)
        files = len(store.commitlog.files.files)
        with caplog.at_level(logging.WARNING, logger="gannet.node.store.upkeep.cleaning"):
            result = store.cleaner.run(manual=False, now_ms=noon_ms())
        assert result.commitlog_files_deleted == files - 1  # every file but the active one
        assert result.unconsumed_deleted == {}
        assert not writes_refused(store)
        assert store.put_message(Message(topic=TOPIC, body=b"new")).queue_offset == 120
        deletions = [r.getMessage() for r in caplog.records if "cleanup deleted" in r.getMessage()]
        assert len(deletions) == 1
        assert "unconsumed messages removed per group: none" in deletions[0]
        assert f"{0:020d}" in deletions[0]


def test_delete_unconsumed_deletes_logs_the_loss_per_group_and_counts_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with open_store(tmp_path, delete_unconsumed=True) as store:
        registry = CollectorRegistry()
        CleanupTally(registry).attach(store.cleaner)
        fill(store)
        for queue_id in (0, 1):
            store.consumer_offsets.commit("Workers", TOPIC, queue_id, 10)
        files = len(store.commitlog.files.files)
        store.cleaner.ratio_probe = lambda path: 0.88
        with caplog.at_level(logging.WARNING, logger="gannet.node.store.upkeep.cleaning"):
            result = store.cleaner.run(manual=False, now_ms=noon_ms())
        assert result.commitlog_files_deleted == files - 1  # RocketMQ's behaviour, opted in
        assert not store.disk_full
        expected = sum(store.min_offset_in_queue(TOPIC, q) - 10 for q in (0, 1))
        assert expected > 100
        assert result.unconsumed_deleted == {"Workers": expected}
        message = next(
            r.getMessage() for r in caplog.records if "cleanup deleted" in r.getMessage()
        )
        assert "--delete-unconsumed" in message
        assert f"Workers: {expected}" in message
        exposition = generate_latest(registry).decode()
        assert f"gannet_cleanup_unconsumed_messages_removed_total {float(expected)}" in exposition


def test_expired_files_still_go_and_their_loss_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import os

    with open_store(tmp_path, delete_when="04") as store:
        fill(store)
        old = [f.path for f in store.commitlog.files.files[:2]]
        for path in old:
            os.utime(path, (1, 1))  # past fileReservedTime
        store.cleaner.ratio_probe = lambda path: 0.10
        at_four = dt.datetime.now().astimezone().replace(hour=4, minute=30)
        with caplog.at_level(logging.WARNING, logger="gannet.node.store.upkeep.cleaning"):
            result = store.cleaner.run(manual=False, now_ms=int(at_four.timestamp() * 1000))
        assert (result.reason, result.commitlog_files_deleted) == ("time", 2)
        key = cleaning.no_group_key(TOPIC)
        assert result.unconsumed_deleted[key] > 0
        assert not store.disk_full
        message = next(
            r.getMessage() for r in caplog.records if "cleanup deleted" in r.getMessage()
        )
        assert all(p.name in message for p in old)
        assert f"{key}: {result.unconsumed_deleted[key]}" in message


# ---------------------------------------------------------------------------- broker run
def test_broker_run_takes_the_ratios_and_the_opt_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, object] = {}

    async def start_and_stop(running: serving.Broker) -> None:
        await running.start()
        seen["policy"] = running.store.cleaner.policy
        await running.stop()

    monkeypatch.setattr(broker, "_serve", start_and_stop)
    args = ["broker", "run", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0"]
    args += ["--metrics-listen", "", "--event-loop", "asyncio", "--file-size-mb", "1"]
    result = CliRunner().invoke(
        cli.main,
        [
            *args,
            "--disk-clean-forcibly-ratio",
            "0.93",
            "--disk-warning-ratio",
            "0.97",
            "--disk-max-used-ratio-percent",
            "80",
            "--file-reserved-hours",
            "24",
            "--delete-when",
            "03;04",
            "--delete-unconsumed",
            "--disk-hysteresis-percentage-points",
            "3.5",
        ],
    )
    assert result.exit_code == 0, result.output
    assert seen["policy"] == CleanPolicy(24.0, "03;04", 80, 0.97, 0.93, True, 3.5)


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        (["--disk-clean-forcibly-ratio", "0.95", "--disk-warning-ratio", "0.9"], "warning"),
        (["--disk-warning-ratio", "1.5"], "--disk-warning-ratio"),
        (["--delete-when", "noon"], "deleteWhen"),
        (["--disk-hysteresis-percentage-points", "25"], "--disk-hysteresis-percentage-points"),
    ],
)
def test_broker_run_refuses_bad_ratios(tmp_path: Path, extra: list[str], names: str) -> None:
    result = CliRunner().invoke(cli.main, ["broker", "run", "--data-dir", str(tmp_path), *extra])
    assert result.exit_code == 2, result.output
    assert names in result.output
    assert "Traceback" not in result.output
