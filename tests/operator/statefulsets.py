"""A stand-in for the StatefulSet controller and the kubelet on the KMock emulator.

KMock stores objects but runs no controllers, so nothing would create the pods of the
operator's StatefulSet. :func:`playing` runs a task that watches StatefulSets and Pods and keeps
pods ``<name>-0`` .. ``<name>-<replicas - 1>`` existing with ``status.phase: Running`` (a
deleted pod comes back with a new uid, as a StatefulSet's does), and deletes pods past the
replica count. Everything is driven by watch events; nothing polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from gannet.operator import kube, manifests
from tests.operator.conftest import NAMESPACE, Env


def _pod(cluster: str, ordinal: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": manifests.pod_name(cluster, ordinal),
            "namespace": NAMESPACE,
            "labels": {**manifests.selector_labels(cluster), "controller-revision-hash": "r1"},
        },
        "spec": {"containers": [{"name": "broker", "image": "gannet"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


async def _sync(env: Env, cluster: str) -> None:
    sts = await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, cluster)
    replicas = 0 if sts is None else int(sts["spec"].get("replicas") or 0)
    pods = await env.kube.list("v1", "Pod", NAMESPACE, labels=manifests.selector_labels(cluster))
    have = {str(p["metadata"]["name"]) for p in pods}
    for ordinal in range(replicas):
        if manifests.pod_name(cluster, ordinal) not in have:
            await env.kube.create(_pod(cluster, ordinal))
    for name in have:
        _, _, tail = name.rpartition("-")
        if tail.isdigit() and int(tail) >= replicas:
            await env.kube.delete("v1", "Pod", NAMESPACE, name)


async def watch(env: Env, path: str, changed: asyncio.Event) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{env.url}{path}", params={"watch": "true"}) as response,
    ):
        changed.set()
        async for line in response.content:
            if line.strip() and json.loads(line).get("type"):
                changed.set()


@contextlib.asynccontextmanager
async def playing(env: Env, cluster: str) -> AsyncIterator[None]:
    changed = asyncio.Event()

    async def controller() -> None:
        while True:
            await changed.wait()
            changed.clear()
            await _sync(env, cluster)

    tasks = [
        asyncio.create_task(watch(env, kube.resource_path(v, k, NAMESPACE), changed))
        for v, k in (("apps/v1", "StatefulSet"), ("v1", "Pod"))
    ]
    tasks.append(asyncio.create_task(controller()))
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
