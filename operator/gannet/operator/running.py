"""Run the operator: kopf settings, login, the metrics/liveness server, and the kopf loop.

``gannet operator run`` (:mod:`gannet.node.cli.kube_operator`) calls :func:`run`; tests call it too,
with an emulated API server, in-process brokers, an :class:`~gannet.operator.contexts.Endpoints`
that points at them and an injected clock. Everything the operator needs is built here and
passed down explicitly; nothing lives in module globals.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, cast

import kopf

from gannet.operator import contexts, handlers, kube, metrics, resources
from gannet.operator.brokers import PLAIN, Brokers, Security

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    metrics_listen: str | None = "0.0.0.0:8080"  # /metrics and /healthz; None disables
    refresh_interval_s: float = 30.0
    retry_delay_s: float = 10.0
    broker_timeout_s: float = 5.0
    kube_timeout_s: float = 30.0
    stall_timeout_s: float = 300.0
    # An API server URL used without credentials (tests, `kubectl proxy`); None: in-cluster
    # service account, else KUBECONFIG / ~/.kube/config.
    server: str | None = None
    # The admin key and TLS trust for brokers whose GannetCluster names none of its own.
    broker_security: Security = PLAIN

    def __post_init__(self) -> None:
        for name in (
            "refresh_interval_s",
            "retry_delay_s",
            "broker_timeout_s",
            "kube_timeout_s",
            "stall_timeout_s",
        ):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"{name} is {value}; use a positive number of seconds")


def parse_listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not host:port")
    return host.strip("[]"), int(port)


def settings(options: Options) -> kopf.OperatorSettings:
    result = kopf.OperatorSettings()
    result.persistence.finalizer = resources.FINALIZER
    # kopf turns no log record into an Event; the operator posts its own (gannet.operator.events).
    result.posting.loggers = False
    result.peering.standalone = True  # one replica, Deployment strategy Recreate
    result.scanning.disabled = True  # the handlers name their resources
    result.networking.request_timeout = options.kube_timeout_s * 2
    result.networking.connect_timeout = options.kube_timeout_s
    result.watching.server_timeout = 300
    result.watching.client_timeout = 330
    result.queueing.error_delays = (1, 2, 5, 10, 30)
    # A deleted object's refresh timer that is mid-pass when the deletion arrives is polled
    # for its exit (kopf's default: every 60 s), and the finalizer stays until it exited: a
    # GannetCluster deletion waited a minute on the real API server. Poll every second.
    result.background.cancellation_polling = 1.0
    return result


def registry_for(ctx: contexts.Context, options: Options) -> kopf.OperatorRegistry:
    """Every handler, plus the login: the operator's own client and kopf log in once, from
    the same kubernetes_asyncio configuration (:func:`kube.configuration`), on start and
    whenever kopf finds its credentials rejected."""
    registry = kopf.OperatorRegistry()

    async def login(**_: Any) -> kopf.ConnectionInfo:
        try:
            settings = await kube.configuration(options.server)
        except kube.KubeError as exc:
            raise kopf.PermanentError(str(exc)) from None
        await ctx.kube.connect(settings)
        return kube.connection_info(settings)

    kopf.on.login(id="login", registry=registry)(cast(Any, login))
    handlers.register(registry, ctx)
    return registry


def lister(ctx: contexts.Context, options: Options) -> metrics.Lister:
    async def listed() -> list[metrics.Listed]:
        found: list[metrics.Listed] = []
        for kind in metrics.KINDS:
            for namespace in options.namespaces or (None,):
                for item in await ctx.kube.list(resources.API_VERSION, kind, namespace):
                    meta = item.get("metadata") or {}
                    found.append(
                        metrics.Listed(
                            kind,
                            str(meta.get("namespace") or ""),
                            str(meta.get("name") or ""),
                            str(meta.get("resourceVersion") or ""),
                        )
                    )
        return found

    return listed


async def run(
    options: Options,
    *,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    endpoints: contexts.Endpoints | None = None,
    clock: Callable[[], dt.datetime] = contexts.utc_now,
    operator_metrics: metrics.OperatorMetrics | None = None,
) -> None:
    """Run until ``stop_flag`` is set (or forever); closes every client on the way out."""
    ctx = contexts.Context(
        brokers=Brokers(timeout_s=options.broker_timeout_s, security=options.broker_security),
        kube=kube.Kube(timeout_s=options.kube_timeout_s),
        metrics=operator_metrics or metrics.OperatorMetrics(),
        endpoints=endpoints or contexts.ServiceEndpoints(),
        clock=clock,
        refresh_interval_s=options.refresh_interval_s,
        retry_delay_s=options.retry_delay_s,
    )
    runner = None
    if options.metrics_listen:
        host, port = parse_listen(options.metrics_listen)
        liveness = metrics.Liveness(
            ctx.metrics, lister(ctx, options), stall_timeout_s=options.stall_timeout_s
        )
        runner = await metrics.serve(metrics.application(ctx.metrics, liveness), host, port)
        log.info("operator metrics on http://%s:%d/metrics", host, port)
    try:
        await kopf.operator(
            registry=registry_for(ctx, options),
            settings=settings(options),
            clusterwide=not options.namespaces,
            namespaces=options.namespaces,
            standalone=True,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        if runner is not None:
            await runner.cleanup()
        await ctx.brokers.close()
        await ctx.kube.close()
