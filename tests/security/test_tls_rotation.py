"""Certificate rotation without a restart
(:class:`gannet.node.protocol.tls.ReloadingServerCredentials`): the client port serves a replaced
certificate at the next handshake; files that are not PEM keep the old certificate; checks happen
at most every ``interval_s``."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol import tls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

from . import certs

pytestmark = pytest.mark.timeout(60)


def _install(source: certs.Issued, cert_file: Path, key_file: Path) -> None:
    """Copy beside and rename over (a new inode, as a Secret rotation gives)."""
    for src, dst in ((source.cert_file, cert_file), (source.key_file, key_file)):
        temp = dst.with_name(dst.name + ".tmp")
        shutil.copyfile(src, temp)
        os.replace(temp, dst)


def _handshake(endpoint: str, ca_file: Path) -> grpc.StatusCode:
    """The status of one admin call over a fresh TLS channel trusting ``ca_file``."""
    with grpc.secure_channel(endpoint, tls.channel_credentials(ca_file)) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.GetStatus(admin_pb2.GetStatusRequest(), timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


@pytest.fixture
def rotating(tmp_path: Path) -> Iterator[tuple[threads.BrokerThread, Path]]:
    old_ca = certs.authority(tmp_path, "old-ca")
    issued = old_ca.issue(tmp_path, "old", server=True)
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    _install(issued, cert_file, key_file)
    store = StoreConfig.for_tests(tmp_path / "store", flush_mode=FlushMode.SYNC_FLUSH)
    config = BrokerConfig(
        store=store,
        listen_port=0,
        tls_cert=cert_file,
        tls_key=key_file,
        tls_reload_interval_s=0.0,
    )
    running = threads.start(config)
    yield running, tmp_path
    running.stop()


def test_a_rotated_certificate_serves_the_next_handshake(
    rotating: tuple[threads.BrokerThread, Path],
) -> None:
    running, root = rotating
    endpoint = running.endpoint
    old_ca = root / "old-ca.crt"
    assert _handshake(endpoint, old_ca) == grpc.StatusCode.OK
    new_ca = certs.authority(root, "new-ca")
    _install(new_ca.issue(root, "new", server=True), root / "tls.crt", root / "tls.key")
    assert _handshake(endpoint, new_ca.cert_file) == grpc.StatusCode.OK
    assert _handshake(endpoint, old_ca) == grpc.StatusCode.UNAVAILABLE


def test_broken_files_keep_the_old_certificate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    authority = certs.authority(tmp_path, "ca")
    issued = authority.issue(tmp_path, "server", server=True)
    now_s = [0.0]
    reloading = tls.ReloadingServerCredentials(
        issued.cert_file, issued.key_file, interval_s=2.0, clock=lambda: now_s[0]
    )
    assert reloading.fetch() is None  # within the interval
    now_s[0] = 3.0
    assert reloading.fetch() is None  # unchanged
    issued.cert_file.write_text("garbage\n")
    now_s[0] = 6.0
    with caplog.at_level(logging.ERROR, logger=tls.__name__):
        assert reloading.fetch() is None
    assert reloading.failures_total == 1
    assert any("is not PEM" in r.getMessage() for r in caplog.records)
    fresh = authority.issue(tmp_path, "fresh", server=True)
    _install(fresh, issued.cert_file, issued.key_file)
    now_s[0] = 9.0
    assert isinstance(reloading.fetch(), grpc.ServerCertificateConfiguration)
    assert reloading.reloads_total == 1
