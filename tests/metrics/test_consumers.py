"""Consumer, Pop and Raft figures: pure computations against fakes, and a live broker whose
``/metrics`` follows receives, acks and dead-lettering done over the v2 API."""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.broker import threads
from gannet.node.metrics import consumer_collecting as cc
from gannet.node.metrics import raft_collecting
from gannet.node.protocol.gen import admin_pb2
from gannet.node.replication import driver_state

from .conftest import (
    CLIENT_ID,
    RPC_TIMEOUT_S,
    create_topic,
    metrics_port,
    samples,
    scrape,
    send,
    value,
)

NOW_MS = 1_000_000


@dataclass
class FakeView:
    """A :class:`consumer_collecting.ConsumerView` from plain tables."""

    offsets: dict[tuple[str, str], list[tuple[int, cc.QueueOffsets]]] = field(default_factory=dict)
    stored_ms: dict[tuple[str, int, int], int] = field(default_factory=dict)
    inflight_counts: dict[tuple[str, str], int] = field(default_factory=dict)
    dlq: dict[str, int] = field(default_factory=dict)
    configured_groups: list[str] = field(default_factory=list)

    def pairs(self) -> list[tuple[str, str]]:
        return list(self.offsets)

    def queues(self, topic: str, group: str) -> list[tuple[int, cc.QueueOffsets]]:
        return self.offsets[(topic, group)]

    def store_time_ms(self, topic: str, queue_id: int, offset: int) -> int | None:
        return self.stored_ms.get((topic, queue_id, offset))

    def inflight(self) -> dict[tuple[str, str], int]:
        return self.inflight_counts

    def dead_lettered(self) -> dict[str, int]:
        return self.dlq

    def groups(self) -> list[str]:
        return self.configured_groups


def test_ready_counts_from_the_furthest_of_committed_min_and_popped() -> None:
    assert cc.QueueOffsets(min_offset=0, max_offset=10, committed=-1).ready == 10
    assert cc.QueueOffsets(min_offset=4, max_offset=10, committed=2).ready == 6
    assert cc.QueueOffsets(min_offset=0, max_offset=10, committed=3, popped_to=7).ready == 3
    assert cc.QueueOffsets(min_offset=0, max_offset=10, committed=12).ready == 0


def test_figures_fold_retry_topics_add_inflight_and_take_the_oldest_ready_age() -> None:
    view = FakeView(
        offsets={
            ("T", "G"): [
                (0, cc.QueueOffsets(0, 10, 4)),
                (1, cc.QueueOffsets(0, 5, 5)),
            ],
            ("%RETRY%G_T", "G"): [(0, cc.QueueOffsets(0, 3, 1))],
        },
        stored_ms={("T", 0, 4): NOW_MS - 2_500, ("%RETRY%G_T", 0, 1): NOW_MS - 9_000},
        inflight_counts={("T", "G"): 2, ("%RETRY%G_T", "G"): 1, ("X", "CID_RMQ_SYS_A"): 7},
        dlq={"G": 4},
    )
    snapshot = cc.figures_of(view, NOW_MS)
    assert list(snapshot.pairs) == [("T", "G")]
    f = snapshot.pairs[("T", "G")]
    assert (f.ready_messages, f.inflight_messages, f.lag_messages) == (6 + 2, 3, 11)
    assert f.lag_seconds == 9.0
    assert f.retry_messages == 3
    assert snapshot.dead_lettered == {"G": 4}


def test_pairs_past_the_bound_are_summed_under_other() -> None:
    view = FakeView(
        offsets={(f"T{i}", "G"): [(0, cc.QueueOffsets(0, i + 1, -1))] for i in range(5)},
        stored_ms={(f"T{i}", 0, 0): NOW_MS - 1000 * i for i in range(5)},
        dlq={f"G{i}": 1 for i in range(5)},
    )
    snapshot = cc.figures_of(view, NOW_MS, pairs_max=3)
    assert list(snapshot.pairs) == [("T0", "G"), ("T1", "G"), ("T2", "G"), ("_other", "_other")]
    other = snapshot.pairs[("_other", "_other")]
    assert other.ready_messages == 4 + 5
    assert other.lag_seconds == 4.0
    assert snapshot.dead_lettered == {"G": 0, "G0": 1, "G1": 1, "_other": 3}


def test_every_configured_group_has_a_dlq_series_at_zero_before_it_consumes() -> None:
    view = FakeView(configured_groups=["Fresh", "CID_RMQ_SYS_TRANS", "Dead"], dlq={"Dead": 2})
    snapshot = cc.figures_of(view, NOW_MS)
    assert snapshot.pairs == {}
    assert snapshot.dead_lettered == {"Dead": 2, "Fresh": 0}


