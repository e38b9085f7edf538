"""QueryRoute and QueryAssignment answers: the broker itself is the only broker.

A topic of ``r`` read and ``w`` write queues is published as the proxy does (§4.1):
``min(r, w)`` queues READ_WRITE, then read-only extras READ and write-only extras WRITE, ids
``0..n-1``, or NONE when the topic's perm has neither bit. ``accept_message_types`` comes from
the topic's ``message.type`` (MIXED → NORMAL, FIFO, DELAY, TRANSACTION). ``broker.id`` is 0
(the Python client only uses master queues), and the endpoints are those the client used to
reach us when they are usable, else the broker's advertised endpoint.

QueryAssignment gives push consumers every readable queue of the topic, one assignment each.

Replicated brokers (a Raft group) publish the *leader*: every member answers a route with the
leader's client endpoint (:func:`leader_endpoints`), so clients write where writes are accepted.
A write that still reaches a non-leader (a stale route) is refused with
``HA_NOT_AVAILABLE`` and a message naming the leader's node id and client endpoint
(:func:`replication_refusal`): the code RocketMQ uses when the replica set cannot take a
write (``SLAVE_NOT_AVAILABLE``); a client refreshes its route and sends again.
``MASTER_PERSISTENCE_TIMEOUT`` answers a write that was appended but not known committed
(time out, or leadership lost meanwhile), as for a flush timeout; ``TOO_MANY_REQUESTS`` one
refused by the leader's uncommitted-bytes limit or a leadership transfer in progress.

Pure functions; called by :mod:`messaging`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rocketmq.grpc_protocol import Code, definition_pb2

from gannet.node.api import statuses
from gannet.node.api.statuses import ApiError
from gannet.node.replication.driver import (
    CommitUncertain,
    NotLeaderError,
    ReplicationBusy,
    ReplicationError,
    ReplicationNode,
)
from gannet.node.store.topic_configs import MessageType, TopicConfig

_MESSAGE_TYPES = {
    MessageType.NORMAL: definition_pb2.NORMAL,
    MessageType.FIFO: definition_pb2.FIFO,
    MessageType.DELAY: definition_pb2.DELAY,
    MessageType.TRANSACTION: definition_pb2.TRANSACTION,
}

HA_NOT_AVAILABLE: int = Code.HA_NOT_AVAILABLE
"""A write reached a replica that is not the Raft leader (or no leader is known)."""


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """Who this broker is in routes: name and the endpoint clients should use."""

    broker_name: str
    host: str
    port: int

    def endpoints(self) -> definition_pb2.Endpoints:
        return endpoints_of(self.host, self.port)


def endpoints_of(host: str, port: int) -> definition_pb2.Endpoints:
    return definition_pb2.Endpoints(
        scheme=address_scheme(host), addresses=[definition_pb2.Address(host=host, port=port)]
    )


def leader_endpoints(replication: ReplicationNode) -> definition_pb2.Endpoints:
    """The Raft leader's client endpoint; ``HA_NOT_AVAILABLE`` while none is known."""
    leader = replication.leader()
    if leader is None:
        raise ApiError(
            HA_NOT_AVAILABLE,
            "no Raft leader is known yet (election in progress); retry in a second",
        )
    return endpoints_of(leader.host, leader.client_port)


def replication_refusal(exc: ReplicationError) -> ApiError:
    """The v2 status of a write the replication layer did not take (module docstring)."""
    if isinstance(exc, NotLeaderError):
        return ApiError(HA_NOT_AVAILABLE, str(exc))
    if isinstance(exc, CommitUncertain):
        return ApiError(statuses.MASTER_PERSISTENCE_TIMEOUT, str(exc))
    if isinstance(exc, ReplicationBusy):
        return ApiError(statuses.TOO_MANY_REQUESTS, str(exc))
    return ApiError(statuses.INTERNAL_SERVER_ERROR, str(exc))


def address_scheme(host: str) -> int:
    if all(part.isdigit() for part in host.split(".")) and host.count(".") == 3:
        return int(definition_pb2.IPv4)
    if ":" in host:
        return int(definition_pb2.IPv6)
    return int(definition_pb2.DOMAIN_NAME)


def usable_endpoints(
    requested: definition_pb2.Endpoints, identity: BrokerIdentity
) -> definition_pb2.Endpoints:
    """The request's endpoints when they have a scheme and an address, else ours."""
    if requested.scheme != definition_pb2.ADDRESS_SCHEME_UNSPECIFIED and requested.addresses:
        return requested
    return identity.endpoints()


def accept_message_types(config: TopicConfig) -> list[int]:
    return sorted(_MESSAGE_TYPES[kind] for kind in config.accepted_message_types)


def _queue_permissions(config: TopicConfig) -> Iterator[int]:
    read = config.read_queue_nums if config.readable else 0
    write = config.write_queue_nums if config.writable else 0
    if read == 0 and write == 0:
        yield definition_pb2.NONE
        return
    both = min(read, write)
    yield from [definition_pb2.READ_WRITE] * both
    yield from [definition_pb2.READ] * (read - both)
    yield from [definition_pb2.WRITE] * (write - both)


def message_queues(
    config: TopicConfig,
    identity: BrokerIdentity,
    endpoints: definition_pb2.Endpoints,
    namespace: str,
) -> list[definition_pb2.MessageQueue]:
    """The route of a topic: one MessageQueue per queue id (see the module docstring)."""
    broker = definition_pb2.Broker(name=identity.broker_name, id=0, endpoints=endpoints)
    topic = definition_pb2.Resource(resource_namespace=namespace, name=config.topic_name)
    types = accept_message_types(config)
    return [
        definition_pb2.MessageQueue(
            topic=topic, id=queue_id, permission=perm, broker=broker, accept_message_types=types
        )
        for queue_id, perm in enumerate(_queue_permissions(config))
    ]


def assignments(
    config: TopicConfig,
    identity: BrokerIdentity,
    endpoints: definition_pb2.Endpoints,
    namespace: str,
) -> list[definition_pb2.Assignment]:
    """Every readable queue of the topic, for a push consumer."""
    readable = (definition_pb2.READ, definition_pb2.READ_WRITE)
    return [
        definition_pb2.Assignment(message_queue=queue)
        for queue in message_queues(config, identity, endpoints, namespace)
        if queue.permission in readable
    ]
