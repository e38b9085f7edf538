"""A follower asks its leader about a topic it does not know before answering
``TOPIC_NOT_FOUND`` (``messaging._here_or_leader``, issue 34).

Seen in ``make e2e-lossy-links``: the topic of a round was created on the leader and the official
Python client, whose channel is on a follower, started at once; the follower had not applied
the topic's record yet, answered its route queries ``TOPIC_NOT_FOUND``, and the client failed
its first sends ("failed to fetch topic route"). Here the follower never gets the record (its
transport drops every ``AppendEntries``, heartbeats still pass, so it keeps following the
leader): its route for the new topic is the leader's, an unknown topic is still refused, and
the follower's own store still lacks the topic (nothing was written to it by the query).
"""

from __future__ import annotations

import time

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.raft.messages import AppendEntries, Message

from .conftest import Cluster

pytestmark = pytest.mark.timeout(120)
METADATA = (("x-mq-client-id", "tests@1@0@routes"), ("x-mq-language", "PYTHON"))


def _route(endpoint: str, topic: str, timeout_s: float = 10) -> service_pb2.QueryRouteResponse:
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        reply: service_pb2.QueryRouteResponse = stub.QueryRoute(
            service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic)),
            metadata=METADATA,
            timeout=timeout_s,
        )
        return reply


def test_a_topic_the_follower_has_not_applied_is_routed_as_the_leader_knows_it(
    cluster: Cluster,
) -> None:
    cluster.start_all()
    leader = cluster.leader()
    follower = next(i for i in cluster.nodes if i != leader)
    transport = cluster.raft(follower).transport
    deliver = transport.deliver

    def without_appends(message: Message) -> None:
        if not isinstance(message, AppendEntries):
            deliver(message)

    transport.deliver = without_appends  # type: ignore[method-assign]
    try:
        cluster.create_topic_on(leader, "FreshTopic", queues=3)
        assert "FreshTopic" not in cluster.nodes[follower].broker.store.topic_configs
        assert cluster.raft(follower).leader() is not None

        fresh = _route(cluster.endpoint(follower), "FreshTopic")
        assert fresh.status.code == definition_pb2.OK, fresh.status
        assert len(fresh.message_queues) == 3
        assert {q.topic.name for q in fresh.message_queues} == {"FreshTopic"}

        unknown = _route(cluster.endpoint(follower), "NoSuchTopic")
        assert unknown.status.code == definition_pb2.TOPIC_NOT_FOUND, unknown.status

        assert "FreshTopic" not in cluster.nodes[follower].broker.store.topic_configs
        messaging = cluster.nodes[follower].broker.messaging
        assert messaging is not None
        assert messaging.forwarder is not None
        assert messaging.forwarder.stats.forwarded_total.get("QueryRoute") == 2
    finally:
        transport.deliver = deliver  # type: ignore[method-assign]


def test_the_leader_answers_an_unknown_topic_itself(cluster: Cluster) -> None:
    cluster.start_all()
    leader = cluster.leader()
    unknown = _route(cluster.endpoint(leader), "NoSuchTopic")
    assert unknown.status.code == definition_pb2.TOPIC_NOT_FOUND, unknown.status
    messaging = cluster.nodes[leader].broker.messaging
    assert messaging is not None
    assert messaging.forwarder is not None
    assert "QueryRoute" not in messaging.forwarder.stats.forwarded_total


def test_a_leader_that_does_not_answer_leaves_the_followers_own_answer(cluster: Cluster) -> None:
    """The leader refuses every ``Forward``: the follower answers what it knows after
    ``LEADER_CHECK_MAX_S``, not at the end of the caller's 30 s deadline."""
    cluster.start_all()
    leader = cluster.leader()
    follower = next(i for i in cluster.nodes if i != leader)
    cluster.raft(leader).transport.forward_handler = None  # "does not serve forwarded requests"
    started = time.monotonic()
    unknown = _route(cluster.endpoint(follower), "NoSuchTopic", timeout_s=30)
    took_s = time.monotonic() - started
    assert unknown.status.code == definition_pb2.TOPIC_NOT_FOUND, unknown.status
    assert took_s < 15, f"answered after {took_s:.1f} s"
