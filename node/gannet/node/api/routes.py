"""QueryRoute and QueryAssignment answers: the broker itself is the only broker.

A topic of ``r`` read and ``w`` write queues is published as the proxy does
(``docs/protocol.md`` §5):
``min(r, w)`` queues READ_WRITE, then read-only extras READ and write-only extras WRITE, ids
``0..n-1``, or NONE when the topic's perm has neither bit. ``accept_message_types`` comes from
the topic's ``message.type`` (MIXED → NORMAL, FIFO, DELAY, TRANSACTION). ``broker.id`` is 0
(the Python client only uses master queues), and the endpoints are those the client used to
reach us when they are usable, else the broker's advertised endpoint.

QueryAssignment gives push consumers one assignment per broker group, its queue id ``-1``
(:func:`gannet.node.api.broker_groups.readable_assignments`).

Replicated brokers (a Raft group) publish *every member* (:func:`member_endpoints`): the
``Endpoints`` of each queue's broker list all members' client addresses, the leader first (then
the ``--peers`` order), so a client whose channel loses its member moves to a live one by itself
and any member serves it (followers forward what only the leader may do: :mod:`forwarding`).
What the official clients do with several addresses: the Python client (5.1.2) keys one gRPC
channel per ``Endpoints`` and dials ``ipv4:a:p,b:p,c:p`` — the addresses *sorted as strings*,
so the leader-first order is lost — with gRPC's default ``pick_first`` policy: the channel stays
on the first address that connects; when that connection breaks (the member exits or is
killed: the kernel resets it) the next RPC reconnects, trying the addresses in order, and a
refused address costs nothing. A member that is stopped but not dead (SIGSTOP, a hung host)
keeps its TCP connection open: the client's channel has no keepalive, so its RPCs time out
there until the member resumes; the Java client builds its target in the given order, so the
leader comes first. Host names cannot be listed together: the Python client refuses an
``Endpoints`` of scheme ``DOMAIN_NAME`` with more than one address, so a group whose members
are named by DNS publishes one address, the one the client used to reach us (a Kubernetes
Service in front of every member) or else the leader's (this member's while none is known).
So does a TLS client port, for its own group and for every other group's queues in its routes
(:func:`dialable`): gRPC checks the server's certificate against the channel's authority,
which for ``ipv4:a,b,c`` is the whole address list, so no certificate matches it.
And so does a client that cannot dial a list (:func:`dials_address_lists`): the official
Node.js client (1.0.8) joins the addresses with commas into a gRPC target without a scheme,
which grpc-js resolves as one DNS name and fails ("Name resolution failed for target
dns:a:p,b:p"): every call of such a client failed against a group before it got one address.

Only members that can serve are listed, as far as the answering member knows: the leader
lists itself and the followers it heard from within the last two election timeouts (a member
cut off from its peers but reachable by clients would otherwise hold every request it gets),
and a member that knows no leader leaves itself out.

A write a member cannot take is answered with a code the clients retry on
(:func:`replication_refusal`): ``HA_NOT_AVAILABLE`` (``SLAVE_NOT_AVAILABLE`` in RocketMQ) when
no leader could be reached in time, naming the leader when one is known;
``MASTER_PERSISTENCE_TIMEOUT`` a write that was appended but not known committed (time out, or
leadership lost meanwhile), as for a flush timeout; a leader's uncommitted-bytes limit or a
leadership transfer in progress is ``TOO_MANY_REQUESTS`` (the Python client does not retry
that code: it means the caller should slow down).

Pure functions; called by :mod:`messaging`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rocketmq.grpc_protocol import Code, definition_pb2

from gannet.node.domain.committing import PersistenceTimeout
from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.replication.driver import ReplicationNode
from gannet.node.replication.errors import (
    CommitUncertain,
    NotLeaderError,
    ReplicationBusy,
    ReplicationError,
)
from gannet.node.store.configs.topics import MessageType, TopicConfig

_MESSAGE_TYPES = {
    MessageType.NORMAL: definition_pb2.NORMAL,
    MessageType.FIFO: definition_pb2.FIFO,
    MessageType.DELAY: definition_pb2.DELAY,
    MessageType.TRANSACTION: definition_pb2.TRANSACTION,
    MessageType.LITE: definition_pb2.LITE,
    MessageType.PRIORITY: definition_pb2.PRIORITY,
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


LIST_LANGUAGES = frozenset({"PYTHON", "JAVA"})
"""``x-mq-language`` values of the clients known to dial an ``Endpoints`` of several addresses
(tested: e2e/replication/failover.py). The Node.js client sends ``HTTP``; Go, C++ and C# are
untested here and get one address."""


def dials_address_lists(metadata: Iterable[tuple[str, str]] | None) -> bool:
    """Whether the client whose call carried ``metadata`` (gRPC invocation metadata: pairs)
    dials a list of addresses (:data:`LIST_LANGUAGES`)."""
    for key, value in metadata or ():
        if str(key).lower() == "x-mq-language":
            return str(value).upper() in LIST_LANGUAGES
    return False


def dialable(
    queues: list[definition_pb2.MessageQueue],
    metadata: Iterable[tuple[str, str]] | None,
    *,
    tls: bool = False,
) -> list[definition_pb2.MessageQueue]:
    """``queues`` as the client whose call carried ``metadata`` can dial them: unchanged for a
    client that dials address lists over plaintext, else (``tls``: the client reached a TLS
    port, so it dials the other groups with TLS too, and no certificate matches a list's
    authority) each queue's endpoints cut to their first address (the leader's, in another
    group's view) on copies, never on the cached views."""
    if not tls and dials_address_lists(metadata):
        return queues
    out = []
    for queue in queues:
        if len(queue.broker.endpoints.addresses) <= 1:
            out.append(queue)
            continue
        copy = definition_pb2.MessageQueue()
        copy.CopyFrom(queue)
        del copy.broker.endpoints.addresses[1:]
        out.append(copy)
    return out


