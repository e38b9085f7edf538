"""Lite topics and lite consumers (v2 ``MessageType.LITE``, ``SyncLiteSubscription``).

RocketMQ 5's lite topics are many light sub-topics (one per session, say) under one parent
topic: producers set ``lite_topic``; a ``LiteSimpleConsumer`` / ``LitePushConsumer`` of a group
binds to the parent and subscribes to lite topics one by one. What Gannet does (ADR 0004):

* A topic of type LITE is the parent. A message's lite topic is kept as the ``__LITE_TOPIC``
  property and picks the queue by a stable hash, so one lite topic's messages keep their order
  in one queue.
* ``SyncLiteSubscription`` records, per (group, parent topic), the lite topics each client
  subscribed (``PARTIAL_ADD``/``PARTIAL_REMOVE``; ``COMPLETE_ADD`` replaces the set, as the
  client's sync every 30 s does; ``COMPLETE_REMOVE`` empties it). A client's set expires
  :data:`SUBSCRIPTION_TTL_S` after its last sync; at most :data:`SUBSCRIPTIONS_PER_CLIENT_MAX`
  lite topics per client (``LITE_SUBSCRIPTION_QUOTA_EXCEEDED``), names up to
  :data:`LITE_TOPIC_CHARS_MAX` characters of ``[%|a-zA-Z0-9_-]`` (``ILLEGAL_LITE_TOPIC``).
  On a Raft group the leader keeps them (followers forward the call).
* A receive of the group from the parent gets the messages whose lite topic is in the union
  of its clients' sets (a Pop filter). As with a tag filter, a message no member subscribed
  when the group reaches it is passed over for that group; while the group has no subscription
  at all it receives nothing and passes nothing over (after a leader change, until the clients'
  next sync reaches the new leader).

Called by :mod:`sending`, :mod:`messaging` (the RPC) and :mod:`receiving` (the filter).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.store import properties as props
from gannet.node.store.configs.topics import MessageType

LITE_TOPIC_CHARS_MAX = 64
"""The official client's default ``max_lite_topic_size``; advertised in Settings."""
SUBSCRIPTIONS_PER_CLIENT_MAX = 1_000
"""``lite_subscription_quota`` advertised in Settings and enforced here."""
SUBSCRIPTION_TTL_S = 120.0
"""A client's lite subscriptions expire this long after its last sync (it syncs every 30 s)."""
CLIENTS_PER_GROUP_MAX = 10_000
_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def check_name(name: str) -> str:
    if not name or len(name) > LITE_TOPIC_CHARS_MAX or not _NAME.match(name):
        raise ApiError(
            Code.ILLEGAL_LITE_TOPIC,
            f"lite topic {name[:80]!r} must be 1 to {LITE_TOPIC_CHARS_MAX} characters of "
            "letters, digits, '%', '|', '_' and '-'",
        )
    return name


def mark(sp: definition_pb2.SystemProperties, properties: dict[str, str]) -> MessageType:
    """Keep a LITE message's lite topic in ``properties``; its type."""
    if sp.HasField("message_group") or sp.HasField("delivery_timestamp"):
        raise ApiError(
            statuses.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a lite-topic message cannot have message_group or delivery_timestamp",
        )
    if sp.HasField("priority"):
        raise ApiError(
            statuses.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a message cannot have both lite_topic and priority",
        )
    properties[props.LITE_TOPIC] = check_name(str(sp.lite_topic))
    return MessageType.LITE


def settings(subscription: definition_pb2.Subscription) -> None:
    """What a lite consumer reads from its Settings reply."""
    subscription.lite_subscription_quota = SUBSCRIPTIONS_PER_CLIENT_MAX
    subscription.max_lite_topic_size = LITE_TOPIC_CHARS_MAX


@dataclass(slots=True)
class _Client:
    topics: set[str] = field(default_factory=set)
    synced_s: float = 0.0


class LiteSubscriptions:
    """Lite topics subscribed per (group, parent topic) and client; thread-safe."""

    def __init__(self, clock_s: Callable[[], float] = time.monotonic) -> None:
        self._clock_s = clock_s
        self._lock = threading.Lock()
        self._by_group: dict[tuple[str, str], dict[str, _Client]] = {}

    def _now(self) -> float:
        return self._clock_s()

    def sync(self, group: str, topic: str, client_id: str, action: int, names: list[str]) -> None:
        """Apply one SyncLiteSubscription; raises ApiError naming the problem."""
        checked = {check_name(n) for n in names}
        now = self._now()
        with self._lock:
            clients = self._by_group.setdefault((group, topic), {})
            client = clients.get(client_id)
            if client is None:
                if len(clients) >= CLIENTS_PER_GROUP_MAX:
                    self._expire(clients, now)
                if len(clients) >= CLIENTS_PER_GROUP_MAX:
                    raise ApiError(
                        statuses.TOO_MANY_REQUESTS,
                        f"group {group!r} has {len(clients)} lite consumers on {topic!r}",
                    )
                client = clients[client_id] = _Client()
            wanted = _apply(client.topics, action, checked)
            if len(wanted) > SUBSCRIPTIONS_PER_CLIENT_MAX:
                raise ApiError(
                    Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                    f"{len(wanted)} lite topics for one client; at most "
                    f"{SUBSCRIPTIONS_PER_CLIENT_MAX}",
                )
            client.topics, client.synced_s = wanted, now

    def topics_of(self, group: str, topic: str) -> frozenset[str]:
        """The union of the lite topics the group's live clients subscribed."""
        now = self._now()
        with self._lock:
            clients = self._by_group.get((group, topic))
            if not clients:
                return frozenset()
            self._expire(clients, now)
            return frozenset().union(*(c.topics for c in clients.values()))

    def forget(self, client_id: str) -> None:
        with self._lock:
            for clients in self._by_group.values():
                clients.pop(client_id, None)

    @staticmethod
    def _expire(clients: dict[str, _Client], now: float) -> None:
        for client_id in [c for c, v in clients.items() if now - v.synced_s > SUBSCRIPTION_TTL_S]:
            del clients[client_id]


def _apply(current: set[str], action: int, names: set[str]) -> set[str]:
    if action == definition_pb2.PARTIAL_ADD:
        return current | names
    if action == definition_pb2.PARTIAL_REMOVE:
        return current - names
    if action == definition_pb2.COMPLETE_ADD:
        return set(names)
    if action == definition_pb2.COMPLETE_REMOVE:
        return set()
    raise ApiError(statuses.BAD_REQUEST, f"lite subscription action {action} is unknown")


def request_names(request: service_pb2.SyncLiteSubscriptionRequest) -> list[str]:
    """The request's lite topics. The official Python client 5.1.x sends the *characters* of
    the name on ``subscribe_lite`` (it extends the repeated field with a string): several
    one-character entries of a PARTIAL_ADD are joined back into the one name they spell."""
    names = [str(n) for n in request.lite_topic_set]
    split = len(names) > 1 and all(len(n) == 1 for n in names)
    if split and request.action == definition_pb2.PARTIAL_ADD:
        return ["".join(names)]
    return names
