"""Remoting clients by consumer group, from their heartbeats: the consumer lists of the
client-side rebalance (``GET_CONSUMER_LIST_BY_GROUP``) and the subscriptions pulls without
their own subscription use.

A client leaves its groups when it unregisters, when its last connection closes, or when it has
not heartbeated for :data:`EXPIRY_S` (RocketMQ's ``channelExpiredTimeout``). Whenever a group's
list changes, its other connected consumers are told with a oneway
``NOTIFY_CONSUMER_IDS_CHANGED`` so that they rebalance at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gannet.node.remoting.codec import Command
from gannet.node.remoting.server import Connection

EXPIRY_S = 120.0
NOTIFY_CONSUMER_IDS_CHANGED = 40


@dataclass(slots=True)
class Subscription:
    expression_type: str
    expression: str


@dataclass(slots=True)
class Member:
    conn: Connection
    seen_s: float
    subscriptions: dict[str, Subscription] = field(default_factory=dict)


class ConsumerRegistry:
    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Member]] = {}

    def heartbeat(
        self, group: str, client_id: str, conn: Connection, subscriptions: dict[str, Subscription]
    ) -> None:
        members = self.groups.setdefault(group, {})
        known = client_id in members
        members[client_id] = Member(conn, time.monotonic(), subscriptions)
        conn.client_ids.add(client_id)
        if not known:
            self._notify(group, client_id)

    def unregister(self, group: str, client_id: str) -> None:
        members = self.groups.get(group)
        if members is not None and members.pop(client_id, None) is not None:
            self._notify(group, client_id)

    def closed(self, conn: Connection) -> None:
        for group, members in list(self.groups.items()):
            gone = [cid for cid, m in members.items() if m.conn is conn]
            for cid in gone:
                del members[cid]
            if gone:
                self._notify(group, gone[0])

    def consumer_ids(self, group: str) -> list[str]:
        members = self.groups.get(group, {})
        now = time.monotonic()
        for cid in [cid for cid, m in members.items() if now - m.seen_s > EXPIRY_S]:
            del members[cid]
        return sorted(members)

    def subscription(self, group: str, topic: str) -> Subscription | None:
        for member in self.groups.get(group, {}).values():
            found = member.subscriptions.get(topic)
            if found is not None:
                return found
        return None

    def _notify(self, group: str, changed: str) -> None:
        for cid, member in self.groups.get(group, {}).items():
            if cid != changed:
                member.conn.send(
                    Command(NOTIFY_CONSUMER_IDS_CHANGED, flag=2, ext={"consumerGroup": group})
                )
