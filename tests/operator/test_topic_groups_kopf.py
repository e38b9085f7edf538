"""A Topic resource changed while a broker group drains, reconciled by kopf (in-process, KMock
API emulator) against two real in-process brokers that are two broker groups of one cluster
(``broker-0`` seeded with ``broker-1`` and back): the change reaches both groups, but the
draining group's queues stay read-only (:func:`gannet.operator.topic_planning.scope_to_serving`)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.operator import contexts, resources
from tests.operator.conftest import NAMESPACE, operator_env, ready

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]

POLL_S = 0.2
WAIT_S = 20.0
READ, WRITE = 4, 2


def _start(root: Path, name: str, seeds: tuple[str, ...] = ()) -> threads.BrokerThread:
    store = dataclasses.replace(
        StoreConfig.for_tests(root / name, flush_mode=FlushMode.SYNC_FLUSH), broker_name=name
    )
    config = BrokerConfig(
        store=store, listen_port=0, cluster_seeds=seeds, group_poll_interval_s=POLL_S
    )
    return threads.start(config)


def _admin(endpoint: str) -> admin_pb2_grpc.AdminStub:
    return admin_pb2_grpc.AdminStub(grpc.insecure_channel(endpoint))  # type: ignore[no-untyped-call]


def _topic(endpoint: str, name: str) -> admin_pb2.Topic | None:
    try:
        found = _admin(endpoint).DescribeTopic(admin_pb2.DescribeTopicRequest(name=name), timeout=5)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
        return None
    topic: admin_pb2.Topic = found.topic
    return topic


def _passed(obj: dict[str, Any] | None) -> bool:
    """The GannetCluster's pass over its current spec is done (its status written)."""
    meta, status = (obj or {}).get("metadata") or {}, (obj or {}).get("status") or {}
    return bool(status.get("brokerGroups")) and status.get("observedGeneration") == meta.get(
        "generation"
    )


@pytest.fixture(scope="module")
def groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    root = tmp_path_factory.mktemp("topic-groups")
    zero = _start(root, "broker-0")
    one = _start(root, "broker-1", (zero.endpoint,))
    try:
        _admin(zero.endpoint).SetClusterSeeds(
            admin_pb2.SetClusterSeedsRequest(seeds=[one.endpoint]), timeout=10
        )
        deadline = time.monotonic() + WAIT_S
        pause = threading.Event()
        while not all(
            len(_admin(b.endpoint).GetClusterView(admin_pb2.GetClusterViewRequest()).groups) == 2
            for b in (zero, one)
        ):
            assert time.monotonic() < deadline, "the two groups never knew each other"
            pause.wait(0.05)
        yield zero.endpoint, one.endpoint
    finally:
        one.stop()
        zero.stop()


def test_a_topic_update_during_a_drain_leaves_the_draining_group_read_only(
    groups: tuple[str, str],
) -> None:
    zero, one = groups

    async def scenario() -> None:
        endpoints = contexts.FixedEndpoints(zero, {"wide-g1": one})
        async with operator_env(zero, endpoints=endpoints) as env:
            await env.apply("GannetCluster", "wide", {"replicas": 1})
            assert await env.wait_for("GannetCluster", "wide", _passed)
            await env.apply(
                "Topic", "orders", {"cluster": "wide", "queues": 2, "permission": "ReadOnly"}
            )
            assert await env.wait_for("Topic", "orders", ready)
            for endpoint in (zero, one):  # fanned out by broker-0: both groups hold it
                found = await asyncio.to_thread(_topic, endpoint, "orders")
                assert found is not None
                assert found.perm == READ

            # broker-1 drains, as the cluster pass of a lowered brokerGroups shows it (its
            # pass has run; nothing triggers another: a status write is no spec change).
            rows = [
                {"group": 0, "brokerName": "broker-0", "phase": "Serving", "leader": "wide-0"},
                {"group": 1, "brokerName": "broker-1", "phase": "Draining", "leader": "wide-g1-0"},
            ]
            await env.kube.patch_status(
                resources.API_VERSION, "GannetCluster", NAMESPACE, "wide", {"brokerGroups": rows}
            )

            # The user opens the topic for writes and adds queues while broker-1 drains.
            await env.apply(
                "Topic", "orders", {"cluster": "wide", "queues": 3, "permission": "ReadWrite"}
            )
            assert await env.wait_for(
                "Topic", "orders", lambda o: ready(o) and (o or {})["status"]["queues"] == 3
            )
            served = await asyncio.to_thread(_topic, zero, "orders")
            drained = await asyncio.to_thread(_topic, one, "orders")
            assert served is not None
            assert drained is not None
            assert (served.perm, served.write_queue_nums) == (READ | WRITE, 3)
            # The queues reached the draining group (a drain undone finds the same queues);
            # its permission did not: it never became writable.
            assert drained.write_queue_nums == 3
            assert drained.perm == READ
            cluster = await env.get("GannetCluster", "wide")
            assert cluster is not None
            assert cluster["status"]["brokerGroups"] == rows

            # A topic created during the drain is created on the serving groups only.
            await env.apply("Topic", "audit", {"cluster": "wide", "queues": 2})
            assert await env.wait_for("Topic", "audit", ready)
            assert await asyncio.to_thread(_topic, zero, "audit") is not None
            assert await asyncio.to_thread(_topic, one, "audit") is None

    asyncio.run(scenario())
