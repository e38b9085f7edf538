"""Broker groups in process: two single-node groups (``broker-0``, ``broker-1``) that know each
other by seeds. Routes list both groups' queues in one order on either member, admin writes
reach both groups, the official clients send and consume across both, a request meant for the
other group is refused naming it, and a write that one group cannot take is reported."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import broker_groups
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.broker_groups import views as group_views
from gannet.node.cli.root import main
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.topics import TopicConfig, TopicConfigManager

from .conftest import unique

CLIENT_ID = (("x-mq-client-id", "tests@1@0@groups"),)
POLL_S = 0.2
WAIT_S = 20.0
INVISIBLE_S = 10
"""The shortest lease a broker grants: a receive whose answer the client gave up on (its request
timeout on a loaded machine) leaves its messages invisible this long, then they come back."""
RECEIVES_MAX = 40
"""The official Python client (5.1.2) picks a queue at random for every receive (it builds a new
selector with a random start each time), so after one group is drained a receive lands on it
again with probability 1/2 and waits out the broker's 5 s minimum long poll with nothing to
give. The number of such misses is unbounded in time but not in probability: 40 receives
leave the other group unvisited with probability 2^-39."""
BOX_RULES = str.maketrans("│┃", "  ")


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


def _messaging(endpoint: str) -> service_pb2_grpc.MessagingServiceStub:
    return service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))


def _until(condition: object, what: str) -> None:
    """Another thread's poller: wait, bounded, for what it makes true."""
    assert callable(condition)
    deadline = time.monotonic() + WAIT_S
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        pause.wait(0.05)


def _route(
    endpoint: str, topic: str, *, unknown_is_empty: bool = False
) -> list[tuple[str, int, tuple[int, ...]]]:
    """The route as (group, queue id, ports); ``unknown_is_empty``: a topic this member does
    not know yet (its poller has not seen it in another group) routes to nothing."""
    request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
    reply = _messaging(endpoint).QueryRoute(request, metadata=CLIENT_ID, timeout=5)
    if unknown_is_empty and reply.status.code == Code.TOPIC_NOT_FOUND:
        return []
    assert reply.status.code == Code.OK, reply.status
    return [
        (q.broker.name, q.id, tuple(a.port for a in q.broker.endpoints.addresses))
        for q in reply.message_queues
    ]


@dataclasses.dataclass
class Pair:
    zero: threads.BrokerThread
    one: threads.BrokerThread

    def knows_each_other(self) -> bool:
        views = [
            _admin(b.endpoint).GetClusterView(admin_pb2.GetClusterViewRequest())
            for b in (self.zero, self.one)
        ]
        return all(len(v.groups) == 2 for v in views)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("groups")
    zero = _start(root, "broker-0")
    one = _start(root, "broker-1", (zero.endpoint,))
    _admin(zero.endpoint).SetClusterSeeds(
        admin_pb2.SetClusterSeedsRequest(seeds=[one.endpoint]), timeout=10
    )
    made = Pair(zero, one)
    _until(made.knows_each_other, "both groups to know each other")
    yield made
    one.stop()
    zero.stop()


def test_a_topic_created_on_one_group_routes_over_both_in_one_order(pair: Pair) -> None:
    topic = unique("GrT")
    reply = _admin(pair.one.endpoint).CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=3), timeout=10
    )
    assert reply.topic.read_queue_nums == 3
    zero_port, one_port = (int(b.endpoint.rsplit(":", 1)[1]) for b in (pair.zero, pair.one))
    expected = [("broker-0", i, (zero_port,)) for i in range(3)]
    expected += [("broker-1", i, (one_port,)) for i in range(3)]
    _until(lambda: _route(pair.zero.endpoint, topic) == expected, "broker-0's route of both")
    assert _route(pair.one.endpoint, topic) == expected

    request = service_pb2.QueryAssignmentRequest(
        topic=definition_pb2.Resource(name=topic), group=definition_pb2.Resource(name="G")
    )
    _admin(pair.zero.endpoint).CreateGroup(admin_pb2.CreateGroupRequest(name="G"), timeout=10)
    found = _messaging(pair.zero.endpoint).QueryAssignment(request, metadata=CLIENT_ID, timeout=5)
    assert found.status.code == Code.OK, found.status
    assigned = [
        (
            a.message_queue.broker.name,
            a.message_queue.id,
            len(a.message_queue.broker.endpoints.addresses),
        )
        for a in found.assignments
    ]
    assert assigned == [("broker-0", -1, 1), ("broker-1", -1, 1)]  # one per group, any queue

    again = _admin(pair.zero.endpoint)
    with pytest.raises(grpc.RpcError) as refused:
        again.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=3), timeout=10)
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS


