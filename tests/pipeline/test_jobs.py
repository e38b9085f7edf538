"""The pipeline's Spark jobs against a store the broker wrote: export round trip, rebuild
byte-for-byte, verify finding injected damage. One shared local Spark session (conftest)."""

from __future__ import annotations

import dataclasses
import shutil
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gannet.node.store.config import StoreConfig
from gannet.pipeline import exporting, jobs, segments

from .conftest import BrokerStore

pytestmark = pytest.mark.slow


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_export_round_trip(spark, broker_store: BrokerStore, tmp_path: Path) -> None:
    out = tmp_path / "export"
    report = jobs.export(spark, broker_store.config.root_dir, str(out))
    expected = [w for w in broker_store.written if w.consumable]
    assert report.messages == len(expected)
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"topic=Orders", "topic=Payments"}
    frame = spark.read.parquet(str(out))  # Spark reads the layout back, partitions included
    assert frame.count() == len(expected)
    assert {"topic", "date", "body", "properties", "keys"} <= set(frame.columns)
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == len(expected)
    by_offset = {r["commit_offset"]: r for r in rows}
    for w in expected:
        row = by_offset[w.commit_offset]
        assert (row["topic"], row["queue_id"], row["queue_offset"]) == (
            w.topic, w.queue_id, w.queue_offset,
        )  # fmt: skip
        assert row["body"] == w.body
        assert row["keys"] == w.keys
        assert row["tag"] == w.tag
        assert row["message_id"] == w.uniq_key
        assert row["store_timestamp_ms"] == w.store_timestamp_ms
        assert dict(row["properties"])["UNIQ_KEY"] == w.uniq_key
        assert str(row["date"]) == exporting.utc_date(w.store_timestamp_ms)


def test_export_of_several_groups_names_each_rows_group(
    spark, broker_store: BrokerStore, tmp_path: Path
) -> None:
    """Two groups' stores in one job (here two copies of one store): every row once per
    group, the group as a ``broker`` partition column and in the file names."""
    copy = tmp_path / "broker-1"
    shutil.copytree(broker_store.config.root_dir, copy)
    out = tmp_path / "export"
    sources = [("broker-0", broker_store.config.root_dir), ("broker-1", copy)]
    report = jobs.export(spark, sources, str(out))
    expected = [w for w in broker_store.written if w.consumable]
    assert report.messages == 2 * len(expected)
    frame = spark.read.parquet(str(out))
    counts = {r["broker"]: r["count"] for r in frame.groupBy("broker").count().collect()}
    assert counts == {"broker-0": len(expected), "broker-1": len(expected)}
    names = {p.name.split("-")[1] for p in out.rglob("*.parquet")}
    assert names == {"broker"}  # part-broker-<n>-<segment>-<id>.parquet
    with pytest.raises(ValueError, match="distinct non-empty names"):
        jobs.export(spark, [("b", copy), ("b", copy)], str(tmp_path / "again"))


def test_export_keeps_chosen_topic_and_time_range(
    spark, broker_store: BrokerStore, tmp_path: Path
) -> None:
    payments = [w for w in broker_store.written if w.consumable and w.topic == "Payments"]
    since = payments[10].store_timestamp_ms
    keep = jobs.ExportFilter(frozenset({"Payments"}), since_ms=since, until_ms=None)
    report = jobs.export(spark, broker_store.config.root_dir, str(tmp_path / "p"), keep)
    expected = [w for w in payments if w.store_timestamp_ms >= since]
    assert report.messages == len(expected)
    offsets = sorted(r["commit_offset"] for r in pq.read_table(tmp_path / "p").to_pylist())
    assert offsets == [w.commit_offset for w in expected]


def _cut_into_ranges(monkeypatch: pytest.MonkeyPatch, found: list[segments.Segment]) -> None:
    """Make the jobs cut every segment of ``found`` into several byte ranges (tasks)."""
    monkeypatch.setattr(jobs, "SPLIT_BYTES_MIN", 4096)
    cut = jobs.task_ranges
    monkeypatch.setattr(jobs, "task_ranges", lambda found, _: cut(found, 64))
    assert len(jobs.task_ranges(found, 2)) > 2 * len(found)


