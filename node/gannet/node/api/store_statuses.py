"""The v2 answer to a store error: store exceptions mapped by type to a ``Code`` and a message.

The store raises its own exceptions (:mod:`gannet.node.store.errors`); the v2 servicers answer
them with :func:`from_store_error`, so a message that names the field reaches the client. Kept
apart from :mod:`statuses` (the v2 codes and :class:`~statuses.ApiError`), which knows nothing
of the store and is shared with request signing and the CLI.

Called by :mod:`gannet.node.api.messaging`, :mod:`gannet.node.api.receiving` and
:mod:`gannet.node.api.pulling`.
"""

from __future__ import annotations

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
    if isinstance(exc, errors.DiskFull):
        # The broker's SERVICE_NOT_AVAILABLE, which RocketMQ's proxy answers as
        # INTERNAL_SERVER_ERROR; clients retry it. The text names the disk ratio.
        return ApiError(INTERNAL_SERVER_ERROR, f"service not available now: {exc}")
    return ApiError(INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
