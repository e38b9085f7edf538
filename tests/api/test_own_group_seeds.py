"""Seed lists that name this member's own group (issue 22): an operator or a user naturally
lists every group's endpoints, the one being configured included, so a member given its own
endpoint, or another member of its own group, as a seed takes it for "this group": it is not
polled, not counted as a group not heard of, and an admin write fans out to each other group
once.

The failed e2e-kube run this comes from: a broker requiring signed requests without the
cluster key (so its own polls are refused, as they would be by any other group) was given its
own endpoint as its only seed; the seed never answered as a group, so every fanned-out write
ended "NOT applied on the group of seed <its own endpoint>" and a topic deletion never
finished.
"""

from __future__ import annotations

import asyncio
import dataclasses
import types
from pathlib import Path
from typing import cast

import grpc
import pytest

from gannet.node.api import routes
from gannet.node.api.cluster_admin import BrokerGroups
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.broker_groups.polling import GroupPoller
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.message_store import MessageStore
from tests.replication.test_member_routes import _node
from tests.security.conftest import ADMIN, Signed, write_accounts

from .conftest import unique
from .test_broker_groups import POLL_S, _admin, _start, _until

pytestmark = pytest.mark.timeout(120)


def _signed_admin(endpoint: str) -> admin_pb2_grpc.AdminStub:
    channel = grpc.intercept_channel(grpc.insecure_channel(endpoint), Signed(*ADMIN))
    return admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]


def _view(admin: admin_pb2_grpc.AdminStub) -> admin_pb2.ClusterView:
    view: admin_pb2.ClusterView = admin.GetClusterView(admin_pb2.GetClusterViewRequest(), timeout=5)
    return view


def test_its_own_endpoint_as_seed_with_auth_and_no_cluster_key(tmp_path: Path) -> None:
    """The e2e-kube case: signed requests required, no cluster key, its own endpoint set as
    seed at run time; creating and deleting a topic both finish, and the seed is this group."""
    store = dataclasses.replace(
        StoreConfig.for_tests(tmp_path / "b0", flush_mode=FlushMode.SYNC_FLUSH),
        broker_name="broker-0",
    )
    config = BrokerConfig(
        store=store,
        listen_port=0,
        auth_file=write_accounts(tmp_path / "accounts.json"),
        group_poll_interval_s=POLL_S,
    )
    lone = threads.start(config)
    try:
        admin = _signed_admin(lone.endpoint)
        view = admin.SetClusterSeeds(
            admin_pb2.SetClusterSeedsRequest(seeds=[lone.endpoint]), timeout=10
        )
        assert [g.group.broker_name for g in view.groups] == ["broker-0"]
        assert list(view.seeds) == [lone.endpoint]
        topic = unique("OwnSeed")
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=30)
        admin.DeleteTopic(admin_pb2.DeleteTopicRequest(name=topic), timeout=30)
        groups = lone.broker.groups
        assert groups is not None
        assert groups.poller.unowned_seeds() == {}
        assert groups.poller.polls_total == 0  # its own group is never asked who it is
    finally:
        lone.stop()


def test_every_groups_endpoints_as_seeds_on_every_group(tmp_path: Path) -> None:
    """Both groups get the same seed list, naming both; each knows the other once, a write
    reaches each group once, and neither polls itself."""
    zero = _start(tmp_path, "broker-0")
    one = _start(tmp_path / "a", "broker-1")
    try:
        both = [zero.endpoint, one.endpoint]
        for broker in (zero, one):
            _admin(broker.endpoint).SetClusterSeeds(
                admin_pb2.SetClusterSeedsRequest(seeds=both), timeout=10
            )
        for broker in (zero, one):
            view = _view(_admin(broker.endpoint))
            assert [g.group.broker_name for g in view.groups] == ["broker-0", "broker-1"]
            assert not any(g.last_error for g in view.groups)
        topic = unique("AllSeeds")
        _admin(one.endpoint).CreateTopic(
            admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=30
        )
        for broker in (zero, one):
            described = _admin(broker.endpoint).DescribeTopic(
                admin_pb2.DescribeTopicRequest(name=topic), timeout=5
            )
            assert [q.queue_id for q in described.queues] == [0, 1]
        _admin(zero.endpoint).DeleteTopic(admin_pb2.DeleteTopicRequest(name=topic), timeout=30)
        for broker in (zero, one):
            with pytest.raises(grpc.RpcError) as gone:
                _admin(broker.endpoint).DescribeTopic(
                    admin_pb2.DescribeTopicRequest(name=topic), timeout=5
                )
            assert gone.value.code() == grpc.StatusCode.NOT_FOUND
        for broker in (zero, one):
            groups = broker.broker.groups
            assert groups is not None
            assert groups.poller.unowned_seeds() == {}
            assert broker.endpoint not in groups.poller.channel_endpoints()
    finally:
        one.stop()
        zero.stop()


def test_its_own_endpoint_in_cluster_seeds_at_start(tmp_path: Path) -> None:
    """``--cluster-seeds`` naming the member itself and the other group."""
    one = _start(tmp_path / "a", "broker-1")
    probe = _start(tmp_path / "p", "broker-0")
    endpoint = probe.endpoint  # the port this test's broker-0 will listen on again
    probe.stop()
    host, _, port = endpoint.rpartition(":")
    store = dataclasses.replace(
        StoreConfig.for_tests(tmp_path / "b0", flush_mode=FlushMode.SYNC_FLUSH),
        broker_name="broker-0",
    )
    config = BrokerConfig(
        store=store,
        listen_host=host,
        listen_port=int(port),
        cluster_seeds=(endpoint, one.endpoint),
        group_poll_interval_s=POLL_S,
    )
    zero = threads.start(config)
    try:
        assert zero.endpoint == endpoint
        admin = _admin(zero.endpoint)
        _until(lambda: len(_view(admin).groups) == 2, "broker-0 to know broker-1")
        topic = unique("StartSeeds")
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=1), timeout=30)
        groups = zero.broker.groups
        assert groups is not None
        assert groups.poller.unowned_seeds() == {}
        assert zero.endpoint not in groups.poller.channel_endpoints()
    finally:
        zero.stop()
        one.stop()


