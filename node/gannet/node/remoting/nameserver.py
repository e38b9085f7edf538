"""Name-server requests, answered by every broker from what it knows of its cluster.

Gannet has no separate name server: as RocketMQ 5's proxy does, each broker answers the
name-server requests — on its name-server port (9876 by convention) and on its remoting port —
from the same sources as the v2 ``QueryRoute`` (:mod:`gannet.node.api.routes`, called through
the servicer, so topics auto-create and broker groups merge the same way):

* ``GET_ROUTEINFO_BY_TOPIC`` (105): one ``QueueData`` per broker group (read and write queue
  counts and perm rebuilt from the v2 queues), one ``BrokerData`` per group whose
  ``brokerAddrs`` name the leader as brokerId 0 and the other serving members as 1, 2, ...
  (the routes list the leader first) — in this member's own Raft group, every serving member
  under its node id too (the leader twice: 0 and its id), so that the broker id a pull answer
  suggests names the same member across leader changes (:mod:`pull_steering`);
  ``TOPIC_NOT_EXIST`` for an unknown topic. Plus, for
  failover, one *write-only* entry per follower (:func:`failover_name`).
* ``GET_BROKER_CLUSTER_INFO`` (106): every group of the cluster with its members
  (:meth:`gannet.node.api.cluster_admin.BrokerGroups.cluster_view`), the leader as brokerId 0;
  in this member's own Raft group the followers under their node ids, as the routes name them
  (``mqadmin clusterList`` then shows the ids the routes use).
* ``GET_ALL_TOPIC_LIST_FROM_NAMESERVER`` (206): this group's topics.

Addresses are remoting addresses: a member's client (gRPC) address with its port moved by the
distance between this broker's remoting port and client port (:class:`PortMap`). Every member
of a cluster must therefore keep its remoting port at the same distance from its client port
(on Kubernetes every pod has the same ports; ``cluster up`` lays ports out so).

**Failover entries.** A 4.x producer sends only to a group's brokerId 0, from a route it
refreshes every 30 s, and retries a failed send (``retryTimesWhenSendFailed``, 2) on a queue
of *another broker name* (``TopicPublishInfo.selectOneMessageQueue(lastBrokerName)``): with one
name per group, every retry after a leader's death went to the dead address until the next
refresh. So each follower ``i`` is also named as a broker of its own, ``<group>@<i>``, with
the group's write queues, perm WRITE only, no read queues and its address as brokerId 0: the
producer spreads its sends over every member, each member forwards to the leader as for gRPC,
and a send that fails on one member is retried on another at once. Consumers see only
readable queues, so they see the group alone (``topicRouteData2TopicSubscribeInfo``).

A request that came in on the external remoting listener (``--external-remoting-port``,
:attr:`NameServer.external_ports`) is answered with the members' external remoting addresses
from the address book (:mod:`gannet.node.api.external_routes`): the route is the one a gRPC
client that named nothing gets (the leader, or every serving member leader first), each
member's internal client address translated by the book; an address the book does not hold
keeps its internal remoting address.

Bodies are JSON as fastjson writes them: maps with integer keys (``brokerAddrs``) are written
with bare integer keys, which fastjson reads back into its ``HashMap<Long, String>``.
"""

from __future__ import annotations

import functools
import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.api import external_routes, routes
from gannet.node.api.external_routes import AddressBook
from gannet.node.api.messaging import MessagingServicer
from gannet.node.protocol import statuses
from gannet.node.remoting import codes
from gannet.node.remoting.codec import Command
from gannet.node.remoting.context import RemotingContext
from gannet.node.remoting.server import Connection

PERM_READ = 4
PERM_WRITE = 2


@dataclass(frozen=True, slots=True)
class PortMap:
    """Client (gRPC) port → remoting port of any member (module docstring)."""

    client_port: int
    remoting_port: int

    def remoting(self, endpoint: str) -> str:
        host, _, port = endpoint.rpartition(":")
        return f"{host}:{int(port) + self.remoting_port - self.client_port}"


FAILOVER_SEPARATOR = "@"
ADDRESSES_CACHED_MAX = 64


