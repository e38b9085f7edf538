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

With a :class:`Gate` (``--auth-file``, :mod:`gannet.node.protocol.auth`) every call is
authenticated before it is decoded further and every request (each Telemetry command) is
authorized; refusals are v2 ``UNAUTHORIZED`` / ``FORBIDDEN`` statuses, or for admin RPCs and
the Telemetry stream gRPC ``UNAUTHENTICATED`` / ``PERMISSION_DENIED``. With an ``inflight``
limiter (:mod:`gannet.node.api.limits`) a client past its in-flight cap gets
``TOO_MANY_REQUESTS`` (admin: ``RESOURCE_EXHAUSTED``).

Called by :mod:`gannet.node.broker.serving`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import Code

from gannet.node.api import limits
from gannet.node.protocol import statuses

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
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, statuses.bounded(bad.text()))


async def _stream_guard(
    requests: AsyncIterator[object],
    context: grpc.aio.ServicerContext,
    authorize: Callable[[object], None] | None = None,
) -> AsyncIterator[object]:
    async for request in requests:
        if isinstance(request, Malformed):
            await _abort_invalid(context, request)
            return
        if authorize is not None:
            try:
                authorize(request)
            except statuses.ApiError as refused:
                await context.abort(_grpc_code(refused.code), statuses.bounded(refused.message))
                return
        yield request


class Gate(Protocol):
    """Authentication and authorization (:class:`gannet.node.protocol.auth.WireGate`).

    Both raise :class:`~gannet.node.protocol.statuses.ApiError` to refuse."""

    def authenticate(self, metadata: Iterable[tuple[str, str]]) -> object: ...

    def authorize(self, account: object, method: str, request: object) -> None: ...


