"""Fixtures for the operator tests: an in-process broker, and the operator run in-process by
kopf against the KMock API emulator (:mod:`tests.operator.emulating`).

The operator scenarios are async; each test runs one scenario with ``asyncio.run`` under
``asyncio.timeout`` (plus pytest-timeout), and waits for states by reading the emulator's watch
stream — never by sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import kmock
import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.operator import brokers, contexts, kube, metrics, resources, running
from tests.operator.emulating import ApiServerEmulator
from tests.operator.stores import stack_store

NAMESPACE = "demo"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    # On tmpfs when it has room: the store refuses writes above 90 % disk use, and a shared
    # machine's disk can be that full (see tests.operator.stores).
    root = stack_store(tmp_path_factory.mktemp("broker"))
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    running_broker = threads.start(BrokerConfig(store=store, listen_port=0))
    try:
        yield running_broker
    finally:
        running_broker.stop()
        if root.is_relative_to("/dev/shm"):
            shutil.rmtree(root, ignore_errors=True)


@dataclasses.dataclass
class FakeClock:
    now: dt.datetime

    def __call__(self) -> dt.datetime:
        return self.now


@dataclasses.dataclass
class Env:
    api: ApiServerEmulator
    url: str
    kube: kube.Kube
    metrics: metrics.OperatorMetrics
    # An upper bound only (states are awaited on the watch); generous for a loaded machine.
    wait_timeout_s: float = 30.0

    async def apply(self, kind: str, name: str, spec: dict[str, Any], **meta: Any) -> None:
        await self.kube.apply(
            {
                "apiVersion": resources.API_VERSION,
                "kind": kind,
                "metadata": {"name": name, "namespace": NAMESPACE, **meta},
                "spec": spec,
            }
        )

    async def delete(self, kind: str, name: str) -> None:
        await self.kube.delete(resources.API_VERSION, kind, NAMESPACE, name)

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return await self.kube.get(resources.API_VERSION, kind, NAMESPACE, name)

    async def wait_for(
        self,
        kind: str,
        name: str,
        predicate: Callable[[dict[str, Any] | None], bool],
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any] | None:
        """The first state of the object (None: gone) that satisfies ``predicate``, read from a
        watch stream so that no state change is missed and nothing sleeps."""
        path = kube.resource_path(resources.API_VERSION, kind, NAMESPACE)
        last: dict[str, Any] | None = await self.get(kind, name)
        if predicate(last):
            return last
        async with (
            asyncio.timeout(self.wait_timeout_s if timeout_s is None else timeout_s),
            aiohttp.ClientSession() as session,
            session.get(f"{self.url}{path}", params={"watch": "true"}) as response,
        ):
            current = await self.get(kind, name)  # changes before the watch started
            if predicate(current):
                return current
            last = current
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if (obj.get("metadata") or {}).get("name") != name:
                    continue
                last = None if event.get("type") == "DELETED" else obj
                if predicate(last):
                    return last
        raise AssertionError(f"{kind} {name} never matched; last state: {last}")

    async def events(self, kind: str, name: str) -> list[dict[str, Any]]:
        """The Events posted about one resource, oldest first."""
        found = await self.kube.list("v1", "Event", NAMESPACE)
        return [e for e in found if _about(e, kind, name)]

    async def wait_for_event(
        self, kind: str, name: str, type_: str, reason: str, *, contains: str = ""
    ) -> dict[str, Any]:
        """The first Event about the resource with this type and reason (and text in its
        message), read from a watch of the namespace's Events: nothing sleeps."""

        def matches(event: dict[str, Any]) -> bool:
            return (
                _about(event, kind, name)
                and event.get("type") == type_
                and event.get("reason") == reason
                and contains in str(event.get("message"))
            )

        path = kube.resource_path("v1", "Event", NAMESPACE)
        async with (
            asyncio.timeout(self.wait_timeout_s),
            aiohttp.ClientSession() as session,
            session.get(f"{self.url}{path}", params={"watch": "true"}) as response,
        ):
            for event in await self.events(kind, name):  # posted before the watch started
                if matches(event):
                    return event
            async for line in response.content:
                if line.strip():
                    obj = json.loads(line).get("object") or {}
                    if matches(obj):
                        return dict(obj)
        seen = [(e.get("type"), e.get("reason")) for e in await self.events(kind, name)]
        raise AssertionError(f"no {type_} {reason} event on {kind} {name}; posted: {seen}")


def _about(event: dict[str, Any], kind: str, name: str) -> bool:
    involved = event.get("involvedObject") or {}
    return bool(involved.get("kind") == kind and involved.get("name") == name)


def ready(obj: dict[str, Any] | None, *, status: str = "True", reason: str | None = None) -> bool:
    """The Ready condition matches and reflects the object's current generation."""
    if obj is None:
        return False
    state = obj.get("status") or {}
    found = next((c for c in state.get("conditions") or () if c.get("type") == "Ready"), None)
    generation = obj["metadata"].get("generation")
    return (
        found is not None
        and found["status"] == status
        and (reason is None or found["reason"] == reason)
        and state.get("observedGeneration") == generation
    )


@contextlib.asynccontextmanager
async def operator_env(
    endpoint: str,
    *,
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    refresh_interval_s: float = 3600.0,
    endpoints: contexts.Endpoints | None = None,
    broker_security: brokers.Security = brokers.PLAIN,
) -> AsyncIterator[Env]:
    api = ApiServerEmulator()
    api.resources.load_bundled()
    for kind, plural in resources.PLURALS.items():
        api.resources[f"{resources.GROUP}/{resources.VERSION}/{plural}"] = kmock.ResourceInfo(
            kind=kind,
            singular=kind.lower(),
            namespaced=True,
            verbs={"list", "watch", "get", "patch", "create", "delete"},
            subresources={"status"},
        )
    async with api, kmock.Server(api) as server:
        url = str(server.url).rstrip("/")
        options = running.Options(
            server=url,
            metrics_listen=None,
            refresh_interval_s=refresh_interval_s,
            retry_delay_s=0.5,
            broker_timeout_s=5,
            broker_security=broker_security,
        )
        started = asyncio.Event()
        operator_metrics = metrics.OperatorMetrics()
        task = asyncio.create_task(
            running.run(
                options,
                ready_flag=started,
                endpoints=endpoints or contexts.FixedEndpoints(endpoint),
                clock=clock,
                operator_metrics=operator_metrics,
            )
        )
        client = kube.Kube.for_server(url, timeout_s=10)
        try:
            async with asyncio.timeout(15):
                await started.wait()
            yield Env(api, url, client, operator_metrics)
        finally:
            await client.close()
            # Cancel rather than set the stop flag: on a graceful stop kopf gives every task it
            # did not start (the emulator's request handlers here) 5 s to finish.
            task.cancel()
            async with asyncio.timeout(15):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
