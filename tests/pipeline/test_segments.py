"""Segment discovery and the per-segment scan (no Spark): resynchronising after damage, the
zero tail of the newest file, missing files."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from gannet.node.store.config import StoreConfig
from gannet.node.store.log.layout import MAGIC_V1
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.pipeline import segments

from .conftest import BrokerStore


def _events(segment: segments.Segment) -> list[segments.ScanEvent]:
    with segments.mapped(segment) as buf:
        return list(segments.scan(buf, segment))


def test_finds_segments_of_a_store_and_of_a_folder_of_copies(
    broker_store: BrokerStore, tmp_path: Path
) -> None:
    in_store = segments.find_segments(broker_store.config.root_dir)
    assert len(in_store) >= 4
    assert [s.is_last for s in in_store] == [False] * (len(in_store) - 1) + [True]
    assert segments.gaps(in_store) == []
    copies = tmp_path / "copies"
    copies.mkdir()
    for s in in_store[:1] + in_store[2:]:
        shutil.copy(s.path, copies / s.name)
    (copies / "notes.txt").write_text("not a segment")
    found = segments.find_segments(copies)
    assert [s.start_offset for s in found] == [in_store[0].start_offset] + [
        s.start_offset for s in in_store[2:]
    ]
    assert segments.gaps(found) == [
        segments.Damage(
            in_store[2].name, in_store[1].start_offset, in_store[2].start_offset, "missing segment"
        )
    ]


def test_clean_segments_scan_to_their_blank_or_zero_tail(broker_store: BrokerStore) -> None:
    found = segments.find_segments(broker_store.config.root_dir)
    total = 0
    for s in found:
        events = _events(s)
        assert not [e for e in events if isinstance(e, segments.Damage)]
        assert isinstance(events[-1], segments.End)
        total += sum(isinstance(e, segments.Record) for e in events)
    assert total == len(broker_store.written)


def test_scan_resynchronises_past_a_magic_code_inside_a_body(tmp_path: Path) -> None:
    config = StoreConfig.for_tests(tmp_path / "store")
    decoy = b"x" * 20 + struct.pack(">ii", 200, MAGIC_V1) + b"y" * 100
    with MessageStore(config).open() as store:
        offsets = [
            store.put_message(Message(topic="T", body=decoy if i == 1 else b"z" * 300)).wrote_offset
            for i in range(4)
        ]
    (segment,) = segments.find_segments(config.root_dir)
    data = bytearray(Path(segment.path).read_bytes())
    data[offsets[1] + 4] ^= 0x01  # the magic code of the record holding the decoy
    Path(segment.path).write_bytes(bytes(data))

    events = _events(segment)

    damage = [e for e in events if isinstance(e, segments.Damage)]
    assert [(d.start_offset, d.end_offset) for d in damage] == [(offsets[1], offsets[2])]
    assert "bad magic code" in damage[0].reason
    kept = [e.info.commit_offset for e in events if isinstance(e, segments.Record)]
    assert kept == [offsets[0], offsets[2], offsets[3]]


def test_a_missing_blank_in_an_older_segment_is_damage(broker_store: BrokerStore) -> None:
    first = segments.find_segments(broker_store.config.root_dir)[0]
    with segments.mapped(first) as buf:
        events = list(segments.scan(buf, first))
        end = events[-1]
        assert isinstance(end, segments.End)
        blank_at = end.data_end_offset - first.start_offset
        damaged = bytearray(bytes(buf))
    damaged[blank_at : blank_at + 8] = bytes(8)
    as_last = segments.Segment(first.path, first.start_offset, first.size_bytes, is_last=True)
    as_older = segments.Segment(first.path, first.start_offset, first.size_bytes, is_last=False)
    assert not [e for e in segments.scan(damaged, as_last) if isinstance(e, segments.Damage)]
    (damage,) = [e for e in segments.scan(damaged, as_older) if isinstance(e, segments.Damage)]
    assert (damage.start_offset, damage.end_offset) == (end.data_end_offset, first.end_offset)
