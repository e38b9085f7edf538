"""The checkpoints of one pop go in one append (``popping.PopService._store_batch``): one CK
record per queue that gave messages, all appended together and waited for once; a failed append
withdraws the pop (the same messages are popped again at once); a crash after the append, before
the answer, brings every message back once invisible; receipt handles and ``POP_CK`` texts are
the ones ``ReceiptHandle`` writes field by field."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from gannet.node.domain.committing import pop_flush_wait
from gannet.node.pop import receipts
from gannet.node.pop.config import PopConfig
from gannet.node.pop.popping import PopResult
from gannet.node.pop.service import PopBroker
from gannet.node.store import properties as props
from gannet.node.store.errors import StoreError
from gannet.node.store.log import records
from tests.pop.pop_harness import GROUP, INVISIBLE_MS, TOPIC, Harness, bodies_of

STORED = PopConfig(buffer_merge_enabled=False)
"""Every checkpoint written at once (as on a Raft group)."""


def _count_appends(h: Harness) -> list[list[str]]:
    """The tags of the records of each append from now on (a counting wrapper around the
    store's own append)."""
    appends: list[list[str]] = []
    put = h.store.put_messages_nowait

    def counting(msgs: list[records.Message], **kw: bool) -> object:
        appends.append([m.tags or "" for m in msgs])
        return put(msgs, **kw)

    h.store.put_messages_nowait = counting  # type: ignore[method-assign, assignment]
    return appends


def test_a_pop_over_several_queues_appends_its_checkpoints_once(tmp_path: Path) -> None:
    h = Harness(tmp_path, STORED)
    h.setup(queues=4)
    try:
        sent = h.produce(8)  # two per queue
        appends = _count_appends(h)
        got = h.pop(32)
        assert sorted(bodies_of(got)) == sorted(sent)
        assert appends == [["ck"] * 4]  # one CK per queue, one append
        assert h.broker.statistics().buffered_checkpoints == 0  # all stored
        # nothing acked: every message comes back from its checkpoint
        h.advance(INVISIBLE_MS + 3_000)
        assert sorted(bodies_of(h.pop(32))) == sorted(sent)
    finally:
        h.close()


def test_acks_of_a_batched_pop_are_kept(tmp_path: Path) -> None:
    h = Harness(tmp_path, STORED)
    h.setup(queues=4)
    try:
        h.produce(8)
        got = h.pop(32)
        handles = [m.handle for m in got.messages]
        assert not any(h.broker.ack_many(GROUP, TOPIC, list(handles[:5]), now_ms=h.now))
        h.advance(INVISIBLE_MS + 3_000)
        assert sorted(bodies_of(h.pop(32))) == sorted(bodies_of(got)[5:])
    finally:
        h.close()


def test_a_failed_checkpoint_append_withdraws_the_pop(tmp_path: Path) -> None:
    h = Harness(tmp_path, STORED)
    h.setup(queues=4)
    try:
        sent = h.produce(8)
        put = h.store.put_messages_nowait

        def failing(msgs: list[records.Message], **kw: bool) -> object:
            raise StoreError("disk full (test)")

        h.store.put_messages_nowait = failing  # type: ignore[method-assign, assignment]
        with pytest.raises(StoreError, match="disk full"):
            h.pop(32)
        h.store.put_messages_nowait = put  # type: ignore[method-assign]
        stats = h.broker.statistics()
        assert (stats.tracked_checkpoints, stats.offset_queues) == (0, 0)
        # the queues were neither locked nor advanced: the same messages, at once
        assert sorted(bodies_of(h.pop(32))) == sorted(sent)
    finally:
        h.close()


def test_a_crash_after_the_checkpoint_append_brings_the_messages_back(tmp_path: Path) -> None:
    h = Harness(tmp_path, STORED)
    h.setup(queues=4)
    try:
        sent = h.produce(8)
        assert len(h.pop(32).messages) == 8
        h.store.consumer_offsets.persist()  # the offsets past the popped messages reach disk
        h.store.abandon()  # killed before answering
        h.store = h._open_store()
        h.settle()
        h.now += 1_000
        h.broker = PopBroker(h.store, h.config, wait_durable=pop_flush_wait(h.store))
        assert h.pop(32).messages == []  # invisible: the stored checkpoints hold them
        h.advance(INVISIBLE_MS + 3_000)
        assert sorted(bodies_of(h.pop(32))) == sorted(sent)
    finally:
        h.close()


@pytest.mark.parametrize("retry", [False, True], ids=["topic", "retry-topic"])
def test_handles_are_the_field_by_field_texts(tmp_path: Path, retry: bool) -> None:
    h = Harness(tmp_path, PopConfig())
    h.setup(queues=4)
    try:
        h.produce(6)
        if retry:  # unacked, revived into the retry topic, popped from there
            h.pop(32)
            h.advance(INVISIBLE_MS + 3_000)
        got = h.pop(32)
        assert len(got.messages) == 6
        for m in got.messages:
            assert m.receipt_handle == m.handle.encode()
            assert m.message.properties[props.POP_CK] == m.handle.extra_info()
            assert receipts.parse(m.receipt_handle) == m.handle
            assert (m.handle.flag is not receipts.TopicFlag.NORMAL) is retry
    finally:
        h.close()


def test_a_batch_checks_every_handle_against_its_own_unit(tmp_path: Path) -> None:
    """The ack reads a checkpoint's consume-queue units in one run: a handle naming another
    message's commit-log offset is still refused, alone."""
    h = Harness(tmp_path, STORED)
    h.setup(queues=4)
    try:
        h.produce(4, queue_id=0)
        a, b, c, d = (m.handle for m in h.pop(32, queue_id=0).messages)
        forged = dataclasses.replace(c, commit_offset=b.commit_offset)
        results = h.broker.ack_many(GROUP, TOPIC, [a, b, forged, d], now_ms=h.now)
        assert [type(r).__name__ for r in results] == [
            "NoneType", "NoneType", "ReceiptHandleUnknown", "NoneType",
        ]  # fmt: skip
        assert "commit-log offset" in str(results[2])
        assert h.broker.ack_many(GROUP, TOPIC, [c], now_ms=h.now) == [None]
    finally:
        h.close()


def test_queues_stay_locked_until_the_batched_append_is_done(tmp_path: Path) -> None:
    """A second pop while the first one's checkpoints are being appended hands none of the same
    messages out, and no offset moves past them before the append is durable."""
    h = Harness(tmp_path, STORED)
    h.setup(queues=4)
    try:
        sent = h.produce(8)
        put = h.store.put_messages_nowait
        appending, release = threading.Event(), threading.Event()

        def held(msgs: list[records.Message], **kw: bool) -> object:
            if any(m.tags == "ck" for m in msgs):
                appending.set()
                assert release.wait(30), "the test never released the append"
            return put(msgs, **kw)

        h.store.put_messages_nowait = held  # type: ignore[method-assign, assignment]
        first: list[PopResult] = []
        popper = threading.Thread(
            target=lambda: first.append(
                h.broker.pop(GROUP, TOPIC, invisible_time_ms=INVISIBLE_MS, now_ms=h.now)
            )
        )
        popper.start()
        try:
            assert appending.wait(30)
            second = h.broker.pop(GROUP, TOPIC, invisible_time_ms=INVISIBLE_MS, now_ms=h.now)
            assert second.messages == []
            # not committed while the checkpoints are not durable
            assert all(h.store.consumer_offsets.query(GROUP, TOPIC, q) <= 0 for q in range(4))
        finally:
            release.set()
            popper.join(30)
        h.store.put_messages_nowait = put  # type: ignore[method-assign]
        assert sorted(bodies_of(first[0])) == sorted(sent)
        h.settle()
        assert h.pop(32).messages == []  # all invisible now
    finally:
        h.close()


def test_a_failed_read_of_a_later_queue_withdraws_the_checkpoints_so_far(tmp_path: Path) -> None:
    h = Harness(tmp_path, STORED)
    h.setup(queues=4)
    try:
        sent = h.produce(8)
        get = h.store.get_messages
        reads: list[int] = []

        def failing_third(*args: object, **kw: object) -> object:
            reads.append(1)
            if len(reads) == 3:
                raise StoreError("read failed (test)")
            return get(*args, **kw)  # type: ignore[arg-type]

        h.store.get_messages = failing_third  # type: ignore[method-assign, assignment]
        with pytest.raises(StoreError, match="read failed"):
            h.pop(32)
        h.store.get_messages = get  # type: ignore[method-assign]
        stats = h.broker.statistics()
        assert (stats.tracked_checkpoints, stats.offset_queues) == (0, 0)
        assert sorted(bodies_of(h.pop(32))) == sorted(sent)
        h.advance(INVISIBLE_MS + 3_000)  # and they are revived once, not lost
        assert sorted(bodies_of(h.pop(32))) == sorted(sent)
    finally:
        h.close()