@dataclass
class Peer:
    node_id: str
    lag_bytes: int
    reachable: bool = True


@dataclass
class Status:
    node_id: str = "n1"
    role: str = "leader"
    term: int = 3
    commit_offset: int = 1000
    last_offset: int = 1200
    peers: list[Peer] = field(default_factory=list)
    elections_total: int = 2
    leader_changes_total: int = 1


def _raft_samples(status: Status | None) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    collector = raft_collecting.RaftCollector(lambda: status)
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in collector.collect()
        for s in family.samples
    }


def test_raft_exports_nothing_without_replication_and_lag_only_on_the_leader() -> None:
    assert _raft_samples(None) == {}
    leader = _raft_samples(Status(peers=[Peer("n1", 0), Peer("n2", 200), Peer("n3", 50, False)]))
    assert leader[("gannet_raft_role", frozenset({("role", "leader")}))] == 1
    assert leader[("gannet_raft_role", frozenset({("role", "follower")}))] == 0
    assert leader[("gannet_raft_follower_lag_bytes", frozenset({("peer", "n2")}))] == 200
    assert leader[("gannet_raft_peer_reachable", frozenset({("peer", "n3")}))] == 0
    assert ("gannet_raft_follower_lag_bytes", frozenset({("peer", "n1")})) not in leader
    assert leader[("gannet_raft_elections_total", frozenset())] == 2
    assert leader[("gannet_raft_commit_offset_bytes", frozenset())] == 1000
    follower = _raft_samples(Status(role="follower", peers=[Peer("n2", 5)]))
    assert not [k for k in follower if k[0] == "gannet_raft_follower_lag_bytes"]
    assert follower[("gannet_raft_term", frozenset())] == 3


def _node_status_fits(status: driver_state.NodeStatus) -> raft_collecting.RaftStatusLike:
    return status  # mypy checks that the replication layer's status fits the collector


def test_replication_node_status_fits_the_collector() -> None:
    peers = (
        driver_state.PeerStatus(2, "p2", "c2", match_offset=90, lag_bytes=10, reachable=True),
        driver_state.PeerStatus(3, "p3", "c3", match_offset=-1, lag_bytes=-1, reachable=False),
    )
    status = driver_state.NodeStatus(1, "leader", 4, 1, "c1", 100, 100, 100, peers, 1, 1)
    found = _raft_samples(_node_status_fits(status))  # type: ignore[arg-type]
    assert found[("gannet_raft_follower_lag_bytes", frozenset({("peer", "2")}))] == 10
    assert ("gannet_raft_follower_lag_bytes", frozenset({("peer", "3")})) not in found
    assert found[("gannet_raft_peer_reachable", frozenset({("peer", "3")}))] == 0


def test_admin_raft_status_message_fits_the_collector() -> None:
    status = admin_pb2.RaftStatus(node_id="a", role="leader", term=1, commit_offset=5)
    status.peers.add(node_id="b", lag_bytes=7, reachable=True)
    found = _raft_samples(status)
    assert found[("gannet_raft_follower_lag_bytes", frozenset({("peer", "b")}))] == 7


# ---------------------------------------------------------------------- live broker
def receive(messaging, topic: str, group: str, batch: int) -> list[definition_pb2.Message]:
    request = service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name=group),
        message_queue=definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic)),
        filter_expression=definition_pb2.FilterExpression(type=definition_pb2.TAG, expression="*"),
        batch_size=batch,
    )
    request.invisible_duration.FromSeconds(30)
    frames = list(messaging.ReceiveMessage(request, metadata=CLIENT_ID, timeout=RPC_TIMEOUT_S))
    assert frames[0].status.code == Code.OK, frames[0].status
    return [f.message for f in frames if f.WhichOneof("content") == "message"]


def ack(messaging, topic: str, group: str, messages: list[definition_pb2.Message]) -> None:
    request = service_pb2.AckMessageRequest(
        group=definition_pb2.Resource(name=group), topic=definition_pb2.Resource(name=topic)
    )
    for m in messages:
        request.entries.add(
            message_id=m.system_properties.message_id,
            receipt_handle=m.system_properties.receipt_handle,
        )
    reply = messaging.AckMessage(request, metadata=CLIENT_ID, timeout=RPC_TIMEOUT_S)
    assert reply.status.code == Code.OK, reply.status