_GRPC_CODES = {
    Code.UNAUTHORIZED: grpc.StatusCode.UNAUTHENTICATED,
    statuses.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    statuses.TOO_MANY_REQUESTS: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def _grpc_code(code: int) -> grpc.StatusCode:
    """The gRPC status for a refusal where no v2 status can carry it."""
    return _GRPC_CODES.get(code, grpc.StatusCode.INVALID_ARGUMENT)


def _metadata(context: grpc.aio.ServicerContext) -> list[tuple[str, str]]:
    return [(str(k), str(v)) for k, v in context.invocation_metadata() or ()]


@dataclass(frozen=True, slots=True)
class Rules:
    """How a service answers requests it refuses before the servicer sees them."""

    v2_status: bool
    """True: a v2 response with a ``status``; False: a gRPC INVALID_ARGUMENT."""
    client_id_header: str | None = None
    """A metadata key every request must carry non-blank (v2: ``x-mq-client-id``)."""
    gate: Gate | None = None
    """Authenticates and authorizes every call; None: open broker."""
    inflight: limits.InflightPerClient | None = None
    """Caps requests in flight per ``client_id_header`` value; None: no per-client cap."""


def _refusal(
    request: object,
    context: grpc.aio.ServicerContext,
    rules: Rules,
    method: str = "",
    client_id: str | None = None,
) -> statuses.ApiError | None:
    """Why the request is refused before the servicer runs, or None.

    Order: authentication (before anything about the request is revealed), decoding, client
    id, authorization. ``client_id``: the header's value when the caller read it already."""
    try:
        account = _authenticated(context, rules)
    except statuses.ApiError as refused:
        return refused
    return _checked(request, context, rules, method, account, client_id)


def _authenticated(context: grpc.aio.ServicerContext, rules: Rules) -> object:
    """The caller's account (None without a gate); raises ApiError to refuse."""
    if rules.gate is None:
        return None
    return rules.gate.authenticate(_metadata(context))


def _checked(
    request: object,
    context: grpc.aio.ServicerContext,
    rules: Rules,
    method: str,
    account: object,
    client_id: str | None = None,
) -> statuses.ApiError | None:
    """The checks after authentication; ``request`` None (a stream's start): no authorization.
    ``client_id``: the header's value when the caller read it already (None: read it here)."""
    if isinstance(request, Malformed):
        return statuses.ApiError(statuses.BAD_REQUEST, request.text())
    header = rules.client_id_header
    if header is not None and not (
        client_id if client_id is not None else _client_id(context, header)
    ):
        return statuses.ApiError(
            statuses.CLIENT_ID_REQUIRED,
            f"the {rules.client_id_header} header is missing or blank; RocketMQ clients send it",
        )
    if rules.gate is not None and request is not None:
        try:
            rules.gate.authorize(account, method, request)
        except statuses.ApiError as refused:
            return refused
    return None


def _client_id(context: grpc.aio.ServicerContext, header: str) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == header and str(value).strip():
            return str(value)
    return ""


class _Admitted:
    """Holds one per-client in-flight slot for the duration of a call (``with``)."""

    def __init__(self, rules: Rules, client_id: str) -> None:
        self._limiter = rules.inflight
        self._client = client_id
        if self._limiter is not None:
            self._limiter.acquire(client_id)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        if self._limiter is not None:
            self._limiter.release(self._client)


def _reads_client_id(rules: Rules) -> bool:
    """Whether admission needs the client id header: it is required, or the limiter keys on it."""
    return rules.client_id_header is not None or rules.inflight is not None


def _admission(
    request: object, context: grpc.aio.ServicerContext, rules: Rules, name: str
) -> _Admitted | statuses.ApiError:
    """An in-flight slot for the call, or why it is refused. The metadata is read once for the
    client id (a per-call cost the limiter and the header check share)."""
    client_id = _client_id(context, rules.client_id_header or "") if _reads_client_id(rules) else ""
    refused = _refusal(request, context, rules, name, client_id)
    if refused is not None:
        return refused
    try:
        return _Admitted(rules, client_id)
    except statuses.ApiError as busy:
        return busy


async def _refused_answer(
    refused: statuses.ApiError,
    context: grpc.aio.ServicerContext,
    rules: Rules,
    out: type[ProtoMessage],
) -> ProtoMessage:
    """The answer to a refused call: a v2 status in ``out``, or a gRPC abort for a service
    without one (``rules.v2_status`` false; the abort raises)."""
    if not rules.v2_status:
        await context.abort(_grpc_code(refused.code), statuses.bounded(refused.message))
    return out(status=refused.status())


def _unary(
    method: Callable[..., Any], out: type[ProtoMessage], rules: Rules, name: str
) -> Callable[..., Any]:
    async def handle(request: object, context: grpc.aio.ServicerContext) -> ProtoMessage:
        admitted = _admission(request, context, rules, name)
        if isinstance(admitted, statuses.ApiError):
            return await _refused_answer(admitted, context, rules, out)
        with admitted:
            return await method(request, context)

    return handle


def _server_stream(
    method: Callable[..., Any], out: type[ProtoMessage], rules: Rules, name: str
) -> Callable[..., Any]:
    async def handle(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        admitted = _admission(request, context, rules, name)
        if isinstance(admitted, statuses.ApiError):
            yield await _refused_answer(admitted, context, rules, out)
            return
        with admitted:
            async for response in method(request, context):
                yield response

    return handle


def _bidi(method: Callable[..., Any], rules: Rules, name: str) -> Callable[..., Any]:
    async def handle(requests: AsyncIterator[object], context: grpc.aio.ServicerContext) -> Any:
        account: object = None
        try:
            account = _authenticated(context, rules)
            refused = _checked(None, context, rules, name, account)
        except statuses.ApiError as error:
            refused = error
        if refused is not None:
            await context.abort(_grpc_code(refused.code), statuses.bounded(refused.message))
        authorize = _command_authorizer(rules.gate, account, name)
        async for response in method(_stream_guard(requests, context, authorize), context):
            yield response

    return handle


def _command_authorizer(
    gate: Gate | None, account: object, name: str
) -> Callable[[object], None] | None:
    """Authorizes each command of a stream authenticated once at its start (not again: the
    stream's one set of headers would count as a replay)."""
    if gate is None:
        return None

    def authorize(command: object) -> None:
        gate.authorize(account, name, command)

    return authorize


def register(server: grpc.aio.Server, service: Any, servicer: object, rules: Rules) -> None:
    """Serve every method of ``service`` (a ServiceDescriptor) from ``servicer``."""
    handlers = {}
    for m in service.methods:
        request_cls = message_factory.GetMessageClass(m.input_type)
        response_cls = message_factory.GetMessageClass(m.output_type)
        decode = _decoder(request_cls, m.input_type.full_name)
        method = getattr(servicer, m.name)
        if m.client_streaming and m.server_streaming:
            behaviour = _bidi(method, rules, m.name)
            handler = grpc.stream_stream_rpc_method_handler(behaviour, decode, _encoder)
        elif m.client_streaming:
            raise TypeError(f"{m.full_name}: client-streaming methods have no wire handler")
        elif m.server_streaming:
            behaviour = _server_stream(method, response_cls, rules, m.name)
            handler = grpc.unary_stream_rpc_method_handler(behaviour, decode, _encoder)
        else:
            behaviour = _unary(method, response_cls, rules, m.name)
            handler = grpc.unary_unary_rpc_method_handler(behaviour, decode, _encoder)
        handlers[m.name] = handler
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