@functools.lru_cache(maxsize=ADDRESSES_CACHED_MAX)
def _ip_text(host: str) -> str | None:
    """``host`` as an IP address in canonical text, None when it is a name. Cached: every send's
    answer asks it of the same few hosts (:meth:`NameServer.store_address`), and parsing with
    :mod:`ipaddress` cost ~40 µs a send (bench/results/REMOTING.md)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def failover_name(group: str, index: int) -> str:
    """The write-only broker name of a group's ``index``-th member (1: the first follower)."""
    return f"{group}{FAILOVER_SEPARATOR}{index}"


def _broker_data(
    cluster: str,
    name: str,
    addresses: list[str],
    broker_ids: list[int] | None = None,
    numbered: list[tuple[int, str]] | None = None,
) -> str:
    """``brokerAddrs`` numbers ``addresses`` 0, 1, 2, ... unless ``broker_ids`` gives each
    address its id (then the first address is also named 0: the leader) or ``numbered`` gives
    the (id, address) pairs themselves."""
    if numbered is None and broker_ids is None:
        numbered = list(enumerate(addresses))
    elif numbered is None:
        numbered = [(0, addresses[0]), *zip(broker_ids or [], addresses, strict=True)]
    addrs = ",".join(f"{i}:{json.dumps(a)}" for i, a in numbered)
    return (
        f'{{"brokerAddrs":{{{addrs}}},"brokerName":{json.dumps(name)},'
        f'"cluster":{json.dumps(cluster)}}}'
    )


