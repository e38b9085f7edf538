"""TLS on the client port: the official client over TLS, plaintext refused, mutual TLS.

Certificates are made per module with ``cryptography`` (``certs.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gannet.node.broker import serving, threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol import tls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

from . import certs

pytestmark = pytest.mark.timeout(120)
TOPIC = "TlsTopic"
SCRIPT = Path(__file__).with_name("tls_producer.py")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    directory = tmp_path_factory.mktemp("pki")
    ca = certs.authority(directory, "cluster-ca")
    rogue = certs.authority(directory, "rogue-ca")
    return {
        "dir": directory,
        "ca": ca,
        "server": ca.issue(directory, "broker", server=True),
        "client": ca.issue(directory, "client", server=False),
        "rogue_client": rogue.issue(directory, "rogue-client", server=False),
    }


def _start(tmp: Path, pki: dict[str, object], *, mutual: bool) -> threads.BrokerThread:
    server = pki["server"]
    ca = pki["ca"]
    assert isinstance(server, certs.Issued)
    assert isinstance(ca, certs.Authority)
    store = StoreConfig.for_tests(tmp, flush_mode=FlushMode.SYNC_FLUSH)
    config = BrokerConfig(
        store=store,
        listen_port=0,
        tls_cert=server.cert_file,
        tls_key=server.key_file,
        tls_client_ca=ca.cert_file if mutual else None,
    )
    return threads.start(config)


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki) -> Iterator[threads.BrokerThread]:
    running = _start(tmp_path_factory.mktemp("tls-broker"), pki, mutual=False)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory, pki) -> Iterator[threads.BrokerThread]:
    running = _start(tmp_path_factory.mktemp("mtls-broker"), pki, mutual=True)
    yield running
    running.stop()


def _admin(channel: grpc.Channel) -> admin_pb2_grpc.AdminStub:
    return admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]


def _list_code(channel: grpc.Channel) -> grpc.StatusCode:
    """The gRPC code of one admin call on ``channel``."""
    try:
        _admin(channel).ListTopics(admin_pb2.ListTopicsRequest(), timeout=3)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def _secure(endpoint: str, pki, client: str | None = None) -> grpc.Channel:
    ca = pki["ca"]
    issued = pki[client] if client else None
    credentials = tls.channel_credentials(
        ca.cert_file,
        issued.cert_file if issued else None,
        issued.key_file if issued else None,
    )
    return grpc.secure_channel(endpoint, credentials)


def test_official_client_sends_over_tls(tls_broker, pki):
    with _secure(tls_broker.endpoint, pki) as channel:
        _admin(channel).CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=1))
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(pki["ca"].cert_file)}
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("tls_producer.py")),
            tls_broker.endpoint,
            TOPIC,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    message_id = done.stdout.strip().splitlines()[-1]
    with _secure(tls_broker.endpoint, pki) as channel:
        found = _admin(channel).QueryMessage(
            admin_pb2.QueryMessageRequest(topic=TOPIC, message_id=message_id), timeout=10
        )
    assert [m.body for m in found.messages] == [b"over tls"]


def test_plaintext_is_refused_by_a_tls_port(tls_broker):
    with grpc.insecure_channel(tls_broker.endpoint) as channel:
        assert _list_code(channel) == grpc.StatusCode.UNAVAILABLE


def test_client_trusting_another_ca_cannot_connect(tls_broker, pki, tmp_path):
    other = certs.authority(tmp_path, "other-ca")
    credentials = tls.channel_credentials(other.cert_file)
    with grpc.secure_channel(tls_broker.endpoint, credentials) as channel:
        assert _list_code(channel) == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("client", [None, "rogue_client"])
def test_mutual_tls_refuses_clients_without_a_cluster_certificate(mtls_broker, pki, client):
    with _secure(mtls_broker.endpoint, pki, client) as channel:
        assert _list_code(channel) == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_serves_a_client_with_a_cluster_certificate(mtls_broker, pki):
    with _secure(mtls_broker.endpoint, pki, "client") as channel:
        reply = _admin(channel).GetStatus(admin_pb2.GetStatusRequest(), timeout=5)
    assert reply.broker_name


def test_bad_tls_files_are_named(tmp_path, pki):
    not_pem = tmp_path / "cert.txt"
    not_pem.write_text("hello")
    with pytest.raises(tls.TlsFileError, match="is not PEM"):
        tls.server_credentials(not_pem, pki["server"].key_file)
    with pytest.raises(tls.TlsFileError, match="cannot read private key"):
        tls.server_credentials(pki["server"].cert_file, tmp_path / "missing.key")
    with pytest.raises(tls.TlsFileError, match="both its certificate and its key"):
        tls.channel_credentials(None, pki["client"].cert_file, None)
    store = StoreConfig.for_tests(tmp_path / "s")
    with pytest.raises(tls.TlsFileError, match="needs both --tls-cert and --tls-key"):
        serving.Broker(BrokerConfig(store=store, tls_cert=pki["server"].cert_file))
