"""The failed e2e-kube run of issue 22, in process (kopf + KMock, one real in-process broker):
the operator reaches every broker group of a 2-group GannetCluster at one endpoint
(``FixedEndpoints`` without a ``--group-endpoint``: brokers outside Kubernetes, a test's
leftover cluster), so it sends that broker its own endpoint as the other group's seed
(``SetClusterSeeds``). The broker requires signed requests and has no cluster key, as the
e2e module broker did: before the fix it polled itself unsigned, was refused by its own gate,
and every fanned-out write (a Topic's create and delete) ended "NOT applied on the group of
seed <itself>". Now it takes the seed for its own group: the Topic is created and deleted.

In Kubernetes (``ServiceEndpoints``) the operator never sends a group its own endpoints: each
group's seeds are the other groups' client Services (``test_broker_group_planning``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol import auth
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.operator import brokers, contexts
from tests.operator.conftest import operator_env, ready
from tests.operator.test_security_kopf import ACCOUNTS, ADMIN

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]


@pytest.fixture
def signed_broker(tmp_path: Path) -> Iterator[threads.BrokerThread]:
    """Broker ``broker-0`` requiring signatures, without a cluster key, polling every 0.2 s."""
    accounts = tmp_path / "accounts.json"
    accounts.write_text(json.dumps(ACCOUNTS))
    store = dataclasses.replace(
        StoreConfig.for_tests(tmp_path / "store", flush_mode=FlushMode.SYNC_FLUSH),
        broker_name="broker-0",
    )
    running = threads.start(
        BrokerConfig(store=store, listen_port=0, auth_file=accounts, group_poll_interval_s=0.2)
    )
    yield running
    running.stop()


def _seeds(endpoint: str) -> list[str]:
    channel = grpc.intercept_channel(
        grpc.insecure_channel(endpoint), auth.SigningInterceptor(*ADMIN)
    )
    with channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        view = stub.GetClusterView(admin_pb2.GetClusterViewRequest(), timeout=5)
        return list(view.seeds)


def test_a_broker_sent_its_own_endpoint_as_a_seed_still_fans_out(
    signed_broker: threads.BrokerThread,
) -> None:
    endpoint = signed_broker.endpoint

    async def scenario() -> None:
        security = brokers.Security(access_key=ADMIN[0], secret_key=ADMIN[1])
        async with operator_env(
            endpoint, endpoints=contexts.FixedEndpoints(endpoint), broker_security=security
        ) as env:
            await env.apply("GannetCluster", "wide", {"replicas": 1, "brokerGroups": 2})
            sent = await env.wait_for_event(
                "GannetCluster", "wide", "Normal", "ClusterSeedsSet", contains=endpoint
            )
            assert "wide-0" in sent["message"], sent
            assert await asyncio.to_thread(_seeds, endpoint) == [endpoint]

            await env.apply("Topic", "orders", {"cluster": "wide", "queues": 2})
            assert await env.wait_for("Topic", "orders", ready)
            await env.delete("Topic", "orders")
            await env.wait_for("Topic", "orders", lambda o: o is None)

    asyncio.run(scenario())
