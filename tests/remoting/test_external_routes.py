"""Routes for clients outside (docs/kubernetes.md, "Access from outside"): the address book, and
a real broker answering gRPC and remoting routes with external addresses only to clients that
came from outside (a gRPC client that dialed a book address; the external remoting listener)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import external_routes, routes
from gannet.node.api.external_routes import AddressBookError, ExternalAddress
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.remoting import codes
from gannet.node.store.config import FlushMode, StoreConfig
from tests.remoting.client import RawClient

OUTSIDE = "203.0.113.7"


def endpoints(*addresses: tuple[str, int]) -> definition_pb2.Endpoints:
    scheme = routes.address_scheme(addresses[0][0])
    return definition_pb2.Endpoints(
        scheme=scheme, addresses=[definition_pb2.Address(host=h, port=p) for h, p in addresses]
    )


BOOK = external_routes.parse(
    json.dumps(
        {
            "main-0.main-peers.ns.svc:8081": {
                "client": "10.9.0.1:30081",
                "remoting": "10.9.0.1:30911",
            },
            "main-1.main-peers.ns.svc:8081": {"client": "10.9.0.1:30082"},
            "10.0.0.2:8081": {"client": "lb-2.example.com:8081"},
        }
    )
)


def test_the_book_reads_back_what_the_operator_writes() -> None:
    rendered = external_routes.render(BOOK.members)
    assert external_routes.parse(rendered) == BOOK
    assert BOOK.remoting("main-0.main-peers.ns.svc:8081") == "10.9.0.1:30911"
    assert BOOK.remoting("main-1.main-peers.ns.svc:8081") is None
    assert external_routes.parse("") == external_routes.EMPTY


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[1]", "expected an object"),
        ("{", "not JSON"),
        ('{"a:1": {"client": "b"}}', r"'a:1' client is 'b'; expected 'host:port'"),
        ('{"a": {"client": "b:1"}}', r"a key is 'a'"),
        ('{"a:1": {"client": "b:70000"}}', "port 1-65535"),
        ('{"a:1": {}}', "has no 'client' address"),
        ('{"a:1": {"client": "b:1", "grpc": "c:2"}}', r"unknown fields \['grpc'\]"),
    ],
)
def test_a_bad_book_is_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(AddressBookError, match=problem):
        external_routes.parse(text)


def test_only_a_client_that_dialed_an_external_address_is_outside() -> None:
    assert BOOK.dialed_outside(endpoints(("10.9.0.1", 30082)))
    assert not BOOK.dialed_outside(endpoints(("10.9.0.1", 30083)))
    assert not BOOK.dialed_outside(endpoints(("main-client.ns.svc", 8081)))
    assert not BOOK.dialed_outside(definition_pb2.Endpoints())


def test_translation_keeps_the_order_and_cuts_host_name_lists() -> None:
    leader_first = endpoints(("main-1.main-peers.ns.svc", 8081), ("main-0.main-peers.ns.svc", 8081))
    found = external_routes.translate_endpoints(leader_first, BOOK)
    assert found.scheme == definition_pb2.IPv4
    assert [(a.host, a.port) for a in found.addresses] == [("10.9.0.1", 30082), ("10.9.0.1", 30081)]
    named = external_routes.translate_endpoints(
        endpoints(("10.0.0.2", 8081), ("10.0.0.3", 8081)), BOOK
    )
    assert named.scheme == definition_pb2.DOMAIN_NAME
    assert [(a.host, a.port) for a in named.addresses] == [("lb-2.example.com", 8081)]
    unknown = endpoints(("main-5.main-peers.ns.svc", 8081))
    assert external_routes.translate_endpoints(unknown, BOOK) == unknown


@pytest.fixture(scope="module")
def outside_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    root = tmp_path_factory.mktemp("external-broker")
    book = root / "book.json"
    config = BrokerConfig(
        store=StoreConfig.for_tests(root / "store", flush_mode=FlushMode.SYNC_FLUSH),
        listen_port=0,
        remoting_port=0,
        external_remoting_port=0,
        external_addresses=book,
        auto_create_topics=True,
    )
    running = threads.start(config)
    # Written before any route is asked (the broker reads the file on first use).
    members = {
        f"127.0.0.1:{running.broker.port}": ExternalAddress(
            client=(OUTSIDE, 30081), remoting=(OUTSIDE, 30911)
        )
    }
    book.write_text(external_routes.render(members))
    yield running
    running.stop()


def grpc_route(broker: threads.BrokerThread, dialed: tuple[str, int]) -> list[tuple[str, int]]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.QueryRouteRequest(
            topic=definition_pb2.Resource(name="external-topic"), endpoints=endpoints(dialed)
        )
        reply = stub.QueryRoute(request, timeout=10, metadata=[("x-mq-client-id", "outside-test")])
    assert reply.status.code == 20000, reply.status.message
    return sorted(
        {(a.host, a.port) for q in reply.message_queues for a in q.broker.endpoints.addresses}
    )


def remoting_route(port: int) -> list[str]:
    with RawClient(f"127.0.0.1:{port}") as client:
        answer = client.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "external-topic"})
    assert answer.code == codes.SUCCESS, answer.remark
    # fastjson's bare integer keys: read the addresses out of the text.
    text = answer.body.decode()
    start = text.index('"brokerAddrs":{') + len('"brokerAddrs":{')
    entries = text[start : text.index("}", start)].split(",")
    return [json.loads(entry.partition(":")[2]) for entry in entries]


def test_a_grpc_client_outside_gets_external_addresses_and_one_inside_its_own(
    outside_broker: threads.BrokerThread,
) -> None:
    port = outside_broker.broker.port
    assert grpc_route(outside_broker, (OUTSIDE, 30081)) == [(OUTSIDE, 30081)]
    assert grpc_route(outside_broker, ("127.0.0.1", port)) == [("127.0.0.1", port)]


def test_the_external_remoting_listener_names_external_remoting_addresses(
    outside_broker: threads.BrokerThread,
) -> None:
    broker = outside_broker.broker
    assert remoting_route(broker.external_remoting_port) == [f"{OUTSIDE}:30911"]
    assert remoting_route(broker.remoting_port) == [f"127.0.0.1:{broker.remoting_port}"]


def test_an_external_remoting_port_needs_the_book_and_remoting(tmp_path: Path) -> None:
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    with pytest.raises(ValueError, match="needs --remoting-port and --external-addresses"):
        threads.start(BrokerConfig(store=store, listen_port=0, external_remoting_port=0))
