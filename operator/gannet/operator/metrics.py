"""The operator's own Prometheus metrics and its liveness check (``/metrics``, ``/healthz``).

Served by :func:`serve` (aiohttp, default port 8080) next to kopf in the same event loop;
:mod:`gannet.operator.handlers` records every reconcile through :meth:`OperatorMetrics.observe`
and every watch event through :meth:`OperatorMetrics.seen`.

Families (own registry):

- ``gannet_operator_reconciliations_total{kind,result}`` — result is ``success``, ``refused``
  (a condition explains why nothing changed) or ``failed`` (broker or API error, retried);
- ``gannet_operator_reconcile_duration_seconds{kind}`` — histogram;
- ``gannet_operator_resources{kind}`` — resources the watches currently see;
- ``gannet_operator_membership_steps_total{step,result}`` — GannetCluster membership steps
  (:mod:`gannet.operator.membership_handling`): step is the planner's step (``AddLearner``,
  ``Promote``, ``RemoveMember``, ``CreatePod``, ...), result ``done``, ``refused`` (the broker
  said no), ``failed`` (unavailable) or ``blocked`` (the operator's own safety check).

Liveness: a silently stalled watch (kopf issue #1276) delivers no events while the objects keep
changing. :class:`StallDetector` compares the resourceVersions delivered by the watches with a
direct listing: when a listed object is newer than anything the watch delivered, in two checks
at least ``stall_timeout_s`` apart, ``/healthz`` answers 503 and Kubernetes restarts the pod.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

import prometheus_client
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

KINDS: Final = ("GannetCluster", "Topic", "ConsumerGroup")
RESULTS: Final = ("success", "refused", "failed")
MEMBERSHIP_RESULTS: Final = ("done", "refused", "failed", "blocked")
TRACKED_OBJECTS_MAX: Final = 100_000


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reconciliations = Counter(
            "gannet_operator_reconciliations",
            "Reconciliations of custom resources, by kind and result.",
            ["kind", "result"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "gannet_operator_reconcile_duration_seconds",
            "Time one reconciliation took, by kind.",
            ["kind"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.resources = Gauge(
            "gannet_operator_resources",
            "Custom resources the operator's watches currently see, by kind.",
            ["kind"],
            registry=self.registry,
        )
        for kind in KINDS:
            self.resources.labels(kind=kind).set(0)
            for result in RESULTS:
                self.reconciliations.labels(kind=kind, result=result)
        self.membership_steps = Counter(
            "gannet_operator_membership_steps",
            "GannetCluster membership steps taken or refused, by step and result.",
            ["step", "result"],
            registry=self.registry,
        )
        # kind -> {(namespace, name): resourceVersion}: what the watches delivered last.
        self.watched: dict[str, dict[tuple[str, str], str]] = {kind: {} for kind in KINDS}

    def observe(self, kind: str, result: str, duration_s: float) -> None:
        if result not in RESULTS:
            raise ValueError(f"result {result!r} is not one of {RESULTS}")
        self.reconciliations.labels(kind=kind, result=result).inc()
        self.duration.labels(kind=kind).observe(duration_s)

    def membership_step(self, step: str, result: str) -> None:
        if result not in MEMBERSHIP_RESULTS:
            raise ValueError(f"result {result!r} is not one of {MEMBERSHIP_RESULTS}")
        self.membership_steps.labels(step=step, result=result).inc()

    def seen(
        self, kind: str, namespace: str, name: str, resource_version: str, *, deleted: bool
    ) -> None:
        """Record one watch event."""
        objects = self.watched[kind]
        if deleted:
            objects.pop((namespace, name), None)
        elif len(objects) < TRACKED_OBJECTS_MAX or (namespace, name) in objects:
            objects[(namespace, name)] = resource_version
        self.resources.labels(kind=kind).set(len(objects))

    def render(self) -> bytes:
        return bytes(prometheus_client.generate_latest(self.registry))


@dataclasses.dataclass(frozen=True, slots=True)
class Listed:
    kind: str
    namespace: str
    name: str
    resource_version: str


class StallDetector:
    """Decides from listings whether the watches have stopped delivering (pure; no clock)."""

    def __init__(self, *, stall_timeout_s: float) -> None:
        if stall_timeout_s <= 0:
            raise ValueError(f"stall_timeout_s is {stall_timeout_s}; use a positive number")
        self.stall_timeout_s = stall_timeout_s
        self._behind_since: float | None = None

    def check(
        self,
        listed: Iterable[Listed],
        watched: dict[str, dict[tuple[str, str], str]],
        *,
        now_s: float,
    ) -> bool:
        """True while healthy; False once listings stayed ahead of the watches too long."""
        behind = any(
            watched.get(item.kind, {}).get((item.namespace, item.name)) != item.resource_version
            for item in listed
        )
        if not behind:
            self._behind_since = None
            return True
        if self._behind_since is None:
            self._behind_since = now_s
        return now_s - self._behind_since < self.stall_timeout_s


Lister = Callable[[], Awaitable[list[Listed]]]


class Liveness:
    """``/healthz``: runs a listing at most every ``check_interval_s`` and asks the detector."""

    def __init__(
        self,
        metrics: OperatorMetrics,
        lister: Lister | None,
        *,
        stall_timeout_s: float = 300.0,
        check_interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.lister = lister
        self.detector = StallDetector(stall_timeout_s=stall_timeout_s)
        self.check_interval_s = check_interval_s
        self.clock = clock
        self._last_check_s: float | None = None
        self._healthy = True

    async def healthy(self) -> bool:
        now_s = self.clock()
        if self.lister is None:
            return True
        if self._last_check_s is None or now_s - self._last_check_s >= self.check_interval_s:
            self._last_check_s = now_s
            try:
                listed = await self.lister()
            except Exception:
                return self._healthy
            self._healthy = self.detector.check(listed, self.metrics.watched, now_s=now_s)
        return self._healthy


def application(metrics: OperatorMetrics, liveness: Liveness) -> web.Application:
    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), content_type="text/plain", charset="utf-8")

    async def healthz(_: web.Request) -> web.Response:
        if await liveness.healthy():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="watch stalled: listings are ahead of the watch\n")

    app = web.Application(client_max_size=1024)
    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Start serving; the caller stops it with ``await runner.cleanup()``."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
