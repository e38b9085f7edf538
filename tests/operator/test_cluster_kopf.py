"""GannetCluster reconciled by kopf (in-process, KMock API emulator): the StatefulSet, Services,
ConfigMap, PodDisruptionBudget and ServiceMonitor are created with the right shape; scale-down
is refused while no leader vouches for it; the cleanup schedule (injected clock) triggers the
admin Cleanup RPC on the in-process broker and the status reports the run."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import kmock
import pytest

from gannet.node.broker import threads
from tests.operator.conftest import NAMESPACE, FakeClock, operator_env

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


def test_cluster_objects_and_refused_scale_down(broker: threads.BrokerThread) -> None:
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
            args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
            assert args[args.index("--node-id") + 1] == "$(POD_NAME)"
            assert args[args.index("--peers") + 1] == "$(GANNET_PEERS)"
            config = await env.kube.get("v1", "ConfigMap", NAMESPACE, "main-config")
            assert config is not None
            peers = config["data"]["GANNET_PEERS"].split(",")
            assert peers[2] == "main-2=main-2.main-peers.demo.svc:8091/8081"
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

            # Scale-down needs the leader's word that every member is caught up; this broker
            # cannot give it (no Raft group behind it), so the StatefulSet keeps 3 members.
            await env.apply("GannetCluster", "main", {**spec, "replicas": 1})
            cluster = await env.wait_for(
                "GannetCluster",
                "main",
                lambda o: (o or {}).get("status", {}).get("observedGeneration") == 2,
            )
            scaling = condition(cluster, "Scaling")
            assert scaling is not None
            assert (scaling["status"], scaling["reason"]) == ("False", "ScaleDownBlocked")
            sts = await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, "main")
            assert sts is not None
            assert sts["spec"]["replicas"] == 3

            # Scale-up is applied at once, with the new members in the peers list.
            await env.apply("GannetCluster", "main", {**spec, "replicas": 5})
            await env.wait_for(
                "GannetCluster",
                "main",
                lambda o: (o or {}).get("status", {}).get("observedGeneration") == 3,
            )
            sts = await env.kube.get("apps/v1", "StatefulSet", NAMESPACE, "main")
            assert sts is not None
            assert sts["spec"]["replicas"] == 5
            config = await env.kube.get("v1", "ConfigMap", NAMESPACE, "main-config")
            assert config is not None
            assert len(config["data"]["GANNET_PEERS"].split(",")) == 5
            pdb = await env.kube.get("policy/v1", "PodDisruptionBudget", NAMESPACE, "main")
            assert pdb is not None
            assert pdb["spec"]["maxUnavailable"] == 2

    asyncio.run(scenario())


def test_cleanup_schedule_triggers_cleanup(broker: threads.BrokerThread) -> None:
    clock = FakeClock(dt.datetime(2026, 3, 1, 3, 59, 0, tzinfo=dt.UTC))

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
            assert report["lastRunFilesDeleted"] >= 0
            assert broker.broker.store.cleaner.last_result is not None

    asyncio.run(scenario())
