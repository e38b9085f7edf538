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
from collections.abc import Callable
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


LOCK_LIFETIME_S = 60.0  # RocketMQ's rebalance.lockMaxLiveTime
LOCKS_MAX = 100_000

QueueKey = tuple[str, str, int]
"""(topic, broker name, queue id) of a message queue."""


class RebalanceLocks:
    """Which client of a consumer group holds which queue (RocketMQ's
    ``RebalanceLockManager``): orderly consumers lock their queues (``LOCK_BATCH_MQ``) and renew
    the locks every 20 s; a lock not renewed for :data:`LOCK_LIFETIME_S` may be taken by
    another client of the group. Kept in memory by the broker the consumers talk to (the
    group's master, the Raft leader): after a leader change the consumers lock again there.
    Bounded by :data:`LOCKS_MAX` entries (beyond: no new lock is granted)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._held: dict[str, dict[QueueKey, tuple[str, float]]] = {}
        self._count = 0
        self.granted_total: dict[str, int] = {}
        """Locks granted (or renewed), by group."""

    def lock(self, group: str, client_id: str, queues: list[QueueKey]) -> list[QueueKey]:
        """Lock (or renew) ``queues`` for ``client_id``; returns those now held by it."""
        now = self._clock()
        table = self._held.setdefault(group, {})
        granted = []
        for queue in queues:
            held = table.get(queue)
            if held is None and self._count >= LOCKS_MAX:
                continue
            if held is None or held[0] == client_id or now - held[1] > LOCK_LIFETIME_S:
                if held is None:
                    self._count += 1
                table[queue] = (client_id, now)
                granted.append(queue)
        self.granted_total[group] = self.granted_total.get(group, 0) + len(granted)
        return granted

    def unlock(self, group: str, client_id: str, queues: list[QueueKey]) -> None:
        table = self._held.get(group, {})
        for queue in queues:
            held = table.get(queue)
            if held is not None and held[0] == client_id:
                del table[queue]
                self._count -= 1
