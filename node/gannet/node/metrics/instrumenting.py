"""Timing and in-flight counting of gRPC methods, without touching the servicers.

:func:`instrument` returns a stand-in for a servicer whose methods wrap the real ones; the
broker passes the stand-in to ``wire.register`` in place of the servicer. Unary v2 methods are
timed into ``gannet_rpc_duration_seconds{rpc, code}``, where ``code`` is the name of the v2
``Code`` in the response's ``status`` (``OK``, ``TOPIC_NOT_FOUND``, …; ``GRPC_ERROR`` when the
method raised, e.g. a gRPC abort). Streaming methods (ReceiveMessage long polls, the Telemetry
stream) last as long as a client wants, so they are counted in flight but not timed. Requests
that ``wire`` refuses before the servicer runs (undecodable, no client id) are not seen here.

Both label sets are bounded: ``rpc`` by the service's methods, ``code`` by the v2 ``Code``
enum. Label children are cached and the figures are :mod:`tallies` (no locks: every servicer
method runs on the broker's event-loop thread), so a call costs two clock reads, a dict lookup
and a bisect — about 1.5 µs.

Called by :mod:`gannet.node.broker.serving` through
:class:`~gannet.node.metrics.broker_metrics.BrokerMetrics`.
"""

from __future__ import annotations

import time
import types
from collections.abc import AsyncIterator, Callable
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from gannet.node.metrics import tallies
from gannet.node.protocol import statuses

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


class RpcMeter:
    """The RPC figures of one broker, kept as :mod:`tallies` (event-loop thread only).

    Registered on a registry as a collector: :meth:`collect` builds the families at scrape time.
    """

    def __init__(self) -> None:
        self.inflight = 0
        self.inflight_max: int | None = None
        """The server's concurrent-RPC limit (beyond it gRPC answers RESOURCE_EXHAUSTED)."""
        self._durations = tallies.LabelledHistograms(
            "gannet_rpc_duration_seconds",
            "Time to answer a unary apache.rocketmq.v2 RPC, by method and v2 status code.",
            ("rpc", "code"),
            RPC_DURATION_BUCKETS_S,
        )
        self._children: dict[tuple[str, int | None], tallies.HistogramTally] = {}

    def observe(self, rpc: str, code: int | None, seconds: float) -> None:
        """One answered call; ``code`` None when the method raised."""
        key = (rpc, code)
        child = self._children.get(key)
        if child is None:
            label = RAISED if code is None else statuses.code_name(code)
            child = self._children[key] = self._durations.child(rpc, label)
        child.observe(seconds)

    def collect(self) -> list[Metric]:
        inflight = GaugeMetricFamily(
            "gannet_grpc_inflight_requests",
            "gRPC calls being served now (unary and streaming, client and admin services).",
            value=self.inflight,
        )
        found: list[Metric] = [inflight, self._durations.family()]
        if self.inflight_max is not None:
            limit = GaugeMetricFamily(
                "gannet_grpc_inflight_requests_limit",
                "Concurrent gRPC calls the server accepts; more are refused RESOURCE_EXHAUSTED.",
                value=self.inflight_max,
            )
            found.append(limit)
        return found


def _status_code(response: ProtoMessage) -> int | None:
    status = getattr(response, "status", None)
    return int(status.code) if status is not None else None


def _timed_unary(method: Method, rpc: str, meter: RpcMeter) -> Method:
    async def handle(request: object, context: object) -> ProtoMessage:
        meter.inflight += 1
        started = time.perf_counter()
        code: int | None = None
        try:
            response = await method(request, context)
            code = _status_code(response)
            return response
        finally:
            meter.observe(rpc, code, time.perf_counter() - started)
            meter.inflight -= 1

    return handle


def _counted_unary(method: Method, meter: RpcMeter) -> Method:
    async def handle(request: object, context: object) -> ProtoMessage:
        meter.inflight += 1
        try:
            return await method(request, context)
        finally:
            meter.inflight -= 1

    return handle


def _counted_stream(method: Method, meter: RpcMeter) -> Method:
    async def handle(request: object, context: object) -> AsyncIterator[ProtoMessage]:
        meter.inflight += 1
        try:
            async for response in method(request, context):
                yield response
        finally:
            meter.inflight -= 1

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
