"""Consume queues: byte layout, dispatch rules, recovery, truncation, cleanup, time search."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.node.store.config import StoreConfig
from gannet.node.store.queues.consume_queue_store import ConsumeQueueStore
from gannet.node.store.queues.consume_queues import (
    PRE_BLANK_UNIT,
    Boundary,
    ConsumeQueue,
    CqUnit,
)

UNITS_PER_FILE = 100  # StoreConfig.for_tests
MSG_SIZE = 100


def new_queue(root: Path, topic: str = "T", queue_id: int = 0) -> ConsumeQueue:
    return ConsumeQueue(topic, queue_id, StoreConfig.for_tests(root))


def reopen(root: Path, topic: str = "T", queue_id: int = 0) -> ConsumeQueue:
    cq = new_queue(root, topic, queue_id)
    cq.load()
    cq.recover()
    return cq


def fill(cq: ConsumeQueue, count: int, first_queue_offset: int = 0) -> None:
    """Units whose commit offset is ``queue offset × 100`` and size 100."""
    for qo in range(first_queue_offset, first_queue_offset + count):
        cq.put(qo * MSG_SIZE, MSG_SIZE, qo, qo)


def file_names(cq: ConsumeQueue) -> list[str]:
    return [f.path.name for f in cq.files]


def raw(cq: ConsumeQueue, file_index: int, position: int, size: int) -> bytes:
    return cq.files[file_index].read(position, size)


# --- byte layout and file names ---


def test_unit_is_20_big_endian_bytes(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    cq.put(0x0102030405060708, 0x0A0B0C0D, -1, 0)
    expected = bytes.fromhex("01020304050607080a0b0c0dffffffffffffffff")
    assert raw(cq, 0, 0, 20) == expected
    assert (tmp_path / "consumequeue" / "T" / "0" / "00000000000000000000").stat().st_size == 2000


def test_second_file_is_named_by_logical_byte_offset(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 150)
    assert file_names(cq) == ["00000000000000000000", "00000000000000002000"]
    assert cq.max_offset_in_queue() == 150
    assert cq.roll_next_file(150) == 200
    assert cq.roll_next_file(0) == 100
    assert cq.roll_next_file(199) == 200


def test_first_file_at_non_zero_offset_is_pre_blank_filled(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    cq.put(5000, 100, 7, 105)
    assert file_names(cq) == ["00000000000000002000"]
    pre_blank = bytes.fromhex("0000000000000000" "7fffffff" "0000000000000000")  # fmt: skip
    assert pre_blank == PRE_BLANK_UNIT
    assert raw(cq, 0, 0, 100) == PRE_BLANK_UNIT * 5
    assert raw(cq, 0, 100, 20) == bytes.fromhex("0000000000001388000000640000000000000007")
    assert cq.min_offset_in_queue() == 105
    assert cq.max_offset_in_queue() == 106
    assert cq.get_unit(104) is None
    assert cq.get_unit(105) == CqUnit(105, 5000, 100, 7)
    assert cq.max_physic_offset == 5100


def test_pre_blank_queue_survives_restart(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    cq.put(5000, 100, 7, 105)
    cq.close()
    again = reopen(tmp_path)
    assert again.min_offset_in_queue() == 105
    assert again.max_offset_in_queue() == 106
    assert again.max_physic_offset == 5100
    assert again.get_last_offset() == 5100


# --- dispatch write rules ---


def test_put_is_idempotent_below_max_physic_offset(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 3)
    cq.put(100, MSG_SIZE, 1, 1)  # rebuilt entry
    cq.put(0, MSG_SIZE, 0, 0)
    assert cq.max_offset_in_queue() == 3


def test_put_drops_duplicate_queue_offset(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 3)
    cq.put(10_000, MSG_SIZE, 9, 1)  # new commit offset, but queue offset 1 is written
    assert cq.max_offset_in_queue() == 3
    assert cq.get_unit(1) == CqUnit(1, 100, MSG_SIZE, 1)


def test_put_with_gap_warns_and_appends(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 2)
    with caplog.at_level(logging.WARNING):
        cq.put(500, MSG_SIZE, 0, 7)
    assert "logic queue order maybe wrong" in caplog.text
    assert cq.max_offset_in_queue() == 3
    assert cq.get_unit(2) == CqUnit(2, 500, MSG_SIZE, 0)


# --- reads ---


def test_read_units_spans_files_and_stops_at_written_end(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 150)
    units = cq.read_units(90, 20)
    assert [u.queue_offset for u in units] == list(range(90, 110))
    assert units[15] == CqUnit(105, 10_500, MSG_SIZE, 105)
    assert len(cq.read_units(140, 100)) == 10
    assert cq.read_units(150, 10) == []
    assert cq.read_units(0, 0) == []
    assert cq.get_unit(149) == CqUnit(149, 14_900, MSG_SIZE, 149)
    assert cq.get_unit(150) is None


def test_read_below_min_or_in_missing_file_is_empty(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 250)
    assert cq.delete_expired_file(15_050) == 1
    assert cq.read_units(50, 10) == []
    assert cq.get_unit(99) is None


def test_get_last_offset(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    assert cq.get_last_offset() == -1
    fill(cq, 101)
    assert cq.get_last_offset() == 100 * MSG_SIZE + MSG_SIZE


# --- recovery ---


def test_recover_stops_at_zeroed_unit_and_erases_the_rest(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 250)
    last = cq.files[-1]
    last.write_at(30 * 20, bytes(20))  # unit 230 torn to zeros; 231.. are valid but orphaned
    cq.close()
    again = reopen(tmp_path)
    assert again.max_offset_in_queue() == 230
    assert again.max_physic_offset == 229 * MSG_SIZE + MSG_SIZE
    assert raw(again, 2, 31 * 20, 20) == bytes(20)  # cut tail zeroed
    again.put(23_000, MSG_SIZE, 0, 230)
    again.close()
    assert reopen(tmp_path).max_offset_in_queue() == 231


def test_recover_treats_negative_offset_or_zero_size_as_invalid(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 10)
    cq.files[0].write_at(4 * 20, bytes.fromhex("ffffffffffffffff000000640000000000000000"))
    cq.files[0].write_at(8 * 20 + 8, bytes(4))
    cq.close()
    assert reopen(tmp_path).max_offset_in_queue() == 4


def test_recover_starts_at_third_from_last_file(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 450)  # five files
    cq.files[0].write_at(0, bytes(20))  # not scanned: recovery trusts older files
    cq.files[3].write_at(40 * 20, bytes(20))
    cq.close()
    again = reopen(tmp_path)
    assert again.max_offset_in_queue() == 340
    assert file_names(again)[-1] == "00000000000000006000"


def test_recover_of_full_last_file_keeps_everything(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 200)
    cq.close()
    again = reopen(tmp_path)
    assert again.max_offset_in_queue() == 200
    again.put(20_000, MSG_SIZE, 0, 200)
    assert file_names(again)[-1] == "00000000000000004000"


# --- truncation ---


def test_truncate_cuts_units_at_and_after_phy_offset(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 250)
    cq.truncate_dirty_logic_files(12_000)
    assert file_names(cq) == ["00000000000000000000", "00000000000000002000"]
    assert cq.max_offset_in_queue() == 120
    assert cq.max_physic_offset == 12_000
    assert raw(cq, 1, 20 * 20, 2000 - 400) == bytes(1600)


def test_truncate_then_reappend_does_not_resurrect_stale_units(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 180)
    cq.truncate_dirty_logic_files(12_050)  # inside unit 120: it starts before, so it stays
    assert cq.max_offset_in_queue() == 121
    cq.put(50_000, MSG_SIZE, 1, 121)
    cq.put(50_100, MSG_SIZE, 2, 122)
    cq.close()
    again = reopen(tmp_path)
    assert again.max_offset_in_queue() == 123
    assert again.get_unit(122) == CqUnit(122, 50_100, MSG_SIZE, 2)


def test_truncate_at_file_boundary_and_to_nothing(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 250)
    cq.truncate_dirty_logic_files(20_000)
    assert cq.max_offset_in_queue() == 200
    assert len(cq.files) == 2
    cq.truncate_dirty_logic_files(0)
    assert cq.files == []
    assert cq.max_offset_in_queue() == 0
    assert cq.min_offset_in_queue() == 0
    fill(cq, 1)
    assert cq.get_unit(0) == CqUnit(0, 0, MSG_SIZE, 0)


def test_truncate_keeps_pre_blank_units(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 3, first_queue_offset=105)
    cq.truncate_dirty_logic_files(106 * MSG_SIZE)
    assert cq.max_offset_in_queue() == 106
    assert cq.min_offset_in_queue() == 105
    assert raw(cq, 0, 0, 20) == PRE_BLANK_UNIT


def test_truncating_a_queue_that_holds_no_unit_lets_dispatch_rebuild_it(tmp_path: Path) -> None:
    """A crash after dispatch created a queue's first file but before it wrote the unit: the
    recovered queue is one empty file. Truncation must not leave ``max_physic_offset`` at the
    cut, or every re-dispatched record below it is dropped as already built."""
    store = ConsumeQueueStore(StoreConfig.for_tests(tmp_path))
    store.find_or_create("T", 0).put(0, MSG_SIZE, 0, 0)
    empty = store.find_or_create("T", 1)
    empty.put(MSG_SIZE, MSG_SIZE, 0, 0)
    empty.files[0].write_at(0, bytes(20))  # the file exists, its unit was never written
    store.close()
    again = ConsumeQueueStore(StoreConfig.for_tests(tmp_path))
    again.load()
    assert again.recover() == MSG_SIZE
    again.truncate_dirty(5 * MSG_SIZE)  # recovery's cut, past the records of both queues
    q1 = again.get("T", 1)
    assert q1 is not None
    assert q1.max_physic_offset == -1
    q1.put(MSG_SIZE, MSG_SIZE, 9, 0)  # dispatch from the recovered point
    q1.put(3 * MSG_SIZE, MSG_SIZE, 9, 1)
    assert q1.read_units(0, 5) == [
        CqUnit(0, MSG_SIZE, MSG_SIZE, 9),
        CqUnit(1, 3 * MSG_SIZE, MSG_SIZE, 9),
    ]


def test_truncate_to_pre_blank_units_only_forgets_max_physic_offset(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 3, first_queue_offset=105)
    cq.truncate_dirty_logic_files(105 * MSG_SIZE)  # only the pre-blank units stay
    assert cq.max_offset_in_queue() == 105
    assert cq.max_physic_offset == -1
    cq.put(10 * MSG_SIZE, MSG_SIZE, 0, 105)  # a record below the cut, re-dispatched
    assert cq.get_unit(105) == CqUnit(105, 10 * MSG_SIZE, MSG_SIZE, 0)


# --- min offset and cleanup ---


def test_delete_expired_file_then_correct_min_offset(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 250)
    assert cq.delete_expired_file(15_050) == 1
    assert file_names(cq) == ["00000000000000002000", "00000000000000004000"]
    assert cq.min_offset_in_queue() == 151
    assert cq.delete_expired_file(15_050) == 0
    cq.correct_min_offset(0)  # an intact min offset never moves backwards
    assert cq.min_offset_in_queue() == 151


def test_delete_expired_never_deletes_last_file(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 150)
    assert cq.delete_expired_file(10**9) == 1
    assert len(cq.files) == 1
    assert cq.min_offset_in_queue() == cq.max_offset_in_queue() == 150


def test_correct_min_offset_after_restart_searches_from_first_file(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 250)
    assert cq.delete_expired_file(10_000) == 1
    cq.close()
    again = reopen(tmp_path)
    assert again.min_offset_in_queue() == 100  # first real unit of the first file
    again.correct_min_offset(17_777)
    assert again.min_offset_in_queue() == 178


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=26_000), st.integers(min_value=1, max_value=250))
def test_correct_min_offset_is_a_lower_bound(min_commitlog_offset: int, count: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cq = new_queue(Path(tmp))
        fill(cq, count)
        cq.correct_min_offset(min_commitlog_offset)
        offsets = [qo * MSG_SIZE for qo in range(count)]
        expected = next((i for i, o in enumerate(offsets) if o >= min_commitlog_offset), count)
        assert cq.min_offset_in_queue() == expected
        cq.close()


# --- time search ---


def search(cq: ConsumeQueue, times_ms: list[int], ts: int, boundary: Boundary) -> int:
    by_offset = {qo * MSG_SIZE: t for qo, t in enumerate(times_ms)}
    return cq.get_offset_in_queue_by_time(ts, boundary, lambda o, _s: by_offset.get(o, -1), 0)


TIMES = [10, 10, 20, 20, 20, 30, 40, 40]


@pytest.mark.parametrize(
    ("ts", "lower", "upper"),
    [
        (20, 2, 4),  # exact: first and last of the run
        (25, 5, 4),  # between: LOWER = right neighbour, UPPER = left neighbour
        (5, 0, 0),  # before everything: file start / 0 clamped to min
        (50, 8, 7),  # after everything: after the last / the last
        (10, 0, 1),
        (40, 6, 7),
    ],
)
def test_time_search_corner_cases(tmp_path: Path, ts: int, lower: int, upper: int) -> None:
    cq = new_queue(tmp_path)
    fill(cq, len(TIMES))
    assert search(cq, TIMES, ts, Boundary.LOWER) == lower
    assert search(cq, TIMES, ts, Boundary.UPPER) == upper


def test_time_search_failed_lookup_gives_min(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    fill(cq, 9, first_queue_offset=3)
    times = [0, 0, 0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
    lookups = {qo * MSG_SIZE: t for qo, t in enumerate(times)}
    lookups[7 * MSG_SIZE] = -1  # the commit log cannot read the middle record

    result = cq.get_offset_in_queue_by_time(
        45,
        Boundary.LOWER,
        store_time_of=lambda o, _s: lookups[o],
        commitlog_min_offset=0,
    )
    assert result == 3  # 0, clamped to the min offset
    assert search(cq, times, 1, Boundary.UPPER) == 3


def test_time_search_skips_units_below_commitlog_min(tmp_path: Path) -> None:
    cq = new_queue(tmp_path)
    times = [5, 10, 10, 10, 20, 30, 30, 40]
    fill(cq, len(times))
    by_offset = {qo * MSG_SIZE: t for qo, t in enumerate(times)}
    result = cq.get_offset_in_queue_by_time(
        10,
        Boundary.UPPER,
        store_time_of=lambda o, _s: by_offset[o],
        commitlog_min_offset=4 * MSG_SIZE,
    )
    assert result == 3  # no exact match among units >= the min: the left neighbour


def brute_force(times_ms: list[int], ts: int, boundary: Boundary) -> int:
    if boundary is Boundary.LOWER:
        return next((i for i, t in enumerate(times_ms) if t >= ts), len(times_ms))
    return max((i for i, t in enumerate(times_ms) if t <= ts), default=0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=320),
    st.integers(min_value=0, max_value=1_000),
    st.sampled_from([Boundary.LOWER, Boundary.UPPER]),
)
def test_time_search_matches_brute_force(steps: list[int], pick: int, boundary: Boundary) -> None:
    times: list[int] = []
    now = 1
    for step in steps:
        now += step
        times.append(now)
    candidates = sorted({0, *times, times[-1] + 1, *(t + 1 for t in times)})
    ts = candidates[pick % len(candidates)]
    with tempfile.TemporaryDirectory() as tmp:
        cq = new_queue(Path(tmp))
        fill(cq, len(times))
        assert search(cq, times, ts, boundary) == brute_force(times, ts, boundary)
        cq.close()


# --- round trip ---


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 5000), st.integers(-(2**63), 2**63 - 1)),
        min_size=1,
        max_size=260,
    ),
    st.integers(min_value=0, max_value=450),
)
def test_put_reload_round_trip(entries: list[tuple[int, int]], first: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cq = new_queue(root)
        expected: list[CqUnit] = []
        commit_offset = 1_000
        for i, (size, code) in enumerate(entries):
            cq.put(commit_offset, size, code, first + i)
            expected.append(CqUnit(first + i, commit_offset, size, code))
            commit_offset += size
        cq.close()
        again = reopen(root)
        assert again.min_offset_in_queue() == first
        assert again.max_offset_in_queue() == first + len(entries)
        assert again.read_units(first, len(entries) + 5) == expected
        assert again.max_physic_offset == commit_offset
        assert again.get_last_offset() == commit_offset
        again.close()


# --- the store of all queues ---


def test_store_load_recover_and_lookup(tmp_path: Path) -> None:
    config = StoreConfig.for_tests(tmp_path)
    store = ConsumeQueueStore(config)
    store.load()
    assert store.recover() == -1
    a0 = store.find_or_create("A", 0)
    a1 = store.find_or_create("A", 1)
    b0 = store.find_or_create("B", 0)
    assert store.find_or_create("A", 0) is a0
    a0.put(0, 100, 0, 0)
    b0.put(100, 50, 0, 0)
    a1.put(150, 70, 0, 0)
    store.flush_all(0)
    store.close()

    again = ConsumeQueueStore(config)
    again.load()
    assert again.recover() == 220
    assert sorted(again.topics()) == ["A", "B"]
    assert len(again.queues()) == 3
    queue = again.get("A", 1)
    assert queue is not None
    assert queue.get_unit(0) == CqUnit(0, 150, 70, 0)
    assert again.get("C", 0) is None


def test_store_ignores_non_numeric_queue_dirs(tmp_path: Path) -> None:
    config = StoreConfig.for_tests(tmp_path)
    (config.consume_queue_dir / "T" / "notanumber").mkdir(parents=True)
    store = ConsumeQueueStore(config)
    store.load()
    assert store.queues() == []


def test_store_truncate_correct_and_delete(tmp_path: Path) -> None:
    store = ConsumeQueueStore(StoreConfig.for_tests(tmp_path))
    q0 = store.find_or_create("T", 0)
    q1 = store.find_or_create("T", 1)
    for i in range(300):  # interleaved in the commit log: even → q0, odd → q1
        q = q0 if i % 2 == 0 else q1
        q.put(i * MSG_SIZE, MSG_SIZE, 0, i // 2)
    store.truncate_dirty(250 * MSG_SIZE)
    assert q0.max_offset_in_queue() == 125
    assert q1.max_offset_in_queue() == 125
    assert store.delete_expired(220 * MSG_SIZE) == 2
    assert q0.min_offset_in_queue() == 110
    assert q1.min_offset_in_queue() == 110
    store.correct_min_offsets(230 * MSG_SIZE)
    assert q0.min_offset_in_queue() == 115


def test_store_destroy(tmp_path: Path) -> None:
    config = StoreConfig.for_tests(tmp_path)
    store = ConsumeQueueStore(config)
    for topic in ("A", "B"):
        for qid in (0, 1):
            store.find_or_create(topic, qid).put(0, 10, 0, 0)
    store.destroy_queue("A", 0)
    assert not (config.consume_queue_dir / "A" / "0").exists()
    assert store.get("A", 0) is None
    store.destroy_queue("A", 1)
    assert not (config.consume_queue_dir / "A").exists()
    assert store.topics() == ["B"]
    store.destroy_topic("B")
    assert store.topics() == []
    assert not (config.consume_queue_dir / "B").exists()
    store.find_or_create("C", 3).put(0, 10, 0, 0)
    store.destroy_all()
    assert store.queues() == []
    assert list(config.consume_queue_dir.iterdir()) == []
