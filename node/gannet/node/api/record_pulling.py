"""Admin ``PullRecords``: one queue read in bulk, answered with the stored records themselves.

The Spark data source ``gannet`` (:mod:`gannet.pipeline.reading`) reads through this RPC
rather than v2 PullMessage, whose answer is a stream of one frame per message, each a
``Message`` built field by field (per message: a record decode, a protobuf object, a gRPC
frame on the broker, and again on the reader). Here the broker reads the same range the same
way (:meth:`gannet.node.api.pulling.PullHandler.get`: committed messages only, the same
validation, offsets, long polling and limits) and answers with the commit-log records
concatenated as stored, in one message; the reader parses them into Arrow columns in bulk
(:func:`gannet.pipeline.columns.records_chunk`).

* ``messages_max`` (>= 1) is capped at :attr:`PullLimits.batch_messages_max`, ``bytes_max``
  (0: the cap) at :attr:`PullLimits.batch_bytes_max`; the reply holds at least one record
  when any is there. ``next_offset`` is where to read next (past filtered-out units too).
* Without a tag expression the store reads the range in bulk
  (:func:`gannet.node.store.queues.reading.read_queue_records`: the consume-queue units as one
  byte string, records that follow each other in the commit log copied as one slice), with the
  same units, statuses and bounds as PullMessage; no record is decoded.
* A tag expression is applied by tag hash in the store; records whose tag only collides are
  decoded and dropped here (the only per-record decode, and only with a filter).
* Errors are gRPC status codes (the admin API's model): NOT_FOUND (topic, group),
  PERMISSION_DENIED (not readable), INVALID_ARGUMENT (queue id, limits, filter), OUT_OF_RANGE
  (offset outside the queue; the message names the range), RESOURCE_EXHAUSTED (waiting pulls
  at their limit), UNAVAILABLE (an offloaded offset while the bucket is down or every tier
  fetch slot is taken: retry, as the admin API answers it elsewhere).

Called by :meth:`gannet.node.api.admin.AdminServicer.PullRecords` with the broker's v2 servicer
(whose :class:`~gannet.node.api.pulling.PullHandler` wakes waiting pulls).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
from rocketmq.grpc_protocol import Code, definition_pb2

from gannet.node.api import filters, pulling
from gannet.node.pop.filtering import TagFilter
from gannet.node.protocol import statuses
from gannet.node.protocol.gen import admin_pb2
from gannet.node.protocol.statuses import ApiError
from gannet.node.store.log import records

if TYPE_CHECKING:
    from gannet.node.api.messaging import MessagingServicer

_GRPC_CODES = {
    Code.TOPIC_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.CONSUMER_GROUP_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    Code.ILLEGAL_OFFSET: grpc.StatusCode.OUT_OF_RANGE,
    Code.TOO_MANY_REQUESTS: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Code.INTERNAL_SERVER_ERROR: grpc.StatusCode.INTERNAL,
    Code.HA_NOT_AVAILABLE: grpc.StatusCode.UNAVAILABLE,
}


def grpc_code(v2_code: int) -> grpc.StatusCode:
    """The admin API's status code for a v2 code (bad input of any kind: INVALID_ARGUMENT)."""
    return _GRPC_CODES.get(v2_code, grpc.StatusCode.INVALID_ARGUMENT)


async def pull_records(
    servicer: MessagingServicer,
    request: admin_pb2.PullRecordsRequest,
    context: grpc.aio.ServicerContext,
) -> admin_pb2.PullRecordsResponse:
    """The reply to one PullRecords (see the module docstring); aborts the call on errors."""
    try:
        return await _pull(servicer, request, context)
    except Exception as exc:  # every failure becomes a status, as in PullMessage
        error = pulling.api_error(exc)
        await context.abort(grpc_code(error.code), f"PullRecords: {error.message}")
        raise AssertionError("unreachable: abort raises") from None


async def _pull(
    servicer: MessagingServicer,
    request: admin_pb2.PullRecordsRequest,
    context: grpc.aio.ServicerContext,
) -> admin_pb2.PullRecordsResponse:
    handler = pulling.handler_of(servicer)
    limits = handler.limits
    if request.group:
        servicer.resources.group(str(request.group))
    queue = definition_pb2.MessageQueue(
        topic=definition_pb2.Resource(name=request.topic), id=request.queue_id
    )
    config, queue_id = servicer.resources.queue(queue)
    if not config.readable:
        raise ApiError(statuses.FORBIDDEN, f"topic {config.topic_name!r} is not readable")
    if request.messages_max <= 0 or request.bytes_max < 0:
        raise ApiError(
            statuses.BAD_REQUEST,
            f"messages_max {request.messages_max} must be >= 1 and bytes_max "
            f"{request.bytes_max} >= 0 (0: the broker's cap)",
        )
    expression = str(request.tag_expression).strip() or "*"
    tag_filter = filters.filter_of(
        definition_pb2.FilterExpression(type=definition_pb2.TAG, expression=expression)
    )
    wanted = min(int(request.messages_max), limits.batch_messages_max)
    bytes_max = min(int(request.bytes_max) or limits.batch_bytes_max, limits.batch_bytes_max)
    wait_ms = max(0, min(int(request.polling_ms), limits.polling_ms_max))
    remaining_s = context.time_remaining()
    if remaining_s is not None:
        wait_ms = min(wait_ms, max(int(remaining_s * 1000) - limits.deadline_margin_ms, 0))
    check_tags = not (isinstance(tag_filter, TagFilter) and tag_filter.matches_all)
    if not check_tags:  # in bulk: the records as stored, one slice per run of them
        got = await handler.get(
            config.topic_name, queue_id, int(request.offset), wanted, tag_filter, wait_ms, bytes_max
        )
        return admin_pb2.PullRecordsResponse(
            records=got.records,
            count=got.records_count,
            next_offset=got.next_begin_offset,
            min_offset=got.min_offset,
            max_offset=got.max_offset,
        )
    got = await handler.get(
        config.topic_name, queue_id, int(request.offset), wanted, tag_filter, wait_ms
    )
    kept: list[bytes] = []
    size_bytes = 0
    next_offset = got.next_begin_offset
    for stored in got.messages:
        if kept and size_bytes + len(stored.data) > bytes_max:
            next_offset = stored.queue_offset
            break
        size_bytes += len(stored.data)
        if check_tags and not tag_filter.matches_message(records.decode(stored.data)):
            continue  # a tag-hash collision: not really wanted
        kept.append(stored.data)
    return admin_pb2.PullRecordsResponse(
        records=b"".join(kept),
        count=len(kept),
        next_offset=next_offset,
        min_offset=got.min_offset,
        max_offset=got.max_offset,
    )
