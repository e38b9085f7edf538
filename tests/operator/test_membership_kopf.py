"""GannetCluster membership flows run by kopf (in-process, KMock API emulator) against a
scriptable admin server that plays the Raft group and records the broker calls
(:mod:`tests.operator.fake_admin`); pods are kept by a StatefulSet-controller stand-in
(:mod:`tests.operator.statefulsets`).

3 -> 5 -> 3 with the broker calls observed in order; a refused scale-down (a lagging member:
the operator's check, then the broker's own refusal) reported in the Scaling condition; a
member whose volume was lost (ephemeral storage, its pod recreated) replaced under a new id."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from gannet.operator import kube
from tests.operator import fake_admin, statefulsets
from tests.operator.conftest import NAMESPACE, Env, operator_env

pytestmark = [
    pytest.mark.timeout(240),  # upper bounds for a loaded 2-core machine
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]


def scaling(obj: dict[str, Any] | None) -> dict[str, Any]:
    for found in ((obj or {}).get("status") or {}).get("conditions") or ():
        if found["type"] == "Scaling":
            return dict(found)
    return {}


def settled(generation: int, size: int) -> Any:
    def check(obj: dict[str, Any] | None) -> bool:
        status = (obj or {}).get("status") or {}
        return (
            status.get("observedGeneration") == generation
            and scaling(obj).get("reason") == "AtDesiredSize"
            and len(status.get("members") or ()) == size
            and all(m.get("role") == "voter" for m in status.get("members") or ())
        )

    return check


def three_members() -> fake_admin.FakeAdmin:
    return fake_admin.FakeAdmin(
        leader_id="1", members={n: [True, 0, True] for n in ("1", "2", "3")}
    )


async def roster(env: Env) -> dict[str, Any]:
    found = await env.kube.get("v1", "ConfigMap", NAMESPACE, "main-members")
    assert found is not None
    return dict(found["data"])


async def replicas_of(env: Env) -> int:
    sts = await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, "main")
    assert sts is not None
    return int(sts["spec"]["replicas"])


def test_scale_3_to_5_to_3_goes_through_the_membership_calls_in_order() -> None:
    admin = three_members()

    async def scenario() -> None:
        with fake_admin.serving(admin) as endpoint:
            async with (
                operator_env(endpoint, refresh_interval_s=0.2) as env,
                statefulsets.playing(env, "main"),
            ):
                env.wait_timeout_s = 90.0
                await env.apply("GannetCluster", "main", {"replicas": 3})
                cluster = await env.wait_for("GannetCluster", "main", settled(1, 3))
                assert cluster is not None
                data = await roster(env)
                assert json.loads(data["roster.json"])["sealed"] is True
                assert data["main-0"].startswith("--node-id 1 --data-dir /var/lib/gannet/node-1")
                assert "--join" in data["main-0"]  # sealed: a restart never bootstraps again
                sts = await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, "main")
                assert sts is not None
                container = sts["spec"]["template"]["spec"]["containers"][0]
                assert "/etc/gannet/members/$$POD_NAME" in container["command"][2]
                assert "--peers" not in container["args"]
                config = await env.kube.get("v1", "ConfigMap", NAMESPACE, "main-config")
                assert config is not None
                assert "GANNET_PEERS" not in config["data"]
                assert admin.membership_calls() == []

                await env.apply("GannetCluster", "main", {"replicas": 5})
                cluster = await env.wait_for("GannetCluster", "main", settled(2, 5))
                assert admin.membership_calls() == [
                    ("AddMember", ("4", True)),
                    ("AddMember", ("4", False)),
                    ("AddMember", ("5", True)),
                    ("AddMember", ("5", False)),
                ]
                assert await replicas_of(env) == 5
                data = await roster(env)
                assert data["main-4"].startswith("--node-id 5 ")
                assert "--join" in data["main-4"]
                assert cluster is not None
                assert cluster["status"]["nextNodeId"] == 6
                for reason in ("PodAdded", "LearnerAdded", "MemberPromoted"):
                    await env.wait_for_event("GannetCluster", "main", "Normal", reason)

                admin.calls.clear()
                admin.leader_id = "5"  # the last pod's node leads: it hands over first
                await env.apply("GannetCluster", "main", {"replicas": 3})
                cluster = await env.wait_for("GannetCluster", "main", settled(3, 3))
                assert admin.membership_calls() == [
                    ("TransferLeadership", "5"),
                    ("RemoveMember", "5"),
                    ("RemoveMember", "4"),
                ]
                assert await replicas_of(env) == 3
                assert cluster is not None
                assert [m["nodeId"] for m in cluster["status"]["members"]] == ["1", "2", "3"]
                assert cluster["status"]["leader"] == "main-0"
                event = await env.wait_for_event(
                    "GannetCluster", "main", "Normal", "MemberRemoved", contains="node 4"
                )
                assert "pod main-3" in event["message"]
                samples = env.metrics.render().decode()
                assert (
                    'gannet_operator_membership_steps_total{result="done",step="RemoveMember"} 2.0'
                    in samples
                )

    asyncio.run(scenario())


def test_a_scale_down_refused_for_a_lagging_member_is_a_condition() -> None:
    admin = three_members()
    admin.members["2"][1] = 12_345_678

    async def scenario() -> None:
        with fake_admin.serving(admin) as endpoint:
            async with (
                operator_env(endpoint, refresh_interval_s=0.2) as env,
                statefulsets.playing(env, "main"),
            ):
                env.wait_timeout_s = 90.0
                await env.apply("GannetCluster", "main", {"replicas": 3})
                await env.wait_for(
                    "GannetCluster",
                    "main",
                    lambda o: (
                        ((o or {}).get("status") or {}).get("observedGeneration") == 1
                        and scaling(o).get("reason") == "AtDesiredSize"
                    ),
                )
                await env.apply("GannetCluster", "main", {"replicas": 2})
                cluster = await env.wait_for(
                    "GannetCluster",
                    "main",
                    lambda o: (
                        scaling(o).get("reason") == "ScaleDownBlocked"
                        and (o or {})["status"].get("observedGeneration") == 2
                    ),
                )
                condition = scaling(cluster)
                assert condition["status"] == "False"
                assert "scale-down from 3 to 2 refused" in condition["message"]
                assert "node 2 12,345,678 bytes behind" in condition["message"]
                assert admin.membership_calls() == []
                assert await replicas_of(env) == 3
                await env.wait_for_event("GannetCluster", "main", "Warning", "ScaleDownBlocked")

                # Caught up by the operator's figures, but the broker refuses: its reason shows.
                admin.refuse_remove = (
                    "node 2 is 12,345,678 bytes behind the commit offset; removing node 3 "
                    "would stall commits; wait for node 2 to catch up"
                )
                admin.members["2"][1] = 0
                cluster = await env.wait_for(
                    "GannetCluster",
                    "main",
                    lambda o: scaling(o).get("reason") == "MemberChangeRefused",
                )
                condition = scaling(cluster)
                assert condition["status"] == "False"
                assert "FAILED_PRECONDITION" in condition["message"]
                assert "wait for node 2 to catch up" in condition["message"]
                assert admin.membership_calls()[0] == ("RemoveMember", "3")
                assert await replicas_of(env) == 3  # the pod stays until the removal commits
                data = await roster(env)
                assert json.loads(data["roster.json"])["members"][2]["leaving"] == "scale-down"
                await env.wait_for_event(
                    "GannetCluster", "main", "Warning", "MemberChangeRefused", contains="node 2"
                )

                admin.refuse_remove = ""
                cluster = await env.wait_for("GannetCluster", "main", settled(2, 2))
                assert await replicas_of(env) == 2
                assert "3" not in admin.members

    asyncio.run(scenario())


def test_a_member_whose_volume_was_lost_rejoins_under_a_new_id() -> None:
    admin = three_members()

    async def scenario() -> None:
        with fake_admin.serving(admin) as endpoint:
            async with (
                operator_env(endpoint, refresh_interval_s=0.2) as env,
                statefulsets.playing(env, "main"),
            ):
                env.wait_timeout_s = 90.0
                spec = {"replicas": 3, "storage": {"type": "ephemeral"}}
                await env.apply("GannetCluster", "main", spec)
                await env.wait_for("GannetCluster", "main", settled(1, 3))
                await roster_where(
                    env, lambda r: all(m["volume"] for m in r["members"])
                )  # each pod's volume (its uid, ephemeral) is recorded
                # The pod of node 2 is recreated: with ephemeral storage its data is gone.
                await env.kube.delete("v1", "Pod", NAMESPACE, "main-1")
                cluster = await env.wait_for(
                    "GannetCluster",
                    "main",
                    lambda o: (
                        [m["nodeId"] for m in ((o or {}).get("status") or {}).get("members") or ()]
                        == ["1", "4", "3"]
                        and settled(1, 3)(o)
                    ),
                )
                assert cluster is not None
                assert admin.membership_calls() == [
                    ("RemoveMember", "2"),
                    ("AddMember", ("4", True)),
                    ("AddMember", ("4", False)),
                ]
                data = await roster(env)
                assert data["main-1"].startswith("--node-id 4 --data-dir /var/lib/gannet/node-4")
                await env.wait_for_event(
                    "GannetCluster", "main", "Normal", "MemberRemoved", contains="volume was lost"
                )

    asyncio.run(scenario())


async def roster_where(env: Env, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first roster (``roster.json`` of ``main-members``) that satisfies ``predicate``, read
    from a watch of the namespace's ConfigMaps."""
    path = kube.resource_path("v1", "ConfigMap", NAMESPACE)
    async with (
        asyncio.timeout(env.wait_timeout_s),
        aiohttp.ClientSession() as session,
        session.get(f"{env.url}{path}", params={"watch": "true"}) as response,
    ):
        found = json.loads((await roster(env))["roster.json"])
        if predicate(found):
            return dict(found)
        async for line in response.content:
            obj = json.loads(line).get("object") or {} if line.strip() else {}
            if (obj.get("metadata") or {}).get("name") == "main-members":
                found = json.loads(obj["data"]["roster.json"])
                if predicate(found):
                    return dict(found)
    raise AssertionError("the roster never matched")
