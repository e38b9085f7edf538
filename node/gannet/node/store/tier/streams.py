"""Sequential streams among the tier's reads: which reads deserve read-ahead (pure).

The reader (:mod:`.reading`) sees block reads of many consumers interleaved, without knowing
who asks: Pop and pull requests of different groups and queues run on different threads and
read different objects, or different offsets of one object. Like a file system's prefetcher
(ZFS's zfetch, Linux's per-file read-ahead state), it keeps a small table of **streams**, each
the last block one sequential reader read: a read of block ``i`` of object ``b`` continues the
stream at ``(b, i - 1)`` (it moves to ``(b, i)``) or re-reads the stream at ``(b, i)`` (another
record of the same block); any other read starts a new stream. A read that continues a stream
is sequential, and only a sequential read that moves its stream to a new block triggers
read-ahead (once per block, not once per record), so a random reader (a query by key) costs no
extra GETs, while each of several interleaved consumers keeps its own stream.

The table is bounded (``streams_max``); the least recently used stream is forgotten first, so
a consumer that went away stops occupying a slot.

Invariant: ``len(streams) <= streams_max`` and no two streams sit on the same block.
"""

from __future__ import annotations

from collections import OrderedDict

from gannet.node.invariants import invariant
from gannet.node.store.tier.caching import BlockKey


class SequentialStreams:
    """The streams of recent reads, least recently used first (module docstring)."""

    def __init__(self, streams_max: int) -> None:
        if streams_max < 1:
            raise ValueError(f"streams_max {streams_max} < 1")
        self.streams_max = streams_max
        self._streams: OrderedDict[BlockKey, int] = OrderedDict()  # block -> run length

    def __len__(self) -> int:
        return len(self._streams)

    def observe(self, key: BlockKey, previous: BlockKey | None = None) -> tuple[int, bool]:
        """Record a read of block ``key``; answer how many blocks in a row its stream has read
        before this one (0: not sequential, a new stream), and whether the stream moved to
        ``key`` with this read (False: another read of the block it was on). ``previous`` is
        the block before ``key`` in the commit log: ``(base, index - 1)`` by default, the last
        block of the object before for a first block (a consumer crossing a file's end)."""
        base, index = key
        run = self._streams.pop(key, None)
        if run is not None:  # another read of the stream's current block
            self._streams[key] = run
            return run, False
        run = self._streams.pop(previous if previous is not None else (base, index - 1), None)
        if run is not None:
            self._streams[key] = run + 1
            return run + 1, True
        self._streams[key] = 0
        while len(self._streams) > self.streams_max:
            self._streams.popitem(last=False)
        invariant(len(self._streams) <= self.streams_max, "more streams than streams_max")
        return 0, True

    def forget_object(self, base_offset: int) -> None:
        """Drop the streams of an object the tier expired."""
        for key in [key for key in self._streams if key[0] == base_offset]:
            del self._streams[key]
