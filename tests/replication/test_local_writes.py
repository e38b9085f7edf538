"""Only the Raft leader appends on its own; a follower's commit log takes the leader's bytes only.

Fault-injection seed 210 (``e2e/faults``): a follower cut off, killed and restarted while still
cut off came back with 177 Pop revive-log records no other member had. ``store.open`` had
started the timer thread before replication stopped it, and the Pop checkpoints parked in the
timer that had come due were delivered into the revive topic of the local commit log. After the
heal the restarted member's Raft log claimed those bytes as the last term's (its log end was the
store's), so the leader's entries were appended after them at a position inside one of the
leader's records: the same commit offset as the others, 668 acknowledged messages unreadable.

Two guards, tested here without processes: :attr:`MessageStore.write_permit` (the broker and the
replication driver set it to "this member leads"; every local append asks it, and the timer
thread does not start at open while it says no), and :meth:`MessageStore.append_replicated`
refusing leader bytes that do not start a record made for the log's end
(:class:`LogMismatch`).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from gannet.node.pop.config import PopConfig
from gannet.node.store import properties as props
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import LogMismatch, NotLeading
from gannet.node.store.log.commitlog import now_ms
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from tests.pop.pop_harness import GROUP, TOPIC, Harness, bodies_of


def _config(root: Path) -> StoreConfig:
    return StoreConfig.for_tests(root, flush_mode=FlushMode.ASYNC_FLUSH)


def _never() -> bool:
    return False


def test_a_member_that_does_not_lead_fires_no_due_timer_at_open(tmp_path: Path) -> None:
    """The seed-210 writer: delayed messages (Pop's parked checkpoints among them) due while
    the member was down must not be delivered by the store's open on a follower."""
    store = MessageStore(_config(tmp_path)).open(start_services=False)
    due_ms = now_ms() + 100
    store.put_message(
        Message(topic="Orders", body=b"d", properties={props.TIMER_DELIVER_MS: str(due_ms)})
    )
    store.close()
    time.sleep(0.2)  # the timer message is due now
    store = MessageStore(_config(tmp_path), commit_follows_flush=False)
    store.write_permit = _never  # a Raft member before it knows it leads
    store.open()
    try:
        end = store.commitlog.max_offset()
        assert not store.timers.running
        with pytest.raises(NotLeading):
            store.put_message(Message(topic="Orders", body=b"local"))
        assert store.commitlog.max_offset() == end
    finally:
        store.close()


def test_a_pop_broker_on_a_member_that_does_not_lead_writes_nothing(tmp_path: Path) -> None:
    """Buffer flush, timer delivery of checkpoints and revive passes all write the revive
    log; on a member that does not lead (the Pop thread not told yet, a long poll woken after
    the leadership was lost) every one is refused, and nothing is lost for when it leads."""
    h = Harness(tmp_path / "store", PopConfig(revive_queue_count=1, buffer_merge_enabled=False))
    h.setup()
    try:
        h.produce(1, queue_id=0)
        assert bodies_of(h.pop(invisible_ms=10_000)) == ["m0"]
        h.advance(1_000)
        end = h.store.commitlog.max_offset()
        h.store.write_permit = _never
        h.now += 20_000  # the checkpoint is due: it would be delivered, revived, re-put
        for step in (
            lambda: h.broker.ctx.flush_buffer(h.now),
            lambda: h.store.timers.tick(h.now),
            lambda: h.broker.tick(h.now),
            lambda: h.broker.pop(GROUP, TOPIC, invisible_time_ms=10_000, now_ms=h.now),
        ):
            with contextlib.suppress(NotLeading):
                step()
            h.settle()
        assert h.store.commitlog.max_offset() == end
        h.store.write_permit = None  # it leads again: the unacked message is revived
        for _ in range(5):
            h.advance(10_000)
        assert bodies_of(h.pop(invisible_ms=10_000)) == ["m0"]
    finally:
        h.close()


def _store(root: Path) -> MessageStore:
    return MessageStore(_config(root), commit_follows_flush=False).open(start_services=False)


def test_a_follower_with_bytes_of_its_own_refuses_the_leaders_bytes(tmp_path: Path) -> None:
    """Raft log matching at the byte level: bytes the leader sends for this log's end must
    start a record made for that offset. Local bytes the leader does not have put the end
    elsewhere (inside one of the leader's records here): refused, nothing written."""
    leader, follower = _store(tmp_path / "leader"), _store(tmp_path / "follower")
    try:
        leader.put_messages([Message(topic="T", body=b"a" * 100) for _ in range(3)])
        start = leader.commitlog.max_offset()
        assert follower.append_replicated(0, leader.read_replicated(0, start)) == start
        follower.put_message(Message(topic="rmq_sys_REVIVE_LOG", body=b"c" * 30))  # local
        leader.put_messages([Message(topic="T", body=b"b" * 400) for _ in range(3)])
        end = leader.commitlog.max_offset()
        local_end = follower.commitlog.max_offset()
        assert start < local_end < end
        with pytest.raises(LogMismatch, match="starts no record"):
            follower.append_replicated(local_end, leader.read_replicated(local_end, end))
        assert follower.commitlog.max_offset() == local_end
        # the follower's own record is cut (Raft truncation): the leader's bytes fit again
        follower.truncate(start)
        assert follower.append_replicated(start, leader.read_replicated(start, end)) == end
        assert follower.read_replicated(0, end) == leader.read_replicated(0, end)
    finally:
        leader.close()
        follower.close()


def test_leader_bytes_made_for_another_offset_are_refused(tmp_path: Path) -> None:
    """A whole record of the leader's, but for another position (both logs at a boundary)."""
    leader, follower = _store(tmp_path / "leader"), _store(tmp_path / "follower")
    try:
        leader.put_message(Message(topic="T", body=b"x" * 50))
        follower.put_message(Message(topic="T", body=b"y" * 80))  # written without Raft
        first = leader.commitlog.max_offset()
        leader.put_message(Message(topic="T", body=b"z" * 50))
        own_end = follower.commitlog.max_offset()
        payload = leader.read_replicated(first, leader.commitlog.max_offset() - first)
        with pytest.raises(LogMismatch, match=f"made for offset {first}"):
            follower.append_replicated(own_end, payload)
        assert follower.commitlog.max_offset() == own_end
    finally:
        leader.close()
        follower.close()
