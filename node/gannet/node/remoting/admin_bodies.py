"""The JSON bodies of the admin answers ``mqadmin`` reads, written as fastjson writes them.

RocketMQ's admin bodies (``TopicStatsTable``, ``ConsumeStats``, ``ResetOffsetBody``) are Java
maps keyed by a ``MessageQueue`` object; fastjson writes such a key as a JSON object in key
position and reads it back the same way::

    {"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"maxOffset":5,...}}}

which is not JSON. :func:`encode` writes nested Python values with three kinds of map key:
``str`` (quoted), ``int`` (bare, as fastjson writes an ``Integer`` key) and :class:`QueueKey`
(the object form above). Fields are written in fastjson's order (alphabetical, its bean
property order), ``None`` values are left out as fastjson leaves out nulls.

The builders below name the Java classes they stand for; each field is the Java field of
that class in rocketmq-remoting 5.3.3. Pure functions, no I/O; called by
:mod:`admin_requests`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

Body: TypeAlias = (
    "bool | int | float | str | Sequence[Body] | Mapping[str, Body] | Mapping[int, Body] "
    "| Mapping[QueueKey, Body] | None"
)


@dataclass(frozen=True, slots=True, order=True)
class QueueKey:
    """A ``MessageQueue`` as a map key: written as the object ``{brokerName, queueId, topic}``."""

    topic: str
    broker_name: str
    queue_id: int

    def fields(self) -> dict[str, Body]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


def _key(key: str | int | QueueKey) -> str:
    if isinstance(key, QueueKey):
        return _write(key.fields())
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise TypeError(f"map key {key!r} is neither str, int nor QueueKey")
    return str(key) if isinstance(key, int) else json.dumps(key, ensure_ascii=False)


def _write(value: Body) -> str:
    if value is None or isinstance(value, (bool, int, float, str)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        items = sorted(
            ((k, v) for k, v in value.items() if v is not None), key=lambda kv: _order(kv[0])
        )
        return "{" + ",".join(f"{_key(k)}:{_write(v)}" for k, v in items) + "}"
    return "[" + ",".join(_write(v) for v in value) + "]"


def _order(key: str | int | QueueKey) -> tuple[int, str, int, str]:
    """Names alphabetically (fastjson's property order), then numbers, then queues."""
    if isinstance(key, QueueKey):
        return (2, key.topic, key.queue_id, key.broker_name)
    if isinstance(key, int):
        return (1, "", key, "")
    return (0, key, 0, "")


def encode(value: Body) -> bytes:
    """``value`` as fastjson's JSON, UTF-8."""
    return _write(value).encode("utf-8")


# ---------------------------------------------------------------------------- the bodies


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue of a topic as ``TopicOffset`` reports it."""

    min_offset: int
    max_offset: int
    last_update_ms: int


def topic_stats_table(queues: Mapping[QueueKey, QueueFigures]) -> Body:
    """``TopicStatsTable``: ``offsetTable`` (queue → ``TopicOffset``) and ``topicPutTps``."""
    table: dict[QueueKey, Body] = {
        key: {
            "lastUpdateTimestamp": q.last_update_ms,
            "maxOffset": q.max_offset,
            "minOffset": q.min_offset,
        }
        for key, q in queues.items()
    }
    body: dict[str, Body] = {"offsetTable": table, "topicPutTps": 0.0}
    return body


@dataclass(frozen=True, slots=True)
class GroupQueue:
    """One queue of a consumer group as ``OffsetWrapper`` reports it."""

    broker_offset: int
    consumer_offset: int
    last_timestamp_ms: int


def consume_stats(queues: Mapping[QueueKey, GroupQueue]) -> Body:
    """``ConsumeStats``: ``offsetTable`` (queue → ``OffsetWrapper``) and ``consumeTps``.
    ``pullOffset`` is the committed offset: Gannet does not keep a separate pull position."""
    table: dict[QueueKey, Body] = {
        key: {
            "brokerOffset": q.broker_offset,
            "consumerOffset": q.consumer_offset,
            "lastTimestamp": q.last_timestamp_ms,
            "pullOffset": q.consumer_offset,
        }
        for key, q in queues.items()
    }
    body: dict[str, Body] = {"consumeTps": 0.0, "offsetTable": table}
    return body


@dataclass(frozen=True, slots=True)
class ClientConnection:
    """``Connection``: a client as the broker sees it."""

    client_id: str
    client_addr: str
    language: str
    version: int

    def body(self) -> Body:
        fields: dict[str, Body] = {
            "clientAddr": self.client_addr,
            "clientId": self.client_id,
            "language": self.language,
            "version": self.version,
        }
        return fields


def consumer_connection(
    connections: Sequence[ClientConnection],
    subscriptions: Mapping[str, Body],
    *,
    consume_type: str,
    message_model: str,
    consume_from_where: str,
) -> Body:
    """``ConsumerConnection``: the group's clients, their subscriptions by topic (the
    ``SubscriptionData`` the clients sent in their heartbeats) and how they consume."""
    body: dict[str, Body] = {
        "connectionSet": [c.body() for c in connections],
        "consumeFromWhere": consume_from_where,
        "consumeType": consume_type,
        "messageModel": message_model,
        "subscriptionTable": dict(subscriptions),
    }
    return body


def producer_connection(connections: Sequence[ClientConnection]) -> Body:
    """``ProducerConnection``."""
    return {"connectionSet": [c.body() for c in connections]}


def kv_table(table: Mapping[str, str]) -> Body:
    """``KVTable``: string → string."""
    return {"table": dict(table)}


def data_version(timestamp_ms: int, counter: int) -> Body:
    """``DataVersion`` (an answer's; Gannet versions its tables by the Raft log instead)."""
    return {"counter": counter, "stateVersion": 0, "timestamp": timestamp_ms}


def subscription_group_wrapper(groups: Mapping[str, Body], timestamp_ms: int) -> Body:
    """``SubscriptionGroupWrapper``: group name → ``SubscriptionGroupConfig``."""
    return {
        "dataVersion": data_version(timestamp_ms, len(groups)),
        "subscriptionGroupTable": dict(groups),
    }


def topic_config_wrapper(topics: Mapping[str, Body], timestamp_ms: int) -> Body:
    """``TopicConfigSerializeWrapper``: topic name → ``TopicConfig``."""
    return {
        "dataVersion": data_version(timestamp_ms, len(topics)),
        "topicConfigTable": dict(topics),
    }


def reset_offset_body(offsets: Mapping[QueueKey, int]) -> Body:
    """``ResetOffsetBody``: queue → the offset it was reset to."""
    return {"offsetTable": dict(offsets)}


def group_list(groups: Sequence[str]) -> Body:
    """``GroupList``."""
    return {"groupList": sorted(groups)}
