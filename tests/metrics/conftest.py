"""Fixtures for the metrics tests: a broker with its metrics endpoint on an ephemeral port,
HTTP helpers, a parsed scrape, and promtool (installed by ``make unit``)."""

from __future__ import annotations

import http.client
import itertools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

CLIENT_ID = (("x-mq-client-id", "tests@1@0@metrics"),)
HTTP_TIMEOUT_S = 10.0
RPC_TIMEOUT_S = 10.0
REPO = Path(__file__).resolve().parents[2]
BROKER_LABEL = "broker"
_names = itertools.count()


def broker_config(root: Path) -> BrokerConfig:
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    return BrokerConfig(store=store, listen_port=0, metrics_listen="127.0.0.1:0")


def metrics_port(running: threads.BrokerThread) -> int:
    server = running.broker.metrics_server
    assert server is not None
    return server.port


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    running = threads.start(broker_config(tmp_path_factory.mktemp("metered")))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def channel(broker: threads.BrokerThread) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(broker.endpoint) as ch:
        yield ch


@pytest.fixture(scope="module")
def messaging(channel: grpc.Channel) -> service_pb2_grpc.MessagingServiceStub:
    return service_pb2_grpc.MessagingServiceStub(channel)


@pytest.fixture(scope="module")
def admin(channel: grpc.Channel) -> admin_pb2_grpc.AdminStub:
    return admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]


def create_topic(admin: admin_pb2_grpc.AdminStub) -> str:
    name = f"Metered-{next(_names)}"
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name=name, queue_nums=2), timeout=RPC_TIMEOUT_S)
    return name


def send(messaging, topic: str, bodies: list[bytes]) -> service_pb2.SendMessageResponse:
    request = service_pb2.SendMessageRequest()
    for i, body in enumerate(bodies):
        msg = request.messages.add(body=body)
        msg.topic.name = topic
        msg.system_properties.message_id = f"0102FC000000013E000B13F97D{next(_names) + i:08X}"
    return messaging.SendMessage(request, metadata=CLIENT_ID, timeout=RPC_TIMEOUT_S)


def http_get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of ``GET http://127.0.0.1:{port}{path}``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def scrape(port: int) -> str:
    status, text = http_get(port, "/metrics")
    assert status == 200, text
    return text


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, keyed by (name, labels); the constant ``broker`` label that
    every served sample carries (test_scraping checks it) is left out of the key."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k != BROKER_LABEL}
            found[(sample.name, frozenset(labels.items()))] = sample.value
    return found


def broker_labels(text: str) -> dict[str, set[str]]:
    """Each sample name of a scrape and the ``broker`` label values it was served with
    (an empty string where a sample had none)."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, set()).add(sample.labels.get(BROKER_LABEL, ""))
    return found


def value(text: str, name: str, /, **labels: str) -> float:
    """One sample's value; 0 when the series does not exist yet (counters start there)."""
    return samples(text).get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="session")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (make unit installs Debian's prometheus package)")
    return found


def run_promtool(promtool: str, *args: str, stdin: str | None = None) -> str:
    """Run promtool; fail the test with its output unless it exits 0."""
    done = subprocess.run(
        [promtool, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output
