"""A bounded LRU cache of object blocks (pure: no IO, no clock).

The reader (:mod:`.reading`) fetches offloaded commit-log files in aligned blocks and keeps
them here. The cache is bounded in bytes (``bytes_max``); adding a block evicts the least
recently used ones until the total fits. A block larger than the whole bound is not kept.

Invariant: ``used_bytes == sum(len(block) for block in blocks) <= bytes_max``.
"""

from __future__ import annotations

from collections import OrderedDict

from gannet.node.invariants import invariant

BlockKey = tuple[int, int]  # (object base offset, block index within the object)


class BlockCache:
    """Blocks by :data:`BlockKey`, least recently used evicted first."""

    def __init__(self, bytes_max: int) -> None:
        if bytes_max <= 0:
            raise ValueError(f"tier cache bytes_max {bytes_max} <= 0")
        self.bytes_max = bytes_max
        self.used_bytes = 0
        self._blocks: OrderedDict[BlockKey, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def contains(self, key: BlockKey) -> bool:
        """Whether the block is cached (its recency unchanged)."""
        return key in self._blocks

    def get(self, key: BlockKey) -> bytes | None:
        """The block, marked as just used; ``None`` if not cached."""
        block = self._blocks.get(key)
        if block is not None:
            self._blocks.move_to_end(key)
        return block

    def put(self, key: BlockKey, block: bytes) -> None:
        """Cache ``block``, evicting least recently used blocks until the bound holds."""
        old = self._blocks.pop(key, None)
        if old is not None:
            self.used_bytes -= len(old)
        if len(block) > self.bytes_max:
            return
        while self.used_bytes + len(block) > self.bytes_max:
            _, evicted = self._blocks.popitem(last=False)
            self.used_bytes -= len(evicted)
        self._blocks[key] = block
        self.used_bytes += len(block)
        invariant(0 <= self.used_bytes <= self.bytes_max, "tier cache over its bound")

    def discard_object(self, base_offset: int) -> None:
        """Forget every block of one object (it was expired from the tier)."""
        for key in [key for key in self._blocks if key[0] == base_offset]:
            self.used_bytes -= len(self._blocks.pop(key))
