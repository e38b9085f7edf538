"""Broker groups: what one member knows of the other groups of its cluster, and the routes
built from it.

A cluster is G broker groups × R replicas; each group is its own Raft group with its own broker
name (RocketMQ's brokerName: ``broker-0``, ``broker-1``, …), store, timers, revive queues and
consumer offsets. A topic has its queues in every group that defines it, so a route answered
by any member lists the queues of every group, each ``MessageQueue.broker`` carrying that
group's name and its members' client endpoints (leader first), and the official clients send,
receive and ack straight at the right group: nothing crosses groups on the hot path.

This member learns the other groups by polling (:mod:`group_polling`) and keeps one
:class:`GroupView` per group: its members, its leader, and the route-relevant part of its topic
table (queue counts, permission, message type) with a version, so an unchanged table is not
sent again. A group that stops answering keeps its last view, so its queues stay in routes and
an election never reshuffles the clients' queue choice (FIFO picks a queue by hashing over the
list, so every member must list the same queues in the same order: groups sorted by
:func:`group_order`, queues by id within a group).

Pure: no IO. Used by :mod:`messaging` (routes), :mod:`cluster_admin` and :mod:`group_polling`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rocketmq.grpc_protocol import definition_pb2

from gannet.node.api import routes
from gannet.node.protocol.gen import admin_pb2
from gannet.node.store.configs.topics import MESSAGE_TYPE_ATTRIBUTE, TopicConfig

SCOPE_HEADER = "gannet-scope"
"""Metadata key of an admin write meant for the answering group only (value :data:`SCOPE_GROUP`):
what one member sends to the other groups when it fans a write out."""
SCOPE_GROUP = "group"


@dataclass(frozen=True, slots=True)
class RouteTopic:
    """What a route needs of a topic of another group."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    message_type: str

    def config(self) -> TopicConfig:
        return TopicConfig(
            self.name,
            read_queue_nums=self.read_queue_nums,
            write_queue_nums=self.write_queue_nums,
            perm=self.perm,
            attributes={MESSAGE_TYPE_ATTRIBUTE: self.message_type},
        )


def route_topic(config: TopicConfig) -> RouteTopic:
    return RouteTopic(
        config.topic_name,
        config.read_queue_nums,
        config.write_queue_nums,
        config.perm,
        config.message_type.value,
    )


def topics_version(topics: Iterable[RouteTopic]) -> str:
    """A digest of the route-relevant topic table (order-independent)."""
    digest = hashlib.sha1(usedforsecurity=False)
    for t in sorted(topics, key=lambda t: t.name):
        digest.update(
            f"{t.name}\0{t.read_queue_nums}\0{t.write_queue_nums}\0{t.perm}\0{t.message_type}\n".encode()
        )
    return digest.hexdigest()[:16]


class RouteTopicsCache:
    """This group's route-relevant topic table and its :func:`topics_version`, computed once per
    topic-table data version (every topic write bumps it) instead of once per poll answer.

    Key it with the table's data version read *before* its topics: a write in between then
    stores the newer table under the older version, which the next call recomputes anyway.
    """

    def __init__(self) -> None:
        self._version: object = None
        self._topics: dict[str, RouteTopic] = {}
        self._digest = ""
        self.computed = 0
        """How many times the table was rebuilt (the tests count it)."""

    def get(
        self, data_version: object, configs: Callable[[], Iterable[TopicConfig]]
    ) -> tuple[dict[str, RouteTopic], str]:
        """The table and its digest for ``data_version``; ``configs`` is called only when the
        version differs from the last one seen."""
        if self._version is None or data_version != self._version:
            self._topics = {c.topic_name: route_topic(c) for c in configs()}
            self._digest = topics_version(self._topics.values())
            self._version = data_version
            self.computed += 1
        return self._topics, self._digest


@dataclass(slots=True)
class GroupView:
    """One other group, as last heard from one of its members."""

    broker_name: str
    members: tuple[str, ...]
    """Client ``host:port`` of the members that serve, leader first."""
    leader: str
    """The leader's client endpoint; empty while the group knows none."""
    topics: dict[str, RouteTopic] = field(default_factory=dict)
    topics_version: str = ""
    heard_at_s: float = 0.0
    """Monotonic time of the last answer."""
    last_error: str = ""


