"""``gannet broker run --auth-file … --tls-cert … --tls-key …`` as a real process: the
options reach the server — TLS only, signatures required, rights enforced."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest

from gannet.node.protocol import auth, tls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.testing import small_stores

from . import certs
from .conftest import ADMIN, SUB_A, write_accounts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def _signed(key: tuple[str, str]) -> list[tuple[str, str]]:
    return [*auth.signed_metadata(*key, time.time()), ("x-mq-request-id", str(uuid.uuid4()))]


def test_secured_broker_process(tmp_path: Path) -> None:
    ca = certs.authority(tmp_path, "ca")
    server = ca.issue(tmp_path, "broker", server=True)
    args = [
        sys.executable, "-m", "gannet.node.cli", "broker", "run",
        "--data-dir", str(tmp_path / "store"), "--listen", "127.0.0.1:0", "--file-size-mb", "4",
        *small_stores.INDEX_ARGS,
        "--metrics-listen", "", "--auth-file", str(write_accounts(tmp_path / "accounts.json")),
        "--tls-cert", str(server.cert_file), "--tls-key", str(server.key_file),
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "press Ctrl-C" in line:
                break
        text = "".join(lines)
        match = re.search(r"on (127\.0\.0\.1:\d+)", text)
        assert match, text
        assert "authentication: on, 3 access keys" in text
        assert "TLS:" in text
        endpoint = match.group(1)
        with grpc.insecure_channel(endpoint) as plain:
            with pytest.raises(grpc.RpcError) as error:
                admin_pb2_grpc.AdminStub(plain).GetStatus(  # type: ignore[no-untyped-call]
                    admin_pb2.GetStatusRequest(), timeout=3
                )
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE
        with grpc.secure_channel(endpoint, tls.channel_credentials(ca.cert_file)) as channel:
            admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            request = admin_pb2.CreateTopicRequest(name="Secured", queue_nums=1)
            with pytest.raises(grpc.RpcError) as error:
                admin.CreateTopic(request, timeout=10)
            assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as error:
                admin.CreateTopic(request, metadata=_signed(SUB_A), timeout=10)
            assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED
            admin.CreateTopic(request, metadata=_signed(ADMIN), timeout=10)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest
    assert "Secured" in (tmp_path / "store" / "config" / "topics.json").read_text()
