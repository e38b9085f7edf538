"""Message queries (RocketMQ ``QueryMessageProcessor`` / ``DefaultMessageStore`` query paths).

* by offset message id — the id encodes the commit-log offset (:mod:`msgids`);
* by key / unique key — the index gives hash matches newest file first (at most
  ``index_query_results_max``, 32 for unique keys); up to three rounds narrow the time bound as
  RocketMQ does; hash collisions are removed here by checking the real ``KEYS`` / ``UNIQ_KEY``
  (RocketMQ leaves that to the client);
* by queue offset — one consume-queue unit, then the record;
* by store time — the queue offset for a timestamp, LOWER (first message at or after) or UPPER
  (last message at or before), binary search in the consume queue
  (``docs/formats/queues.md`` §1.6).

Read-only. Called by the CLI, the admin API and the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gannet.node.store import msgids
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.consume_queues import Boundary

UNIQ_KEY_QUERY_RESULTS_MAX = 32
QUERY_ROUNDS_MAX = 3


@dataclass(slots=True)
class KeyQueryResult:
    messages: list[Message] = field(default_factory=list)
    index_last_update_timestamp_ms: int = 0
    index_last_update_phy_offset: int = 0


def by_offset_msg_id(store: MessageStore, msg_id: str) -> Message | None:
    """The message an offset message id points at (raises MessageIllegal for a bad id)."""
    decoded = msgids.decode_offset_msg_id(msg_id)
    return store.read_message(decoded.commit_offset)


def by_key(
    store: MessageStore,
    topic: str,
    key: str,
    *,
    max_num: int = 64,
    begin_ms: int = 0,
    end_ms: int = 2**63 - 1,
    unique: bool = False,
) -> KeyQueryResult:
    """Messages of ``topic`` whose ``KEYS`` (or ``UNIQ_KEY`` when ``unique``) contain ``key``."""
    result = KeyQueryResult()
    if store.index is None:
        return result
    if unique:
        max_num = UNIQ_KEY_QUERY_RESULTS_MAX
    seen: set[int] = set()
    upper = end_ms
    for _ in range(QUERY_ROUNDS_MAX):
        found = store.index.query_offsets(topic, key, max_num, begin_ms, upper)
        result.index_last_update_timestamp_ms = found.index_last_update_timestamp_ms
        result.index_last_update_phy_offset = found.index_last_update_phy_offset
        first_ts = -1
        for offset in sorted(found.phy_offsets):
            if offset in seen:
                continue
            seen.add(offset)
            msg = store.read_message(offset)
            if msg is None or msg.topic != topic:
                continue
            if first_ts < 0:
                first_ts = msg.store_timestamp_ms
            if (msg.uniq_key == key) if unique else (key in msg.keys or msg.uniq_key == key):
                result.messages.append(msg)
        if result.messages or first_ts < 0 or first_ts - 1 < begin_ms:
            break
        upper = first_ts - 1
    return result


def by_queue_offset(
    store: MessageStore, topic: str, queue_id: int, queue_offset: int
) -> Message | None:
    cq = store.queues.get(topic, queue_id)
    if cq is None:
        return None
    unit = cq.get_unit(queue_offset)
    if unit is None or unit.size <= 0 or unit.size == 0x7FFFFFFF:
        return None
    return store.read_message(unit.commit_offset)


def offset_by_time(
    store: MessageStore,
    topic: str,
    queue_id: int,
    timestamp_ms: int,
    boundary: Boundary = Boundary.LOWER,
) -> int:
    """Queue offset for a store time (``getOffsetInQueueByTime``), 0 for an unknown queue."""
    cq = store.queues.get(topic, queue_id)
    if cq is None:
        return 0
    return cq.get_offset_in_queue_by_time(
        timestamp_ms,
        boundary,
        store.reads.store_timestamp_at,
        store.reads.min_offset(),
    )


def earliest_store_time(store: MessageStore, topic: str, queue_id: int) -> int:
    """Store time of the message at the queue's min offset, −1 when none."""
    msg = by_queue_offset(store, topic, queue_id, store.min_offset_in_queue(topic, queue_id))
    return msg.store_timestamp_ms if msg is not None else -1
