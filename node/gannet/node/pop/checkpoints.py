"""Pop checkpoints (``PopCheckPoint``, ``docs/formats/pop.md`` §2): the JSON body of CK messages.

A checkpoint records one pop of up to 32 messages of one queue: where it started, when, for
how long the messages are invisible, and which of them were acknowledged. JSON (fastjson 1.x
names, keys sorted as fastjson writes them, compact)::

    {"bm":0,"bn":"broker-a","c":"GID","d":[0,1,3],"it":60000,"n":3,"pt":1700000000000,
     "q":2,"reviveTime":1700000060000,"ro":0,"so":100,"t":"Orders"}

``so`` start offset, ``pt`` pop time (ms), ``it`` invisible time (ms), ``bm`` ack bitmap (bit i
= message i acknowledged), ``n`` message count, ``q`` queue id, ``t`` topic (possibly a retry
topic), ``c`` consumer group, ``ro`` offset of the CK in the revive queue (set when read back),
``d`` offset diffs (message i is at ``so + d[i]``; a CK without ``d`` means consecutive
offsets), ``bn`` broker name, ``rp`` re-put count as a *string* (absent on a fresh CK;
unparsable → 127). ``reviveTime`` is derived (``pt + it``) and ignored on read.

Unique key of a CK message: ``topic@queueId@startOffset@cid@popTime@brokerName@ck``.
Revive/merge key: ``topic + cid + queueId + startOffset + popTime + brokerName`` concatenated.

Pure; called by :mod:`popping`, :mod:`merging`, :mod:`reviving` and :mod:`acking`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from gannet.node.invariants import InvariantViolation
from gannet.node.pop.errors import PopRequestIllegal

CK_TAG = "ck"
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"
KEY_SEPARATOR = "@"
CK_MESSAGES_MAX = 32
RE_PUT_TIMES_UNPARSABLE = 127


@dataclass(frozen=True, slots=True)
class PopCheckPoint:
    """One checkpoint. Invariants (checked when built): ``0 < num <= CK_MESSAGES_MAX``;
    ``len(offset_diffs) == num`` when ``offset_diffs`` is set; ``bit_map`` has bits only for the
    ``num`` messages (:attr:`all_bits`). :func:`decode` refuses a body that breaks them."""

    start_offset: int
    pop_time_ms: int
    invisible_time_ms: int
    num: int
    queue_id: int
    topic: str
    cid: str
    broker_name: str
    offset_diffs: tuple[int, ...] | None = None
    bit_map: int = 0
    revive_offset: int = 0
    re_put_times: str | None = None

    def __post_init__(self) -> None:
        """The checks when a checkpoint is built (from a pop, or decoded from the log)."""
        if not (0 < self.num <= CK_MESSAGES_MAX):
            raise InvariantViolation(f"a checkpoint of {self.num} messages")
        if not (self.offset_diffs is None or len(self.offset_diffs) == self.num):
            raise InvariantViolation(
                f"a checkpoint of {self.num} messages with "
                f"{len(self.offset_diffs or ())} offset diffs"
            )
        if self.bit_map & ~self.all_bits:
            raise InvariantViolation(
                f"ack bits {self.bit_map:#x} name messages beyond the {self.num} of the checkpoint"
            )

    @property
    def revive_time_ms(self) -> int:
        return self.pop_time_ms + self.invisible_time_ms

    def queue_offset(self, index: int) -> int:
        """Queue offset of message ``index``."""
        if self.offset_diffs is None:
            return self.start_offset + index
        return self.start_offset + self.offset_diffs[index]

    def index_of(self, queue_offset: int) -> int:
        """``indexOfAck``: position of ``queue_offset`` in this CK, -1 when absent."""
        if queue_offset < self.start_offset:
            return -1
        delta = queue_offset - self.start_offset
        if self.offset_diffs is None:
            return delta if delta < self.num else -1
        try:
            return self.offset_diffs.index(delta)
        except ValueError:
            return -1

    def is_acked(self, index: int) -> bool:
        return bool(self.bit_map >> index & 1)

    def with_bits(self, bits: int) -> PopCheckPoint:
        """The checkpoint with acks applied: ``bits`` may only name its own messages."""
        if bits & ~self.all_bits:
            raise InvariantViolation(
                f"ack bits {bits:#x} for {self.topic}-{self.queue_id} at {self.start_offset} name "
                f"messages beyond the {self.num} of the checkpoint"
            )
        return replace(self, bit_map=self.bit_map | bits)

    @property
    def all_bits(self) -> int:
        return (1 << self.num) - 1

    def parse_re_put_times(self) -> int:
        if self.re_put_times is None:
            return 0
        try:
            return int(self.re_put_times)
        except ValueError:
            return RE_PUT_TIMES_UNPARSABLE


def encode(ck: PopCheckPoint) -> bytes:
    """The CK message body, as fastjson writes it (sorted keys, no spaces, nulls omitted)."""
    doc: dict[str, object] = {
        "bm": ck.bit_map,
        "bn": ck.broker_name,
        "c": ck.cid,
        "it": ck.invisible_time_ms,
        "n": ck.num,
        "pt": ck.pop_time_ms,
        "q": ck.queue_id,
        "reviveTime": ck.revive_time_ms,
        "ro": ck.revive_offset,
        "so": ck.start_offset,
        "t": ck.topic,
    }
    if ck.offset_diffs is not None:
        doc["d"] = list(ck.offset_diffs)
    if ck.re_put_times is not None:
        doc["rp"] = ck.re_put_times
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _int(doc: dict[str, object], key: str, default: int | None = None) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PopRequestIllegal(f"checkpoint field {key!r} is {value!r}, not an integer")
    return value


def _str(doc: dict[str, object], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise PopRequestIllegal(f"checkpoint field {key!r} is {value!r}, not a string")
    return value


def load_json(data: bytes | str) -> dict[str, object]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PopRequestIllegal(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PopRequestIllegal("body is not a JSON object")
    return doc


def decode(data: bytes | str) -> PopCheckPoint:
    """Parse a CK body; unknown keys (``reviveTime``) are ignored. Raises PopRequestIllegal."""
    doc = load_json(data)
    diffs_raw = doc.get("d")
    diffs: tuple[int, ...] | None = None
    if diffs_raw is not None:
        if not isinstance(diffs_raw, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in diffs_raw
        ):
            raise PopRequestIllegal(f"checkpoint field 'd' is {diffs_raw!r}")
        diffs = tuple(diffs_raw)
    num, bit_map = _int(doc, "n"), _int(doc, "bm", 0)
    if not 0 < num <= CK_MESSAGES_MAX:
        raise PopRequestIllegal(f"checkpoint field 'n' is {num}, not in [1, {CK_MESSAGES_MAX}]")
    if diffs is not None and len(diffs) != num:
        raise PopRequestIllegal(f"checkpoint field 'd' has {len(diffs)} diffs for {num} messages")
    if bit_map & ~((1 << num) - 1):
        raise PopRequestIllegal(f"checkpoint field 'bm' {bit_map:#x} names messages beyond {num}")
    rp = doc.get("rp")
    bn = doc.get("bn")
    return PopCheckPoint(
        start_offset=_int(doc, "so"),
        pop_time_ms=_int(doc, "pt"),
        invisible_time_ms=_int(doc, "it"),
        num=num,
        queue_id=_int(doc, "q"),
        topic=_str(doc, "t"),
        cid=_str(doc, "c"),
        broker_name=bn if isinstance(bn, str) else "",
        offset_diffs=diffs,
        bit_map=bit_map,
        revive_offset=_int(doc, "ro", 0),
        re_put_times=None if rp is None else str(rp),
    )


def ck_unique_key(ck: PopCheckPoint) -> str:
    """UNIQ_KEY of the CK message (``genCkUniqueId``)."""
    return KEY_SEPARATOR.join(
        (
            ck.topic,
            str(ck.queue_id),
            str(ck.start_offset),
            ck.cid,
            str(ck.pop_time_ms),
            ck.broker_name,
            CK_TAG,
        )
    )


def revive_key(
    topic: str, cid: str, queue_id: int, start_offset: int, pop_time_ms: int, broker_name: str
) -> str:
    """The key that matches acks to checkpoints in revive and in the merge buffer."""
    return f"{topic}{cid}{queue_id}{start_offset}{pop_time_ms}{broker_name}"


def ck_revive_key(ck: PopCheckPoint) -> str:
    return revive_key(
        ck.topic, ck.cid, ck.queue_id, ck.start_offset, ck.pop_time_ms, ck.broker_name
    )