def group_order(broker_name: str) -> tuple[object, ...]:
    """Sort key: ``broker-2`` before ``broker-10`` (digits compare as numbers)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", broker_name))


def member_endpoints_pb(members: Iterable[str]) -> definition_pb2.Endpoints:
    """The ``Endpoints`` of a group's members (``host:port`` strings, leader first). IP
    addresses are listed together; a host name is listed alone (the Python client refuses
    several DOMAIN_NAME addresses: :mod:`routes`), the first one, the leader's when known."""
    parsed = [_split(m) for m in members]
    if not parsed:
        return definition_pb2.Endpoints()
    schemes = {routes.address_scheme(host) for host, _ in parsed}
    if len(schemes) == 1 and definition_pb2.DOMAIN_NAME not in schemes:
        return definition_pb2.Endpoints(
            scheme=schemes.pop(),
            addresses=[definition_pb2.Address(host=h, port=p) for h, p in parsed],
        )
    host, port = parsed[0]
    return routes.endpoints_of(host, port)


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def remote_message_queues(
    topic: str, views: Iterable[GroupView], namespace: str
) -> list[definition_pb2.MessageQueue]:
    """The queues of ``topic`` in the other groups that define it, groups in
    :func:`group_order`; a group whose members are unknown is left out (no endpoint to give)."""
    queues: list[definition_pb2.MessageQueue] = []
    for view in sorted(views, key=lambda v: group_order(v.broker_name)):
        found = view.topics.get(topic)
        if found is None or not view.members:
            continue
        identity = routes.BrokerIdentity(view.broker_name, "", 0)
        endpoints = member_endpoints_pb(view.members)
        queues += routes.message_queues(found.config(), identity, endpoints, namespace)
    return queues


def merged_route(
    local_name: str,
    local: list[definition_pb2.MessageQueue],
    remote: list[definition_pb2.MessageQueue],
) -> list[definition_pb2.MessageQueue]:
    """Local and remote queues in one list ordered by group (:func:`group_order`), so every
    member of every group answers the same list."""
    by_group: dict[str, list[definition_pb2.MessageQueue]] = {local_name: list(local)}
    for queue in remote:
        by_group.setdefault(queue.broker.name, []).append(queue)
    return [q for name in sorted(by_group, key=group_order) for q in by_group[name]]


def readable_assignments(
    queues: Iterable[definition_pb2.MessageQueue],
) -> list[definition_pb2.Assignment]:
    """One assignment per broker group with a readable queue, in route order, as RocketMQ's
    proxy answers Pop consumers: the group's first readable queue with id ``-1`` ("any queue of
    this group"; a receive pops across the group's queues, whatever queue it names). The
    official Python push consumer keeps one receive loop per assignment and sends it to the
    assignment's ``broker.endpoints``, so each group gets its own loop and no group's queues are
    polled twice."""
    readable = (definition_pb2.READ, definition_pb2.READ_WRITE)
    found: dict[str, definition_pb2.Assignment] = {}
    for queue in queues:
        if queue.permission in readable and queue.broker.name not in found:
            any_queue = definition_pb2.MessageQueue()
            any_queue.CopyFrom(queue)
            any_queue.id = -1
            found[queue.broker.name] = definition_pb2.Assignment(message_queue=any_queue)
    return list(found.values())


# ---------------------------------------------------------------------------- protobuf
def group_pb(
    broker_name: str,
    cluster_name: str,
    members: Iterable[str],
    leader: str,
    topics: Mapping[str, RouteTopic],
    version: str,
    *,
    include_topics: bool,
) -> admin_pb2.BrokerGroup:
    reply = admin_pb2.BrokerGroup(
        broker_name=broker_name,
        cluster_name=cluster_name,
        member_endpoints=list(members),
        leader_endpoint=leader,
        topics_version=version,
        topics_included=include_topics,
    )
    if include_topics:
        reply.topics.extend(
            admin_pb2.RouteTopic(
                name=t.name,
                read_queue_nums=t.read_queue_nums,
                write_queue_nums=t.write_queue_nums,
                perm=t.perm,
                message_type=t.message_type,
            )
            for t in topics.values()
        )
    return reply


def apply_answer(view: GroupView | None, reply: admin_pb2.BrokerGroup, now_s: float) -> GroupView:
    """``view`` updated by a member's answer (a new view for a group heard of first)."""
    if view is None or view.broker_name != reply.broker_name:
        view = GroupView(reply.broker_name, (), "")
    if reply.member_endpoints:
        view.members = tuple(reply.member_endpoints)
    view.leader = reply.leader_endpoint
    if reply.topics_included:
        view.topics = {
            t.name: RouteTopic(
                t.name, t.read_queue_nums, t.write_queue_nums, t.perm, t.message_type
            )
            for t in reply.topics
        }
        view.topics_version = reply.topics_version
    view.heard_at_s = now_s
    view.last_error = ""
    return view
