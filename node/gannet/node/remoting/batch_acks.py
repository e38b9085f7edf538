"""The body of ``BATCH_ACK_MESSAGE`` (200151): many Pop acks in one request, read into the
extra infos the single ``ACK_MESSAGE`` carries (:mod:`popping` acks them as one v2
``AckMessage`` per entry).

RocketMQ 5's ``BatchAckMessageRequestBody`` as fastjson writes it (rocketmq-client 5.3.3,
``MQClientAPIImpl.batchAckMessageAsync``)::

    {"acks": [{"b": "<base64>", "c": "<group>", "it": 60000, "pt": 1700000000000,
               "q": 2, "r": "0", "rq": 3, "so": 100, "t": "<topic>"}, ...],
     "brokerName": "broker-a"}

One entry per (retry flag, queue id, checkpoint start offset, pop time) of the extra infos
acked: ``c`` consumer group, ``t`` topic, ``r`` retry flag (extra info field 4), ``so`` the
checkpoint's start offset, ``q`` queue id, ``rq`` revive queue id, ``pt`` pop time,
``it`` invisible time; ``b`` is ``java.util.BitSet.toByteArray()`` in base64 (little endian:
bit ``i`` is bit ``i % 8`` of byte ``i // 8``), bit ``i`` set acks the message at queue offset
``so + i``. The long names (``consumerGroup``, ``startOffset``, ...) are accepted too, as
fastjson's ``alternateNames`` are. Each acked message becomes the 8-field extra info
``so pt it rq r brokerName q so+i`` (``docs/formats/pop.md`` §4), which the ack path takes
without a commit-log offset.

Pure. Bad input raises :class:`BadBatchAck` naming the field.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

ACKS_MAX = 4096
"""Messages one request may ack (32 per pop: 128 pops' worth)."""
BITSET_BYTES_MAX = 4096
"""Bytes of one entry's bit set: offsets up to 32,767 past the checkpoint's start."""

_NAMES = {
    "c": "consumerGroup", "t": "topic", "r": "retry", "so": "startOffset", "q": "queueId",
    "rq": "reviveQueueId", "pt": "popTime", "it": "invisibleTime", "b": "bitSet",
}  # fmt: skip


class BadBatchAck(ValueError):
    """The body is not a batch ack as the 5.x client writes it; the message names why."""


@dataclass(frozen=True, slots=True)
class BatchAck:
    """The acks of one entry: ``extra_infos`` of messages popped by ``group`` from ``topic``."""

    group: str
    topic: str
    extra_infos: tuple[str, ...]


def _field(entry: dict[str, Any], short: str) -> Any:
    if short in entry:
        return entry[short]
    return entry.get(_NAMES[short])


def _number(entry: dict[str, Any], short: str, index: int) -> int:
    value = _field(entry, short)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadBatchAck(f"acks[{index}].{short} ({_NAMES[short]}) is not a number: {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise BadBatchAck(f"acks[{index}].{short} ({_NAMES[short]}) is not a number") from None
    if not 0 <= number < 2**63:
        raise BadBatchAck(f"acks[{index}].{short} ({_NAMES[short]}) = {number} is out of range")
    return number


def _name(entry: dict[str, Any], short: str, index: int) -> str:
    value = _field(entry, short)
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise BadBatchAck(f"acks[{index}].{short} ({_NAMES[short]}) is missing or malformed")
    return value


def offsets_of(bit_set: bytes) -> list[int]:
    """The indices of the bits set in ``java.util.BitSet.toByteArray()``'s bytes."""
    return [
        byte_index * 8 + bit
        for byte_index, byte in enumerate(bit_set)
        for bit in range(8)
        if byte >> bit & 1
    ]


def parse(body: bytes) -> list[BatchAck]:
    """The acks of a ``BATCH_ACK_MESSAGE`` body (module docstring)."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadBatchAck(f"the batch ack body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadBatchAck("the batch ack body is not a JSON object")
    broker = data.get("brokerName")
    if not isinstance(broker, str) or not broker or any(c.isspace() for c in broker):
        raise BadBatchAck("the batch ack body has no brokerName")
    entries = data.get("acks")
    if not isinstance(entries, list):
        raise BadBatchAck("the batch ack body has no acks list")
    found: list[BatchAck] = []
    total = 0
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise BadBatchAck(f"acks[{index}] is not an object")
        encoded = _field(entry, "b")
        if not isinstance(encoded, str) or len(encoded) > BITSET_BYTES_MAX * 4 // 3 + 4:
            raise BadBatchAck(f"acks[{index}].b (bitSet) is missing or longer than "
                              f"{BITSET_BYTES_MAX} bytes")  # fmt: skip
        try:
            bit_set = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise BadBatchAck(f"acks[{index}].b (bitSet) is not base64") from None
        indices = offsets_of(bit_set)
        total += len(indices)
        if total > ACKS_MAX:
            raise BadBatchAck(f"the batch acks more than {ACKS_MAX} messages")
        start = _number(entry, "so", index)
        head = " ".join(
            (
                str(start),
                str(_number(entry, "pt", index)),
                str(_number(entry, "it", index)),
                str(_number(entry, "rq", index)),
                str(_number(entry, "r", index)),
                broker,
                str(_number(entry, "q", index)),
            )
        )
        found.append(
            BatchAck(
                _name(entry, "c", index),
                _name(entry, "t", index),
                tuple(f"{head} {start + i}" for i in indices),
            )
        )
    return found
