"""Revive details: progress only past handled checkpoints, re-put on failure, the expiry rule,
deleted groups, and the retry-first queue order."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gannet.node.pop import checkpoints
from gannet.node.pop.config import PopConfig
from gannet.node.store import validation
from gannet.node.store.errors import StoreNotWritable
from gannet.node.store.log import records
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from tests.pop.pop_harness import GROUP, INVISIBLE_MS, TOPIC, Harness, bodies_of

RETRY = validation.retry_topic_v1(GROUP, TOPIC)
REVIVE = validation.revive_topic("DefaultCluster")


def _single_revive_queue(tmp_path: Path) -> Harness:
    h = Harness(tmp_path, PopConfig(revive_queue_count=1, buffer_merge_enabled=False))
    h.setup()
    return h


def test_progress_stops_before_the_first_unexpired_checkpoint(tmp_path: Path) -> None:
    h = _single_revive_queue(tmp_path)
    try:
        h.produce(2, queue_id=0)
        h.pop(1, queue_id=0, invisible_ms=10_000)
        h.pop(1, queue_id=0, invisible_ms=100_000)
        reviver = h.broker.reviver(0)
        h.advance(13_000)
        assert reviver.progress() == 0  # the first CK (revive-queue offset 0) is handled
        assert h.store.max_offset_in_queue(REVIVE, 0) == 1
        (m0,) = h.pop().messages  # a third CK, at revive-queue offset 2
        assert m0.message.body == b"m0"
        h.broker.ack(GROUP, TOPIC, m0.receipt_handle, now_ms=h.now)
        h.advance(90_000)
        assert reviver.progress() == 3  # both CKs and the ACK handled
        assert bodies_of(h.pop()) == ["m1"]
    finally:
        h.close()


def test_ck_is_not_expired_until_two_seconds_after_revive_time(tmp_path: Path) -> None:
    h = _single_revive_queue(tmp_path)
    try:
        h.produce(1, queue_id=0)
        pop_time = h.now
        h.pop(1)
        h.advance(INVISIBLE_MS + 1_500)
        assert h.broker.reviver(0).progress() == -1
        assert h.pop().messages == []
        h.advance(1_000)
        assert h.now - (pop_time + INVISIBLE_MS) > 2_000
        assert len(h.pop().messages) == 1
    finally:
        h.close()


def test_a_revive_pass_between_timer_ticks_is_not_held_back_by_the_wheel_cursor(
    tmp_path: Path,
) -> None:
    """The timer wheel is read once per tick, so between ticks its cursor lags ``now`` by up to
    a slot. Revive asked "delivered until now?", which is false in that lag; revive passes that
    kept landing there (both threads tick about once a second) held an expired lease back for
    up to 30 s (tests/api/test_clock_step.py failed that way). Revive now counts up to the time
    the wheel has delivered everything due."""
    h = _single_revive_queue(tmp_path)
    try:
        h.produce(1, queue_id=0)
        pop_time = h.now
        h.pop(1)
        h.now = pop_time + INVISIBLE_MS + 2_500
        h.broker.ctx.flush_buffer(h.now)
        h.settle()
        h.store.timers.tick(h.now)  # fires the checkpoint into the revive queue
        h.settle()
        through = h.store.timers.delivered_through_ms()
        assert through is not None
        assert through - (pop_time + INVISIBLE_MS) > 2_000
        h.now += h.store.config.timer_precision_ms + 300  # a revive pass before the next tick
        assert not h.store.timers.delivered_until(h.now)
        h.broker.tick(h.now)
        h.settle()
        assert h.broker.reviver(0).progress() == 0, "the expired checkpoint was held back"
        assert len(h.pop().messages) == 1
    finally:
        h.close()


def test_a_revive_pass_while_the_timer_re_puts_an_ack_does_not_revive_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 1002 (docs/architecture.md, Faults): a new leader's first timer tick had seconds
    of parked records to re-put, among them the ACKs of three checkpoints already in the
    revive queue. ``due_entries`` moves the wheel's read cursor past the slots it returns
    before their re-put (a Raft proposal and commit) returns; the revive thread, passing in
    between, took the cursor as "delivered through" and revived the three acked messages.
    Revive now counts only slots whose re-put returned (the committed read time)."""
    h = _single_revive_queue(tmp_path)
    try:
        h.produce(1, queue_id=0)
        h.now += 500 - h.now % 1_000  # the ACK's slot is due half a second after the CK's
        pop_time = h.now
        (m0,) = h.pop(1).messages
        h.broker.ack(GROUP, TOPIC, m0.receipt_handle, now_ms=h.now)
        h.settle()
        reviver = h.broker.reviver(0)
        passes = h.advance(INVISIBLE_MS)  # the CK is fired into the revive queue, the ACK not
        assert h.store.max_offset_in_queue(REVIVE, 0) == 1
        assert passes[0].revived == 0
        during_fire: list[int] = []
        real_put = MessageStore.put_messages

        def slow_put(self: MessageStore, msgs: list[Message], **kw: object) -> object:
            if any(m.topic == REVIVE and m.tags == checkpoints.ACK_TAG for m in msgs):
                # the revive thread's pass while the ACK's re-put waits for its commit
                during_fire.extend(p.revived for p in h.broker.tick(h.now))
                h.settle()
            return real_put(self, msgs, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(MessageStore, "put_messages", slow_put)
        h.now = pop_time + INVISIBLE_MS + 5_000
        h.store.timers.tick(h.now)
        monkeypatch.setattr(MessageStore, "put_messages", real_put)
        h.settle()
        assert during_fire == [0], "the CK was revived while its ACK was being re-put"
        h.advance(INVISIBLE_MS)
        assert reviver.progress() == 1  # CK and ACK handled
        assert h.store.max_offset_in_queue(RETRY, 0) == 0
        assert h.pop().messages == []
    finally:
        h.close()


def test_failed_retry_write_re_puts_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = _single_revive_queue(tmp_path)
    try:
        h.produce(1, queue_id=0)
        h.pop(1)
        real_put = MessageStore.put_messages

        def failing_put(self: MessageStore, msgs: list[Message], **kw: object) -> object:
            if any(m.topic == RETRY for m in msgs):
                raise StoreNotWritable("injected")
            return real_put(self, msgs)

        monkeypatch.setattr(MessageStore, "put_messages", failing_put)
        passes = h.advance(INVISIBLE_MS + 3_000)
        assert passes[0].re_put == 1
        assert passes[0].cks_handled == 1
        monkeypatch.setattr(MessageStore, "put_messages", real_put)
        assert h.pop().messages == []
        parked = [
            records.decode(p.data)
            for p in h.store.get_messages("rmq_sys_wheel_timer", 0, 0, 9).messages
        ]
        re_put = checkpoints.decode(parked[-1].body)
        assert re_put.re_put_times == "1"
        assert re_put.invisible_time_ms == INVISIBLE_MS + 10_000
        h.advance(10_000)
        again = h.pop()
        assert bodies_of(again) == ["m0"]
        assert again.messages[0].delivery_attempt == 2
    finally:
        h.close()


def test_checkpoints_of_deleted_groups_are_skipped(tmp_path: Path) -> None:
    h = _single_revive_queue(tmp_path)
    try:
        h.produce(1, queue_id=0)
        h.pop(1)
        h.store.group_configs.delete(GROUP)
        passes = h.advance(INVISIBLE_MS + 3_000)
        assert (passes[0].revived, passes[0].progress) == (0, 0)
        assert h.store.topic_configs.get(RETRY) is None
    finally:
        h.close()


def test_retry_topic_first_with_twenty_percent_probability(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig(buffer_merge_enabled=False), seed=5)
    h.setup()
    try:
        h.produce(1, queue_id=0)
        h.pop()
        h.advance(INVISIBLE_MS + 3_000)  # m0 now waits in the retry topic
        h.produce(200, queue_id=1)
        draw = random.Random(h.seed + 0)
        draw.randrange(100)  # the first pop's draw
        first_retry = []
        for _ in range(40):
            random_q = draw.randrange(100)
            got = h.pop(1)
            if got.messages[0].message.body == b"m0":
                first_retry.append(random_q)
                break
        assert first_retry
        assert first_retry[0] < 20
    finally:
        h.close()


def test_queue_order_starts_at_the_random_draw(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig(buffer_merge_enabled=False), seed=9)
    h.setup()
    try:
        for q in range(4):
            h.produce(10, queue_id=q)
        draw = random.Random(h.seed)
        for _ in range(12):
            random_q = draw.randrange(100)
            got = h.pop(1)
            assert got.messages[0].handle.queue_id == random_q % 4
    finally:
        h.close()
