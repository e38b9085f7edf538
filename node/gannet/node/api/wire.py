"""Registering servicers so that a malformed request is answered, not crashed on.

gRPC's generated registration decodes each request before the servicer runs; undecodable bytes
then end as gRPC ``UNKNOWN`` with a logged traceback. :func:`register` builds the handlers from
the service descriptor instead, with a decoder that turns bad bytes into a :class:`Malformed`
marker, and answers it itself:

* v2 unary RPCs → the response with ``status{BAD_REQUEST, "request is not a valid …"}``;
  server-streaming RPCs → one such status frame;
* the Telemetry stream, and every admin RPC → gRPC ``INVALID_ARGUMENT``.

The same path refuses v2 requests without an ``x-mq-client-id`` header with
``CLIENT_ID_REQUIRED``, as the proxy's ``validateContext`` does (every official client sends
one).

Called by :mod:`gannet.node.broker.serving`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError

from gannet.node.api import statuses

ProtoMessage = Any  # generated protobuf classes are untyped at this boundary


@dataclass(frozen=True, slots=True)
class Malformed:
    """Bytes that did not decode as the method's request type."""

    type_name: str
    reason: str

    def text(self) -> str:
        return f"request is not a valid {self.type_name}: {self.reason}"


def _decoder(cls: type[ProtoMessage], type_name: str) -> Callable[[bytes], object]:
    def decode(data: bytes) -> object:
        try:
            return cls.FromString(data)
        except DecodeError as exc:
            return Malformed(type_name, str(exc))

    return decode


def _encoder(message: ProtoMessage) -> bytes:
    return bytes(message.SerializeToString())


async def _abort_invalid(context: grpc.aio.ServicerContext, bad: Malformed) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bad.text())


async def _stream_guard(
    requests: AsyncIterator[object], context: grpc.aio.ServicerContext
) -> AsyncIterator[object]:
    async for request in requests:
        if isinstance(request, Malformed):
            await _abort_invalid(context, request)
            return
        yield request


@dataclass(frozen=True, slots=True)
class Rules:
    """How a service answers requests it refuses before the servicer sees them."""

    v2_status: bool
    """True: a v2 response with a ``status``; False: a gRPC INVALID_ARGUMENT."""
    client_id_header: str | None = None
    """A metadata key every request must carry non-blank (v2: ``x-mq-client-id``)."""


def _refusal(
    request: object, context: grpc.aio.ServicerContext, rules: Rules
) -> statuses.ApiError | None:
    """Why the request is refused before the servicer runs, or None."""
    if isinstance(request, Malformed):
        return statuses.ApiError(statuses.BAD_REQUEST, request.text())
    if rules.client_id_header is not None:
        for key, value in context.invocation_metadata() or ():
            if key == rules.client_id_header and str(value).strip():
                return None
        return statuses.ApiError(
            statuses.CLIENT_ID_REQUIRED,
            f"the {rules.client_id_header} header is missing or blank; RocketMQ clients send it",
        )
    return None


def _unary(method: Callable[..., Any], out: type[ProtoMessage], rules: Rules) -> Callable[..., Any]:
    async def handle(request: object, context: grpc.aio.ServicerContext) -> ProtoMessage:
        refused = _refusal(request, context, rules)
        if refused is not None:
            if not rules.v2_status:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.message)
            return out(status=refused.status())
        return await method(request, context)

    return handle


def _server_stream(
    method: Callable[..., Any], out: type[ProtoMessage], rules: Rules
) -> Callable[..., Any]:
    async def handle(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        refused = _refusal(request, context, rules)
        if refused is not None:
            if not rules.v2_status:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.message)
            yield out(status=refused.status())
            return
        async for response in method(request, context):
            yield response

    return handle


def _bidi(method: Callable[..., Any], rules: Rules) -> Callable[..., Any]:
    async def handle(requests: AsyncIterator[object], context: grpc.aio.ServicerContext) -> Any:
        refused = _refusal(None, context, rules)
        if refused is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.message)
        async for response in method(_stream_guard(requests, context), context):
            yield response

    return handle


def register(server: grpc.aio.Server, service: Any, servicer: object, rules: Rules) -> None:
    """Serve every method of ``service`` (a ServiceDescriptor) from ``servicer``."""
    handlers = {}
    for m in service.methods:
        request_cls = message_factory.GetMessageClass(m.input_type)
        response_cls = message_factory.GetMessageClass(m.output_type)
        decode = _decoder(request_cls, m.input_type.full_name)
        method = getattr(servicer, m.name)
        if m.client_streaming and m.server_streaming:
            handler = grpc.stream_stream_rpc_method_handler(_bidi(method, rules), decode, _encoder)
        elif m.client_streaming:
            raise TypeError(f"{m.full_name}: client-streaming methods have no wire handler")
        elif m.server_streaming:
            behaviour = _server_stream(method, response_cls, rules)
            handler = grpc.unary_stream_rpc_method_handler(behaviour, decode, _encoder)
        else:
            behaviour = _unary(method, response_cls, rules)
            handler = grpc.unary_unary_rpc_method_handler(behaviour, decode, _encoder)
        handlers[m.name] = handler
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
