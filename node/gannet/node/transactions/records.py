"""The records a transaction writes to the commit log, and how a dispatched one is read back.

RocketMQ's broker model (``TransactionalMessageService``), plus one Gannet record:

* **half message** — the transactional SendMessage, stored in ``RMQ_SYS_TRANS_HALF_TOPIC``
  queue 0 with ``REAL_TOPIC`` / ``REAL_QID`` naming where it belongs and ``TRAN_MSG=true``.
  No consumer reads that topic, so it stays invisible. Its commit-log offset, as 16 hex
  digits, is the ``transaction_id`` the producer gets.
* **commit** — a copy of the half message in its real topic and queue, with sysFlag
  ``TRANSACTION_COMMIT_TYPE`` and ``preparedTransactionOffset`` = the half message's offset
  (as RocketMQ's ``endMessageTransaction``). Being one record, the copy itself resolves the
  transaction: a failover can never keep the copy and lose the resolution.
* **op record** — ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag ``d``, body = the half
  message's offset in decimal; written after the commit copy, for a rollback, and for a discard.
* **discard** — after ``check_max`` unanswered checks the half message is copied to
  ``TRANS_CHECK_MAX_TIME_TOPIC`` (as RocketMQ's ``resolveDiscardMsg``: kept for inspection,
  never delivered) and gets an op record.
* **check record** (Gannet) — ``rmq_sys_GANNET_TRANS_CHECK`` queue 0, tag ``c``, body = the
  half message's offset, ``TRANSACTION_CHECK_TIMES`` = the check's number. The leader writes
  one when a check is due; every replica, on dispatching it, asks its own connected producers
  of the topic. So check counts and times survive a leader change, and a producer gets its
  check whichever member its Telemetry stream reached. (RocketMQ instead re-appends the half
  message with a higher ``TRANSACTION_CHECK_TIMES``, which changes its offset and with it the
  transaction id a producer may still hold.)

Pure functions over :class:`~gannet.node.store.log.records.Message`; used by :mod:`transactions`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import Code, definition_pb2

from gannet.node.protocol.statuses import ApiError
from gannet.node.store import properties as props
from gannet.node.store import validation
from gannet.node.store.log import records
from gannet.node.store.log.records import DispatchInfo
from gannet.node.transactions.book import Resolution

HALF_TOPIC = validation.TRANS_HALF_TOPIC
OP_TOPIC = validation.TRANS_OP_HALF_TOPIC
DISCARD_TOPIC = validation.TRANS_CHECK_MAX_TIME_TOPIC
CHECK_TOPIC = validation.SYSTEM_TOPIC_PREFIX + "GANNET_TRANS_CHECK"
TOPICS = (HALF_TOPIC, OP_TOPIC, DISCARD_TOPIC, CHECK_TOPIC)
OP_TAG = "d"
CHECK_TAG = "c"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
TRANSACTION_ID_HEX_DIGITS = 16
HIDDEN = frozenset({props.REAL_TOPIC, props.REAL_QUEUE_ID, props.TRANSACTION_PREPARED})
_WATCHED = frozenset({HALF_TOPIC, OP_TOPIC, CHECK_TOPIC})


def transaction_id_of(half_offset: int) -> str:
    return f"{half_offset:0{TRANSACTION_ID_HEX_DIGITS}X}"


def parse_transaction_id(text: str) -> int:
    if len(text) != TRANSACTION_ID_HEX_DIGITS:
        raise ApiError(
            Code.INVALID_TRANSACTION_ID,
            f"transaction_id {text[:40]!r} is not {TRANSACTION_ID_HEX_DIGITS} hex digits",
        )
    try:
        return int(text, 16)
    except ValueError:
        raise ApiError(
            Code.INVALID_TRANSACTION_ID, f"transaction_id {text!r} is not hexadecimal"
        ) from None


# ---------------------------------------------------------------------- writing
def to_half(messages: list[records.Message]) -> list[records.Message]:
    """The half messages to append instead of ``messages`` (already assigned a queue)."""
    halves = []
    for m in messages:
        properties = dict(m.properties)
        properties[props.REAL_TOPIC] = m.topic
        properties[props.REAL_QUEUE_ID] = str(m.queue_id)
        properties[props.TRANSACTION_PREPARED] = "true"
        halves.append(dataclasses.replace(m, topic=HALF_TOPIC, queue_id=0, properties=properties))
    return halves


def commit_copy(half: records.Message, half_offset: int) -> records.Message:
    p = {k: v for k, v in half.properties.items() if k not in HIDDEN}
    return records.Message(
        topic=half.properties[props.REAL_TOPIC],
        body=half.body,
        properties=p,
        queue_id=int(half.properties.get(props.REAL_QUEUE_ID, "0")),
        sys_flag=(half.sys_flag & ~0xC) | records.SYSFLAG_TRANSACTION_COMMIT_TYPE,
        born_timestamp_ms=half.born_timestamp_ms,
        born_host=half.born_host,
        prepared_transaction_offset=half_offset,
    )


def discard_copy(half: records.Message) -> records.Message:
    return records.Message(
        topic=DISCARD_TOPIC,
        body=half.body,
        properties=dict(half.properties),
        queue_id=0,
        born_timestamp_ms=half.born_timestamp_ms,
        born_host=half.born_host,
    )


def op_record(half_offset: int) -> records.Message:
    return records.Message(
        topic=OP_TOPIC, body=str(half_offset).encode(), properties={props.TAGS: OP_TAG}
    )


def check_record(half_offset: int, check_number: int) -> records.Message:
    return records.Message(
        topic=CHECK_TOPIC,
        body=str(half_offset).encode(),
        properties={props.TAGS: CHECK_TAG, CHECK_TIMES: str(check_number)},
    )


def resolution_records(
    half: records.Message, half_offset: int, resolution: Resolution
) -> list[records.Message]:
    if resolution is Resolution.COMMIT:
        return [commit_copy(half, half_offset), op_record(half_offset)]
    if resolution is Resolution.DISCARD:
        return [discard_copy(half), op_record(half_offset)]
    return [op_record(half_offset)]


# ---------------------------------------------------------------------- reading back
class Seen(NamedTuple):
    """A dispatched transaction record: ``kind`` is half, commit, op or check."""

    kind: str
    half_offset: int
    topic: str = ""
    checks: int = 0


def watched_of(infos: Sequence[DispatchInfo]) -> list[DispatchInfo]:
    """The records of a dispatched batch that could be transaction records (a half, op or
    check topic, or a commit-type sysFlag), in order: one comprehension, no call per record
    (the dispatch hot path; usually none)."""
    commit = records.SYSFLAG_TRANSACTION_COMMIT_TYPE
    return [i for i in infos if i.topic in _WATCHED or i.sys_flag & 0xC == commit]


def seen(info: DispatchInfo, body: bytes | None) -> Seen | None:
    """What a dispatched record means to the book (``body`` of op and check records)."""
    if info.topic == HALF_TOPIC:
        return Seen("half", info.commit_offset, info.properties.get(props.REAL_TOPIC, ""))
    if info.sys_flag & 0xC == records.SYSFLAG_TRANSACTION_COMMIT_TYPE:
        return Seen("commit", info.prepared_transaction_offset)
    offset = _offset_in(body)
    if offset is None:
        return None
    if info.topic == OP_TOPIC and info.properties.get(props.TAGS) == OP_TAG:
        return Seen("op", offset)
    if info.topic == CHECK_TOPIC:
        return Seen("check", offset, checks=_int(info.properties.get(CHECK_TIMES)))
    return None


def _offset_in(body: bytes | None) -> int | None:
    if body is None or not body.isdigit():
        return None
    return int(body)


def _int(text: str | None) -> int:
    return int(text) if text is not None and text.isdigit() else 0


# ---------------------------------------------------------------------- the producer's view
def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def message_pb(half: records.Message) -> definition_pb2.Message:
    """A half message as the v2 message a producer's checker sees."""
    p = half.properties
    sp = definition_pb2.SystemProperties(
        message_id=p.get(props.UNIQ_KEY, ""),
        keys=half.keys,
        body_encoding=definition_pb2.IDENTITY,
        message_type=definition_pb2.TRANSACTION,
        born_timestamp=_timestamp(half.born_timestamp_ms),
        store_timestamp=_timestamp(half.store_timestamp_ms),
    )
    if half.tags is not None:
        sp.tag = half.tags
    user = {
        k: v
        for k, v in p.items()
        if k not in HIDDEN
        and k not in validation.RESERVED_PROPERTY_KEYS
        and not k.startswith(props.TRANSIENT_PREFIX)
    }
    return definition_pb2.Message(
        topic=definition_pb2.Resource(name=p.get(props.REAL_TOPIC, "")),
        user_properties=user,
        system_properties=sp,
        body=half.body,
    )
