"""Producers and consumers by group, as their heartbeats describe them, for the connection
lists ``mqadmin`` asks for (``GET_PRODUCER_CONNECTION_LIST``, ``GET_CONSUMER_CONNECTION_LIST``).

A remoting client heartbeats every 30 s (``HEART_BEAT``) naming its producer groups and its
consumer groups with how they consume (``consumeType``, ``messageModel``,
``consumeFromWhere``) and their subscriptions. :class:`ClientBook` keeps the latest of each
(client id, group), with the connection it came on and the client's language and version (from
the request header). An entry counts while its connection is open, it has heartbeated within
:data:`EXPIRY_S` (RocketMQ's ``channelExpiredTimeout``) and it has not unregistered.

Bounded: at most :data:`GROUPS_MAX` groups of each kind and :data:`CLIENTS_PER_GROUP_MAX`
clients per group; a heartbeat beyond them is not recorded (the client still works, it is
only missing from the lists). Filled by :mod:`admin_requests`; no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gannet.node.remoting.server import Connection

EXPIRY_S = 120.0
GROUPS_MAX = 10_000
CLIENTS_PER_GROUP_MAX = 1_000


@dataclass(slots=True)
class Client:
    client_id: str
    conn: Connection
    language: str
    version: int
    seen_s: float
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""
    subscriptions: dict[str, Any] = field(default_factory=dict)
    """Topic → the ``SubscriptionData`` object the client sent, as it sent it."""

    @property
    def address(self) -> str:
        host = self.conn.peer_host
        return f"[{host}]:{self.conn.peer_port}" if ":" in host else f"{host}:{self.conn.peer_port}"


class ClientBook:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.producers: dict[str, dict[str, Client]] = {}
        self.consumers: dict[str, dict[str, Client]] = {}

    def heartbeat(
        self, data: dict[str, Any], conn: Connection, language: str, version: int
    ) -> None:
        """Record a heartbeat body (``HeartbeatData``); malformed parts are skipped (the
        heartbeat handler itself refuses what it cannot serve)."""
        client_id = str(data.get("clientID") or "")
        if not client_id:
            return
        now = self._clock()
        for producer in _objects(data.get("producerDataSet")):
            group = str(producer.get("groupName") or "")
            if group:
                self._put(self.producers, group, Client(client_id, conn, language, version, now))
        for consumer in _objects(data.get("consumerDataSet")):
            group = str(consumer.get("groupName") or "")
            if not group:
                continue
            subscriptions = {
                str(sub["topic"]): sub
                for sub in _objects(consumer.get("subscriptionDataSet"))
                if sub.get("topic")
            }
            entry = Client(
                client_id, conn, language, version, now,
                consume_type=str(consumer.get("consumeType") or "CONSUME_PASSIVELY"),
                message_model=str(consumer.get("messageModel") or "CLUSTERING"),
                consume_from_where=str(
                    consumer.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"
                ),
                subscriptions=subscriptions,
            )  # fmt: skip
            self._put(self.consumers, group, entry)

    def unregister(self, client_id: str, producer_group: str, consumer_group: str) -> None:
        if producer_group:
            self.producers.get(producer_group, {}).pop(client_id, None)
        if consumer_group:
            self.consumers.get(consumer_group, {}).pop(client_id, None)

    def producers_of(self, group: str) -> list[Client]:
        return self._live(self.producers, group)

    def consumers_of(self, group: str) -> list[Client]:
        return self._live(self.consumers, group)

    def _put(self, table: dict[str, dict[str, Client]], group: str, entry: Client) -> None:
        members = table.get(group)
        if members is None:
            if len(table) >= GROUPS_MAX:
                return
            members = table[group] = {}
        if entry.client_id not in members and len(members) >= CLIENTS_PER_GROUP_MAX:
            return
        members[entry.client_id] = entry

    def _live(self, table: dict[str, dict[str, Client]], group: str) -> list[Client]:
        members = table.get(group)
        if members is None:
            return []
        now = self._clock()
        for client_id in [
            cid for cid, c in members.items() if c.conn.closed.is_set() or now - c.seen_s > EXPIRY_S
        ]:
            del members[client_id]
        if not members:
            del table[group]
            return []
        return sorted(members.values(), key=lambda c: c.client_id)


def _objects(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
