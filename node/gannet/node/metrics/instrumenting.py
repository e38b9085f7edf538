"""Timing and in-flight counting of gRPC methods, without touching the servicers.

:func:`instrument` returns a stand-in for a servicer whose methods wrap the real ones; the
broker passes the stand-in to ``wire.register`` in place of the servicer. Unary v2 methods are
timed into ``gannet_rpc_duration_seconds{rpc, code}``, where ``code`` is the name of the v2
``Code`` in the response's ``status`` (``OK``, ``TOPIC_NOT_FOUND``, …; ``GRPC_ERROR`` when the
method raised, e.g. a gRPC abort). Streaming methods (ReceiveMessage long polls, the Telemetry
stream) last as long as a client wants, so they are counted in flight but not timed. Requests
that ``wire`` refuses before the servicer runs (undecodable, no client id) are not seen here.

Both label sets are bounded: ``rpc`` by the service's methods, ``code`` by the v2 ``Code``
enum. Label children are cached, so a call costs two clock reads, a dict lookup and three
locked additions.

Called by :mod:`gannet.node.broker.serving` through
:class:`~gannet.node.metrics.broker_metrics.BrokerMetrics`.
"""

from __future__ import annotations

import time
import types
from collections.abc import AsyncIterator, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram
from rocketmq.grpc_protocol import Code

RPC_DURATION_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
RAISED = "GRPC_ERROR"

ProtoMessage = Any  # generated protobuf classes are untyped at this boundary
Method = Callable[..., Any]


def code_name(code: int) -> str:
    """``OK`` for 20000; the number itself for a code this client version does not know."""
    try:
        return str(Code.Name(code))
    except ValueError:
        return str(code)


class RpcMeter:
    """The RPC families of one registry, with cached label children."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.inflight = Gauge(
            "gannet_grpc_inflight_requests",
            "gRPC calls being served now (unary and streaming, client and admin services).",
            registry=registry,
        )
        self.duration = Histogram(
            "gannet_rpc_duration_seconds",
            "Time to answer a unary apache.rocketmq.v2 RPC, by method and v2 status code.",
            ["rpc", "code"],
            buckets=RPC_DURATION_BUCKETS_S,
            registry=registry,
        )
        self._children: dict[tuple[str, int | None], Any] = {}

    def observe(self, rpc: str, code: int | None, seconds: float) -> None:
        """One answered call; ``code`` None when the method raised."""
        key = (rpc, code)
        child = self._children.get(key)
        if child is None:
            label = RAISED if code is None else code_name(code)
            child = self._children[key] = self.duration.labels(rpc, label)
        child.observe(seconds)


def _status_code(response: ProtoMessage) -> int | None:
    status = getattr(response, "status", None)
    return int(status.code) if status is not None else None


def _timed_unary(method: Method, rpc: str, meter: RpcMeter) -> Method:
    async def handle(request: object, context: object) -> ProtoMessage:
        meter.inflight.inc()
        started = time.perf_counter()
        code: int | None = None
        try:
            response = await method(request, context)
            code = _status_code(response)
            return response
        finally:
            meter.observe(rpc, code, time.perf_counter() - started)
            meter.inflight.dec()

    return handle


def _counted_unary(method: Method, meter: RpcMeter) -> Method:
    async def handle(request: object, context: object) -> ProtoMessage:
        with meter.inflight.track_inprogress():
            return await method(request, context)

    return handle


def _counted_stream(method: Method, meter: RpcMeter) -> Method:
    async def handle(request: object, context: object) -> AsyncIterator[ProtoMessage]:
        with meter.inflight.track_inprogress():
            async for response in method(request, context):
                yield response

    return handle


def instrument(servicer: object, service: Any, meter: RpcMeter, *, timed: bool) -> object:
    """A stand-in for ``servicer`` serving every method of ``service`` (a ServiceDescriptor).

    ``timed``: also time the unary methods (the v2 service); otherwise only count in flight.
    """
    methods: dict[str, Method] = {}
    for m in service.methods:
        method = getattr(servicer, m.name)
        if m.server_streaming:
            methods[m.name] = _counted_stream(method, meter)
        elif timed:
            methods[m.name] = _timed_unary(method, m.name, meter)
        else:
            methods[m.name] = _counted_unary(method, meter)
    return types.SimpleNamespace(**methods)
