"""Index files: one hash-index file from message keys to commit-log offsets (``IndexFile``).

The on-disk format and its codec: :class:`IndexFile` maps one file and adds, reads, walks and
undoes its items; the functions beside it give byte positions, key strings and file names.
Called by :class:`~gannet.node.store.queues.index_service.IndexService`, which keeps the set
of files of a store (load, rollover, queries across files, cleanup, truncation) and is what
the dispatcher, the queries, recovery and the cleaner call. Byte-compatible with RocketMQ 5
(``docs/formats/queues.md`` §2).

Format. Files live in ``<root>/index/`` and are named by the local time of their creation,
``yyyyMMddHHmmssSSS``. One file, all integers big-endian::

    0                      header, 40 bytes
                             0  8  beginTimestamp   store time (ms) of the first item
                             8  8  endTimestamp     store time (ms) of the last item
                            16  8  beginPhyOffset   commit-log offset of the first item
                            24  8  endPhyOffset     commit-log offset of the last item
                            32  4  hashSlotCount    slots that became non-empty
                            36  4  indexCount       next item number; starts at 1
    40                     hashSlots × 4-byte slots: item number of the newest item of the
                           bucket, 0 (or anything <= 0 or > indexCount) = empty
    40 + hashSlots × 4     itemsMax × 20-byte items, item n at 40 + hashSlots×4 + n×20:
                             0  4  keyHash    abs(Java hashCode of "topic#key"), MIN_VALUE → 0
                             4  8  phyOffset  commit-log offset of the message
                            12  4  timeDiff   (storeTime − beginTimestamp) / 1000, in seconds
                            16  4  prevIndex  the slot's previous value: the bucket's chain

Item 0 is never used, so a file holds at most ``itemsMax − 1`` items. The bucket of a key is
``keyHash mod hashSlots``; a lookup walks the chain from the slot through ``prevIndex`` and
returns hash matches only: the caller re-checks the real key of each message. A new file
inherits the previous file's end offset and end time as its begin and end values.

Gannet addition: :meth:`IndexFile.truncate_from` removes exactly the items at or past a
commit-log offset (RocketMQ has no such operation; Raft truncates divergent suffixes). Items
are appended in commit-log order, so the removed items are a suffix of the file; each is undone
in reverse order of insertion (its slot gets the item's ``prevIndex`` back) and zeroed.

Threading: none of its own. The service's one writer (the dispatch thread) adds items; the
service's lock keeps queries, cleanup and truncation apart.
"""

from __future__ import annotations

import datetime
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from gannet.node.store import durable
from gannet.node.store.hashing import java_string_hash
from gannet.node.store.log import native
from gannet.node.store.log.mapped_files import map_file, unmap_file

HEADER_SIZE_BYTES = 40
SLOT_SIZE_BYTES = 4
ITEM_SIZE_BYTES = 20
INVALID_INDEX = 0
_INT_MAX = 2_147_483_647
_HEADER = struct.Struct(">qqqqii")
_ITEM = struct.Struct(">iqii")
_INT = struct.Struct(">i")
_ZERO_ITEM = bytes(ITEM_SIZE_BYTES)


def index_file_size_bytes(hash_slots: int, items_max: int) -> int:
    """Total file size: header, slots, items."""
    return HEADER_SIZE_BYTES + hash_slots * SLOT_SIZE_BYTES + items_max * ITEM_SIZE_BYTES


def slot_position(key_hash: int, hash_slots: int) -> int:
    """Byte position of the slot of a (non-negative) key hash."""
    return HEADER_SIZE_BYTES + (key_hash % hash_slots) * SLOT_SIZE_BYTES


def item_position(hash_slots: int, item_number: int) -> int:
    """Byte position of item ``item_number``: ``40 + slots×4 + n×20``."""
    return HEADER_SIZE_BYTES + hash_slots * SLOT_SIZE_BYTES + item_number * ITEM_SIZE_BYTES


