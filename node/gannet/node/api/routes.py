"""QueryRoute and QueryAssignment answers: the broker itself is the only broker.

A topic of ``r`` read and ``w`` write queues is published as the proxy does (§4.1):
``min(r, w)`` queues READ_WRITE, then read-only extras READ and write-only extras WRITE, ids
``0..n-1``, or NONE when the topic's perm has neither bit. ``accept_message_types`` comes from
the topic's ``message.type`` (MIXED → NORMAL, FIFO, DELAY, TRANSACTION). ``broker.id`` is 0
(the Python client only uses master queues), and the endpoints are those the client used to
reach us when they are usable, else the broker's advertised endpoint.

QueryAssignment gives push consumers every readable queue of the topic, one assignment each.

Pure functions; called by :mod:`messaging`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rocketmq.grpc_protocol import definition_pb2

from gannet.node.store.topic_configs import MessageType, TopicConfig

_MESSAGE_TYPES = {
    MessageType.NORMAL: definition_pb2.NORMAL,
    MessageType.FIFO: definition_pb2.FIFO,
    MessageType.DELAY: definition_pb2.DELAY,
    MessageType.TRANSACTION: definition_pb2.TRANSACTION,
}


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """Who this broker is in routes: name and the endpoint clients should use."""

    broker_name: str
    host: str
    port: int

    def endpoints(self) -> definition_pb2.Endpoints:
        return definition_pb2.Endpoints(
            scheme=address_scheme(self.host),
            addresses=[definition_pb2.Address(host=self.host, port=self.port)],
        )


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
