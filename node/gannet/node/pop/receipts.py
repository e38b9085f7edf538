"""Extra info (the ``POP_CK`` property) and receipt handles (store-format.md §10.5).

Extra info (``ExtraInfoUtil.buildExtraInfo``): eight fields joined by one space::

    idx field
      0 ckQueueOffset   start offset of the checkpoint the message belongs to
      1 popTime         ms
      2 invisibleTime   ms
      3 reviveQid       revive queue of the checkpoint; 999 = orderly pop (no checkpoint)
      4 retry flag      0 normal topic, 1 retry topic V1, 2 retry topic V2
      5 brokerName
      6 queueId         queue of the topic the message was popped from (the retry topic's)
      7 queue offset    the message's own offset

The gRPC receipt handle (proxy ``ReceiptHandle``) is the same list plus index 8, the message's
commit-log offset, e.g. ``100 1700000000000 60000 3 0 broker-a 2 102 8812``. The message is
visible again at ``popTime + invisibleTime``. The topic to ack is derived from the flag:
``%RETRY%<group>_<topic>`` for 1, ``%RETRY%<group>+<topic>`` for 2, the topic itself for 0.

Response-header lists: ``startOffsetInfo`` = ``"<flag> <queueId> <startOffset>"`` joined by
``;``; ``msgOffsetInfo`` = ``"<flag> <queueId> <o1>,<o2>,..."`` joined by ``;``.

Pure; called by :mod:`popping` (build) and :mod:`acking` (parse).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gannet.node.pop.errors import ReceiptHandleIllegal
from gannet.node.store import validation

ORDER_REVIVE_QUEUE = 999
FIELD_SEPARATOR = " "
EXTRA_INFO_FIELDS = 8
RECEIPT_HANDLE_FIELDS = 9
RECEIPT_HANDLE_LENGTH_MAX_CHARS = 1024


class TopicFlag(enum.IntEnum):
    NORMAL = 0
    RETRY_V1 = 1
    RETRY_V2 = 2


def topic_flag(topic: str) -> TopicFlag:
    """Flag of a topic popped from (``%RETRY%`` topics popped by Pop are V1 unless ``+``)."""
    if not validation.is_retry_topic(topic):
        return TopicFlag.NORMAL
    return TopicFlag.RETRY_V2 if "+" in topic else TopicFlag.RETRY_V1


def real_topic(flag: TopicFlag, group: str, topic: str) -> str:
    """The topic a handle's message lives in, from the original topic and the flag."""
    if flag is TopicFlag.RETRY_V1:
        return validation.retry_topic_v1(group, topic)
    if flag is TopicFlag.RETRY_V2:
        return validation.retry_topic_v2(group, topic)
    return topic


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """A parsed extra info; ``commit_offset`` is -1 when parsed from an 8-field extra info."""

    ck_queue_offset: int
    pop_time_ms: int
    invisible_time_ms: int
    revive_qid: int
    flag: TopicFlag
    broker_name: str
    queue_id: int
    queue_offset: int
    commit_offset: int = -1

    @property
    def next_visible_time_ms(self) -> int:
        return self.pop_time_ms + self.invisible_time_ms

    @property
    def is_order(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QUEUE

    def extra_info(self) -> str:
        """The eight-field ``POP_CK`` form."""
        return FIELD_SEPARATOR.join(
            (
                str(self.ck_queue_offset),
                str(self.pop_time_ms),
                str(self.invisible_time_ms),
                str(self.revive_qid),
                str(int(self.flag)),
                self.broker_name,
                str(self.queue_id),
                str(self.queue_offset),
            )
        )

    def encode(self) -> str:
        """The nine-field gRPC receipt handle."""
        return f"{self.extra_info()}{FIELD_SEPARATOR}{self.commit_offset}"


def _field(parts: list[str], index: int, name: str, text: str) -> int:
    try:
        return int(parts[index])
    except ValueError:
        raise ReceiptHandleIllegal(
            f"receipt handle {text[:80]!r}: field {index} ({name}) is {parts[index]!r}, "
            "not an integer"
        ) from None


def parse(text: str) -> ReceiptHandle:
    """Parse an 8-field extra info or a 9-field receipt handle; raises ReceiptHandleIllegal."""
    if len(text) > RECEIPT_HANDLE_LENGTH_MAX_CHARS:
        raise ReceiptHandleIllegal(
            f"receipt handle is {len(text)} characters; at most "
            f"{RECEIPT_HANDLE_LENGTH_MAX_CHARS} are allowed"
        )
    parts = text.split(FIELD_SEPARATOR)
    if len(parts) not in (EXTRA_INFO_FIELDS, RECEIPT_HANDLE_FIELDS):
        raise ReceiptHandleIllegal(
            f"receipt handle {text[:80]!r} has {len(parts)} space-separated fields; "
            f"expected {EXTRA_INFO_FIELDS} or {RECEIPT_HANDLE_FIELDS}"
        )
    flag_value = _field(parts, 4, "retry flag", text)
    if flag_value not in (0, 1, 2):
        raise ReceiptHandleIllegal(f"receipt handle {text[:80]!r}: retry flag {flag_value}")
    if not parts[5]:
        raise ReceiptHandleIllegal(f"receipt handle {text[:80]!r}: empty broker name")
    handle = ReceiptHandle(
        ck_queue_offset=_field(parts, 0, "checkpoint offset", text),
        pop_time_ms=_field(parts, 1, "pop time", text),
        invisible_time_ms=_field(parts, 2, "invisible time", text),
        revive_qid=_field(parts, 3, "revive queue", text),
        flag=TopicFlag(flag_value),
        broker_name=parts[5],
        queue_id=_field(parts, 6, "queue id", text),
        queue_offset=_field(parts, 7, "queue offset", text),
        commit_offset=_field(parts, 8, "commit offset", text) if len(parts) == 9 else -1,
    )
    if min(handle.ck_queue_offset, handle.queue_id, handle.queue_offset, handle.revive_qid) < 0:
        raise ReceiptHandleIllegal(f"receipt handle {text[:80]!r} has a negative field")
    return handle


def start_offset_info(flag: TopicFlag, queue_id: int, start_offset: int) -> str:
    return f"{int(flag)} {queue_id} {start_offset}"


def msg_offset_info(flag: TopicFlag, queue_id: int, offsets: list[int]) -> str:
    return f"{int(flag)} {queue_id} " + ",".join(str(o) for o in offsets)