def test_official_clients_produce_and_consume_across_both_groups(pair: Pair) -> None:
    topic, group = unique("GrP"), unique("GrG")
    admin = _admin(pair.zero.endpoint)
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=10)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=10)
    _until(lambda: len(_route(pair.zero.endpoint, topic)) == 4, "the route of both groups")
    config = ClientConfiguration(pair.zero.endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,))
    producer.startup()
    sent: dict[str, str] = {}
    try:
        for i in range(24):
            message = Message()
            message.topic, message.body, message.keys = topic, f"m{i}".encode(), f"k{i}"
            receipt = producer.send(message)
            sent[f"m{i}"] = receipt.message_queue.message_queue0().broker.name
    finally:
        producer.shutdown()
    assert set(sent.values()) == {"broker-0", "broker-1"}, sent

    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    got: set[str] = set()
    try:
        for _ in range(RECEIVES_MAX):
            if got == set(sent):
                break
            for message in consumer.receive(16, INVISIBLE_S):
                consumer.ack(message)  # goes to the group the message came from
                got.add(bytes(message.body).decode())
    finally:
        consumer.shutdown()
    assert got == set(sent)


def test_the_official_push_consumer_takes_one_assignment_per_group(pair: Pair) -> None:
    """QueryAssignment answers one queue-id -1 assignment per group; the official push
    consumer then runs one receive loop per group and gets every message of both."""
    topic, group = unique("GrA"), unique("GrB")
    admin = _admin(pair.one.endpoint)
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=10)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=10)
    _until(lambda: len(_route(pair.one.endpoint, topic)) == 4, "the route of both groups")
    config = ClientConfiguration(pair.one.endpoint, Credentials(), request_timeout=5)
    seen: list[str] = []
    lock = threading.Lock()

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            with lock:
                seen.append(bytes(message.body).decode())
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(config, group, Listener(), {topic: FilterExpression("*")})
    consumer.startup()
    producer = Producer(config, (topic,))
    producer.startup()
    sent: dict[str, str] = {}
    try:
        for i in range(16):
            message = Message()
            message.topic, message.body = topic, f"p{i}".encode()
            receipt = producer.send(message)
            sent[f"p{i}"] = receipt.message_queue.message_queue0().broker.name
        assert set(sent.values()) == {"broker-0", "broker-1"}, sent

        def all_seen() -> bool:
            with lock:
                return set(seen) >= set(sent)

        _until(all_seen, "the push consumer to get the messages of both groups")
    finally:
        producer.shutdown()
        consumer.shutdown()


def test_offset_resets_and_the_revive_queue_count_reach_every_group(pair: Pair) -> None:
    topic, group = unique("GrR"), unique("GrS")
    admin = _admin(pair.zero.endpoint)
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=10)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=10)
    reply = admin.ResetOffset(
        admin_pb2.ResetOffsetRequest(group=group, topic=topic, offset=0), timeout=10
    )
    assert [(q.broker, q.queue_id) for q in reply.queues] == [
        ("broker-0", 0),
        ("broker-0", 1),
        ("broker-1", 0),
        ("broker-1", 1),
    ]
    assert [(q.broker, q.queue_id) for q in reply.before] == [
        (q.broker, q.queue_id) for q in reply.queues
    ]
    one = _admin(pair.one.endpoint)
    count = one.GetReviveQueues(admin_pb2.GetReviveQueuesRequest(), timeout=10).active_count
    wanted = 2 if count != 2 else 3
    admin.SetReviveQueueCount(admin_pb2.SetReviveQueueCountRequest(count=wanted), timeout=10)
    for broker in (pair.zero, pair.one):
        got = _admin(broker.endpoint).GetReviveQueues(admin_pb2.GetReviveQueuesRequest())
        assert got.active_count == wanted, broker.endpoint
    admin.SetReviveQueueCount(admin_pb2.SetReviveQueueCountRequest(count=count), timeout=10)


