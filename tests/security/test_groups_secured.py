"""Broker groups with auth and mutual TLS on (issue 22): two in-process single-node groups
whose client ports require signed requests and a client certificate of the cluster CA.

Each member polls the other over TLS with its own certificate and signs its polls with the
cluster access key it is given (``BrokerConfig.cluster_access_key``, ``--cluster-access-key``);
admin writes fan out over the same TLS channels carrying their caller's signature. Routes then
span both groups and a ``CreateTopic`` sent to one group lands on both. A member without the
cluster key is refused by the others (its polls are unsigned), which is what this fixes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol import tls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from tests.api.test_broker_groups import _until

from . import certs
from .conftest import ADMIN, Signed, write_accounts

pytestmark = pytest.mark.timeout(120)
POLL_S = 0.2


@dataclasses.dataclass
class Cluster:
    root: Path
    ca: certs.Authority
    client: certs.Issued
    accounts: Path
    brokers: list[threads.BrokerThread] = dataclasses.field(default_factory=list)

    @property
    def zero(self) -> threads.BrokerThread:
        return self.brokers[0]

    @property
    def one(self) -> threads.BrokerThread:
        return self.brokers[1]

    def channel(self, endpoint: str) -> grpc.Channel:
        """A signed (root key), mutual-TLS channel of an admin client."""
        credentials = tls.channel_credentials(
            self.ca.cert_file, self.client.cert_file, self.client.key_file
        )
        raw = grpc.secure_channel(endpoint, credentials)
        return grpc.intercept_channel(raw, Signed(*ADMIN))

    def admin(self, endpoint: str) -> admin_pb2_grpc.AdminStub:
        return admin_pb2_grpc.AdminStub(self.channel(endpoint))  # type: ignore[no-untyped-call]

    def start(
        self, name: str, seeds: tuple[str, ...], *, cluster_key: bool = True
    ) -> threads.BrokerThread:
        issued = self.ca.issue(self.root, name, server=True, client=True)
        store = dataclasses.replace(
            StoreConfig.for_tests(self.root / name, flush_mode=FlushMode.SYNC_FLUSH),
            broker_name=name,
        )
        config = BrokerConfig(
            store=store,
            listen_port=0,
            auth_file=self.accounts,
            tls_cert=issued.cert_file,
            tls_key=issued.key_file,
            tls_client_ca=self.ca.cert_file,
            cluster_seeds=seeds,
            group_poll_interval_s=POLL_S,
            cluster_access_key=ADMIN[0] if cluster_key else None,
            cluster_secret_key=ADMIN[1] if cluster_key else None,
        )
        return threads.start(config)

    def knows_each_other(self) -> bool:
        views = [
            self.admin(b.endpoint).GetClusterView(admin_pb2.GetClusterViewRequest(), timeout=5)
            for b in (self.zero, self.one)
        ]
        return all(len(v.groups) == 2 and not any(g.last_error for g in v.groups) for v in views)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("groups-secured")
    ca = certs.authority(root, "cluster-ca")
    client = ca.issue(root, "admin-client", server=False)
    accounts = write_accounts(root / "accounts.json")
    made = Cluster(root, ca, client, accounts)
    made.brokers.append(made.start("broker-0", ()))
    made.brokers.append(made.start("broker-1", (made.zero.endpoint,)))
    made.admin(made.zero.endpoint).SetClusterSeeds(
        admin_pb2.SetClusterSeedsRequest(seeds=[made.one.endpoint]), timeout=10
    )
    _until(made.knows_each_other, "both groups to know each other over TLS, signed")
    yield made
    made.one.stop()
    made.zero.stop()


def _route(cluster: Cluster, endpoint: str, topic: str) -> list[tuple[str, int]]:
    stub = service_pb2_grpc.MessagingServiceStub(cluster.channel(endpoint))
    request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
    reply = stub.QueryRoute(request, timeout=5)
    if reply.status.code == Code.TOPIC_NOT_FOUND:
        return []
    assert reply.status.code == Code.OK, reply.status
    return sorted((q.broker.name, q.id) for q in reply.message_queues)


def test_a_fanned_out_create_lands_on_both_groups_and_routes_span_them(cluster: Cluster) -> None:
    topic = "SecuredGroupsTopic"
    reply = cluster.admin(cluster.one.endpoint).CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=10
    )
    assert reply.topic.read_queue_nums == 2
    for broker in (cluster.zero, cluster.one):  # each group holds the topic itself
        described = cluster.admin(broker.endpoint).DescribeTopic(
            admin_pb2.DescribeTopicRequest(name=topic), timeout=5
        )
        assert [q.queue_id for q in described.queues] == [0, 1]
    expected = [("broker-0", 0), ("broker-0", 1), ("broker-1", 0), ("broker-1", 1)]
    _until(lambda: _route(cluster, cluster.zero.endpoint, topic) == expected, "broker-0's route")
    _until(lambda: _route(cluster, cluster.one.endpoint, topic) == expected, "broker-1's route")


def test_a_member_without_the_cluster_key_is_refused_by_the_others(cluster: Cluster) -> None:
    lone = cluster.start("broker-2", (cluster.zero.endpoint,), cluster_key=False)
    try:
        groups = lone.broker.groups
        assert groups is not None
        _until(
            lambda: (
                groups.poller.unowned_seeds()
                .get(cluster.zero.endpoint, "")
                .startswith("UNAUTHENTICATED")
            ),
            "broker-0 to refuse broker-2's unsigned poll",
        )
        why = groups.poller.unowned_seeds()[cluster.zero.endpoint]
        assert "--cluster-access-key" in why, why  # says what to do
        assert groups.poller.views == {}
    finally:
        lone.stop()