class NameServer:
    def __init__(self, servicer: MessagingServicer, ports: PortMap) -> None:
        self.servicer = servicer
        self.ports = ports
        self.external_ports: frozenset[int] = frozenset()
        """Local ports whose clients are outside (the external remoting listener)."""

    def _book(self, conn: Connection) -> AddressBook | None:
        """The address book when ``conn`` came in on an external listener, else None."""
        if conn.local_port not in self.external_ports:
            return None
        load = self.servicer.external_book
        return load() if load is not None else external_routes.EMPTY

    def _own_client_endpoint(self) -> tuple[str, int]:
        """This member's client endpoint as routes name it: its ``--peers`` address in a Raft
        group (a pod's DNS name: the broker listens on 0.0.0.0 there), else the broker's."""
        replication = self.servicer.replication
        if replication is not None:
            me = replication.config.me
            return me.host, me.client_port
        return self.servicer.identity.host, self.servicer.identity.port

    def store_address(self, conn: Connection) -> tuple[str, int]:
        """The IP address and port an offset message id given to ``conn``'s client names: this
        member's remoting address as the routes name it to that client (the external one on
        the external listener), so that the client can dial it for VIEW_MESSAGE_BY_ID; when
        the routes name a host (a pod's DNS name), the address the client connected to."""
        host, port = self._own_client_endpoint()
        address = self._remoting(f"{host}:{port}", self._book(conn))
        route_host, _, route_port = address.rpartition(":")
        for candidate in (route_host.strip("[]"), conn.local_host):
            ip = _ip_text(candidate)
            if ip is not None:
                return ip, int(route_port)
        return "127.0.0.1", int(route_port)

    def _node_ids(self) -> dict[str, int]:
        """Client endpoint → Raft node id of this group's members (empty: not replicated)."""
        replication = self.servicer.replication
        if replication is None:
            return {}
        return {f"{p.host}:{p.client_port}": p.node_id for p in replication.route_members()}

    def _remoting(self, endpoint: str, book: AddressBook | None) -> str:
        if book is not None:
            found = book.remoting(endpoint)
            if found is not None:
                return found
        return self.ports.remoting(endpoint)

    @property
    def cluster(self) -> str:
        return self.servicer.store.config.cluster_name

    async def route(self, request: Command, conn: Connection) -> Command:
        topic = request.ext.get("topic", "")
        book = self._book(conn)
        host, port = self._own_client_endpoint()
        query = service_pb2.QueryRouteRequest(
            topic=definition_pb2.Resource(name=topic),
            endpoints=definition_pb2.Endpoints()
            if book is not None
            else definition_pb2.Endpoints(
                scheme=routes.address_scheme(host),
                addresses=[definition_pb2.Address(host=host, port=port)],
            ),
        )
        v2: Any = self.servicer
        reply = await v2.QueryRoute(query, RemotingContext(conn))
        if reply.status.code != statuses.OK:
            code = codes.from_v2(reply.status.code)
            return request.response(code, str(reply.status.message))
        groups: dict[str, tuple[list[str], list[int]]] = {}
        member_ids: dict[str, list[int]] = {}
        node_ids = self._node_ids()
        for queue in reply.message_queues:
            name = str(queue.broker.name)
            entry = groups.setdefault(name, ([], []))
            if not entry[0]:
                endpoints = [f"{a.host}:{a.port}" for a in queue.broker.endpoints.addresses]
                entry[0].extend(self._remoting(e, book) for e in endpoints)
                ids = [node_ids.get(e) for e in endpoints]
                if name == self.servicer.identity.broker_name and endpoints and None not in ids:
                    member_ids[name] = [i for i in ids if i is not None]
            entry[1].append(int(queue.permission))
        queue_datas = []
        broker_datas = []
        for name, (addresses, perms) in groups.items():
            reads = sum(1 for p in perms if p in (definition_pb2.READ, definition_pb2.READ_WRITE))
            writes = sum(1 for p in perms if p in (definition_pb2.WRITE, definition_pb2.READ_WRITE))
            perm = (PERM_READ if reads else 0) | (PERM_WRITE if writes else 0)
            queue_datas.append(
                json.dumps(
                    {
                        "brokerName": name,
                        "perm": perm,
                        "readQueueNums": reads,
                        "topicSysFlag": 0,
                        "writeQueueNums": writes,
                    }
                )
            )
            broker_datas.append(_broker_data(self.cluster, name, addresses, member_ids.get(name)))
            if not writes:
                continue
            for index, address in enumerate(addresses[1:], start=1):
                queue_datas.append(
                    json.dumps(
                        {
                            "brokerName": failover_name(name, index),
                            "perm": PERM_WRITE,
                            "readQueueNums": 0,
                            "topicSysFlag": 0,
                            "writeQueueNums": writes,
                        }
                    )
                )
                broker_datas.append(
                    _broker_data(self.cluster, failover_name(name, index), [address])
                )
        body = (
            f'{{"brokerDatas":[{",".join(broker_datas)}],"filterServerTable":{{}},'
            f'"queueDatas":[{",".join(queue_datas)}]}}'
        )
        return request.response(codes.SUCCESS, body=body.encode("utf-8"))

    async def cluster_info(self, request: Command, conn: Connection) -> Command:
        groups = self.servicer.groups
        book = self._book(conn)
        entries: list[tuple[str, list[str]]] = []
        if groups is None:
            own = f"{self.servicer.identity.host}:{self.servicer.identity.port}"
            entries.append((self.servicer.identity.broker_name, [own]))
        else:
            for state in groups.cluster_view().groups:
                members = list(state.group.member_endpoints)
                entries.append((str(state.group.broker_name), members))
        node_ids = self._node_ids()
        own = self.servicer.identity.broker_name
        parts = []
        for name, members in entries:
            addresses = [self._remoting(m, book) for m in members]
            ids = [node_ids.get(m) for m in members[1:]]
            if name == own and addresses and None not in ids:
                # the leader as 0, the followers under their node ids, as the routes name them
                numbered = [(0, addresses[0])]
                numbered += [(int(i or 0), a) for i, a in zip(ids, addresses[1:], strict=True)]
                data = _broker_data(self.cluster, name, addresses, numbered=numbered)
            else:
                data = _broker_data(self.cluster, name, addresses)
            parts.append(f"{json.dumps(name)}:{data}")
        table = ",".join(parts)
        names = json.dumps([name for name, _ in entries])
        body = (
            f'{{"brokerAddrTable":{{{table}}},'
            f'"clusterAddrTable":{{{json.dumps(self.cluster)}:{names}}}}}'
        )
        return request.response(codes.SUCCESS, body=body.encode("utf-8"))

    async def topic_list(self, request: Command, conn: Connection) -> Command:
        names = sorted(c.topic_name for c in self.servicer.store.topic_configs.list())
        body = json.dumps({"topicList": names})
        return request.response(codes.SUCCESS, body=body.encode("utf-8"))