def build_key(topic: str, key: str) -> str:
    """The indexed string of a key (``IndexService.buildKey``)."""
    return f"{topic}#{key}"


def file_name_for(epoch_ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: local time as ``yyyyMMddHHmmssSSS``."""
    seconds = time.strftime("%Y%m%d%H%M%S", time.localtime(epoch_ms // 1000))
    return f"{seconds}{epoch_ms % 1000:03d}"


def epoch_ms_of_name(name: str) -> int | None:
    """Inverse of :func:`file_name_for`, or None for a name of another shape."""
    if len(name) != 17 or not name.isdigit():
        return None
    try:
        local = datetime.datetime.strptime(name[:14], "%Y%m%d%H%M%S")  # naive = local time
    except ValueError:
        return None
    return int(local.timestamp()) * 1000 + int(name[14:])


def _time_diff_s(store_timestamp_ms: int, begin_timestamp_ms: int) -> int:
    """Seconds since the file's begin time, clamped to ``[0, Integer.MAX_VALUE]``."""
    if begin_timestamp_ms <= 0:
        return 0
    diff_ms = store_timestamp_ms - begin_timestamp_ms
    diff_s = diff_ms // 1000 if diff_ms >= 0 else -(-diff_ms // 1000)  # Java truncation
    return min(max(diff_s, 0), _INT_MAX)


@dataclass(frozen=True, slots=True)
class IndexItem:
    """One 20-byte item as stored."""

    key_hash: int
    phy_offset: int
    time_diff_s: int
    prev_index: int


class IndexFile:
    """One mapped index file. Header fields are mirrored in attributes and written through.

    Invariant: ``1 <= index_count <= items_max``; items ``1 .. index_count-1`` are written and
    in commit-log order; every byte of item ``index_count`` and later is zero.
    """

    def __init__(
        self,
        path: Path,
        hash_slots: int,
        items_max: int,
        *,
        create: bool,
        end_phy_offset: int = 0,
        end_timestamp_ms: int = 0,
    ) -> None:
        self.path = path
        self.hash_slots = hash_slots
        self.items_max = items_max
        self._items_base = HEADER_SIZE_BYTES + hash_slots * SLOT_SIZE_BYTES
        self.file_size_bytes = index_file_size_bytes(hash_slots, items_max)
        self._fd, self._mm = map_file(
            path,
            self.file_size_bytes,
            create=create,
            expected=f"{self.file_size_bytes} (index_hash_slots={hash_slots}, "
            f"index_items_max={items_max}); was it written with other settings?",
        )
        header: tuple[int, int, int, int, int, int] = _HEADER.unpack_from(self._mm, 0)
        self.begin_timestamp_ms: int = header[0]
        self.end_timestamp_ms: int = header[1]
        self.begin_phy_offset: int = header[2]
        self.end_phy_offset: int = header[3]
        self.hash_slot_count: int = header[4]
        self.index_count: int = header[5]
        self.index_count = max(self.index_count, 1)
        self._dirty = create
        if create:
            if end_phy_offset > 0:
                self.begin_phy_offset = self.end_phy_offset = end_phy_offset
            if end_timestamp_ms > 0:
                self.begin_timestamp_ms = self.end_timestamp_ms = end_timestamp_ms
            self._write_header()

    @property
    def name(self) -> str:
        return self.path.name

    def is_full(self) -> bool:
        """``isWriteFull``: no item can be added."""
        return self.index_count >= self.items_max

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self._mm,
            0,
            self.begin_timestamp_ms,
            self.end_timestamp_ms,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )
        self._dirty = True

    # --- writing ---
    def put_key(self, key: str, phy_offset: int, store_timestamp_ms: int) -> bool:
        """Add one item for ``key`` (``docs/formats/queues.md`` §2.4) and write the header;
        False when the file is full."""
        if not self.add_item(key, phy_offset, store_timestamp_ms):
            return False
        self._write_header()
        return True

    def write_header(self) -> None:
        """Write the header after :meth:`add_item` calls (the batch path writes it once)."""
        self._write_header()

    def add_items(self, items: list[tuple[int, int, int]], start: int) -> int:
        """Add ``items[start:]`` — (key hash from :func:`index_key_hash`, commit-log offset,
        store time) — until the file is full, without writing the header; returns how far it
        got. The rules of :meth:`add_item`, over local variables (the batch dispatch path); one
        C call with the native encoder (:mod:`~gannet.node.store.log.native`)."""
        codec = native.codec
        if codec is not None:
            at, number, slot_count, begin_phy, begin_ms = codec.add_index_items(
                self._mm, items, start, self.index_count, self.items_max, self.hash_slots,
                self._items_base, self.begin_timestamp_ms, self.hash_slot_count,
            )  # fmt: skip
            if begin_phy is not None:
                self.begin_phy_offset = begin_phy
                self.begin_timestamp_ms = begin_ms
            if at > start:
                self.hash_slot_count = slot_count
                self.index_count = number
                _, self.end_phy_offset, self.end_timestamp_ms = items[at - 1]
            return at
        number = self.index_count
        items_max, slots, base, mm = self.items_max, self.hash_slots, self._items_base, self._mm
        begin_ms = self.begin_timestamp_ms
        slot_count = self.hash_slot_count
        read_int, write_int, write_item = _INT.unpack_from, _INT.pack_into, _ITEM.pack_into
        at, end = start, len(items)
        while at < end and number < items_max:
            key_hash, phy_offset, stored_ms = items[at]
            slot_pos = HEADER_SIZE_BYTES + (key_hash % slots) * SLOT_SIZE_BYTES
            slot_value: int = read_int(mm, slot_pos)[0]
            if slot_value <= INVALID_INDEX or slot_value > number:
                slot_value = INVALID_INDEX
                slot_count += 1
            time_diff_s = 0
            if begin_ms > 0 and stored_ms > begin_ms:
                time_diff_s = min((stored_ms - begin_ms) // 1000, _INT_MAX)
            write_item(mm, base + number * ITEM_SIZE_BYTES, key_hash, phy_offset, time_diff_s,
                       slot_value)  # fmt: skip
            write_int(mm, slot_pos, number)
            if number <= 1:
                self.begin_phy_offset = phy_offset
                self.begin_timestamp_ms = begin_ms = stored_ms
            number += 1
            at += 1
        if at > start:
            self.hash_slot_count = slot_count
            self.index_count = number
            _, self.end_phy_offset, self.end_timestamp_ms = items[at - 1]
        return at

    def add_item(self, key: str, phy_offset: int, store_timestamp_ms: int) -> bool:
        """Add one item for ``key`` (``docs/formats/queues.md`` §2.4) without writing the
        header; False when full.

        On the dispatch hot path, hence written out inline (same rules as
        :func:`slot_position`, :meth:`read_slot_at`, :func:`_time_diff_s`,
        :func:`~gannet.node.store.hashing.index_key_hash`).
        """
        number = self.index_count
        if number >= self.items_max:
            return False
        key_hash = java_string_hash(key)
        key_hash = abs(key_hash) if key_hash != -0x8000_0000 else 0
        slot_pos = HEADER_SIZE_BYTES + (key_hash % self.hash_slots) * SLOT_SIZE_BYTES
        mm = self._mm
        slot_value: int = _INT.unpack_from(mm, slot_pos)[0]
        if slot_value <= INVALID_INDEX or slot_value > number:
            slot_value = INVALID_INDEX
        begin_ms = self.begin_timestamp_ms
        time_diff_s = 0
        if begin_ms > 0:
            diff_ms = store_timestamp_ms - begin_ms
            if diff_ms > 0:
                time_diff_s = min(diff_ms // 1000, _INT_MAX)
        _ITEM.pack_into(
            mm, self._items_base + number * ITEM_SIZE_BYTES, key_hash, phy_offset, time_diff_s,
            slot_value,
        )  # fmt: skip
        _INT.pack_into(mm, slot_pos, number)
        if number <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp_ms = store_timestamp_ms
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count = number + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp_ms = store_timestamp_ms
        return True

    def truncate_from(self, phy_offset: int) -> int:
        """Undo every item whose phyOffset >= ``phy_offset``, newest first; items removed."""
        number = self.index_count - 1
        while number >= 1:
            item = self.read_item(number)
            if item.phy_offset < phy_offset:
                break
            slot_pos = slot_position(item.key_hash, self.hash_slots)
            if self.read_slot_at(slot_pos) == number:
                restored = item.prev_index if 0 < item.prev_index < number else INVALID_INDEX
                _INT.pack_into(self._mm, slot_pos, restored)
                if restored == INVALID_INDEX:
                    self.hash_slot_count -= 1
            item_pos = item_position(self.hash_slots, number)
            self._mm[item_pos : item_pos + ITEM_SIZE_BYTES] = _ZERO_ITEM
            number -= 1
        removed = self.index_count - 1 - number
        if removed:
            self.index_count = number + 1
            self._set_end_to_item(number)
            self._write_header()
        return removed

    def _set_end_to_item(self, number: int) -> None:
        """End offset and time from the item now last.

        Items store whole seconds since the begin time, so after the first item the end time
        loses its milliseconds (it can only move earlier, never past a kept item).
        """
        if number < 1:
            self.end_phy_offset = self.begin_phy_offset
            self.end_timestamp_ms = self.begin_timestamp_ms
            return
        item = self.read_item(number)
        self.end_phy_offset = item.phy_offset
        self.end_timestamp_ms = self.begin_timestamp_ms
        if number > 1:
            self.end_timestamp_ms += item.time_diff_s * 1000

    # --- reading ---
    def read_slot_at(self, slot_pos: int) -> int:
        """Slot value at a byte position; values outside ``(0, index_count]`` read as 0."""
        value: int = _INT.unpack_from(self._mm, slot_pos)[0]
        if value <= INVALID_INDEX or value > self.index_count:
            return INVALID_INDEX
        return value

    def read_item(self, number: int) -> IndexItem:
        key_hash, phy_offset, time_diff_s, prev = _ITEM.unpack_from(
            self._mm, item_position(self.hash_slots, number)
        )
        return IndexItem(key_hash, phy_offset, time_diff_s, prev)

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """Whether ``[begin_ms, end_ms]`` overlaps the file's time range
        (``docs/formats/queues.md`` §2.5)."""
        first, last = self.begin_timestamp_ms, self.end_timestamp_ms
        return (
            (begin_ms < first and end_ms > last)
            or first <= begin_ms <= last
            or first <= end_ms <= last
        )

    def select_phy_offsets(
        self, key_hash: int, max_num: int, begin_ms: int, end_ms: int
    ) -> list[int]:
        """Walk the bucket chain of ``key_hash``: offsets of hash matches stored in the range."""
        found: list[int] = []
        number = self.read_slot_at(slot_position(key_hash, self.hash_slots))
        if number == INVALID_INDEX or self.index_count <= 1:
            return found
        for _ in range(self.index_count):  # bounds a corrupted, cyclic chain
            if len(found) >= max_num:
                break
            item = self.read_item(number)
            if item.time_diff_s < 0:
                break
            item_ms = self.begin_timestamp_ms + item.time_diff_s * 1000
            if item.key_hash == key_hash and begin_ms <= item_ms <= end_ms:
                found.append(item.phy_offset)
            prev = item.prev_index
            if prev <= INVALID_INDEX or prev > self.index_count or prev == number:
                break
            if item_ms < begin_ms:
                break
            number = prev
        return found

    # --- lifecycle ---
    def flush(self) -> None:
        """fdatasync when anything changed since the last flush."""
        if self._dirty and not self._mm.closed:
            self._write_header()
            durable.sync_data(self._fd, str(self.path))
            self._dirty = False

    def close(self) -> None:
        unmap_file(self._fd, self._mm)

    def destroy(self) -> None:
        self.close()
        durable.remove_file(self.path)
