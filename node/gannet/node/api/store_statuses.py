"""The v2 answer to a store error: store exceptions mapped by type to a ``Code`` and a message.

The store raises its own exceptions (:mod:`gannet.node.store.errors`); the v2 servicers answer
them with :func:`from_store_error`, so a message that names the field reaches the client. Kept
apart from :mod:`statuses` (the v2 codes and :class:`~statuses.ApiError`), which knows nothing
of the store and is shared with request signing and the CLI.

Called by :mod:`gannet.node.api.messaging`, :mod:`gannet.node.api.receiving` and
:mod:`gannet.node.api.pulling`.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import Code

from gannet.node.protocol.statuses import (
    BAD_REQUEST,
    ILLEGAL_CONSUMER_GROUP,
    ILLEGAL_TOPIC,
    INTERNAL_SERVER_ERROR,
    MASTER_PERSISTENCE_TIMEOUT,
    MESSAGE_BODY_TOO_LARGE,
    MESSAGE_PROPERTIES_TOO_LARGE,
    ApiError,
)
from gannet.node.store import errors
from gannet.node.store.tier.errors import TierUnavailable

HA_NOT_AVAILABLE: int = Code.HA_NOT_AVAILABLE

# Most specific first: the first type the error is an instance of gives its code.
_CODES: tuple[tuple[type[errors.StoreError], int], ...] = (
    (errors.TopicNameIllegal, ILLEGAL_TOPIC),
    (errors.GroupNameIllegal, ILLEGAL_CONSUMER_GROUP),
    (errors.PropertiesTooLarge, MESSAGE_PROPERTIES_TOO_LARGE),
    (errors.MessageTooLarge, MESSAGE_BODY_TOO_LARGE),
)


def from_store_error(exc: errors.StoreError, *, illegal_code: int = BAD_REQUEST) -> ApiError:
    """The v2 answer to a store error; ``illegal_code`` is used for a plain MessageIllegal."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return ApiError(code, str(exc))
    if isinstance(exc, errors.MessageIllegal):
        return ApiError(illegal_code, str(exc))
    if isinstance(exc, errors.FlushTimeout):
        return ApiError(MASTER_PERSISTENCE_TIMEOUT, str(exc))
    if isinstance(exc, TierUnavailable):
        # A read of an offloaded offset while the bucket is down or busy: the retryable
        # "not available" code (RocketMQ's SLAVE_NOT_AVAILABLE), as for a member without a
        # reachable leader (routes.replication_refusal). The text names the offset and bucket.
        return ApiError(HA_NOT_AVAILABLE, f"tier not available now, retry: {exc}")
    if isinstance(exc, errors.DiskFull):
        # The broker's SERVICE_NOT_AVAILABLE, which RocketMQ's proxy answers as
        # INTERNAL_SERVER_ERROR; clients retry it. The text names the disk ratio.
        return ApiError(INTERNAL_SERVER_ERROR, f"service not available now: {exc}")
    return ApiError(INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
