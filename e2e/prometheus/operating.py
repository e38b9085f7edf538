"""The operator for the Prometheus end-to-end check: ``gannet operator run`` as a process against
the KMock Kubernetes API emulator of ``tests/operator`` (run here on its own thread and event
loop, as ``e2e/operator`` does), managing the e2e cluster's broker, so that its ``/metrics``
(``gannet_operator_*``) is scraped by the same Prometheus and the Operator dashboard's queries
have real data: a GannetCluster, a Topic and a ConsumerGroup are applied and reconciled, and a
Topic shrink is refused.

Used by :mod:`e2e.prometheus.scenario`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import kmock

from e2e.operator import scenario as operator_scenario
from e2e.processes import free_port
from e2e.prometheus import harness
from gannet.operator import kube, metrics, resources
from tests.operator.conftest import Env, ready
from tests.operator.emulating import ApiServerEmulator

START_TIMEOUT_S = 60.0


class OperatorUnderTest:
    """Start with :meth:`start` (returns once the resources are reconciled), end with
    :meth:`stop`. :attr:`metrics_endpoint` is the operator's ``/metrics`` host:port."""

    def __init__(self, workdir: Path, broker_endpoint: str) -> None:
        self.workdir = workdir
        self.broker_endpoint = broker_endpoint
        self.metrics_endpoint = f"127.0.0.1:{free_port()}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="e2e-operator", daemon=True)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise TimeoutError("the operator did not reconcile its resources in time")
        if self._error is not None:
            raise RuntimeError(f"operator setup failed: {self._error!r}") from self._error

    def stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            loop.call_soon_threadsafe(stopping.set)
        self._thread.join(START_TIMEOUT_S)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        api = ApiServerEmulator()
        api.resources.load_bundled()
        for kind, plural in resources.PLURALS.items():
            api.resources[f"{resources.GROUP}/{resources.VERSION}/{plural}"] = kmock.ResourceInfo(
                kind=kind,
                namespaced=True,
                verbs={"list", "watch", "get", "patch", "create", "delete"},
                subresources={"status"},
            )
        async with api, kmock.Server(api) as server:
            url = str(server.url).rstrip("/")
            command = [
                *harness.gannet_command(),
                "operator",
                "run",
                "--server",
                url,
                "--broker-endpoint",
                self.broker_endpoint,
                "--metrics-listen",
                self.metrics_endpoint,
                "--refresh-interval-s",
                "1",
            ]
            log = self.workdir / "operator.log"
            health = f"http://{self.metrics_endpoint}/healthz"
            with contextlib.ExitStack() as stack:
                running = operator_scenario.process(command, log, health, "operator")
                await asyncio.to_thread(stack.enter_context, running)  # the API keeps serving
                client = kube.Kube.for_server(url, timeout_s=10)
                try:
                    env = Env(api, url, client, metrics.OperatorMetrics())
                    await self._reconcile_some(env)
                    self._ready.set()
                    await self._stopping.wait()
                finally:
                    await client.close()

    async def _reconcile_some(self, env: Env) -> None:
        # The store's own defaults (RocketMQ's 0.90 / 0.85), not the CRD's: a shared test disk
        # may well be 87 % full, and the e2e brokers must keep accepting writes.
        cleanup = {"diskWarningRatio": 0.9, "diskCleanForciblyRatio": 0.85}
        await env.apply("GannetCluster", "e2e", {"replicas": 1, "cleanup": cleanup})
        await env.apply("Topic", "ops-topic", {"cluster": "e2e", "queues": 4})
        await env.apply("ConsumerGroup", "ops-group", {"cluster": "e2e"})
        await env.wait_for("Topic", "ops-topic", ready, timeout_s=30)
        await env.wait_for("ConsumerGroup", "ops-group", ready, timeout_s=30)
        await env.apply("Topic", "ops-topic", {"cluster": "e2e", "queues": 2})  # refused
