"""Telemetry settings replies and the registry of connected clients.

A client opens a Telemetry stream and sends its ``Settings``; the broker answers on the same
stream with ``TelemetryCommand{status OK, settings}`` — the client's settings merged with the
server's values (``docs/protocol.md`` §4). Missing pieces silently break clients:

* producers: ``publishing.max_body_size`` (the Python client refuses every send with 0),
  ``validate_message_type`` and an ``exponential_backoff`` policy (Java/Node);
* consumers: ``subscription.long_polling_timeout`` (Python push consumer), ``receive_batch_size``
  (Java push), ``fifo`` from the group config and a backoff policy: the group's
  ``retryMaxTimes + 1`` attempts with its customized (default) or exponential delays; each
  subscription's filter expression must parse (tag or SQL92), else the stream ends with
  ``ILLEGAL_FILTER_EXPRESSION`` naming the error's position;
* ``metric.on = false``, so clients do not try to export OpenTelemetry metrics to us.

:class:`ClientRegistry` remembers the latest settings and last-seen time per client id (bounded
by ``clients_max``); the Pop path reads ``fifo`` and ``max_attempts`` from it.

Called by :mod:`messaging`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2

from gannet.node.api import filters, lite_topics, sending
from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.store.configs.groups import (
    RETRY_POLICY_EXPONENTIAL,
    CustomizedRetryPolicy,
    ExponentialRetryPolicy,
    GroupConfigManager,
    SubscriptionGroupConfig,
)

PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1_000
PRODUCER_BACKOFF_MULTIPLIER = 2.0
CONSUMER_RECEIVE_BATCH_SIZE = 32
CONSUMER_LONG_POLLING_TIMEOUT_MS = 20_000
CLIENTS_MAX = 10_000

_LITE_CONSUMERS = (definition_pb2.LITE_PUSH_CONSUMER, definition_pb2.LITE_SIMPLE_CONSUMER)
_CONSUMERS = (definition_pb2.PUSH_CONSUMER, definition_pb2.SIMPLE_CONSUMER, *_LITE_CONSUMERS)


def _duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def reply_settings(
    settings: definition_pb2.Settings,
    groups: GroupConfigManager,
    *,
    body_size_max_bytes: int = sending.BODY_SIZE_MAX_BYTES,
) -> definition_pb2.Settings:
    """The settings to send back for a client's ``settings`` command (ApiError when invalid)."""
    kind = settings.client_type
    pub_sub = settings.WhichOneof("pub_sub")
    if pub_sub is None:
        raise ApiError(statuses.BAD_REQUEST, "settings carry neither publishing nor subscription")
    reply = definition_pb2.Settings()
    reply.CopyFrom(settings)
    reply.metric.Clear()
    reply.metric.on = False
    if kind == definition_pb2.PRODUCER and pub_sub == "publishing":
        _merge_producer(reply, body_size_max_bytes)
    elif kind in _CONSUMERS and pub_sub == "subscription":
        _merge_consumer(reply, groups)
        if kind in _LITE_CONSUMERS:
            lite_topics.settings(reply.subscription)
    else:
        raise ApiError(
            statuses.UNRECOGNIZED_CLIENT_TYPE,
            f"client type {_client_type_name(kind)} with {pub_sub} is not served; "
            "use a producer, push consumer or simple consumer",
        )
    return reply


def _client_type_name(kind: int) -> str:
    """``PRODUCER`` for 1; the number itself for a value the enum does not define (fuzzing)."""
    try:
        return str(definition_pb2.ClientType.Name(kind))
    except ValueError:
        return str(kind)


