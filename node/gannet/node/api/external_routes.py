"""Routes for clients outside the network the members name each other in (Kubernetes' pods).

Members name each other, and routes name members, by their *internal* client endpoints: the
``host:client_port`` of ``--peers``/``--join`` (``main-0.main-peers.gannet.svc:8081`` on
Kubernetes), which resolve only inside the cluster. A client outside reaches each member at
another address (a NodePort or a LoadBalancer of its own). The **address book** says, for every
member's internal client endpoint, its external gRPC client endpoint and, when remoting is
served, its external remoting endpoint; the operator writes it into a ConfigMap mounted in every
pod (``--external-addresses``), so every member knows every other member's external address
and a route names the *leader's* external address whichever member answers, across leader
changes: the leader still travels as it does today (by its internal endpoint, in the Raft
membership), and each member translates it through the book. The file format:

.. code-block:: json

    {"main-0.main-peers.gannet.svc:8081":
        {"client": "172.18.0.2:30081", "remoting": "172.18.0.2:30911"}}

Which clients get the external view (``docs/kubernetes.md``, "Access from outside"):

* gRPC (RocketMQ 5 clients): every ``QueryRoute``/``QueryAssignment`` carries the endpoints the
  client dialed. When they name an external client address of the book (:meth:`dialed_outside`),
  the route is built as for a client that named nothing (the leader, or every serving member
  leader first when members are named by IP) and each address is translated
  (:func:`translate_queues`). Clients inside dial the client Service or a pod name, which the
  book does not hold: their routes are unchanged.
* Remoting (4.x clients): a request carries no such endpoints, so the external view is a
  listener of its own (``--external-remoting-port``); its name-server answers name the book's
  remoting addresses.

An address the book does not hold (a member added since the file was written) is left as it is.
Pure functions and dataclasses; the file is read by :mod:`external_book_file`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from rocketmq.grpc_protocol import definition_pb2

from gannet.node.api import routes


class AddressBookError(ValueError):
    """An address book that cannot be used; the message names the entry and the problem."""


@dataclass(frozen=True, slots=True)
class ExternalAddress:
    """Where a client outside reaches one member."""

    client: tuple[str, int]
    """gRPC client endpoint (host, port)."""
    remoting: tuple[str, int] | None = None
    """Remoting endpoint (host, port); None: remoting is not exposed."""


def _endpoint(text: object, where: str) -> tuple[str, int]:
    if not isinstance(text, str) or ":" not in text:
        raise AddressBookError(f"{where} is {text!r}; expected 'host:port'")
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise AddressBookError(f"{where} is {text!r}; expected 'host:port' with a port 1-65535")
    return host, int(port)


def _text(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class AddressBook:
    """Internal client endpoint (``host:port``) → :class:`ExternalAddress`."""

    members: Mapping[str, ExternalAddress]

    def dialed_outside(self, requested: definition_pb2.Endpoints) -> bool:
        """Whether ``requested`` (the endpoints a client dialed) names an external client
        address of the book."""
        outside = {address.client for address in self.members.values()}
        return any((str(a.host), int(a.port)) in outside for a in requested.addresses)

    def client(self, internal: str) -> tuple[str, int] | None:
        found = self.members.get(internal)
        return found.client if found is not None else None

    def remoting(self, internal: str) -> str | None:
        found = self.members.get(internal)
        if found is None or found.remoting is None:
            return None
        return _text(*found.remoting)


EMPTY = AddressBook({})


def parse(text: str) -> AddressBook:
    """The book in ``text`` (JSON, module docstring); raises :class:`AddressBookError`."""
    try:
        raw = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise AddressBookError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise AddressBookError("expected an object of internal endpoint → addresses")
    members: dict[str, ExternalAddress] = {}
    for internal, entry in raw.items():
        host, port = _endpoint(internal, "a key")
        if not isinstance(entry, dict):
            raise AddressBookError(f"{internal!r} is {entry!r}; expected an object")
        unknown = set(entry) - {"client", "remoting"}
        if unknown:
            raise AddressBookError(f"{internal!r} has unknown fields {sorted(unknown)}")
        if "client" not in entry:
            raise AddressBookError(f"{internal!r} has no 'client' address")
        remoting = entry.get("remoting")
        members[_text(host, port)] = ExternalAddress(
            client=_endpoint(entry["client"], f"{internal!r} client"),
            remoting=None if remoting is None else _endpoint(remoting, f"{internal!r} remoting"),
        )
    return AddressBook(members)


def render(book: Mapping[str, ExternalAddress]) -> str:
    """The file text of ``book`` (what the operator writes; :func:`parse` reads it back)."""
    out: dict[str, dict[str, str]] = {}
    for internal, address in sorted(book.items()):
        entry = {"client": _text(*address.client)}
        if address.remoting is not None:
            entry["remoting"] = _text(*address.remoting)
        out[internal] = entry
    return json.dumps(out, indent=1, sort_keys=True) + "\n"


def translate_endpoints(
    endpoints: definition_pb2.Endpoints, book: AddressBook
) -> definition_pb2.Endpoints:
    """``endpoints`` with every address the book holds replaced by its external client
    address; a list of host names is cut to its first (the clients cannot dial such a list)."""
    addresses = []
    for a in endpoints.addresses:
        found = book.client(_text(str(a.host), int(a.port)))
        host, port = found if found is not None else (str(a.host), int(a.port))
        addresses.append((host, port))
    schemes = {routes.address_scheme(h) for h, _ in addresses}
    if len(schemes) != 1 or definition_pb2.DOMAIN_NAME in schemes:
        addresses = addresses[:1]
        schemes = {routes.address_scheme(h) for h, _ in addresses}
    return definition_pb2.Endpoints(
        scheme=schemes.pop() if schemes else endpoints.scheme,
        addresses=[definition_pb2.Address(host=h, port=p) for h, p in addresses],
    )


def translate_queues(
    queues: list[definition_pb2.MessageQueue], book: AddressBook
) -> list[definition_pb2.MessageQueue]:
    """Copies of ``queues`` whose brokers' endpoints are translated (never the cached views)."""
    out = []
    for queue in queues:
        copy = definition_pb2.MessageQueue()
        copy.CopyFrom(queue)
        copy.broker.endpoints.CopyFrom(translate_endpoints(queue.broker.endpoints, book))
        out.append(copy)
    return out
