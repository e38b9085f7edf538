"""The bulk queue read (:func:`reading.read_queue_records`, Admin PullRecords) against the
record-by-record read it replaces (:func:`reading.read_queue`, PullMessage): the same records,
bytes, count, next offset and status for random stores (batches to interleaved queues, files
rolled, random sizes) and random offsets and limits; a run whose bytes are gone is read record
by record; cleaned-up units are skipped as PullMessage skips them."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.commitlog import CommitLog
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues import reading
from gannet.node.store.queues.reading import GetResult, GetStatus

TOPIC = "Bulk"


def _open(root: Path) -> MessageStore:
    config = StoreConfig.for_tests(root, flush_mode=FlushMode.ASYNC_FLUSH)
    return MessageStore(config).open()


def _fill(store: MessageStore, batches: list[tuple[int, list[int]]]) -> None:
    """Each batch: (queue id, body sizes), appended as one put (records back to back)."""
    end = 0
    for n, (queue_id, sizes) in enumerate(batches):
        msgs = [
            Message(topic=TOPIC, body=bytes([65 + n % 26]) * size, queue_id=queue_id)
            for size in sizes
        ]
        results = store.put_messages(msgs)
        end = results[-1].wrote_offset + results[-1].wrote_bytes
    assert store.wait_dispatched(end, 30)


def _oracle(
    store: MessageStore, queue_id: int, offset: int, count: int, bytes_max: int
) -> GetResult:
    """What PullRecords answered before: read_queue, cut at ``bytes_max`` (at least one)."""
    got = reading.read_queue(store.queues, store.commitlog, TOPIC, queue_id, offset, count, None)
    kept: list[bytes] = []
    size = 0
    for stored in got.messages:
        if kept and size + len(stored.data) > bytes_max:
            got.next_begin_offset = stored.queue_offset
            break
        size += len(stored.data)
        kept.append(stored.data)
    got.records, got.records_count, got.messages = b"".join(kept), len(kept), []
    return got


def _bulk(store: MessageStore, queue_id: int, offset: int, count: int, bytes_max: int) -> GetResult:
    return reading.read_queue_records(
        store.queues, store.commitlog, TOPIC, queue_id, offset, count, bytes_max
    )


batches = st.lists(
    st.tuples(st.integers(0, 2), st.lists(st.integers(1, 3000), min_size=1, max_size=9)),
    min_size=1,
    max_size=14,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    written=batches,
    reads=st.lists(
        st.tuples(
            st.integers(0, 2), st.integers(0, 40), st.integers(1, 50), st.integers(1, 20_000)
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_bulk_read_equals_the_record_by_record_read(
    written: list[tuple[int, list[int]]], reads: list[tuple[int, int, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as root, _open(Path(root)) as store:
        _fill(store, written)
        for queue_id, offset, count, bytes_max in reads:
            want = _oracle(store, queue_id, offset, count, bytes_max)
            got = _bulk(store, queue_id, offset, count, bytes_max)
            assert (got.status, got.next_begin_offset, got.records_count) == (
                want.status,
                want.next_begin_offset,
                want.records_count,
            ), (queue_id, offset, count, bytes_max)
            assert got.records == want.records
            assert (got.min_offset, got.max_offset) == (want.min_offset, want.max_offset)


def test_a_run_that_cannot_be_read_whole_is_read_record_by_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(tmp_path) as store:
        _fill(store, [(0, [100] * 6)])
        whole = _bulk(store, 0, 0, 10, 1 << 20)
        assert whole.records_count == 6
        real = CommitLog.read
        monkeypatch.setattr(
            CommitLog, "read", lambda self, at, size: real(self, at, size) if size < 300 else None
        )
        again = _bulk(store, 0, 0, 10, 1 << 20)
        assert (again.records, again.records_count, again.next_begin_offset) == (
            whole.records,
            6,
            6,
        )


def test_units_whose_records_are_gone_are_skipped_as_pull_message_skips_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(tmp_path) as store:
        _fill(store, [(0, [100] * 3), (1, [100]), (0, [100] * 2)])
        units = store.queues.get(TOPIC, 0)
        assert units is not None
        third = units.read_units(3, 1)[0].commit_offset  # the records before it are "cleaned"
        monkeypatch.setattr(CommitLog, "min_offset", lambda self: third)
        got = _bulk(store, 0, 0, 10, 1 << 20)
        want = _oracle(store, 0, 0, 10, 1 << 20)
        assert (got.records_count, got.next_begin_offset, got.records) == (
            2,
            5,
            want.records,
        )
        monkeypatch.setattr(CommitLog, "min_offset", lambda self: 1 << 40)
        gone = _bulk(store, 0, 0, 10, 1 << 20)
        assert (gone.status, gone.records_count, gone.next_begin_offset) == (
            GetStatus.MESSAGE_WAS_REMOVING,
            0,
            5,
        )
        assert _oracle(store, 0, 0, 10, 1 << 20).status is GetStatus.MESSAGE_WAS_REMOVING
