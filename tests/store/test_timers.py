"""Tests of the timer store: byte layouts, routing (``docs/formats/timers.md`` §4), due order,
roll, crash, truncate.

Expected bytes are written out field by field from ``docs/formats/timers.md``, not produced by the
encoders under test. Time is virtual: every call gets ``now_ms`` explicitly.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.node.store import properties as props
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import CorruptionError, MessageIllegal
from gannet.node.store.log import records
from gannet.node.store.timers import codecs, delivery
from gannet.node.store.timers.codecs import TimerEntry
from gannet.node.store.timers.store import TimerStore

NOW = 1_000_500
P = 1_000  # precision
SLOT_1010 = bytes.fromhex(
    "00000000000003F2"  # time / precision = 1010
    "0000000000000034"  # firstPos 52
    "0000000000000068"  # lastPos 104
    "00000002"  # num 2
    "00000000"  # magic 0
)  # fmt: skip
UNIT_FIRST = bytes.fromhex(
    "00000034"  # size 52
    "FFFFFFFFFFFFFFFF"  # prevPos -1
    "00000001"  # magic DEFAULT
    "00000000000F4434"  # enqueue time 1_000_500
    "0000251C"  # delay 9_500 -> fires at 1_010_000
    "0000000000001000"  # commit-log offset 4096
    "000000C8"  # size 200
    "00000054"  # real-topic hash of "T" (84)
    "0000000000000000"  # reserved
)  # fmt: skip
BLANK_40 = bytes.fromhex("00000028" "0000000000000000" "CBD43194")  # fmt: skip


def config(root: Path, **overrides: object) -> StoreConfig:
    return StoreConfig.for_tests(root, **overrides)


def open_store(root: Path, **kw: object) -> TimerStore:
    return TimerStore.open(config(root), **kw)  # type: ignore[arg-type]


def drain(store: TimerStore, now_ms: int, batch: int = 64) -> list[TimerEntry]:
    """Everything due at ``now_ms`` (the glue's loop), committing after each batch."""
    out: list[TimerEntry] = []
    for _ in range(10_000):
        got = store.due_entries(now_ms, batch)
        out.extend(got)
        read_ms = store.read_time_ms
        assert read_ms is not None
        store.commit_read(read_ms)
        if not got and store.is_caught_up(now_ms):
            return out
    raise AssertionError("drain did not finish")


def offsets(entries: list[TimerEntry]) -> list[int]:
    return [e.commit_offset for e in entries]


def crash_copy(src: Path, dst: Path) -> Path:
    """What a crash of the process leaves: the files as they are, nothing flushed or closed."""
    shutil.copytree(src, dst)
    return dst


# --- byte layouts ---------------------------------------------------------------------------


def test_slot_bytes() -> None:
    slot = codecs.Slot(time_ms=1_010_000, first_pos=52, last_pos=104, num=2)
    assert codecs.encode_slot(slot, P) == SLOT_1010
    assert codecs.decode_slot(SLOT_1010, 0, P) == slot
    assert codecs.decode_slot(bytes(32), 0, P) is None


def test_unit_bytes() -> None:
    unit = codecs.TimerUnit(
        prev_pos=-1,
        magic=codecs.MAGIC_DEFAULT,
        enqueue_ms=1_000_500,
        delay_ms=9_500,
        commit_offset=4096,
        size=200,
        topic_hash=codecs.topic_hash("T"),
    )
    assert len(UNIT_FIRST) == codecs.UNIT_SIZE_BYTES == 52
    assert codecs.encode_unit(unit) == UNIT_FIRST
    assert codecs.decode_unit(UNIT_FIRST, 0) == unit
    assert unit.fire_ms == 1_010_000
    assert codecs.decode_unit(bytes(52), 0) is None


def test_blank_bytes() -> None:
    assert codecs.encode_blank(40) == BLANK_40
    assert codecs.BLANK_MAGIC == -875286124
    assert codecs.is_blank(BLANK_40, 0)
    assert not codecs.is_blank(UNIT_FIRST, 0)


def test_checkpoint_bytes() -> None:
    cp = codecs.TimerCheckpoint(1_000_000, 104, 7, 7, 0, 1_000_500, 3)
    data = codecs.encode_checkpoint(cp)
    assert len(data) == 4096
    assert data[:56] == bytes.fromhex(
        "00000000000F4240"  # lastReadTimeMs 1_000_000
        "0000000000000068"  # lastTimerLogFlushPos 104
        "0000000000000007"  # lastTimerQueueOffset
        "0000000000000007"  # masterTimerQueueOffset
        "0000000000000000"  # dataVersion.stateVersion
        "00000000000F4434"  # dataVersion.timestamp 1_000_500
        "0000000000000003"  # dataVersion.counter
    )  # fmt: skip
    assert data[56:] == bytes(4040)
    assert codecs.decode_checkpoint(data, "x") == cp


def test_files_on_disk_after_flush(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    hash_t = codecs.topic_hash("T")
    assert store.enqueue(4096, 200, 1_010_000, 1_000_500, hash_t)
    assert store.enqueue(8192, 200, 1_010_000, 1_000_500, hash_t)
    assert store.enqueue(9000, 100, 1_010_000, 1_000_500, hash_t)
    store.set_timer_queue_offset(3)
    store.flush()
    log = (tmp_path / "timerlog" / "00000000000000000000").read_bytes()
    assert len(log) == 64 * 1024
    assert log[:52] == UNIT_FIRST
    second = log[52:104]
    assert second[4:12] == bytes.fromhex("0000000000000000")  # prevPos 0: the first unit
    third = log[104:156]
    assert third[4:12] == bytes.fromhex("0000000000000034")  # prevPos 52
    wheel = (tmp_path / "timerwheel").read_bytes()
    assert len(wheel) == 2 * 3600 * 32
    index = 1010 % 7200
    expected_slot = codecs.encode_slot(codecs.Slot(1_010_000, 0, 104, 3), P)
    assert wheel[index * 32 : index * 32 + 32] == expected_slot
    cp = codecs.decode_checkpoint((tmp_path / "config" / "timercheck").read_bytes(), "cp")
    assert cp.last_timer_log_flush_pos == 156
    assert cp.last_read_time_ms == 1_000_000
    assert cp.last_timer_queue_offset == cp.master_timer_queue_offset == 3
    store.close()


def test_log_file_ends_with_blank_and_rolls(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    units_per_file = (64 * 1024 - 16) // 52
    assert units_per_file == 1260
    for i in range(units_per_file + 1):
        store.enqueue(i * 100, 100, NOW + 5_000, NOW, 1)
    store.flush()
    first = (tmp_path / "timerlog" / "00000000000000000000").read_bytes()
    assert first[1260 * 52 :] == bytes.fromhex("000000100000000000000000CBD43194")
    second = (tmp_path / "timerlog" / "00000000000000065536").read_bytes()
    assert codecs.decode_unit(second, 0) is not None
    assert codecs.decode_unit(second, 0).prev_pos == 1259 * 52  # type: ignore[union-attr]
    store.close()
    reopened = open_store(tmp_path)
    assert len(drain(reopened, NOW + 10_000)) == units_per_file + 1
    reopened.close()


def test_wheel_with_another_size_is_refused(tmp_path: Path) -> None:
    open_store(tmp_path).close()
    with pytest.raises(CorruptionError, match="wheel size"):
        TimerStore.open(config(tmp_path, timer_wheel_slots=1800))


# --- routing (docs/formats/timers.md §4) ------------------------------------------------------


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({props.TIMER_DELAY_SEC: "10"}, (1_010_000, 1_010_500)),
        ({props.TIMER_DELIVER_MS: "1011000"}, (1_010_000, 1_011_000)),  # exact multiple
        ({props.TIMER_DELIVER_MS: "1010999"}, (1_010_000, 1_010_999)),
        ({props.TIMER_DELAY_MS: "2500"}, (1_002_000, 1_003_000)),
        ({props.TIMER_DELAY_MS: "500"}, (1_000_000, 1_001_000)),
        # precedence: DELAY_SEC, then DELAY_MS, then DELIVER_MS
        ({props.TIMER_DELAY_SEC: "1", props.TIMER_DELAY_MS: "9000"}, (1_001_000, 1_001_500)),
        ({props.TIMER_DELAY_MS: "1", props.TIMER_DELIVER_MS: "5000000"}, (1_000_000, 1_000_501)),
        ({props.TIMER_DELAY_SEC: "2", props.TIMER_DELIVER_MS: "junk"}, (1_002_000, 1_002_500)),
    ],
)
def test_route_for_timer(
    tmp_path: Path, properties: dict[str, str], expected: tuple[int, int]
) -> None:
    routing = delivery.route_for_timer(properties, NOW, config(tmp_path))
    assert routing == delivery.TimerRouting(*expected)


@pytest.mark.parametrize(
    "properties",
    [
        {},
        {props.TIMER_DELAY_SEC: "0"},
        {props.TIMER_DELAY_SEC: "-5"},
        {props.TIMER_DELIVER_MS: str(NOW)},  # deliverMs <= now: stored directly
        {props.TIMER_DELAY_SEC: "10", props.TIMER_OUT_MS: "1"},  # already routed
        {props.TIMER_DELAY_SEC: "10", props.DELAY_TIME_LEVEL: "3"},  # legacy schedule path
    ],
)
def test_route_for_timer_stores_directly(tmp_path: Path, properties: dict[str, str]) -> None:
    assert delivery.route_for_timer(properties, NOW, config(tmp_path)) is None


@pytest.mark.parametrize(
    ("properties", "name"),
    [
        ({props.TIMER_DELAY_SEC: "ten"}, props.TIMER_DELAY_SEC),
        ({props.TIMER_DELAY_MS: "1.5"}, props.TIMER_DELAY_MS),
        ({props.TIMER_DELIVER_MS: " 5"}, props.TIMER_DELIVER_MS),
        ({props.TIMER_DELIVER_MS: "99999999999999999999"}, props.TIMER_DELIVER_MS),
    ],
)
def test_route_for_timer_unparsable(tmp_path: Path, properties: dict[str, str], name: str) -> None:
    with pytest.raises(MessageIllegal, match=name):
        delivery.route_for_timer(properties, NOW, config(tmp_path))


def test_route_for_timer_max_delay(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    limit_s = 3 * 86_400
    assert cfg.timer_max_delay_s == limit_s
    ok = delivery.route_for_timer({props.TIMER_DELAY_SEC: str(limit_s)}, NOW, cfg)
    assert ok is not None
    assert ok.deliver_ms == NOW - 500 + limit_s * 1000
    with pytest.raises(MessageIllegal, match="timerMaxDelaySec"):
        delivery.route_for_timer({props.TIMER_DELAY_SEC: str(limit_s + 1)}, NOW, cfg)
    with pytest.raises(MessageIllegal):
        delivery.route_for_timer({props.TIMER_DELAY_MS: str(limit_s * 1000 + 1)}, NOW, cfg)


def test_park_restore_roll() -> None:
    msg = records.Message(
        topic="orders",
        body=b"x",
        queue_id=3,
        properties={props.TIMER_DELAY_SEC: "10", props.UNIQ_KEY: "U1"},
    )
    parked = delivery.park_message(msg, delivery.TimerRouting(1_010_000, 1_010_500))
    assert parked.topic == delivery.TIMER_TOPIC == "rmq_sys_wheel_timer"
    assert parked.queue_id == 0
    assert parked.properties == {
        props.TIMER_DELAY_SEC: "10",
        props.UNIQ_KEY: "U1",
        props.TIMER_OUT_MS: "1010000",
        props.REAL_TOPIC: "orders",
        props.REAL_QUEUE_ID: "3",
    }
    assert msg.topic == "orders"
    assert props.TIMER_OUT_MS not in msg.properties  # the original is untouched
    rolled = delivery.roll_message(parked)
    assert rolled.topic == delivery.TIMER_TOPIC
    assert rolled.properties[props.TIMER_ROLL_TIMES] == "1"
    assert delivery.roll_message(rolled).properties[props.TIMER_ROLL_TIMES] == "2"
    restored = delivery.restore_message(parked, 1_000_600, 1_011_000)
    assert (restored.topic, restored.queue_id) == ("orders", 3)
    assert restored.properties == {
        props.TIMER_DELAY_SEC: "10",
        props.UNIQ_KEY: "U1",
        props.TIMER_OUT_MS: "1010000",
        props.TIMER_ENQUEUE_MS: "1000600",
        props.TIMER_DEQUEUE_MS: "1011000",
    }
    with pytest.raises(MessageIllegal, match=props.REAL_TOPIC):
        delivery.restore_message(msg, 0, 0)


# --- due order, persistence ---------------------------------------------------------------------


def test_due_entries_in_time_then_enqueue_order(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.enqueue(100, 10, 1_010_000, NOW, 1)
    store.enqueue(200, 10, 1_003_000, NOW, 1)
    store.enqueue(300, 10, 1_010_000, NOW, 1)
    store.enqueue(400, 10, 1_003_000, NOW, 1)
    assert store.backlog_count() == 4
    assert store.due_entries(1_003_999, 10) == []  # slot 1_003_000 is due at 1_004_000
    assert offsets(store.due_entries(1_004_000, 10)) == [200, 400]
    assert store.backlog_count() == 2
    assert store.due_entries(1_010_999, 10) == []
    got = store.due_entries(1_011_000, 1)
    assert offsets(got) == [100]
    assert got[0] == TimerEntry(100, 10, 1_010_000, NOW, 1, rolled=False, deleted=False)
    assert offsets(store.due_entries(1_011_000, 10)) == [300]
    assert store.backlog_count() == 0
    assert store.due_entries(2_000_000, 10) == []
    store.close()


def test_persistence_across_close_and_reopen(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.enqueue(100, 10, 1_005_000, NOW, 1)
    store.enqueue(200, 10, 1_020_000, NOW, 1)
    store.set_timer_queue_offset(2)
    assert offsets(drain(store, 1_006_000)) == [100]
    store.close()
    again = open_store(tmp_path)
    assert again.timer_queue_offset == 2
    assert again.read_time_ms == 1_006_000
    assert again.backlog_count() == 1
    assert again.last_commit_offset == 200
    assert not again.enqueue(200, 10, 1_020_000, NOW, 1)  # a replay is ignored
    assert offsets(drain(again, 1_030_000)) == [200]
    again.close()


def test_fire_time_before_the_cursor_fires_at_once(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.enqueue(100, 10, 1_050_000, NOW, 1)
    drain(store, 1_040_000)
    assert store.read_time_ms == 1_040_000
    store.enqueue(200, 10, 1_001_000, 1_040_000, 1)  # late: its slot was read long ago
    got = drain(store, 1_041_000)
    assert offsets(got) == [200]
    assert got[0].deliver_ms == 1_040_000
    store.close()


def test_slot_being_read_does_not_grow(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for off in (100, 200, 300):
        store.enqueue(off, 10, 1_002_000, NOW, 1)
    assert offsets(store.due_entries(1_003_000, 1)) == [100]  # slot 1_002_000 is half read
    store.enqueue(400, 10, 1_001_000, 1_003_000, 1)  # goes to the next slot
    assert offsets(store.due_entries(1_003_000, 10)) == [200, 300]
    assert offsets(store.due_entries(1_004_000, 10)) == [400]
    store.close()


def test_bounded_work_per_call(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for i in range(10):
        store.enqueue(i, 10, 1_100_000, NOW, 1)
    assert store.due_entries(1_101_000, 10, slots_max=50) == []  # stepped 50 empty slots
    assert store.read_time_ms == 1_050_000
    assert not store.is_caught_up(1_101_000)
    assert store.due_entries(1_101_000, 10, slots_max=50, units_read_max=4) == []
    assert store.read_time_ms == 1_100_000
    # The whole slot (10 units) is collected before any is returned, 4 units per call.
    assert store.due_entries(1_101_000, 3, units_read_max=4) == []
    assert store.due_entries(1_101_000, 3, units_read_max=4) == []
    assert len(store.due_entries(1_101_000, 3, units_read_max=4)) == 3
    assert len(store.due_entries(1_101_000, 100)) == 7
    assert store.is_caught_up(1_101_000)
    store.close()


def test_cursor_waits_for_commit(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.enqueue(1, 10, NOW + 3_000_000, NOW, 1)  # beyond 1 h of slots: never committed
    for _ in range(5):
        store.due_entries(NOW + 10_000_000, 10)
    assert store.read_time_ms == 1_000_000 + 3_600 * P  # slots × precision past the commit
    store.commit_read(10**12)  # clamped to the cursor
    assert store.committed_read_time_ms == store.read_time_ms
    store.close()


# --- roll -------------------------------------------------------------------------------------


def test_roll_beyond_window(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    window = store.roll_window_ms
    assert window == 1_800 * P  # (3600 // 2) slots of 1 s in the test wheel
    target = 1_000_000 + 2 * 3_600 * P + 7_000  # 2 h away, beyond the 30-minute window
    store.enqueue(100, 10, target, NOW, 5)
    got = drain(store, 1_000_000 + window)
    assert got == [TimerEntry(100, 10, 1_000_000 + window - P, NOW, 5, rolled=True, deleted=False)]
    rolled_at = [got[0].deliver_ms]
    offset = 100
    while True:  # the glue parks the message again with TIMER_ROLL_TIMES + 1
        now = got[0].deliver_ms + P
        offset += 100
        store.enqueue(offset, 10, target, now, 5)
        got = drain(store, now + window)
        assert len(got) == 1
        if not got[0].rolled:
            break
        rolled_at.append(got[0].deliver_ms)
    # Window ends at 2_800_000, 4_600_000, 6_400_000; then the target is only 7 s past the
    # window (< W/3), so the last roll goes to mid-window: 6_400_000 + 900_000.
    assert rolled_at == [2_799_000, 4_599_000, 6_399_000, 7_300_000]
    assert got[0].deliver_ms == target
    store.close()


def test_default_roll_window_is_two_days(tmp_path: Path) -> None:
    cfg = StoreConfig(root_dir=tmp_path)
    assert codecs.roll_window_ms(cfg) == 2 * 86_400_000


# --- delete markers ---------------------------------------------------------------------------


def test_delete_marker_suppresses_its_target(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.enqueue(100, 10, 1_005_000, NOW, 1)
    store.enqueue(200, 10, 1_005_000, NOW, 1)
    assert store.delete(300, 10, 1_005_000, NOW + 1, 1, target_commit_offset=100)
    store.delete(400, 10, 1_005_000, NOW + 2, 1)  # target unknown: the glue matches keys
    assert store.backlog_count() == 0  # num counts a marker -1, as RocketMQ
    got = drain(store, 1_006_000)
    assert [(e.commit_offset, e.deleted) for e in got] == [(300, True), (400, True), (200, False)]
    assert store.statistics().suppressed_total == 1
    store.close()


def test_pending_units_are_what_fires_from_the_committed_read_time_on(tmp_path: Path) -> None:
    """What the per-topic figures are rebuilt from: entries not yet returned, or returned and
    not committed (they fire again after a crash); no delete marker nor its known target."""
    root = tmp_path / "a"
    store = open_store(root)
    for off, fire in ((100, 1_002_000), (200, 1_004_000), (300, 1_006_000), (400, 1_006_000)):
        store.enqueue(off, 10, fire, NOW, 1)
    store.delete(500, 10, 1_006_000, NOW + 1, 1, target_commit_offset=400)
    assert [u.commit_offset for u in store.pending_units()] == [100, 200, 300]
    assert offsets(store.due_entries(1_003_000, 10)) == [100]
    store.commit_read(store.read_time_ms or 0)
    assert offsets(store.due_entries(1_005_000, 10)) == [200]  # returned, not committed
    assert [u.commit_offset for u in store.pending_units()] == [200, 300]
    store.flush()
    crashed = open_store(crash_copy(root, tmp_path / "b"))
    assert [u.commit_offset for u in crashed.pending_units()] == [200, 300]
    fired = drain(crashed, 1_010_000)
    assert [e.commit_offset for e in fired if not e.deleted] == [200, 300]
    assert crashed.pending_units() == []
    crashed.close()
    store.close()


# --- crash and recovery -----------------------------------------------------------------------


def test_crash_without_flush_keeps_what_reached_the_files(tmp_path: Path) -> None:
    root = tmp_path / "a"
    store = open_store(root)
    store.enqueue(100, 10, 1_005_000, NOW, 1)
    store.flush()
    store.enqueue(200, 10, 1_005_000, NOW, 1)  # in the log's page cache, wheel not written
    store.enqueue(300, 10, 1_007_000, NOW, 1)
    wheel = (root / "timerwheel").read_bytes()
    index = 1007 % 7200
    assert wheel[index * 32 : index * 32 + 32] == bytes(32)  # the wheel waits for flush
    crashed = open_store(crash_copy(root, tmp_path / "b"))
    assert offsets(drain(crashed, 1_010_000)) == [100, 200, 300]
    crashed.close()
    store.close()


def test_crash_losing_unflushed_log_bytes(tmp_path: Path) -> None:
    root = tmp_path / "a"
    store = open_store(root)
    store.enqueue(100, 10, 1_005_000, NOW, 1)
    store.enqueue(200, 10, 1_009_000, NOW, 1)
    store.flush()
    store.enqueue(300, 10, 1_005_000, NOW, 1)
    store.enqueue(400, 10, 1_009_000, NOW, 1)
    copy = crash_copy(root, tmp_path / "b")
    log_path = copy / "timerlog" / "00000000000000000000"
    data = bytearray(log_path.read_bytes())
    data[104 + 20 :] = bytes(len(data) - 124)  # the OS lost the tail, tearing unit 300
    log_path.write_bytes(bytes(data))
    crashed = open_store(copy)
    assert crashed.last_commit_offset == 200
    assert crashed.statistics().log_max_offset == 104
    assert crashed.enqueue(300, 10, 1_005_000, NOW, 1)  # the glue re-feeds the lost ones
    assert offsets(drain(crashed, 1_010_000)) == [100, 300, 200]
    crashed.close()
    store.close()


def test_checkpoint_behind_wheel_and_log(tmp_path: Path) -> None:
    root = tmp_path / "a"
    store = open_store(root)
    store.enqueue(100, 10, 1_005_000, NOW, 1)
    store.flush()
    old_checkpoint = (root / "config" / "timercheck").read_bytes()
    store.enqueue(200, 10, 1_005_000, NOW, 1)
    store.enqueue(300, 10, 1_006_000, NOW, 1)
    store.flush()
    copy = crash_copy(root, tmp_path / "b")
    (copy / "config" / "timercheck").write_bytes(old_checkpoint)  # crash before its rewrite
    crashed = open_store(copy)
    assert crashed.backlog_count() == 3
    assert offsets(drain(crashed, 1_010_000)) == [100, 200, 300]
    crashed.close()
    store.close()


def test_uncommitted_entries_are_returned_again_after_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "a"
    store = open_store(root)
    for off, fire in ((100, 1_002_000), (200, 1_004_000), (300, 1_006_000)):
        store.enqueue(off, 10, fire, NOW, 1)
    assert offsets(store.due_entries(1_003_000, 10)) == [100]
    store.commit_read(store.read_time_ms or 0)
    assert offsets(store.due_entries(1_005_000, 10)) == [200]  # returned, not committed
    store.flush()
    crashed = open_store(crash_copy(root, tmp_path / "b"))
    assert crashed.read_time_ms == 1_003_000
    assert offsets(drain(crashed, 1_010_000)) == [200, 300]  # at least once
    crashed.close()
    store.close()


def test_lost_wheel_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.enqueue(100, 10, 1_005_000, NOW, 1)
    store.enqueue(200, 10, 1_009_000, NOW, 1)
    store.close()
    (tmp_path / "timerwheel").unlink()
    again = open_store(tmp_path)
    assert offsets(drain(again, 1_010_000)) == [100, 200]
    again.close()


def test_checkpoint_claiming_more_than_the_log_is_corruption(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.enqueue(100, 10, 1_005_000, NOW, 1)
    store.close()
    path = tmp_path / "timerlog" / "00000000000000000000"
    path.write_bytes(bytes(path.stat().st_size))
    with pytest.raises(CorruptionError, match="flushed"):
        open_store(tmp_path)


# --- truncate and cleanup -----------------------------------------------------------------------


def test_truncate_drops_entries_at_or_past_the_cut(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.enqueue(100, 10, 1_005_000, NOW, 1)
    store.enqueue(200, 10, 1_009_000, NOW, 1)
    store.enqueue(300, 10, 1_005_000, NOW, 1)
    store.enqueue(400, 10, 1_007_000, NOW, 1)
    store.truncate(300)
    assert store.last_commit_offset == 200
    assert store.backlog_count() == 2
    assert store.enqueue(300, 10, 1_008_000, NOW, 1)  # a new message at the cut offset
    store.close()
    again = open_store(tmp_path)
    assert offsets(drain(again, 1_010_000)) == [100, 300, 200]
    again.close()


def test_recover_with_commit_log_end(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.enqueue(100, 10, 1_005_000, NOW, 1)
    store.enqueue(200, 10, 1_005_000, NOW, 1)
    store.close()
    again = open_store(tmp_path, commit_log_max_offset=150)
    assert offsets(drain(again, 1_010_000)) == [100]
    again.close()


def test_truncate_everything(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.enqueue(100, 10, 1_005_000, NOW, 1)
    store.truncate(0)
    assert store.statistics().log_max_offset == 0
    assert store.last_commit_offset == -1
    assert drain(store, 1_010_000) == []
    store.close()


def test_clean_expired_files(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for i in range(1_300):  # two files
        store.enqueue(i + 1, 10, 1_005_000, NOW, 1)
    store.enqueue(5_000, 10, 1_900_000, NOW, 1)
    store.flush()
    assert store.clean_expired_files() == 0  # nothing read yet
    assert len(drain(store, 1_006_000)) == 1_300
    store.flush()
    assert store.clean_expired_files() == 1
    assert store.statistics().log_min_offset == 65_536
    assert store.clean_expired_files() == 0  # never the newest file
    store.close()
    again = open_store(tmp_path)
    assert offsets(drain(again, 1_901_000)) == [5_000]
    again.close()


# --- property: every entry exactly once ----------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 90_000), st.integers(1, 2 * 3_600_000)), min_size=1, max_size=30
    ),
    step_ms=st.integers(700, 400_000),
    batch=st.integers(1, 8),
)
def test_every_entry_fires_exactly_once(
    ops: list[tuple[int, int]], step_ms: int, batch: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(Path(tmp))
        store = TimerStore.open(cfg)
        now = 1_700_000_000_123
        origin: dict[int, tuple[int, delivery.TimerRouting]] = {}
        fired: dict[int, int] = {}
        next_offset = [0]

        def park(i: int, routing: delivery.TimerRouting, at_ms: int) -> None:
            next_offset[0] += 100
            assert store.enqueue(next_offset[0], 100, routing.deliver_ms, at_ms, 7)
            origin[next_offset[0]] = (i, routing)

        def pump(at_ms: int) -> None:
            for _ in range(100_000):
                got = store.due_entries(at_ms, batch)
                for entry in got:
                    i, routing = origin.pop(entry.commit_offset)
                    assert entry.deliver_ms + P <= at_ms
                    if entry.rolled:
                        assert entry.deliver_ms < routing.deliver_ms
                        park(i, routing, at_ms)
                    else:
                        assert i not in fired
                        # Exact: a roll leaves at least W/3 (10 min) > step_ms to the target.
                        assert entry.deliver_ms == routing.deliver_ms
                        assert routing.requested_ms <= at_ms
                        fired[i] = at_ms
                store.commit_read(store.read_time_ms or 0)
                if not got and store.is_caught_up(at_ms):
                    return
            raise AssertionError("pump did not finish")

        for i, (gap_ms, delay_ms) in enumerate(ops):
            now += gap_ms
            pump(now)
            routing = delivery.route_for_timer({props.TIMER_DELAY_MS: str(delay_ms)}, now, cfg)
            assert routing is not None
            park(i, routing, now)
        for _ in range(100_000):
            if len(fired) == len(ops):
                break
            now += step_ms
            pump(now)
        assert sorted(fired) == list(range(len(ops)))
        assert origin == {}
        assert store.backlog_count() == 0
        store.close()


_ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.integers(1, 20 * 60_000)),
        st.tuples(st.just("advance"), st.integers(1, 120_000)),
        st.tuples(st.just("flush"), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(actions=_ACTIONS, lose_tail=st.booleans())
def test_crash_at_any_point_loses_nothing_flushed(
    actions: list[tuple[str, int]], lose_tail: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "a"
        cfg = config(root)
        store = TimerStore.open(cfg)
        now = 1_700_000_000_000
        offset = 0
        enqueued: set[int] = set()
        returned: set[int] = set()
        durable: set[int] = set()  # enqueued before the last flush
        committed: set[int] = set()  # returned and committed before the last flush
        for action, value in actions:
            if action == "enqueue":
                offset += 100
                routing = delivery.route_for_timer({props.TIMER_DELAY_MS: str(value)}, now, cfg)
                assert routing is not None
                store.enqueue(offset, 100, routing.deliver_ms, now, 1)
                enqueued.add(offset)
            elif action == "advance":
                now += value
                returned |= set(offsets(drain(store, now)))
            else:
                store.flush()
                durable, committed = set(enqueued), set(returned)
        copy = crash_copy(root, Path(tmp) / "b")
        if lose_tail:  # the OS also lost every log byte past the checkpoint's flush position
            cp = codecs.decode_checkpoint((copy / "config" / "timercheck").read_bytes(), "cp")
            for path in sorted((copy / "timerlog").iterdir()):
                start = int(path.name)
                data = bytearray(path.read_bytes())
                keep = max(0, cp.last_timer_log_flush_pos - start)
                data[keep:] = bytes(len(data) - min(keep, len(data)))
                path.write_bytes(bytes(data))
        crashed = TimerStore.open(config(copy))
        after = offsets(drain(crashed, now + 3_600_000))
        assert len(after) == len(set(after))
        assert not set(after) & committed
        assert durable - committed <= set(after)
        crashed.close()
        store.close()