def _merge_producer(reply: definition_pb2.Settings, body_size_max_bytes: int) -> None:
    for topic in reply.publishing.topics:
        sending.check_topic_name(str(topic.name))
    reply.publishing.max_body_size = body_size_max_bytes
    reply.publishing.validate_message_type = True
    backoff = reply.backoff_policy
    backoff.Clear()
    backoff.max_attempts = PRODUCER_MAX_ATTEMPTS
    backoff.exponential_backoff.initial.CopyFrom(_duration(PRODUCER_BACKOFF_INITIAL_MS))
    backoff.exponential_backoff.max.CopyFrom(_duration(PRODUCER_BACKOFF_MAX_MS))
    backoff.exponential_backoff.multiplier = PRODUCER_BACKOFF_MULTIPLIER


def _merge_consumer(reply: definition_pb2.Settings, groups: GroupConfigManager) -> None:
    name = str(reply.subscription.group.name)
    sending.check_group_name(name)
    group = groups.get(name) or SubscriptionGroupConfig(group_name=name)
    sub = reply.subscription
    for entry in sub.subscriptions:
        filters.filter_of(entry.expression)
    sub.receive_batch_size = CONSUMER_RECEIVE_BATCH_SIZE
    sub.long_polling_timeout.CopyFrom(_duration(CONSUMER_LONG_POLLING_TIMEOUT_MS))
    sub.fifo = group.consume_message_orderly
    _set_group_backoff(reply.backoff_policy, group)


def _set_group_backoff(backoff: definition_pb2.RetryPolicy, group: SubscriptionGroupConfig) -> None:
    backoff.Clear()
    backoff.max_attempts = group.retry_max_times + 1
    policy = group.group_retry_policy
    if policy.policy_type == RETRY_POLICY_EXPONENTIAL:
        exp = policy.exponential or ExponentialRetryPolicy()
        backoff.exponential_backoff.initial.CopyFrom(_duration(exp.initial_ms))
        backoff.exponential_backoff.max.CopyFrom(_duration(exp.max_ms))
        backoff.exponential_backoff.multiplier = float(exp.multiplier)
        return
    custom = policy.customized or CustomizedRetryPolicy()
    backoff.customized_backoff.next.extend(_duration(ms) for ms in custom.next_ms)


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """What the broker knows of one client (by ``x-mq-client-id``)."""

    client_id: str
    client_type: int
    group: str
    fifo: bool
    max_attempts: int
    last_seen_ms: int


class ClientRegistry:
    """Latest settings per client id, least recently seen evicted beyond ``clients_max``."""

    def __init__(self, clients_max: int = CLIENTS_MAX) -> None:
        self._clients: OrderedDict[str, ClientInfo] = OrderedDict()
        self._lock = threading.Lock()
        self._clients_max = clients_max

    def record_settings(self, client_id: str, settings: definition_pb2.Settings) -> None:
        info = ClientInfo(
            client_id=client_id,
            client_type=int(settings.client_type),
            group=str(settings.subscription.group.name)
            if settings.HasField("subscription")
            else "",
            fifo=bool(settings.subscription.fifo),
            max_attempts=int(settings.backoff_policy.max_attempts),
            last_seen_ms=time.time_ns() // 1_000_000,
        )
        self._store(info)

    def touch(self, client_id: str, client_type: int, group: str) -> None:
        """A heartbeat: refresh (or create) the client's entry."""
        now = time.time_ns() // 1_000_000
        with self._lock:
            old = self._clients.get(client_id)
        if old is None:
            old = ClientInfo(client_id, client_type, group, False, 0, now)
        self._store(ClientInfo(old.client_id, client_type, group, old.fifo, old.max_attempts, now))

    def _store(self, info: ClientInfo) -> None:
        with self._lock:
            self._clients[info.client_id] = info
            self._clients.move_to_end(info.client_id)
            while len(self._clients) > self._clients_max:
                self._clients.popitem(last=False)

    def forget(self, client_id: str) -> ClientInfo | None:
        with self._lock:
            return self._clients.pop(client_id, None)

    def get(self, client_id: str) -> ClientInfo | None:
        with self._lock:
            return self._clients.get(client_id)

    def count(self) -> int:
        with self._lock:
            return len(self._clients)
