"""Sequential-stream detection of the tier reader (pure): interleaved readers each keep a stream."""

from __future__ import annotations

import pytest

from gannet.node.store.tier import streams


def test_interleaved_sequential_readers_each_keep_their_stream() -> None:
    table = streams.SequentialStreams(8)
    # Three consumers: two in object 0 at different offsets, one in object 100, interleaved.
    assert [table.observe(k) for k in [(0, 0), (0, 50), (100, 7)]] == [(0, True)] * 3
    runs = [table.observe(k)[0] for k in [(0, 1), (0, 51), (100, 8), (0, 2), (0, 52), (100, 9)]]
    assert runs == [1, 1, 1, 2, 2, 2]
    assert table.observe((0, 2)) == (2, False)  # another record of the same block
    assert len(table) == 3


def test_random_reads_are_not_sequential_and_the_table_is_bounded() -> None:
    table = streams.SequentialStreams(2)
    assert [table.observe(k)[0] for k in [(0, 5), (0, 9), (0, 3)]] == [0, 0, 0]
    assert len(table) == 2
    assert table.observe((0, 6)) == (0, True)  # (0, 5) was the least recently used: forgotten
    assert table.observe((0, 4)) == (1, True)
    table.forget_object(0)
    assert len(table) == 0
    with pytest.raises(ValueError, match="streams_max"):
        streams.SequentialStreams(0)


def test_a_stream_continues_into_the_next_object() -> None:
    table = streams.SequentialStreams(4)
    assert table.observe((0, 3)) == (0, True)
    assert table.observe((4096, 0), previous=(0, 3)) == (1, True)  # the file's end crossed
    assert table.observe((4096, 1)) == (2, True)
    assert table.observe((8192, 0), previous=(4096, 2)) == (0, True)  # not where it stood
