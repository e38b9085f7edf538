"""Broker groups in v2: the routes built from what one member knows of the other groups
(:mod:`gannet.node.broker_groups.views`), and a group's answer to the pollers.

A cluster is G broker groups × R replicas; each group is its own Raft group with its own broker
name (RocketMQ's brokerName: ``broker-0``, ``broker-1``, …), store, timers, revive queues and
consumer offsets. A topic has its queues in every group that defines it, so a route answered
by any member lists the queues of every group, each ``MessageQueue.broker`` carrying that
group's name and its members' client endpoints (leader first), and the official clients send,
receive and ack straight at the right group: nothing crosses groups on the hot path.

This member learns the other groups by polling (:mod:`gannet.node.broker_groups.polling`) and
keeps one
:class:`GroupView` per group: its members, its leader, and the route-relevant part of its topic
table (queue counts, permission, message type) with a version, so an unchanged table is not
sent again. A group that stops answering keeps its last view, so its queues stay in routes and
an election never reshuffles the clients' queue choice (FIFO picks a queue by hashing over the
list, so every member must list the same queues in the same order: groups sorted by
:func:`group_order`, queues by id within a group).

Pure: no IO. Used by :mod:`messaging` (routes) and :mod:`cluster_admin`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rocketmq.grpc_protocol import definition_pb2

from gannet.node.api import routes
from gannet.node.broker_groups.views import GroupView, RouteTopic, group_order
from gannet.node.protocol.gen import admin_pb2


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
