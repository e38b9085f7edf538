"""Majority arithmetic and the per-follower in-flight window."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gannet.node.raft import quorum
from gannet.node.raft.messages import ByteOffset
from gannet.node.raft.progress import Progress, ProgressState


@given(st.lists(st.integers(0, 1_000), min_size=1, max_size=9))
def test_quorum_offset_is_held_by_a_majority_and_is_the_highest_such(values: list[int]) -> None:
    offsets = [ByteOffset(v) for v in values]
    result = quorum.quorum_offset(offsets)
    needed = quorum.majority(len(offsets))
    assert sum(1 for v in offsets if v >= result) >= needed
    assert sum(1 for v in offsets if v >= result + 1) < needed


def test_majorities() -> None:
    assert [quorum.majority(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_window_fills_by_messages_or_bytes_and_acknowledgements_free_it() -> None:
    pr = Progress(ByteOffset(0), inflight_messages_max=3, inflight_bytes_max=100)
    pr.acknowledged(ByteOffset(0), ByteOffset(0))
    pr.become_replicate()
    pr.sent(ByteOffset(10), 10)
    pr.sent(ByteOffset(20), 10)
    assert not pr.window_full()
    pr.sent(ByteOffset(30), 10)
    assert pr.window_full()  # three messages
    assert pr.acknowledged(ByteOffset(20), ByteOffset(10))
    assert (pr.inflight_count(), pr.inflight_bytes) == (1, 10)
    pr.sent(ByteOffset(130), 100)
    assert pr.window_full()  # 110 bytes in flight
    pr.become_probe(ByteOffset(20))
    assert pr.state is ProgressState.PROBE
    assert (pr.inflight_count(), pr.next_offset, pr.match_offset) == (0, 20, 20)
    assert pr.durable_offset == 10
