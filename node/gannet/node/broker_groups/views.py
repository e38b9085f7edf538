"""Broker groups: what one member knows of the other groups of its cluster.

A cluster is G broker groups × R replicas; each group is its own Raft group with its own broker
name (RocketMQ's brokerName: ``broker-0``, ``broker-1``, …), store, timers, revive queues and
consumer offsets. A topic has its queues in every group that defines it, so a route answered
by any member lists the queues of every group (the v2 conversions:
:mod:`gannet.node.api.broker_groups`).

This member learns the other groups by polling (:mod:`gannet.node.broker_groups.polling`) and
keeps one :class:`GroupView` per group: its members, its leader, and the route-relevant part of
its topic table (queue counts, permission, message type) with a version, so an unchanged table
is not sent again (:func:`apply_answer` folds a member's answer in). A group that stops
answering keeps its last view, so its queues stay in routes and an election never reshuffles
the clients' queue choice (FIFO picks a queue by hashing over the list, so every member must
list the same queues in the same order: groups sorted by :func:`group_order`, queues by id
within a group).

Pure: no IO. Used by :mod:`gannet.node.broker_groups.polling`,
:mod:`gannet.node.api.broker_groups` and :mod:`gannet.node.api.cluster_admin`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

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
