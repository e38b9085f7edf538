"""The operator's membership flow against real broker processes (slow; kopf + KMock for the
API, :class:`e2e.replication.membership.MembershipGroup` for the brokers).

Three founders run with ``--peers``; the operator bootstraps its roster with their ids, seals
it, and scales 3 -> 4 -> 3 (3 -> 5 -> 3 with ``GANNET_OPERATOR_MEMBERSHIP_FULL=1``; the KMock
and e2e-kube tests check the call order of that one) through the brokers' own ``ListMembers``,
``AddMember`` and ``RemoveMember``. A kubelet stand-in starts ``gannet broker run --node-id N
--join`` for each pod the StatefulSet gains (N read from the pod's roster key) and stops it when
the pod goes; :class:`LocalEndpoints` maps each pod to its process's ports. At the end the
group's own ``ListMembers`` names exactly the three founders as voters."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from e2e.replication.membership import MembershipGroup
from gannet.node.api.gen import admin_pb2
from gannet.operator import manifests
from tests.operator import statefulsets
from tests.operator.conftest import NAMESPACE, Env, operator_env
from tests.operator.test_membership_kopf import settled

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(400),
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]


@dataclasses.dataclass
class LocalEndpoints:
    """Pod ordinal -> the node its process runs (the kubelet stand-in keeps it)."""

    group: MembershipGroup
    node_of: dict[int, int]

    def client(self, namespace: str, cluster: str) -> str:
        return self.group.client_endpoint(min(self.node_of.values()))

    def pod(self, namespace: str, cluster: str, ordinal: int) -> str:
        return self.group.client_endpoint(self.node_of.get(ordinal, 1))

    def member(self, namespace: str, cluster: str, ordinal: int) -> tuple[str, str]:
        spec = self.group.spec(self.node_of[ordinal])
        return spec.peer_endpoint, self.group.client_endpoint(spec.node_id)


async def _kubelet(env: Env, group: MembershipGroup, endpoints: LocalEndpoints) -> None:
    """Start a joining broker for each new pod (node id from its roster key), stop the
    process of each pod that went."""
    changed = asyncio.Event()
    path = "/api/v1/namespaces/demo/pods"
    watcher = asyncio.create_task(statefulsets.watch(env, path, changed))
    seen: set[int] = set()
    try:
        while True:
            await changed.wait()
            changed.clear()
            pods = await env.kube.list("v1", "Pod", NAMESPACE)
            ordinals = {int(str(p["metadata"]["name"]).rpartition("-")[2]) for p in pods}
            gone, seen = seen - ordinals, seen | ordinals
            roster = await env.kube.get("v1", "ConfigMap", NAMESPACE, "main-members") or {}
            for ordinal in sorted(ordinals - set(endpoints.node_of)):
                line = (roster.get("data") or {}).get(manifests.pod_name("main", ordinal), "")
                node = int(line.split()[1])
                await asyncio.to_thread(group.start_joining, node)
                endpoints.node_of[ordinal] = node
            for ordinal in sorted(gone & set(endpoints.node_of)):
                seen.discard(ordinal)
                node = endpoints.node_of.pop(ordinal)
                await asyncio.to_thread(group.stop, node)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


@contextlib.asynccontextmanager
async def kubelet(
    env: Env, group: MembershipGroup, endpoints: LocalEndpoints
) -> AsyncIterator[None]:
    task = asyncio.create_task(_kubelet(env, group, endpoints))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def voters(group: MembershipGroup) -> list[int]:
    leader = group.leader(among=[1, 2, 3])
    reply: Any = group.admin_call(leader, "ListMembers", admin_pb2.ListMembersRequest())
    return sorted(int(m.node_id) for m in reply.members if m.voter)


def test_the_operator_scales_a_real_group_up_and_back(tmp_path: Path) -> None:
    top = 5 if os.environ.get("GANNET_OPERATOR_MEMBERSHIP_FULL") == "1" else 4
    group = MembershipGroup(tmp_path)
    group.start()
    try:
        group.leader(among=[1, 2, 3], timeout_s=60)
        endpoints = LocalEndpoints(group, {0: 1, 1: 2, 2: 3})

        async def scenario() -> None:
            async with (
                operator_env("", endpoints=endpoints, refresh_interval_s=0.5) as env,
                statefulsets.playing(env, "main"),
                kubelet(env, group, endpoints),
            ):
                env.wait_timeout_s = 150.0
                await env.apply("GannetCluster", "main", {"replicas": 3})
                await env.wait_for("GannetCluster", "main", settled(1, 3))
                await env.apply("GannetCluster", "main", {"replicas": top})
                grown = await env.wait_for("GannetCluster", "main", settled(2, top))
                assert grown is not None
                ids = [str(i) for i in range(1, top + 1)]
                assert [m["nodeId"] for m in grown["status"]["members"]] == ids
                assert await asyncio.to_thread(voters, group) == list(range(1, top + 1))
                await env.apply("GannetCluster", "main", {"replicas": 3})
                shrunk = await env.wait_for("GannetCluster", "main", settled(3, 3))
                assert shrunk is not None
                assert await asyncio.to_thread(voters, group) == [1, 2, 3]

        asyncio.run(scenario())
    finally:
        group.close()
