"""Restarts (clean and crash) in the middle of pop, ack, change invisible and revive: nothing
is lost, redelivery stays at least once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gannet.node.pop.config import PopConfig
from tests.pop.pop_harness import GROUP, INVISIBLE_MS, TOPIC, Harness, bodies_of


def _everything(h: Harness, rounds: int = 6) -> Counter[str]:
    """Pop, expire and pop again until quiet, acking everything; bodies with counts."""
    seen: Counter[str] = Counter()
    for _ in range(rounds):
        while True:
            got = h.pop(32)
            if not got.messages:
                break
            seen.update(bodies_of(got))
            for m in got.messages:
                h.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=h.now)
        h.advance(INVISIBLE_MS + 3_000)
    return seen


@pytest.mark.parametrize("merge", [True, False])
def test_clean_restart_with_messages_in_flight(tmp_path: Path, merge: bool) -> None:
    h = Harness(tmp_path, PopConfig(buffer_merge_enabled=merge))
    h.setup()
    try:
        sent = h.produce(20)
        first = h.pop(32)
        assert len(first.messages) == 20
        acked = first.messages[:5]
        for m in acked:
            h.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=h.now)
        h.restart()
        assert h.pop(32).messages == []  # still invisible after the restart
        for m in first.messages[5:10]:  # old handles still ack after the restart
            h.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=h.now)
        h.advance(INVISIBLE_MS + 3_000)
        back = h.pop(32)
        assert sorted(bodies_of(back)) == sorted(
            m.message.body.decode() for m in first.messages[10:]
        )
        for m in back.messages:
            h.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=h.now)
        assert _everything(h) == Counter()
        assert set(sent) == {m.message.body.decode() for m in first.messages}
    finally:
        h.close()


def test_crash_with_buffered_checkpoints_redelivers_at_once(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig())
    h.setup()
    try:
        sent = h.produce(10)
        assert len(h.pop(32).messages) == 10  # checkpoints only in memory
        h.restart(crash=True)
        seen = _everything(h)
        assert set(seen) == set(sent)
    finally:
        h.close()


def test_crash_after_checkpoints_were_stored(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig(buffer_merge_enabled=False))
    h.setup()
    try:
        sent = h.produce(10)
        first = h.pop(32)
        for m in first.messages[:4]:
            h.broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=h.now)
        h.store.consumer_offsets.persist()
        h.restart(crash=True)
        seen = _everything(h)
        unacked = {m.message.body.decode() for m in first.messages[4:]}
        assert unacked <= set(seen)
        assert set(seen) | {m.message.body.decode() for m in first.messages[:4]} == set(sent)
    finally:
        h.close()


def test_restart_in_the_middle_of_revive(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig())
    h.setup()
    try:
        sent = h.produce(12)
        h.pop(32)
        h.advance(INVISIBLE_MS + 3_000)  # revived into the retry topic
        h.restart(crash=True)
        seen = _everything(h)
        assert set(seen) == set(sent)
    finally:
        h.close()


def test_change_invisible_survives_restart(tmp_path: Path) -> None:
    h = Harness(tmp_path, PopConfig())
    h.setup()
    try:
        h.produce(1)
        (m,) = h.pop().messages
        new = h.broker.change_invisible_time(
            GROUP, TOPIC, m.receipt_handle, invisible_time_ms=120_000, now_ms=h.now
        )
        h.restart()
        h.advance(INVISIBLE_MS + 3_000)
        assert h.pop().messages == []
        h.broker.ack(GROUP, TOPIC, new, now_ms=h.now)
        h.advance(120_000)
        assert h.pop().messages == []
    finally:
        h.close()
