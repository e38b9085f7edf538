"""TLS on the remoting port beyond the official client's run (``test_remoting_security``):
a rotated certificate serves the next handshake, and ``--tls-client-ca`` requires a client
certificate from that CA (``remoting.tls_context``). Raw frames over Python's ``ssl``."""

from __future__ import annotations

import os
import shutil
import ssl
from pathlib import Path

import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.remoting import codes
from gannet.node.store.config import FlushMode, StoreConfig
from tests.security import certs

from .client import RawClient


def _install(source: certs.Issued, cert_file: Path, key_file: Path) -> None:
    """Copy beside and rename over (a new inode, as a Secret rotation gives)."""
    for src, dst in ((source.cert_file, cert_file), (source.key_file, key_file)):
        temp = dst.with_name(dst.name + ".tmp")
        shutil.copyfile(src, temp)
        os.replace(temp, dst)


def _start(root: Path, cert: Path, key: Path, client_ca: Path | None) -> threads.BrokerThread:
    config = BrokerConfig(
        store=StoreConfig.for_tests(root / "store", flush_mode=FlushMode.SYNC_FLUSH),
        listen_port=0,
        remoting_port=0,
        tls_cert=cert,
        tls_key=key,
        tls_client_ca=client_ca,
        tls_reload_interval_s=0.0,
    )
    return threads.start(config)


def _cluster_info(endpoint: str, context: ssl.SSLContext) -> int:
    with RawClient(endpoint, timeout_s=10, tls=context) as client:
        return client.call(codes.GET_BROKER_CLUSTER_INFO).code


def test_a_rotated_certificate_serves_the_next_handshake(tmp_path: Path) -> None:
    old_ca = certs.authority(tmp_path, "old-ca")
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    _install(old_ca.issue(tmp_path, "old", server=True), cert_file, key_file)
    running = _start(tmp_path, cert_file, key_file, None)
    try:
        endpoint = f"127.0.0.1:{running.broker.remoting_port}"
        trusts_old = ssl.create_default_context(cafile=str(old_ca.cert_file))
        assert _cluster_info(endpoint, trusts_old) == codes.SUCCESS
        new_ca = certs.authority(tmp_path, "new-ca")
        _install(new_ca.issue(tmp_path, "new", server=True), cert_file, key_file)
        trusts_new = ssl.create_default_context(cafile=str(new_ca.cert_file))
        assert _cluster_info(endpoint, trusts_new) == codes.SUCCESS
        with pytest.raises(ssl.SSLCertVerificationError):
            _cluster_info(endpoint, trusts_old)
    finally:
        running.stop()


def test_a_client_ca_requires_a_client_certificate_from_it(tmp_path: Path) -> None:
    ca = certs.authority(tmp_path, "ca")
    rogue = certs.authority(tmp_path, "rogue-ca")
    server = ca.issue(tmp_path, "broker", server=True)
    running = _start(tmp_path, server.cert_file, server.key_file, ca.cert_file)
    try:
        endpoint = f"127.0.0.1:{running.broker.remoting_port}"

        def context(client: certs.Issued | None) -> ssl.SSLContext:
            made = ssl.create_default_context(cafile=str(ca.cert_file))
            if client is not None:
                made.load_cert_chain(client.cert_file, client.key_file)
            return made

        member = ca.issue(tmp_path, "client", server=False)
        assert _cluster_info(endpoint, context(member)) == codes.SUCCESS
        for refused in (None, rogue.issue(tmp_path, "rogue-client", server=False)):
            with pytest.raises((ssl.SSLError, ConnectionError)):  # TLS 1.3: at the first read
                _cluster_info(endpoint, context(refused))
    finally:
        running.stop()