def _settle(broker: threads.BrokerThread) -> None:
    store = broker.broker.store
    assert store.wait_dispatched(store.commitlog.max_offset(), timeout_s=10)


def test_receive_ack_and_dlq_move_the_consumer_figures(broker, admin, messaging) -> None:
    port = metrics_port(broker)
    topic = create_topic(admin)
    group = f"G-{topic}"
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=RPC_TIMEOUT_S)
    # The DLQ counter exists at 0 from the moment the group exists, before any receive:
    # Prometheus stores the 0, so increase() sees the group's first dead letter.
    assert value(scrape(port), "gannet_consumer_dlq_messages_total", group=group) == 0
    bodies = [b"x" * 100] * 6
    for body in bodies:  # one per send so that both queues get some
        assert send(messaging, topic, [body]).status.code == Code.OK
    _settle(broker)

    got: list[definition_pb2.Message] = []
    while len(got) < 4:
        got += receive(messaging, topic, group, 4 - len(got))
    pair = {"topic": topic, "group": group}
    text = scrape(port)
    assert value(text, "gannet_messages_out_total", **pair) == 4
    assert value(text, "gannet_bytes_out_total", **pair) == 400
    assert value(text, "gannet_consumer_inflight_messages", **pair) == 4
    assert value(text, "gannet_consumer_ready_messages", **pair) == 2
    assert value(text, "gannet_consumer_lag_messages", **pair) == 6
    assert value(text, "gannet_consumer_lag_seconds", **pair) >= 0

    ack(messaging, topic, group, got[:2])
    forward = service_pb2.ForwardMessageToDeadLetterQueueRequest(
        group=definition_pb2.Resource(name=group),
        topic=definition_pb2.Resource(name=topic),
        receipt_handle=got[2].system_properties.receipt_handle,
        message_id=got[2].system_properties.message_id,
    )
    reply = messaging.ForwardMessageToDeadLetterQueue(
        forward, metadata=CLIENT_ID, timeout=RPC_TIMEOUT_S
    )
    assert reply.status.code == Code.OK
    _settle(broker)  # the DLQ message is counted once dispatched to its consume queue
    text = scrape(port)
    assert value(text, "gannet_consumer_inflight_messages", **pair) == 1
    assert value(text, "gannet_consumer_lag_messages", **pair) == 3
    assert value(text, "gannet_consumer_dlq_messages_total", group=group) == 1


def test_pulled_messages_count_as_messages_out(broker, admin, messaging) -> None:
    topic = create_topic(admin)
    group = f"P-{topic}"
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=RPC_TIMEOUT_S)
    assert send(messaging, topic, [b"p" * 10] * 3).status.code == Code.OK
    _settle(broker)
    queue_id = next(q for q in range(2) if broker.broker.store.max_offset_in_queue(topic, q) == 3)
    request = service_pb2.PullMessageRequest(
        group=definition_pb2.Resource(name=group),
        message_queue=definition_pb2.MessageQueue(
            topic=definition_pb2.Resource(name=topic), id=queue_id
        ),
        offset=0,
        batch_size=8,
        filter_expression=definition_pb2.FilterExpression(type=definition_pb2.TAG, expression="*"),
    )
    frames = list(messaging.PullMessage(request, metadata=CLIENT_ID, timeout=RPC_TIMEOUT_S))
    assert sum(f.WhichOneof("content") == "message" for f in frames) == 3
    text = scrape(metrics_port(broker))
    assert value(text, "gannet_messages_out_total", topic=topic, group=group) == 3
    assert value(text, "gannet_bytes_out_total", topic=topic, group=group) == 30


def test_pop_and_revive_families_are_exported(broker) -> None:
    found = samples(scrape(metrics_port(broker)))
    names = {name for name, _ in found}
    for name in (
        "gannet_pop_checkpoints_tracked",
        "gannet_pop_checkpoints_buffered",
        "gannet_pop_checkpoints_dropped_without_write_total",
        "gannet_pop_poll_waiters",
        "gannet_pop_revive_in_messages_total",
        "gannet_pop_revive_out_messages_total",
        "gannet_pop_revive_lag_messages",
        "gannet_pop_revive_lag_seconds",
        "gannet_grpc_inflight_requests_limit",
    ):
        assert name in names, name
    dlq_of_queue0 = frozenset({("queue", "0"), ("result", "dlq")})
    assert ("gannet_pop_revive_out_messages_total", dlq_of_queue0) in found
    assert not [n for n in names if n.startswith("gannet_raft_")]  # no replication here
