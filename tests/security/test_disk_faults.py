"""Disk faults over the wire: a full disk refuses writes and keeps serving reads, and
recovers when space returns; a failed fsync stops the node.

The full disk is the store's own measurement (``CleanService.ratio_probe``, the ratio
``statvfs`` gives) reporting 97 % — the cleanup pass an operator triggers over the admin API
then flags the disk full exactly as on a real one. The failed fsync is an ``fdatasync`` raising
``EIO`` (``os.fdatasync`` replaced for the test), the error a dying disk gives.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

pytestmark = pytest.mark.timeout(60)
TOPIC = "DiskTopic"
CLIENT = [("x-mq-client-id", "disk@1@0@x")]


def _start(root: Path) -> threads.BrokerThread:
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    return threads.start(BrokerConfig(store=store, listen_port=0))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[threads.BrokerThread]:
    running = _start(tmp_path / "store")
    with grpc.insecure_channel(running.endpoint) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=1), timeout=10)
    yield running
    running.stop()


def _send(stub: service_pb2_grpc.MessagingServiceStub, key: str) -> service_pb2.SendMessageResponse:
    message = definition_pb2.Message(
        topic=definition_pb2.Resource(name=TOPIC),
        body=b"payload-" + key.encode(),
        system_properties=definition_pb2.SystemProperties(message_id=key, keys=[key]),
    )
    request = service_pb2.SendMessageRequest(messages=[message])
    return stub.SendMessage(request, metadata=CLIENT, timeout=10)


def _query(admin: admin_pb2_grpc.AdminStub, key: str) -> list[bytes]:
    reply = admin.QueryMessage(admin_pb2.QueryMessageRequest(topic=TOPIC, key=key), timeout=10)
    return [m.body for m in reply.messages]


def _wait_until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    """The flush thread's failure reaches the loop asynchronously; wait for its effect."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_full_disk_refuses_writes_serves_reads_and_recovers(broker):
    store = broker.broker.store
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        assert _send(stub, "before").status.code == Code.OK
        assert store.wait_dispatched(store.commitlog.max_offset(), timeout_s=10)

        store.cleaner.ratio_probe = lambda path: 0.97
        cleanup = admin.Cleanup(admin_pb2.CleanupRequest(trigger=True), timeout=10)
        assert cleanup is not None
        assert store.disk_full
        refused = _send(stub, "while-full")
        assert (
            refused.status.code == Code.INTERNAL_SERVER_ERROR
        )  # the proxy's SERVICE_NOT_AVAILABLE
        assert "writes are refused until cleanup frees space" in refused.status.message
        assert _query(admin, "before") == [b"payload-before"]  # reads go on
        offset = stub.GetOffset(
            service_pb2.GetOffsetRequest(
                group=definition_pb2.Resource(name="G"),
                message_queue=definition_pb2.MessageQueue(
                    topic=definition_pb2.Resource(name=TOPIC), id=0
                ),
            ),
            metadata=CLIENT,
            timeout=10,
        )
        assert offset.status.code != Code.INTERNAL_SERVER_ERROR
        assert admin.GetStatus(admin_pb2.GetStatusRequest(), timeout=10).broker_name

        store.cleaner.ratio_probe = lambda path: 0.10
        admin.Cleanup(admin_pb2.CleanupRequest(trigger=True), timeout=10)
        assert not store.disk_full
        assert _send(stub, "after").status.code == Code.OK
        assert store.wait_dispatched(store.commitlog.max_offset(), timeout_s=10)
        assert _query(admin, "after") == [b"payload-after"]
        assert _query(admin, "while-full") == []  # nothing half-written


def test_failed_fsync_stops_the_node(broker, monkeypatch, tmp_path):
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        assert _send(stub, "durable").status.code == Code.OK

        def failing_fdatasync(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error (injected)")

        monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
        try:
            reply = _send(stub, "lost")
            answer = f"v2 {Code.Name(reply.status.code)}: {reply.status.message}"
        except grpc.RpcError as gone:  # the node may already be gone
            answer = f"grpc {gone.code().name}"
        assert not answer.startswith("v2 OK"), answer
        _wait_until(lambda: broker.broker.phase == "failed")
        monkeypatch.undo()

        assert "fdatasync" in (broker.broker.failure or "")
        assert "stopped after a fatal error" in (broker.broker.not_ready_reason() or "")
        with pytest.raises(grpc.RpcError) as error:
            _send(stub, "after")
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    store_dir = broker.broker.config.store.root_dir
    assert (store_dir / "abort").exists()  # the next start recovers as after a crash

    restarted = _start(store_dir)
    try:
        assert restarted.broker.store.last_exit_ok is False
        with grpc.insecure_channel(restarted.endpoint) as channel:
            admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            store = restarted.broker.store
            assert store.wait_dispatched(store.commitlog.max_offset(), timeout_s=10)
            assert _query(admin, "durable") == [b"payload-durable"]
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            assert _send(stub, "again").status.code == Code.OK
    finally:
        restarted.stop()