def member_endpoints(
    replication: ReplicationNode,
    requested: definition_pb2.Endpoints,
    *,
    tls: bool = False,
    single: bool = False,
) -> definition_pb2.Endpoints:
    """Every member's client address, the leader first (module docstring); never fails, also
    while no leader is known. Members named by DNS, a TLS client port, or ``single`` (a client
    that cannot dial a list): one address (``requested`` when usable)."""
    leader = replication.leader()
    me = replication.config.node_id
    members = replication.route_members() or [replication.config.me]
    if leader is not None:
        members.sort(key=lambda p: p.node_id != leader.node_id)  # stable: node ids after
    if leader is not None and leader.node_id == me and replication.core is not None:
        heard = replication.core.responsive_followers()
        members = [p for p in members if p.node_id == me or p.node_id in heard]
    elif leader is None and len(members) > 1:
        members = [p for p in members if p.node_id != me]  # it cannot serve writes now
    schemes = {address_scheme(p.host) for p in members}
    if not (tls or single) and len(schemes) == 1 and definition_pb2.DOMAIN_NAME not in schemes:
        return definition_pb2.Endpoints(
            scheme=schemes.pop(),
            addresses=[definition_pb2.Address(host=p.host, port=p.client_port) for p in members],
        )
    usable = requested.scheme != definition_pb2.ADDRESS_SCHEME_UNSPECIFIED and requested.addresses
    if usable and (len(requested.addresses) == 1 or requested.scheme != definition_pb2.DOMAIN_NAME):
        return requested
    chosen = leader if leader is not None else replication.config.me
    return endpoints_of(chosen.host, chosen.client_port)


def replication_refusal(exc: ReplicationError) -> ApiError:
    """The v2 status of a write the replication layer did not take (module docstring)."""
    if isinstance(exc, NotLeaderError):
        return ApiError(HA_NOT_AVAILABLE, str(exc))
    if isinstance(exc, CommitUncertain):
        return ApiError(statuses.MASTER_PERSISTENCE_TIMEOUT, str(exc))
    if isinstance(exc, ReplicationBusy):
        return ApiError(statuses.TOO_MANY_REQUESTS, str(exc))
    return ApiError(statuses.INTERNAL_SERVER_ERROR, str(exc))


def commit_refusal(exc: ReplicationError | PersistenceTimeout) -> ApiError:
    """The v2 status of a write that :meth:`Committer.commit` did not confirm: the Raft
    group's refusal (:func:`replication_refusal`), or MASTER_PERSISTENCE_TIMEOUT when the flush
    did not finish in time."""
    if isinstance(exc, PersistenceTimeout):
        return ApiError(statuses.MASTER_PERSISTENCE_TIMEOUT, str(exc))
    return replication_refusal(exc)


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