def _receive(
    endpoint: str, topic: str, group: str, broker: str
) -> service_pb2.ReceiveMessageResponse:
    request = service_pb2.ReceiveMessageRequest(batch_size=1)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.message_queue.id = -1
    request.message_queue.broker.name = broker
    request.filter_expression.expression = "*"
    request.invisible_duration.FromSeconds(60)
    request.long_polling_timeout.FromSeconds(1)
    frames = list(_messaging(endpoint).ReceiveMessage(request, metadata=CLIENT_ID, timeout=10))
    statuses = [f for f in frames if f.HasField("status")]
    messages = [f for f in frames if f.HasField("message")]
    return messages[0] if messages else statuses[-1]


def test_requests_meant_for_the_other_group_are_refused_naming_it(pair: Pair) -> None:
    topic, group = unique("GrM"), unique("GrH")
    admin = _admin(pair.zero.endpoint)
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=1), timeout=10)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=10)
    send = service_pb2.SendMessageRequest()
    msg = send.messages.add(body=b"x")
    msg.topic.name = topic
    msg.system_properties.message_id = "01GROUPS0001"
    assert (
        _messaging(pair.one.endpoint).SendMessage(send, metadata=CLIENT_ID, timeout=5).status.code
        == Code.OK
    )

    wrong_queue = _receive(pair.zero.endpoint, topic, group, "broker-1")
    assert wrong_queue.status.code == Code.BAD_REQUEST
    assert "broker-1" in wrong_queue.status.message
    assert pair.one.endpoint in wrong_queue.status.message

    received: service_pb2.ReceiveMessageResponse | None = None

    def got_it() -> bool:
        nonlocal received
        received = _receive(pair.one.endpoint, topic, group, "broker-1")
        return bool(received.HasField("message"))

    _until(got_it, "the message at broker-1")
    assert received is not None
    handle = received.message.system_properties.receipt_handle
    ack = service_pb2.AckMessageRequest()
    ack.group.name, ack.topic.name = group, topic
    ack.entries.add(message_id="01GROUPS0001", receipt_handle=handle)
    refused = _messaging(pair.zero.endpoint).AckMessage(ack, metadata=CLIENT_ID, timeout=5)
    assert refused.status.code == Code.INVALID_RECEIPT_HANDLE
    assert "broker-1" in refused.status.message
    assert pair.one.endpoint in refused.status.message
    short = handle.rsplit(" ", 3)[0]  # the broker name is there, the rest is not: not foreign
    ack.entries[0].receipt_handle = short
    malformed = _messaging(pair.zero.endpoint).AckMessage(ack, metadata=CLIENT_ID, timeout=5)
    assert "broker-1" in short
    assert "belongs to broker group" not in malformed.status.message
    assert "fields" in malformed.entries[0].status.message + malformed.status.message
    ack.entries[0].receipt_handle = handle
    accepted = _messaging(pair.one.endpoint).AckMessage(ack, metadata=CLIENT_ID, timeout=5)
    assert accepted.status.code == Code.OK, accepted.status


def test_a_group_that_cannot_take_a_write_is_named_and_a_rerun_completes_it(
    tmp_path: Path,
) -> None:
    zero = _start(tmp_path, "broker-0")
    one = _start(tmp_path / "a", "broker-1", (zero.endpoint,))
    admin = _admin(zero.endpoint)
    try:
        admin.SetClusterSeeds(admin_pb2.SetClusterSeedsRequest(seeds=[one.endpoint]), timeout=10)
        _until(
            lambda: len(admin.GetClusterView(admin_pb2.GetClusterViewRequest()).groups) == 2, "view"
        )
        one_endpoint = one.endpoint
        one.stop()
        topic = unique("GrF")
        with pytest.raises(grpc.RpcError) as partial:
            admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=30)
        assert partial.value.code() == grpc.StatusCode.UNAVAILABLE
        details = str(partial.value.details())
        assert "applied on broker-0" in details, details
        assert "NOT applied on broker-1" in details, details
        # the stopped group keeps its queues in routes (its last view) and says why it is stale
        view = admin.GetClusterView(admin_pb2.GetClusterViewRequest())
        stale = [g for g in view.groups if g.group.broker_name == "broker-1"]
        assert stale
        assert stale[0].group.member_endpoints == [one_endpoint]

        one = _start(tmp_path / "a", "broker-1", (zero.endpoint,))
        admin.SetClusterSeeds(admin_pb2.SetClusterSeedsRequest(seeds=[one.endpoint]), timeout=10)
        reply = admin.CreateTopic(
            admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=30
        )
        assert reply.topic.name == topic  # broker-0 had it; broker-1 now has it too
        assert (
            _admin(one.endpoint)
            .DescribeTopic(admin_pb2.DescribeTopicRequest(name=topic), timeout=5)
            .topic.read_queue_nums
            == 2
        )
    finally:
        one.stop()
        zero.stop()


