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
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from e2e.replication.membership import MembershipGroup
from gannet.node.protocol.gen import admin_pb2
from gannet.operator import manifests
from tests.operator import statefulsets
from tests.operator.conftest import NAMESPACE, Env, operator_env
from tests.operator.test_membership_kopf import roster_where, settled

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
    """Run a broker for each pod: when a pod appears (or comes back with a new uid) start
    ``--join`` with the node id of its roster key (after stopping the process of the pod it
    replaces); when a pod goes, stop its process."""
    changed = asyncio.Event()
    path = "/api/v1/namespaces/demo/pods"
    watcher = asyncio.create_task(statefulsets.watch(env, path, changed))
    uids: dict[int, str] = {}
    try:
        while True:
            await changed.wait()
            changed.clear()
            pods = {
                int(str(p["metadata"]["name"]).rpartition("-")[2]): str(p["metadata"]["uid"])
                for p in await env.kube.list("v1", "Pod", NAMESPACE)
            }
            roster = await env.kube.get("v1", "ConfigMap", NAMESPACE, "main-members") or {}
            for ordinal in sorted(set(uids) - set(pods)):
                uids.pop(ordinal)
                node = endpoints.node_of.pop(ordinal, None)
                if node is not None and group.processes[node].poll() is None:
                    await asyncio.to_thread(group.stop, node)
            for ordinal, uid in sorted(pods.items()):
                if uids.get(ordinal) == uid:
                    continue
                first = ordinal not in uids
                uids[ordinal] = uid
                if first and ordinal in endpoints.node_of:
                    continue  # a founder: its process runs already
                old = endpoints.node_of.get(ordinal)
                if old is not None and group.processes[old].poll() is None:
                    await asyncio.to_thread(group.stop, old)
                line = (roster.get("data") or {}).get(manifests.pod_name("main", ordinal), "")
                node = int(line.split()[1])
                await asyncio.to_thread(group.start_joining, node)
                endpoints.node_of[ordinal] = node
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
    return voters_of(group, [1, 2, 3])


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


@pytest.mark.skipif(
    os.environ.get("GANNET_OPERATOR_MEMBERSHIP_FULL") != "1",
    reason="the long version (GANNET_OPERATOR_MEMBERSHIP_FULL=1)",
)
def test_a_real_member_whose_disk_was_lost_is_replaced_under_a_new_id(tmp_path: Path) -> None:
    """Ephemeral storage: node 2's process is killed, its data directory deleted and its pod
    recreated; the new pod starts node 2 with ``--join`` (the sealed roster) on an empty disk,
    which never campaigns. The operator removes node 2, gives the pod node 4, restarts it and
    adds node 4."""
    group = MembershipGroup(tmp_path)
    group.start()
    try:
        group.leader(among=[1, 2, 3], timeout_s=60)
        if group.leader(among=[1, 2, 3]) == 2:
            group.admin_call(2, "TransferLeadership", admin_pb2.TransferLeadershipRequest())
        endpoints = LocalEndpoints(group, {0: 1, 1: 2, 2: 3})

        async def scenario() -> None:
            async with (
                operator_env("", endpoints=endpoints, refresh_interval_s=0.5) as env,
                statefulsets.playing(env, "main"),
                kubelet(env, group, endpoints),
            ):
                env.wait_timeout_s = 150.0
                spec = {"replicas": 3, "storage": {"type": "ephemeral"}}
                await env.apply("GannetCluster", "main", spec)
                await env.wait_for("GannetCluster", "main", settled(1, 3))
                await roster_where(env, lambda r: all(m["volume"] for m in r["members"]))
                await asyncio.to_thread(group.kill, 2)
                shutil.rmtree(tmp_path / "node2")
                await env.kube.delete("v1", "Pod", NAMESPACE, "main-1")
                replaced = await env.wait_for(
                    "GannetCluster",
                    "main",
                    lambda o: (
                        settled(1, 3)(o)
                        and [m["nodeId"] for m in (o or {})["status"]["members"]] == ["1", "4", "3"]
                    ),
                )
                assert replaced is not None
                assert await asyncio.to_thread(voters_of, group, [1, 3, 4]) == [1, 3, 4]

        asyncio.run(scenario())
    finally:
        group.close()


def voters_of(group: MembershipGroup, among: list[int]) -> list[int]:
    leader = group.leader(among=among)
    reply: Any = group.admin_call(leader, "ListMembers", admin_pb2.ListMembersRequest())
    return sorted(int(m.node_id) for m in reply.members if m.voter)
