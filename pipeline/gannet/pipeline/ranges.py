"""Queue-offset ranges of the ``gannet`` data source: splitting them into Spark partitions,
sharing a per-trigger limit among queues, and the JSON form of streaming offsets.

A range is ``[start, end)`` in queue offsets of one queue of one broker group; a queue is
named by its key (group name, queue id). Streaming offsets are what Spark checkpoints: a JSON
object of group name → queue id (string) → next queue offset to read, e.g.
``{"broker-0": {"0": 120, "1": 97}, "broker-1": {"0": 3}}``; a queue missing from a start
offset (a queue or group added to the topic later) starts at 0. Checkpoints written before
broker groups, ``{"0": 120, "1": 97}``, still parse: their queues get the group
:data:`LEGACY_GROUP` (``""``), which the reader maps to the group it meant.

Pure; used by :mod:`reading`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

LEGACY_GROUP = ""
"""The group of the queues of a checkpoint written before broker groups."""

QueueKey = tuple[str, int]
"""(broker group name, queue id)."""

K = TypeVar("K", int, QueueKey)


@dataclass(frozen=True, slots=True)
class QueueRange:
    queue_id: int
    start: int
    end: int
    group: str = LEGACY_GROUP

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


def split(ranges: list[QueueRange], count_max: int) -> list[QueueRange]:
    """Each non-empty range cut into pieces of at most ``count_max`` offsets, in order."""
    if count_max < 1:
        raise ValueError(f"count_max must be >= 1, not {count_max}")
    pieces: list[QueueRange] = []
    for r in ranges:
        for start in range(r.start, r.end, count_max):
            pieces.append(QueueRange(r.queue_id, start, min(start + count_max, r.end), r.group))
    return pieces


def apportion(start: Mapping[K, int], latest: Mapping[K, int], limit: int | None) -> dict[K, int]:
    """End offsets moving at most ``limit`` offsets in total past ``start``, shared fairly.

    Queues with less available than an equal share take all of theirs; the rest is split
    equally among the others (lowest keys get the remainder), so no queue starves.
    Queues only in ``latest`` start at 0; an end is never behind its start.
    """
    begin = {q: start.get(q, 0) for q in latest}
    for q, offset in start.items():
        begin.setdefault(q, offset)
    available = {q: max(0, latest.get(q, begin[q]) - begin[q]) for q in begin}
    if limit is None:
        return {q: begin[q] + available[q] for q in begin}
    if limit < 0:
        raise ValueError(f"limit must be >= 0, not {limit}")
    # Water-filling: the queues with least available first, each taking at most an equal
    # share of what is left; leftovers of the integer division go one each to the lowest ids.
    granted = dict.fromkeys(begin, 0)
    order = sorted((q for q in begin if available[q] > 0), key=lambda q: (available[q], q))
    left = limit
    for i, q in enumerate(order):
        granted[q] = min(available[q], left // (len(order) - i))
        left -= granted[q]
    for q in sorted(order):
        if left == 0:
            break
        if granted[q] < available[q]:
            granted[q] += 1
            left -= 1
    return {q: begin[q] + granted[q] for q in begin}


def to_json_offsets(offsets: Mapping[QueueKey, int]) -> dict[str, dict[str, int]]:
    nested: dict[str, dict[str, int]] = {}
    for group, q in sorted(offsets):
        nested.setdefault(group, {})[str(q)] = int(offsets[(group, q)])
    return nested


def from_json_offsets(raw: Mapping[str, object]) -> dict[QueueKey, int]:
    """Offsets from a checkpoint (either form, see the module docstring); ValueError naming a
    malformed entry."""
    result: dict[QueueKey, int] = {}
    for key, value in raw.items():
        if isinstance(value, Mapping):
            for q, offset in value.items():
                result[(str(key), _queue_id(q, offset))] = _offset(q, offset)
        else:
            result[(LEGACY_GROUP, _queue_id(key, value))] = _offset(key, value)
    return result


def _queue_id(key: object, value: object) -> int:
    if not str(key).isdigit():
        raise ValueError(
            f"streaming offset entry {key!r}: {value!r} is not queue id → queue offset"
        )
    return int(str(key))


def _offset(key: object, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"streaming offset entry {key!r}: {value!r} is not queue id → queue offset"
        )
    return value