def test_a_write_limited_to_some_groups_and_unknown_groups_refused(pair: Pair) -> None:
    topic = unique("GrL")
    admin = _admin(pair.zero.endpoint)
    with pytest.raises(grpc.RpcError) as unknown:
        admin.CreateTopic(
            admin_pb2.CreateTopicRequest(name=topic, broker_groups=["broker-7"]), timeout=10
        )
    assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "broker-7" in str(unknown.value.details())
    admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=2, broker_groups=["broker-1"]),
        timeout=10,
    )
    _until(
        lambda: len(_route(pair.one.endpoint, topic, unknown_is_empty=True)) == 2,
        "broker-1's own route",
    )
    _until(
        lambda: (
            [q[0] for q in _route(pair.zero.endpoint, topic, unknown_is_empty=True)]
            == ["broker-1"] * 2
        ),
        "broker-0's route of a topic only broker-1 defines",
    )


# ------------------------------------------------------------------------------- pure parts
def test_groups_sort_by_number_and_merge_in_cluster_order() -> None:
    names = ["broker-10", "broker-2", "broker-1"]
    assert sorted(names, key=group_views.group_order) == ["broker-1", "broker-2", "broker-10"]

    def queue(name: str, i: int) -> definition_pb2.MessageQueue:
        return definition_pb2.MessageQueue(id=i, broker=definition_pb2.Broker(name=name))

    merged = broker_groups.merged_route(
        "broker-2", [queue("broker-2", 0)], [queue("broker-10", 0), queue("broker-1", 0)]
    )
    assert [q.broker.name for q in merged] == ["broker-1", "broker-2", "broker-10"]


def test_topics_version_ignores_order_and_sees_a_queue_change() -> None:
    a = group_views.RouteTopic("A", 4, 4, 6, "NORMAL")
    b = group_views.RouteTopic("B", 2, 2, 6, "FIFO")
    assert group_views.topics_version([a, b]) == group_views.topics_version([b, a])
    grown = dataclasses.replace(a, read_queue_nums=8)
    assert group_views.topics_version([grown, b]) != group_views.topics_version([a, b])


def test_the_poll_answer_digest_is_computed_once_per_topic_table_version(tmp_path: Path) -> None:
    table = TopicConfigManager(tmp_path)
    table.put(TopicConfig("A", read_queue_nums=4, write_queue_nums=4))
    cache = group_views.RouteTopicsCache()
    listed = [0]

    def configs() -> list[TopicConfig]:
        listed[0] += 1
        return table.list()

    topics, first = cache.get(table.data_version, configs)
    assert list(topics) == ["A"]
    for _ in range(3):  # unchanged table: neither listed nor digested again
        assert cache.get(table.data_version, configs)[1] == first
    assert (listed[0], cache.computed) == (1, 1)

    table.put(TopicConfig("A", read_queue_nums=8, write_queue_nums=8))  # a write: new version
    topics, grown = cache.get(table.data_version, configs)
    assert grown != first
    assert topics["A"].read_queue_nums == 8
    table.put(TopicConfig("A", read_queue_nums=8, write_queue_nums=8))  # same config: no write
    assert cache.get(table.data_version, configs)[1] == grown
    assert table.delete("A")
    assert cache.get(table.data_version, configs) == ({}, group_views.topics_version([]))
    assert (listed[0], cache.computed) == (3, 3)


