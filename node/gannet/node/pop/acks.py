"""Ack records (``AckMsg`` / ``BatchAckMsg``, ``docs/formats/pop.md`` §3): JSON bodies of ACK
messages.

AckMsg (tag ``ack``), fastjson names, sorted, compact::

    {"ao":102,"bn":"broker-a","c":"GID","pt":1700000000000,"q":2,"so":100,"t":"Orders"}

``ao`` acked queue offset, ``so`` start offset of the CK it belongs to, ``c`` group, ``t`` topic
(the real topic: a retry topic for messages popped from one), ``q`` queue id, ``pt`` the CK's pop
time, ``bn`` broker name. BatchAckMsg (tag ``bAck``) adds ``aol`` (acked offsets) with ``ao``
−1 or 0; batch acks built from the merge buffer omit ``bn``. When parsing, the long Java field
names (``ackOffset``, ``startOffset``, ``consumerGroup``, ``topic``, ``queueId``, ``popTime``,
``brokerName``, ``ackOffsetList``) are accepted as alternates.

Unique keys: ``topic@queueId@ackOffset@group@popTime@brokerName@ack`` and
``topic@queueId@[o1, o2]@group@popTime@bAck`` (Java ``List.toString``).

Pure; called by :mod:`acking` (writing) and :mod:`reviving` (reading).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gannet.node.pop import checkpoints
from gannet.node.pop.errors import PopRequestIllegal

_ALTERNATES = {
    "ao": "ackOffset",
    "so": "startOffset",
    "c": "consumerGroup",
    "t": "topic",
    "q": "queueId",
    "pt": "popTime",
    "bn": "brokerName",
    "aol": "ackOffsetList",
}


@dataclass(frozen=True, slots=True)
class AckMsg:
    """One ack; ``ack_offsets`` is set for a batch ack (``ack_offset`` is then -1 or 0)."""

    ack_offset: int
    start_offset: int
    consumer_group: str
    topic: str
    queue_id: int
    pop_time_ms: int
    broker_name: str | None
    ack_offsets: tuple[int, ...] | None = None

    @property
    def is_batch(self) -> bool:
        return self.ack_offsets is not None

    def offsets(self) -> tuple[int, ...]:
        """Every acked queue offset."""
        return self.ack_offsets if self.ack_offsets is not None else (self.ack_offset,)

    def revive_key(self, default_broker_name: str) -> str:
        return checkpoints.revive_key(
            self.topic,
            self.consumer_group,
            self.queue_id,
            self.start_offset,
            self.pop_time_ms,
            self.broker_name or default_broker_name,
        )


def encode(ack: AckMsg) -> bytes:
    doc: dict[str, object] = {
        "ao": ack.ack_offset,
        "c": ack.consumer_group,
        "pt": ack.pop_time_ms,
        "q": ack.queue_id,
        "so": ack.start_offset,
        "t": ack.topic,
    }
    if ack.broker_name is not None:
        doc["bn"] = ack.broker_name
    if ack.ack_offsets is not None:
        doc["aol"] = list(ack.ack_offsets)
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _get(doc: dict[str, object], key: str) -> object:
    return doc[key] if key in doc else doc.get(_ALTERNATES[key])


def _int(doc: dict[str, object], key: str) -> int:
    value = _get(doc, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PopRequestIllegal(f"ack field {key!r} is {value!r}, not an integer")
    return value


def _str(doc: dict[str, object], key: str) -> str:
    value = _get(doc, key)
    if not isinstance(value, str):
        raise PopRequestIllegal(f"ack field {key!r} is {value!r}, not a string")
    return value


def decode(data: bytes | str) -> AckMsg:
    """Parse an ACK or batch-ACK body. Raises :class:`PopRequestIllegal`."""
    doc = checkpoints.load_json(data)
    raw_list = _get(doc, "aol")
    offsets: tuple[int, ...] | None = None
    if raw_list is not None:
        if not isinstance(raw_list, list) or not all(
            isinstance(o, int) and not isinstance(o, bool) for o in raw_list
        ):
            raise PopRequestIllegal(f"ack field 'aol' is {raw_list!r}")
        offsets = tuple(raw_list)
    bn = _get(doc, "bn")
    ao = _get(doc, "ao")
    return AckMsg(
        ack_offset=ao if isinstance(ao, int) and not isinstance(ao, bool) else -1,
        start_offset=_int(doc, "so"),
        consumer_group=_str(doc, "c"),
        topic=_str(doc, "t"),
        queue_id=_int(doc, "q"),
        pop_time_ms=_int(doc, "pt"),
        broker_name=bn if isinstance(bn, str) else None,
        ack_offsets=offsets,
    )


def ack_unique_key(ack: AckMsg) -> str:
    """UNIQ_KEY of an ACK (``genAckUniqueId``) or batch ACK (``genBatchAckUniqueId``)."""
    sep = checkpoints.KEY_SEPARATOR
    if ack.ack_offsets is not None:
        listed = "[" + ", ".join(str(o) for o in ack.ack_offsets) + "]"
        parts = [ack.topic, str(ack.queue_id), listed, ack.consumer_group, str(ack.pop_time_ms)]
        return sep.join([*parts, checkpoints.BATCH_ACK_TAG])
    return sep.join(
        (
            ack.topic,
            str(ack.queue_id),
            str(ack.ack_offset),
            ack.consumer_group,
            str(ack.pop_time_ms),
            ack.broker_name or "",
            checkpoints.ACK_TAG,
        )
    )
