"""``gannet broker run`` as a real process: prints how to connect, stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import queue
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.broker import serving, threads
from gannet.node.broker.serving import BrokerConfig, with_listen
from gannet.node.broker_groups.polling import GroupPoller
from gannet.node.cli import calls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.testing import small_stores

from .conftest import CLIENT_ID

pytestmark = pytest.mark.slow


def test_broker_run_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    data_dir = tmp_path / "store"
    args = [
        sys.executable, "-m", "gannet.node.cli", "broker", "run",
        "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", "--file-size-mb", "4",
        *small_stores.INDEX_ARGS, "--flush", "sync", "--metrics-listen", "",
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "broker serving" in line:
                break
        match = re.search(r"on (127\.0\.0\.1:\d+)", "".join(lines))
        assert match, "".join(lines)
        endpoint = match.group(1)
        with calls.channel(endpoint) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            stub.CreateTopic(admin_pb2.CreateTopicRequest(name="Persisted"), timeout=10)
        assert (data_dir / "abort").exists()
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest
    assert "store closed cleanly" in rest
    assert not (data_dir / "abort").exists()
    assert "Persisted" in (data_dir / "config" / "topics.json").read_text()


def test_stop_ends_telemetry_streams_instead_of_waiting_out_the_grace(tmp_path: Path) -> None:
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    running = threads.start(BrokerConfig(store=store, listen_port=0, shutdown_grace_s=60))
    settings = definition_pb2.Settings(client_type=definition_pb2.PRODUCER)
    settings.publishing.SetInParent()
    outbox: queue.Queue[service_pb2.TelemetryCommand | None] = queue.Queue()
    outbox.put(service_pb2.TelemetryCommand(settings=settings))
    with calls.channel(running.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        stream = stub.Telemetry(iter(outbox.get, None), metadata=CLIENT_ID)
        assert next(stream).status.code == 20000
        started = time.monotonic()
        running.stop()
        elapsed_s = time.monotonic() - started
        assert list(stream) == []  # the broker ended the stream
        outbox.put(None)
    assert elapsed_s < 10


def test_ipv6_loopback_listen(tmp_path: Path) -> None:
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    config = with_listen(BrokerConfig(store=store), "[::1]:0")
    try:
        running = threads.start(config)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        assert running.endpoint.startswith("[::1]:")
        with calls.channel(running.endpoint) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            assert stub.GetStatus(admin_pb2.GetStatusRequest(), timeout=10).broker_name
    finally:
        running.stop()


def test_port_in_use_is_a_clear_error(tmp_path: Path, broker: threads.BrokerThread) -> None:
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    port = int(broker.endpoint.rsplit(":", 1)[1])
    with pytest.raises(OSError, match="in use"):
        threads.start(BrokerConfig(store=store, listen_port=port))
    other = threads.start(BrokerConfig(store=store, listen_port=0))  # the store was released
    other.stop()


def test_a_stop_step_that_never_ends_is_left_behind_and_the_store_still_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A gRPC completion that never comes (the poller's calls to a seed) must not hang stop."""

    async def never(self: GroupPoller) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(GroupPoller, "stop", never)
    monkeypatch.setattr(serving, "STOP_STEP_SLACK_S", 0.2)
    store = StoreConfig.for_tests(tmp_path / "store", flush_mode=FlushMode.SYNC_FLUSH)
    config = BrokerConfig(store=store, listen_port=0, cluster_seeds=("127.0.0.1:1",))
    running = threads.start(config)
    running.stop()
    assert "the group poller's stop did not end within 0.2 s" in caplog.text
    assert not (tmp_path / "store" / "abort").exists()  # closed cleanly all the same
