"""GannetCluster reconciled by kopf (in-process, KMock API emulator): the StatefulSet, Services,
ConfigMap, PodDisruptionBudget and ServiceMonitor are created with the right shape; the cleanup
schedule (injected clock) triggers the admin Cleanup RPC on the in-process broker and the status
reports the run. Rolling restarts and the revive-queue roll-out run against a scriptable admin
server (:mod:`tests.operator.fake_admin`) that plays a three-member Raft group; membership
changes are in test_membership_kopf."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from collections.abc import Callable
from typing import Any

import kmock
import pytest

from gannet.node.broker import threads
from gannet.node.store.log.records import Message
from tests.operator import fake_admin
from tests.operator.conftest import NAMESPACE, Env, FakeClock, operator_env

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    if obj is None:
        return None
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == type_), None
    )


def test_cluster_objects_and_scale_up(broker: threads.BrokerThread) -> None:
    async def scenario() -> None:
        async with operator_env(broker.endpoint) as env:
            env.api.resources["monitoring.coreos.com/v1/servicemonitors"] = kmock.ResourceInfo(
                kind="ServiceMonitor", namespaced=True, verbs={"get", "list", "create", "patch"}
            )
            spec = {
                "replicas": 3,
                "image": "example/gannet:test",
                "storage": {"size": "5Gi", "class": "fast"},
                "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
            }
            await env.apply("GannetCluster", "main", spec)
            cluster = await env.wait_for(
                "GannetCluster",
                "main",
                lambda o: (
                    o is not None
                    and (o.get("status") or {}).get("observedGeneration") == 1
                    and "replicas" in o["status"]
                ),
            )
            assert cluster is not None
            uid = cluster["metadata"]["uid"]
            assert cluster["status"]["replicas"] == 3
            assert "app.kubernetes.io/instance=main" in cluster["status"]["selector"]

            sts = await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, "main")
            assert sts is not None
            assert sts["metadata"]["ownerReferences"][0]["uid"] == uid
            assert sts["spec"]["replicas"] == 3
            assert sts["spec"]["serviceName"] == "main-peers"
            assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
            claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
            assert claim["storageClassName"] == "fast"
            assert claim["resources"]["requests"]["storage"] == "5Gi"
            container = sts["spec"]["template"]["spec"]["containers"][0]
            assert 'exec gannet broker run $$(cat "$$f")' in container["command"][2]
            assert "--peers" not in container["args"]
            # A brand-new group bootstraps with --peers of its first members (the roster).
            roster = await env.kube.get("v1", "ConfigMap", NAMESPACE, "main-members")
            assert roster is not None
            line = roster["data"]["main-2"]
            assert line.startswith("--node-id 3 --data-dir /var/lib/gannet/node-3 --peers ")
            peers = line.split()[-1].split(",")
            assert peers[2] == "3=main-2.main-peers.demo.svc:8091/8081"
            peers_service = await env.kube.get("v1", "Service", NAMESPACE, "main-peers")
            assert peers_service is not None
            assert peers_service["spec"]["clusterIP"] == "None"
            client = await env.kube.get("v1", "Service", NAMESPACE, "main-client")
            assert client is not None
            assert [p["port"] for p in client["spec"]["ports"]] == [8081, 5557]
            pdb = await env.kube.get("policy/v1", "PodDisruptionBudget", NAMESPACE, "main")
            assert pdb is not None
            assert pdb["spec"]["maxUnavailable"] == 1
            monitor = await env.kube.get(
                "monitoring.coreos.com/v1", "ServiceMonitor", NAMESPACE, "main"
            )
            assert monitor is not None
            assert monitor["metadata"]["labels"]["release"] == "prom"
            monitoring = condition(cluster, "Monitoring")
            assert monitoring is not None
            assert monitoring["status"] == "True"

            # A scale-up goes through the group's membership calls: while the group is not
            # formed (this lone broker is not the 3 members of the roster), nothing grows and
            # Scaling says why.
            await env.apply("GannetCluster", "main", {**spec, "replicas": 5})
            cluster = await env.wait_for(
                "GannetCluster",
                "main",
                lambda o: (o or {}).get("status", {}).get("observedGeneration") == 2,
            )
            scaling = condition(cluster, "Scaling")
            assert scaling is not None
            assert scaling["reason"] == "Waiting"
            assert scaling["message"].startswith("3 -> 5 members: ")
            assert "not a voter yet" in scaling["message"] or "no leader" in scaling["message"]
            sts = await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, "main")
            assert sts is not None
            assert sts["spec"]["replicas"] == 3

    asyncio.run(scenario())


def fill_and_age_commit_log(broker: threads.BrokerThread) -> int:
    """Write a few 64 KiB commit-log files and date all but the active one 3 days back (the
    clean-up compares file modification times; nothing sleeps). Returns the aged count."""
    store = broker.broker.store
    for i in range(60):
        store.put_message(Message(topic="cleanup-fill", body=bytes([i % 256]) * 4096))
    sealed = store.commitlog.files.files[:-1]
    three_days_ago = time.time() - 3 * 24 * 3600
    for mapped in sealed:
        os.utime(mapped.path, (three_days_ago, three_days_ago))
    return len(sealed)


def test_cleanup_schedule_triggers_cleanup(broker: threads.BrokerThread) -> None:
    clock = FakeClock(dt.datetime(2026, 3, 1, 3, 59, 0, tzinfo=dt.UTC))
    aged = fill_and_age_commit_log(broker)
    assert aged >= 2

    async def scenario() -> None:
        async with operator_env(broker.endpoint, clock=clock, refresh_interval_s=0.1) as env:
            spec = {
                "replicas": 1,
                "cleanup": {"schedule": "0 4 * * *", "fileReservedHours": 48},
            }
            await env.apply("GannetCluster", "main", spec)
            cluster = await env.wait_for(
                "GannetCluster",
                "main",
                lambda o: (
                    ((o or {}).get("status") or {}).get("cleanup", {}).get("nextRunTime")
                    == "2026-03-01T04:00:00Z"
                ),
            )
            assert cluster is not None
            assert "lastRunTime" not in cluster["status"]["cleanup"]
            policy = broker.broker.store.cleaner.policy
            assert policy.file_reserved_hours == 48  # the policy reached the broker

            clock.now = dt.datetime(2026, 3, 1, 4, 0, 5, tzinfo=dt.UTC)
            cluster = await env.wait_for(
                "GannetCluster",
                "main",
                lambda o: (
                    ((o or {}).get("status") or {}).get("cleanup", {}).get("lastRunTime")
                    == "2026-03-01T04:00:05Z"
                ),
            )
            assert cluster is not None
            report = cluster["status"]["cleanup"]
            assert report["nextRunTime"] == "2026-03-02T04:00:00Z"
            assert report["lastRunBrokers"] == 1
            assert report["lastRunErrors"] == []
            # The aged commit-log files went (plus the consume-queue/index files into them).
            assert report["lastRunFilesDeleted"] >= aged
            assert report["lastRunBytesFreed"] >= aged * 64 * 1024
            assert broker.broker.store.cleaner.last_result is not None

    asyncio.run(scenario())


def generation_seen(generation: int) -> Callable[[dict[str, Any] | None], bool]:
    def check(obj: dict[str, Any] | None) -> bool:
        return ((obj or {}).get("status") or {}).get("observedGeneration") == generation

    return check


def test_revive_queue_count_is_rolled_out_and_reported() -> None:
    admin = fake_admin.FakeAdmin(revive_active=8)

    async def scenario() -> None:
        with fake_admin.serving(admin) as endpoint:
            async with operator_env(endpoint) as env:
                await env.apply(
                    "GannetCluster", "main", {"replicas": 1, "pop": {"reviveQueueCount": 4}}
                )
                cluster = await env.wait_for(
                    "GannetCluster",
                    "main",
                    lambda o: (
                        ((o or {}).get("status") or {}).get("reviveQueues", {}).get("active") == 4
                    ),
                )
                assert cluster is not None
                assert cluster["status"]["reviveQueues"]["draining"] == [4, 5, 6, 7]
                assert ("SetReviveQueueCount", 4) in admin.calls
                settings = condition(cluster, "BrokerSettings")
                assert settings is not None
                assert settings["status"] == "True"

    asyncio.run(scenario())


def pod(name: str, revision: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "gannet",
                "app.kubernetes.io/instance": "main",
                "app.kubernetes.io/component": "broker",
                "controller-revision-hash": revision,
            },
        },
        "spec": {"containers": [{"name": "broker", "image": "x"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_rolling_restart_deletes_one_follower_at_a_time() -> None:
    admin = fake_admin.FakeAdmin(leader_id="3")  # pod main-2

    async def scenario() -> None:
        with fake_admin.serving(admin) as endpoint:
            async with operator_env(endpoint, refresh_interval_s=0.1) as env:
                for name, revision in (("main-0", "v1"), ("main-1", "v2"), ("main-2", "v1")):
                    await env.kube.apply(pod(name, revision))
                await env.apply("GannetCluster", "main", {"replicas": 3})
                await env.wait_for("GannetCluster", "main", generation_seen(1))
                await env.kube.patch(
                    "apps/v1",
                    "StatefulSet",
                    NAMESPACE,
                    "main",
                    {"status": {"updateRevision": "v2", "readyReplicas": 3}},
                )
                # main-2 leads, main-1 is current: main-0 is the one to restart.
                cluster = await env.wait_for(
                    "GannetCluster",
                    "main",
                    lambda o: (condition(o, "RollingUpdate") or {}).get("reason") == "Waiting",
                )
                assert await env.kube.get("v1", "Pod", NAMESPACE, "main-0") is None
                assert await env.kube.get("v1", "Pod", NAMESPACE, "main-2") is not None
                rolling = condition(cluster, "RollingUpdate")
                assert rolling is not None
                assert "pods do not exist yet" in rolling["message"]
                assert admin.count("TransferLeadership") == 0
                await env.wait_for_event(
                    "GannetCluster", "main", "Normal", "PodRestarted", contains="main-0"
                )

    asyncio.run(scenario())


def test_missing_service_monitor_crd_is_a_condition_not_a_failure(
    broker: threads.BrokerThread,
) -> None:
    async def scenario() -> None:
        async with operator_env(broker.endpoint) as env:  # no servicemonitors resource served
            spec = {"replicas": 1, "metrics": {"serviceMonitor": {"enabled": True}}}
            await env.apply("GannetCluster", "main", spec)
            cluster = await env.wait_for(
                "GannetCluster", "main", lambda o: condition(o, "Monitoring") is not None
            )
            monitoring = condition(cluster, "Monitoring")
            assert monitoring is not None
            assert (monitoring["status"], monitoring["reason"]) == (
                "False",
                "ServiceMonitorUnavailable",
            )
            assert "CRD installed" in monitoring["message"]
            assert await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, "main") is not None
            await env.wait_for_event(
                "GannetCluster", "main", "Warning", "ServiceMonitorUnavailable"
            )
            await env.wait_for_event(
                "GannetCluster", "main", "Normal", "Created", contains="StatefulSet main"
            )

            # An invalid spec is a Warning too (a real API server's schema rejects most first).
            await env.apply("GannetCluster", "bad", {"replicas": 99})
            event = await env.wait_for_event("GannetCluster", "bad", "Warning", "InvalidSpec")
            assert "spec.replicas is 99" in event["message"]

    asyncio.run(scenario())


def test_create_handler_and_refresh_timer_never_overlap(broker: threads.BrokerThread) -> None:
    """A real API server showed `409 create statefulsets "main" already exists` 3 ms after the
    201: the refresh timer ran beside the create handler. With writes that take 0.3 s and a
    0.1 s timer, overlapping passes would each find the objects missing and each write them;
    one pass at a time writes each object once (the later passes find it as desired)."""

    async def scenario() -> None:
        async with operator_env(broker.endpoint, refresh_interval_s=0.1) as env:
            owned = (
                "statefulsets",
                "configmaps",
                "services",
                "poddisruptionbudgets",
                "networkpolicies",
                "secrets",
            )
            for plural in owned:
                env.api.latency[("PATCH", plural)] = 0.3  # server-side apply
            await env.apply("GannetCluster", "main", {"replicas": 1})
            await env.wait_for("GannetCluster", "main", generation_seen(1))
            # Several timer passes after the create (each PATCHes the status subresource).
            await env.wait_for(
                "GannetCluster",
                "main",
                lambda o: status_writes(env) >= 4,
            )
            writes = [
                (r.method.value, r.resource.plural, r.name)
                for r in env.api
                if r.method.value in ("PATCH", "PUT", "POST")
                and r.resource is not None
                and r.resource.plural in owned
                and r.name is not None  # not the emulator's own POST for an applied create
            ]
            # The roster is written when the group is bootstrapped and again when it is sealed
            # (this lone broker answers ListMembers as node 1); everything else once.
            roster_writes = writes.count(("PATCH", "configmaps", "main-members"))
            assert 1 <= roster_writes <= 2
            writes = [w for w in writes if w[2] != "main-members"]
            assert sorted(writes) == [
                ("PATCH", "configmaps", "main-config"),
                ("PATCH", "networkpolicies", "main-peers"),
                ("PATCH", "poddisruptionbudgets", "main"),
                ("PATCH", "secrets", "main-peer-secret"),
                ("PATCH", "services", "main-client"),
                ("PATCH", "services", "main-peers"),
                ("PATCH", "statefulsets", "main"),
            ]
            # ... and each creation is reported once, as one Normal event.
            created = [
                e["message"]
                for e in await env.events("GannetCluster", "main")
                if e["reason"] == "Created"
            ]
            assert sorted(created) == [
                "created ConfigMap main-config",
                "created NetworkPolicy main-peers",
                "created PodDisruptionBudget main",
                "created Secret main-peer-secret",
                "created Service main-client",
                "created Service main-peers",
                "created StatefulSet main",
            ]

    asyncio.run(scenario())


def status_writes(env: Env) -> int:
    return sum(
        1
        for r in env.api
        if r.method.value == "PATCH"
        and r.resource is not None
        and r.subresource == "status"
        and r.resource.plural == "gannetclusters"
    )
