"""Extra info (the ``POP_CK`` property) and receipt handles (``docs/formats/pop.md`` §4).

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
import re
from dataclasses import dataclass

from gannet.node.pop.errors import ReceiptHandleIllegal
from gannet.node.store import validation

ORDER_REVIVE_QUEUE = 999
FIELD_SEPARATOR = " "
EXTRA_INFO_FIELDS = 8
RECEIPT_HANDLE_FIELDS = 9
BROKER_NAME_FIELD = 5
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
class InvisibleTimeChange:
    """A ChangeInvisibleDuration: the message of ``handle`` (popped by ``group`` from ``topic``)
    stays invisible for ``invisible_time_ms`` from ``now_ms``. Handed by the Pop service to the
    ack service (plain handles) or the order service (orderly ones)."""

    group: str
    topic: str
    handle: str | ReceiptHandle
    invisible_time_ms: int
    now_ms: int


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


_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_DIGITS = frozenset("0123456789")
_FIELD_DIGITS_MAX = 19  # a long has at most 19 digits


def _shown(text: str) -> str:
    """A handle quoted for an error message: at most 80 characters, then the length."""
    if len(text) <= 80:
        return repr(text)
    return f"{text[:80]!r}… ({len(text)} characters)"


def _field(parts: list[str], index: int, name: str, text: str, maximum: int) -> int:
    """Field ``index`` as a decimal in ``[0, maximum]``: ASCII digits only (no sign, blank,
    ``_`` or non-ASCII digit, which Python's ``int`` would accept), at most 19 of them."""
    raw = parts[index]
    if not raw or len(raw) > _FIELD_DIGITS_MAX or not _DIGITS.issuperset(raw):
        raise ReceiptHandleIllegal(
            f"receipt handle {_shown(text)}: field {index} ({name}) is {_shown(raw)}, not a "
            f"decimal number of 1 to {_FIELD_DIGITS_MAX} digits"
        )
    value = int(raw)
    if value > maximum:
        raise ReceiptHandleIllegal(
            f"receipt handle {_shown(text)}: field {index} ({name}) is {value}; at most {maximum}"
        )
    return value


_D = "([0-9]{1,19})"
_CANONICAL = re.compile(rf"{_D} {_D} {_D} {_D} ([012]) ([^ ]+) {_D} {_D} {_D}", re.ASCII)
"""A 9-field handle whose every number is 1 to 19 ASCII digits (as :meth:`ReceiptHandle.encode`
writes them): :func:`parse` checks only the ranges of its fields, in one match."""
_FLAGS = (TopicFlag.NORMAL, TopicFlag.RETRY_V1, TopicFlag.RETRY_V2)


def parse(text: str) -> ReceiptHandle:
    """Parse an 8-field extra info or a 9-field receipt handle; raises ReceiptHandleIllegal.

    Every number must be a plain decimal within its Java type (int for the revive queue and
    queue id, long for the rest; none negative), the checkpoint's offset may not lie past the
    message's, and ``popTime + invisibleTime`` must stay a long. Whether the handle names a
    checkpoint this broker made is :mod:`acking`'s check."""
    match = _CANONICAL.fullmatch(text) if len(text) <= RECEIPT_HANDLE_LENGTH_MAX_CHARS else None
    if match is not None:
        ck, pop, invisible, revive, flag, broker, queue, offset, commit = match.groups()
        handle = ReceiptHandle(
            int(ck), int(pop), int(invisible), int(revive), _FLAGS[int(flag)], broker,
            int(queue), int(offset), int(commit),
        )  # fmt: skip
        if (
            handle.ck_queue_offset <= handle.queue_offset
            and handle.next_visible_time_ms <= _INT64_MAX
            and handle.revive_qid <= _INT32_MAX
            and handle.queue_id <= _INT32_MAX
            and max(handle.queue_offset, handle.commit_offset) <= _INT64_MAX
        ):
            # pop and invisible time (each >= 0) are bounded by their sum; the checkpoint
            # offset by the queue offset.
            return handle
    return _parse_checked(text)


def _parse_checked(text: str) -> ReceiptHandle:
    """:func:`parse` field by field, with the error naming what is wrong."""
    if len(text) > RECEIPT_HANDLE_LENGTH_MAX_CHARS:
        raise ReceiptHandleIllegal(
            f"receipt handle is {len(text)} characters; at most "
            f"{RECEIPT_HANDLE_LENGTH_MAX_CHARS} are allowed"
        )
    parts = text.split(FIELD_SEPARATOR)
    if len(parts) not in (EXTRA_INFO_FIELDS, RECEIPT_HANDLE_FIELDS):
        raise ReceiptHandleIllegal(
            f"receipt handle {_shown(text)} has {len(parts)} space-separated fields; "
            f"expected {EXTRA_INFO_FIELDS} or {RECEIPT_HANDLE_FIELDS}"
        )
    flag_value = _field(parts, 4, "retry flag", text, 2)
    broker_name = parts[BROKER_NAME_FIELD]
    if not broker_name:
        raise ReceiptHandleIllegal(f"receipt handle {_shown(text)}: empty broker name")
    handle = ReceiptHandle(
        ck_queue_offset=_field(parts, 0, "checkpoint offset", text, _INT64_MAX),
        pop_time_ms=_field(parts, 1, "pop time", text, _INT64_MAX),
        invisible_time_ms=_field(parts, 2, "invisible time", text, _INT64_MAX),
        revive_qid=_field(parts, 3, "revive queue", text, _INT32_MAX),
        flag=TopicFlag(flag_value),
        broker_name=broker_name,
        queue_id=_field(parts, 6, "queue id", text, _INT32_MAX),
        queue_offset=_field(parts, 7, "queue offset", text, _INT64_MAX),
        commit_offset=(
            -1
            if len(parts) == 8 or parts[8] == "-1"  # -1: made from an 8-field extra info
            else _field(parts, 8, "commit offset", text, _INT64_MAX)
        ),
    )
    if handle.ck_queue_offset > handle.queue_offset:
        raise ReceiptHandleIllegal(
            f"receipt handle {_shown(text)}: checkpoint offset {handle.ck_queue_offset} lies "
            f"past the message's queue offset {handle.queue_offset}"
        )
    if handle.next_visible_time_ms > _INT64_MAX:
        raise ReceiptHandleIllegal(
            f"receipt handle {_shown(text)}: pop time + invisible time exceeds a long"
        )
    return handle


def start_offset_info(flag: TopicFlag, queue_id: int, start_offset: int) -> str:
    return f"{int(flag)} {queue_id} {start_offset}"


def msg_offset_info(flag: TopicFlag, queue_id: int, offsets: list[int]) -> str:
    return f"{int(flag)} {queue_id} " + ",".join(str(o) for o in offsets)
