"""QueryMessage: find stored messages by message id, key, queue offset or store time.

* message id — the client's id (34 hex digits, stored as ``UNIQ_KEY``) through the index; an
  offset message id (32 or 56 hex digits) is decoded to a commit-log offset, falling back to the
  index when it does not decode;
* key — a ``KEYS`` token through the index;
* queue offset — one consume-queue entry;
* time — per queue, from the first entry stored at or after ``begin_ms`` while the store time
  stays at or below ``end_ms``.

At most ``max_count`` (default :data:`RESULTS_DEFAULT`, cap :data:`RESULTS_MAX`) messages.
Called by :mod:`admin` in a worker thread.
"""

from __future__ import annotations

from gannet.node.protocol.gen import admin_pb2
from gannet.node.store import errors, querying
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.consume_queues import Boundary

RESULTS_DEFAULT = 32
RESULTS_MAX = 64
CLIENT_MESSAGE_ID_CHARS = 34


def query(store: MessageStore, request: admin_pb2.QueryMessageRequest) -> list[Message]:
    limit = min(request.max_count or RESULTS_DEFAULT, RESULTS_MAX)
    topic = request.topic
    by = request.WhichOneof("by")
    if by == "message_id":
        return _by_message_id(store, topic, request.message_id)[:limit]
    if by == "key":
        return querying.by_key(store, topic, request.key, max_num=limit).messages[:limit]
    if by == "queue_offset":
        ref = request.queue_offset
        found = querying.by_queue_offset(store, topic, ref.queue_id, ref.offset)
        return [found] if found is not None else []
    if by == "time":
        return _by_time(store, topic, request.time.begin_ms, request.time.end_ms, limit)
    raise errors.MessageIllegal("give one of message_id, key, queue_offset or time")


def _by_message_id(store: MessageStore, topic: str, message_id: str) -> list[Message]:
    if len(message_id) != CLIENT_MESSAGE_ID_CHARS:
        try:
            found = querying.by_offset_msg_id(store, message_id)
        except errors.MessageIllegal:
            found = None
        if found is not None and found.topic == topic:
            return [found]
    return querying.by_key(store, topic, message_id, unique=True).messages


def _by_time(
    store: MessageStore, topic: str, begin_ms: int, end_ms: int, limit: int
) -> list[Message]:
    found: list[Message] = []
    for cq in sorted(store.queues.queues(), key=lambda q: q.queue_id):
        if cq.topic != topic:
            continue
        offset = querying.offset_by_time(store, topic, cq.queue_id, begin_ms, Boundary.LOWER)
        top = store.max_offset_in_queue(topic, cq.queue_id)
        while offset < top and len(found) < limit:
            msg = querying.by_queue_offset(store, topic, cq.queue_id, offset)
            offset += 1
            if msg is None or msg.store_timestamp_ms < begin_ms:
                continue
            if msg.store_timestamp_ms > end_ms:
                break
            found.append(msg)
    return found