def test_export_of_segments_cut_into_ranges_writes_each_row_once(
    spark, broker_store: BrokerStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segments cut into many byte ranges (one Spark task each) export the same rows as the
    segments exported whole in one process."""
    found = segments.find_segments(broker_store.config.root_dir)
    _cut_into_ranges(monkeypatch, found)
    report = jobs.export(spark, broker_store.config.root_dir, str(tmp_path / "split"))
    for segment in found:
        exporting.export_segment(segment, jobs.KEEP_ALL, str(tmp_path / "whole"))
    split, whole = (
        pq.read_table(tmp_path / name).sort_by("commit_offset").to_pylist()
        for name in ("split", "whole")
    )
    assert report.messages == len(whole) == len([w for w in broker_store.written if w.consumable])
    assert split == whole


@pytest.mark.parametrize("ranges", [False, True], ids=["segments", "byte-ranges"])
def test_rebuild_is_byte_identical_to_the_brokers_dispatch(
    spark, broker_store: BrokerStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranges: bool
) -> None:
    source = broker_store.config.root_dir
    if ranges:
        _cut_into_ranges(monkeypatch, segments.find_segments(source))
    target = dataclasses.replace(broker_store.config, root_dir=tmp_path / "rebuilt")
    report = jobs.rebuild(spark, source, target)
    assert report.stopped_at is None
    assert report.records == len(broker_store.written)
    broker_cq = _files(source / "consumequeue")
    assert len({Path(name).parent for name in broker_cq}) == 4  # queues
    assert len([n for n in broker_cq if n.startswith("Payments/0/")]) >= 2
    assert _files(target.consume_queue_dir) == broker_cq
    broker_index = [p.read_bytes() for p in sorted((source / "index").iterdir())]
    rebuilt_index = [p.read_bytes() for p in sorted(target.index_dir.iterdir())]
    assert len(broker_index) >= 3
    assert report.index_files == len(broker_index)
    assert rebuilt_index == broker_index


def test_rebuild_refuses_a_target_that_has_files(
    spark, broker_store: BrokerStore, tmp_path: Path
) -> None:
    (tmp_path / "consumequeue" / "x").mkdir(parents=True)
    with pytest.raises(FileExistsError):
        jobs.rebuild(spark, broker_store.config.root_dir, StoreConfig.for_tests(tmp_path))


def _flip_bit_in_body(path: Path, record_position: int) -> None:
    data = bytearray(path.read_bytes())
    data[record_position + 100] ^= 0x10  # inside the body (which starts at 88)
    path.write_bytes(bytes(data))


def test_verify_finds_a_flipped_bit_and_a_torn_tail(
    spark, broker_store: BrokerStore, tmp_path: Path
) -> None:
    copies = tmp_path / "copies"
    shutil.copytree(broker_store.config.commitlog_dir, copies)
    found = segments.find_segments(copies)
    assert len(found) >= 4
    # A bit flipped in the body of the third record of the second segment.
    second = found[1]
    in_second = sorted(
        w.commit_offset for w in broker_store.written
        if second.start_offset <= w.commit_offset < second.end_offset
    )  # fmt: skip
    flipped = in_second[2]
    _flip_bit_in_body(Path(second.path), flipped - second.start_offset)
    # A torn tail: the newest record's second half never reached the disk.
    last = broker_store.written[-1]
    size = struct.unpack(">i", Path(found[-1].path).read_bytes()[
        last.commit_offset - found[-1].start_offset :][:4])[0]  # fmt: skip
    data = bytearray(Path(found[-1].path).read_bytes())
    torn_from = last.commit_offset - found[-1].start_offset + size // 2
    data[torn_from : torn_from + size] = bytes(size)
    Path(found[-1].path).write_bytes(bytes(data))

    report = jobs.verify(spark, copies)

    assert [(d.segment, d.start_offset, d.end_offset) for d in report.damage] == [
        (second.name, flipped, in_second[3]),
        (found[-1].name, last.commit_offset, found[-1].end_offset),
    ]
    assert report.damage[0].reason == "body CRC mismatch"
    assert report.records_ok == len(broker_store.written) - 2
    clean = jobs.verify(spark, broker_store.config.root_dir)
    assert clean.clean
    assert clean.records_ok == len(broker_store.written)


@pytest.mark.parametrize("ranges", [False, True], ids=["segments", "byte-ranges"])
def test_rebuild_from_segment_copies_stops_at_damage_like_dispatch(
    spark, broker_store: BrokerStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranges: bool
) -> None:
    copies = tmp_path / "copies"
    shutil.copytree(broker_store.config.commitlog_dir, copies)
    if ranges:
        _cut_into_ranges(monkeypatch, segments.find_segments(copies))
    offsets = sorted(w.commit_offset for w in broker_store.written)
    third = segments.find_segments(copies)[2]
    damaged = next(o for o in offsets if o > third.start_offset + 1000)
    _flip_bit_in_body(Path(third.path), damaged - third.start_offset)
    target = dataclasses.replace(broker_store.config, root_dir=tmp_path / "rebuilt")

    report = jobs.rebuild(spark, copies, target)

    assert report.stopped_at is not None
    assert (report.stopped_at.segment, report.stopped_at.start_offset) == (third.name, damaged)
    assert report.records == offsets.index(damaged)
    assert report.dispatched_end_offset == damaged