def test_a_seed_of_another_cluster_is_refused_naming_it(tmp_path: Path) -> None:
    """A seed answering as a group of another cluster (a leftover cluster's Service, say):
    ``SetClusterSeeds`` refuses it, naming it and what to do, and the seeds stay as they were;
    given at start (``--cluster-seeds``), every fanned-out write names it as not applied."""
    other_store = dataclasses.replace(
        StoreConfig.for_tests(tmp_path / "o", flush_mode=FlushMode.SYNC_FLUSH),
        broker_name="broker-1",
        cluster_name="OtherCluster",
    )
    other = threads.start(BrokerConfig(store=other_store, listen_port=0))
    zero = _start(tmp_path, "broker-0")
    late = _start(tmp_path / "late", "broker-0", (other.endpoint,))
    try:
        admin = _admin(zero.endpoint)
        with pytest.raises(grpc.RpcError) as refused:
            admin.SetClusterSeeds(
                admin_pb2.SetClusterSeedsRequest(seeds=[zero.endpoint, other.endpoint]),
                timeout=10,
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = str(refused.value.details())
        for part in (other.endpoint, "'OtherCluster'", "remove it from the seeds", "unchanged"):
            assert part in details, details
        assert list(_view(admin).seeds) == []

        with pytest.raises(grpc.RpcError) as partial:
            _admin(late.endpoint).CreateTopic(
                admin_pb2.CreateTopicRequest(name=unique("Foreign"), queue_nums=1), timeout=30
            )
        details = str(partial.value.details())
        assert f"NOT applied on the group of seed {other.endpoint}" in details, details
        assert "of cluster 'OtherCluster'" in details, details
        assert [g.group.broker_name for g in _view(_admin(late.endpoint)).groups] == ["broker-0"]
    finally:
        late.stop()
        zero.stop()
        other.stop()


def test_another_group_under_this_groups_name_is_refused(tmp_path: Path) -> None:
    """Two groups both started as ``broker-0``: a seed answering with this group's name but
    sharing no member with it is not taken for this group (its writes would be lost there)."""
    zero = _start(tmp_path, "broker-0")
    twin = _start(tmp_path / "twin", "broker-0")
    try:
        admin = _admin(zero.endpoint)
        with pytest.raises(grpc.RpcError) as refused:
            admin.SetClusterSeeds(
                admin_pb2.SetClusterSeedsRequest(seeds=[twin.endpoint]), timeout=10
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = str(refused.value.details())
        for part in (twin.endpoint, "two groups share the broker name", "--broker-name"):
            assert part in details, details
        assert list(_view(admin).seeds) == []
        groups = zero.broker.groups
        assert groups is not None
        assert groups.poller.channel_endpoints() == []  # the channel opened to ask it is closed
    finally:
        twin.stop()
        zero.stop()


def test_a_refused_poll_says_to_give_the_cluster_key(tmp_path: Path) -> None:
    """A seed of another group that requires signatures, polled unsigned: the fan-out's
    answer says what to do, not just UNAUTHENTICATED."""
    store = dataclasses.replace(
        StoreConfig.for_tests(tmp_path / "b1", flush_mode=FlushMode.SYNC_FLUSH),
        broker_name="broker-1",
    )
    accounts = write_accounts(tmp_path / "accounts.json")
    secured = threads.start(BrokerConfig(store=store, listen_port=0, auth_file=accounts))
    zero = _start(tmp_path, "broker-0", (secured.endpoint,))
    try:
        with pytest.raises(grpc.RpcError) as partial:
            _admin(zero.endpoint).CreateTopic(
                admin_pb2.CreateTopicRequest(name=unique("Unsigned"), queue_nums=1), timeout=30
            )
        details = str(partial.value.details())
        assert f"NOT applied on the group of seed {secured.endpoint}" in details, details
        assert "UNAUTHENTICATED" in details, details
        assert "--cluster-access-key" in details, details
    finally:
        zero.stop()
        secured.stop()


def test_every_member_of_its_own_group_is_a_seed_of_this_group() -> None:
    """A 3-member group: each member's client endpoint (configured, serving or not) and the
    loopback forms of a member listening on a wildcard address are this group; a poll round
    asks none of them (no channel is opened), and only the other group's seed is unowned."""
    node = _node(["10.0.0.1", "10.0.0.2", "10.0.0.3"], leader_id=1, me=2)
    store = cast(MessageStore, types.SimpleNamespace(config=StoreConfig.for_tests(Path("/x"))))
    own_three = ["10.0.0.1:8000", "10.0.0.2:8001", "10.0.0.3:8002"]

    async def run() -> None:
        poller = GroupPoller("broker-0", [*own_three, "127.0.0.1:8001", "10.0.1.1:8000"])
        identity = routes.BrokerIdentity("broker-0", "0.0.0.0", 8001)
        BrokerGroups(store, identity, node, poller)
        assert set(poller.unowned_seeds()) == {"10.0.1.1:8000"}
        assert poller.own_seeds() == [*own_three, "127.0.0.1:8001"]
        poller.timeout_s = 0.01  # the other group's seed does not exist: fail fast
        await poller.poll_once()
        assert poller.channel_endpoints() == ["10.0.1.1:8000"]
        assert poller.views == {}
        await poller.stop()

    asyncio.run(run())