def test_host_names_are_listed_alone_addresses_together() -> None:
    both = broker_groups.member_endpoints_pb(["10.0.0.1:8081", "10.0.0.2:8081"])
    assert [a.host for a in both.addresses] == ["10.0.0.1", "10.0.0.2"]
    named = broker_groups.member_endpoints_pb(["b-0.svc:8081", "b-1.svc:8081"])
    assert [a.host for a in named.addresses] == ["b-0.svc"]
    assert named.scheme == definition_pb2.DOMAIN_NAME


def test_status_and_topic_describe_show_every_group(pair: Pair) -> None:
    topic = unique("GrC")
    _admin(pair.one.endpoint).CreateTopic(
        admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=10
    )
    runner = CliRunner()
    status = runner.invoke(main, ["status", "-o", "json", "--endpoint", pair.zero.endpoint])
    assert status.exit_code == 0, status.output
    groups = json.loads(status.output)["broker_groups"]
    assert [g["broker_name"] for g in groups] == ["broker-0 (this)", "broker-1"]
    assert groups[1]["members"] == pair.one.endpoint
    described = runner.invoke(
        main, ["topic", "describe", topic, "-o", "json", "--endpoint", pair.zero.endpoint]
    )
    assert described.exit_code == 0, described.output
    document = json.loads(described.output)
    assert len(document["queues"]) == 2
    assert len(document["broker_groups"]["broker-1"]["queues"]) == 2


def test_a_write_while_a_seed_never_answered_says_so(tmp_path: Path) -> None:
    lone = _start(tmp_path, "broker-0", ("127.0.0.1:1",))
    try:
        admin = _admin(lone.endpoint)
        with pytest.raises(grpc.RpcError) as partial:
            admin.CreateTopic(admin_pb2.CreateTopicRequest(name="GrSeed", queue_nums=1), timeout=30)
        assert partial.value.code() == grpc.StatusCode.UNAVAILABLE
        details = str(partial.value.details())
        assert "applied on broker-0" in details
        assert "NOT applied on the group of seed 127.0.0.1:1" in details
    finally:
        lone.stop()


def test_no_seeds_answers_at_once(tmp_path: Path) -> None:
    """``SetClusterSeeds`` with no seeds on a member polling no one has no poll round to wait
    for: it answers at once (with a long poll interval here, waiting for a round would run
    past the call's deadline)."""
    store = dataclasses.replace(
        StoreConfig.for_tests(tmp_path / "broker-0", flush_mode=FlushMode.SYNC_FLUSH),
        broker_name="broker-0",
    )
    lone = threads.start(BrokerConfig(store=store, listen_port=0, group_poll_interval_s=600.0))
    try:
        view = _admin(lone.endpoint).SetClusterSeeds(
            admin_pb2.SetClusterSeedsRequest(seeds=[]), timeout=30
        )
        assert [g.group.broker_name for g in view.groups] == ["broker-0"]
        assert list(view.seeds) == []
    finally:
        lone.stop()


def test_reset_offset_names_each_queues_group(pair: Pair) -> None:
    """``group reset-offset`` on a cluster of groups: queue ids repeat across groups, so each
    row names its group (JSON ``broker``, a ``broker`` column in the table)."""
    topic, group = unique("GrO"), unique("GrOG")
    admin = _admin(pair.zero.endpoint)
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=10)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=10)
    runner = CliRunner()
    base = ["group", "reset-offset", group, topic, "--to-offset", "0"]
    endpoint = ["--endpoint", pair.one.endpoint]
    plan = runner.invoke(main, [*base, "-o", "json", *endpoint])
    assert plan.exit_code == 0, plan.output
    rows = json.loads(plan.output)["queues"]
    assert [(r["broker"], r["queue"]) for r in rows] == [
        ("broker-0", 0),
        ("broker-0", 1),
        ("broker-1", 0),
        ("broker-1", 1),
    ]
    table = runner.invoke(main, [*base, "--execute", *endpoint], terminal_width=200)
    assert table.exit_code == 0, table.output
    cells = [line.translate(BOX_RULES).split() for line in table.output.splitlines()]
    header = next(line for line in cells if "committed" in line)
    assert header[:3] == ["topic", "broker", "queue"]
    lines = [line for line in cells if topic in line]
    assert [line[:3] for line in lines] == [
        [topic, "broker-0", "0"],
        [topic, "broker-0", "1"],
        [topic, "broker-1", "0"],
        [topic, "broker-1", "1"],
    ]
    assert "reset 4 queues" in table.output
