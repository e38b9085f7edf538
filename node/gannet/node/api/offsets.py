"""GetOffset, UpdateOffset and QueryOffset: consumer offsets of the v2 pull-consumer RPCs.

The Python client does not use them, but the protocol defines them, so they work: GetOffset
answers ``OFFSET_NOT_FOUND`` for a queue the group never committed, UpdateOffset refuses an
offset outside ``[0, max offset]`` (``ILLEGAL_OFFSET``), QueryOffset gives the queue's min or
max offset, or the first offset stored at or after a time.

Functions raising :class:`~gannet.node.protocol.statuses.ApiError`; called by :mod:`messaging`.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.api.resources import Resources
from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.store import querying


def get_offset(
    resources: Resources, request: service_pb2.GetOffsetRequest
) -> service_pb2.GetOffsetResponse:
    config, queue_id = resources.queue(request.message_queue)
    group = resources.group(str(request.group.name))
    offset = resources.store.consumer_offsets.query(group, config.topic_name, queue_id)
    if offset < 0:
        raise ApiError(
            statuses.OFFSET_NOT_FOUND,
            f"group {group!r} has no offset for {config.topic_name}/{queue_id}",
        )
    return service_pb2.GetOffsetResponse(status=statuses.ok(), offset=offset)


def update_offset(
    resources: Resources, request: service_pb2.UpdateOffsetRequest
) -> service_pb2.UpdateOffsetResponse:
    config, queue_id = resources.queue(request.message_queue)
    group = resources.group(str(request.group.name))
    top = resources.store.max_offset_in_queue(config.topic_name, queue_id)
    if not 0 <= request.offset <= top:
        raise ApiError(
            statuses.ILLEGAL_OFFSET,
            f"offset {request.offset} is outside {config.topic_name}/{queue_id} (0..{top})",
        )
    resources.store.consumer_offsets.commit(group, config.topic_name, queue_id, request.offset)
    return service_pb2.UpdateOffsetResponse(status=statuses.ok())


def query_offset(
    resources: Resources, request: service_pb2.QueryOffsetRequest
) -> service_pb2.QueryOffsetResponse:
    config, queue_id = resources.queue(request.message_queue)
    topic, store = config.topic_name, resources.store
    policy = request.query_offset_policy
    if policy == definition_pb2.BEGINNING:
        offset = store.min_offset_in_queue(topic, queue_id)
    elif policy == definition_pb2.END:
        offset = store.max_offset_in_queue(topic, queue_id)
    else:
        ts = request.timestamp
        at_ms = int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000
        offset = querying.offset_by_time(store, topic, queue_id, at_ms)
    return service_pb2.QueryOffsetResponse(status=statuses.ok(), offset=offset)
