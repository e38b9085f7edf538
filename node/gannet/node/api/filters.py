"""The v2 answer to Pop's own errors, and a request's ``FilterExpression`` compiled to the Pop
filter (TAG or SQL92), with an illegal expression answered ``ILLEGAL_FILTER_EXPRESSION``.

Shared by the request handlers that take a filter or call Pop: :mod:`receiving` (ReceiveMessage
and acks), :mod:`pulling` (PullMessage) and :mod:`client_settings` (Telemetry subscriptions), so
none of them imports another for it.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import Code, definition_pb2

from gannet.node.pop import errors as pop_errors
from gannet.node.pop import filtering
from gannet.node.pop.filtering import MessageFilter
from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError


def pop_error(exc: pop_errors.PopError) -> ApiError:
    """The v2 answer to a Pop error (each class's docstring names its code)."""
    text = str(exc)
    if isinstance(exc, pop_errors.FilterExpressionIllegal):
        return ApiError(Code.ILLEGAL_FILTER_EXPRESSION, text)
    if isinstance(exc, pop_errors.InvisibleTimeIllegal):
        return ApiError(Code.ILLEGAL_INVISIBLE_TIME, text)
    if isinstance(exc, pop_errors.ReceiptHandleIllegal | pop_errors.AlreadyAcked):
        return ApiError(Code.INVALID_RECEIPT_HANDLE, text)
    if isinstance(exc, pop_errors.UnknownTopicOrGroup):
        return ApiError(statuses.TOPIC_NOT_FOUND, text)
    if isinstance(exc, pop_errors.PopBusy):
        return ApiError(statuses.TOO_MANY_REQUESTS, text)
    if isinstance(exc, pop_errors.PopRequestIllegal):
        return ApiError(statuses.BAD_REQUEST, text)
    return ApiError(statuses.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {text}")


def filter_of(expression: definition_pb2.FilterExpression) -> MessageFilter:
    """The compiled filter of a request's expression (SQL92 when its type says so, else TAG)."""
    kind = (
        filtering.ExpressionType.SQL92
        if expression.type == definition_pb2.SQL
        else filtering.ExpressionType.TAG
    )
    try:
        return filtering.parse(str(expression.expression), kind)
    except pop_errors.PopError as exc:
        raise pop_error(exc) from None
