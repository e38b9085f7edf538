"""v2 status codes and the one exception type request handlers raise.

Business errors travel inside v2 responses as ``Status{code, message}`` with gRPC status OK
(``docs/protocol.md`` §2); every unary response carries a non-zero code. Handlers raise
:class:`ApiError`; the servicer turns it into the response's ``status``. Store errors are mapped
by type in :mod:`gannet.node.api.store_statuses`, so a message that names the field reaches the
client; this module knows nothing of the store.

Called by the servicers (:mod:`gannet.node.api.messaging`, ``sending``, ``routes``, ``admin``),
by request signing and by the CLI.
"""

from __future__ import annotations

import re
from typing import NoReturn

import grpc
import grpc.aio
from rocketmq.grpc_protocol import Code, Status

OK: int = Code.OK
BAD_REQUEST: int = Code.BAD_REQUEST
ILLEGAL_TOPIC: int = Code.ILLEGAL_TOPIC
ILLEGAL_CONSUMER_GROUP: int = Code.ILLEGAL_CONSUMER_GROUP
ILLEGAL_MESSAGE_TAG: int = Code.ILLEGAL_MESSAGE_TAG
ILLEGAL_MESSAGE_KEY: int = Code.ILLEGAL_MESSAGE_KEY
ILLEGAL_MESSAGE_GROUP: int = Code.ILLEGAL_MESSAGE_GROUP
ILLEGAL_MESSAGE_PROPERTY_KEY: int = Code.ILLEGAL_MESSAGE_PROPERTY_KEY
ILLEGAL_MESSAGE_ID: int = Code.ILLEGAL_MESSAGE_ID
ILLEGAL_DELIVERY_TIME: int = Code.ILLEGAL_DELIVERY_TIME
ILLEGAL_OFFSET: int = Code.ILLEGAL_OFFSET
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: int = Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
UNRECOGNIZED_CLIENT_TYPE: int = Code.UNRECOGNIZED_CLIENT_TYPE
CLIENT_ID_REQUIRED: int = Code.CLIENT_ID_REQUIRED
MESSAGE_CORRUPTED: int = Code.MESSAGE_CORRUPTED
NOT_FOUND: int = Code.NOT_FOUND
MESSAGE_NOT_FOUND: int = Code.MESSAGE_NOT_FOUND
TOPIC_NOT_FOUND: int = Code.TOPIC_NOT_FOUND
CONSUMER_GROUP_NOT_FOUND: int = Code.CONSUMER_GROUP_NOT_FOUND
OFFSET_NOT_FOUND: int = Code.OFFSET_NOT_FOUND
PAYLOAD_TOO_LARGE: int = Code.PAYLOAD_TOO_LARGE
MESSAGE_BODY_TOO_LARGE: int = Code.MESSAGE_BODY_TOO_LARGE
MESSAGE_BODY_EMPTY: int = Code.MESSAGE_BODY_EMPTY
MESSAGE_PROPERTIES_TOO_LARGE: int = Code.MESSAGE_PROPERTIES_TOO_LARGE
FORBIDDEN: int = Code.FORBIDDEN
TOO_MANY_REQUESTS: int = Code.TOO_MANY_REQUESTS
INTERNAL_SERVER_ERROR: int = Code.INTERNAL_SERVER_ERROR
NOT_IMPLEMENTED: int = Code.NOT_IMPLEMENTED
MASTER_PERSISTENCE_TIMEOUT: int = Code.MASTER_PERSISTENCE_TIMEOUT
UNSUPPORTED: int = Code.UNSUPPORTED


MESSAGE_CHARS_MAX = 1024
"""Longest error text sent to a client (v2 ``Status.message``, admin gRPC details)."""
QUOTED_CHARS_MAX = 64
"""Longest run of a caller's value (a name, a tag, a handle) an error text repeats."""
_LONG_QUOTED = re.compile(
    rf"'[^'\s]{{{QUOTED_CHARS_MAX + 1},}}'|\"[^\"\s]{{{QUOTED_CHARS_MAX + 1},}}\""
)
_LONG_WORD = re.compile(rf"\S{{{4 * QUOTED_CHARS_MAX},}}")


def _shorten(match: re.Match[str]) -> str:
    text = match.group(0)
    quote = text[0] if text[0] in "'\"" else ""
    inner = text[1:-1] if quote else text
    return f"{quote}{inner[:QUOTED_CHARS_MAX]}{quote}… ({len(inner)} characters)"


def bounded(message: str) -> str:
    """``message`` with every long quoted value (no white space inside: explanatory text
    between two quoted values is never taken for one) or long word cut to a prefix and its length,
    and the whole at most :data:`MESSAGE_CHARS_MAX` characters: a 20,000-character name must
    not turn an answer into a metadata-size failure (gRPC caps headers near 8 KiB)."""
    if len(message) <= QUOTED_CHARS_MAX:
        return message
    message = _LONG_WORD.sub(_shorten, _LONG_QUOTED.sub(_shorten, message))
    if len(message) > MESSAGE_CHARS_MAX:
        message = f"{message[: MESSAGE_CHARS_MAX - 40]}… ({len(message)} characters)"
    return message


class ApiError(Exception):
    """A request that cannot be served; ``code`` is a v2 ``Code``, ``message`` names the field
    (cut with :func:`bounded`)."""

    def __init__(self, code: int, message: str) -> None:
        message = bounded(message)
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> Status:
        return Status(code=self.code, message=self.message)


def ok() -> Status:
    return Status(code=OK, message="OK")


def code_name(code: int) -> str:
    """``"TOPIC_NOT_FOUND"`` for 40402; the number itself for an unknown code."""
    try:
        return str(Code.Name(code))
    except ValueError:
        return str(code)


POP_NOT_SERVED = (
    "Pop consumption (ReceiveMessage, AckMessage, ChangeInvisibleDuration, "
    "ForwardMessageToDeadLetterQueue) is not served by this broker yet"
)


async def abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with gRPC status ``code`` and ``message`` :func:`bounded` (the admin
    services, which answer with gRPC codes instead of a v2 status); never returns."""
    await context.abort(code, bounded(message))
    raise AssertionError("context.abort returned")
