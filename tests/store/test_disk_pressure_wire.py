"""The first-hour report over the wire: a broker on a disk 88 % full keeps every unconsumed
message and answers sends with a disk-full error naming the ratio, until the group catches up.
And the Kubernetes report: a disk hovering at the warning ratio does not flip sends between
refused and accepted; they are accepted again once it is 2 points below.

The disk usage is the store's own probe (``CleanService.ratio_probe``) reporting 88 % (91 %,
89.5 %, 87.9 %); the cleanup pass is triggered over the admin API as an operator would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

pytestmark = pytest.mark.timeout(120)
TOPIC = "Backlog"
CLIENT = [("x-mq-client-id", "pressure@1@0@x")]
MESSAGES = 200


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[threads.BrokerThread]:
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.ASYNC_FLUSH, delete_when="")
    running = threads.start(BrokerConfig(store=store, listen_port=0))
    yield running
    running.stop()


def send(stub: service_pb2_grpc.MessagingServiceStub, i: int) -> service_pb2.SendMessageResponse:
    message = definition_pb2.Message(
        topic=definition_pb2.Resource(name=TOPIC),
        body=f"order-{i}:".encode() + b"z" * 1000,
        system_properties=definition_pb2.SystemProperties(message_id=f"id-{i}"),
    )
    request = service_pb2.SendMessageRequest(messages=[message])
    return stub.SendMessage(request, metadata=CLIENT, timeout=10)


def test_88_percent_full_disk_keeps_unconsumed_messages_and_refuses_sends(broker) -> None:
    store = broker.broker.store
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=1), timeout=10)
        for i in range(MESSAGES):
            assert send(stub, i).status.code == Code.OK
        assert store.wait_dispatched(store.commitlog.max_offset())
        files = len(store.commitlog.files.files)
        assert files >= 3
        store.consumer_offsets.commit("Workers", TOPIC, 0, 7)  # a group far behind

        store.cleaner.ratio_probe = lambda path: 0.88
        cleanup = admin.Cleanup(admin_pb2.CleanupRequest(trigger=True), timeout=10)
        assert cleanup.last_result.commitlog_files_deleted == 0
        assert len(store.commitlog.files.files) == files
        assert store.min_offset_in_queue(TOPIC, 0) == 0
        assert store.max_offset_in_queue(TOPIC, 0) == MESSAGES
        refused = send(stub, MESSAGES)
        assert refused.status.code == Code.INTERNAL_SERVER_ERROR  # clients retry it
        assert "disk full" in refused.status.message
        assert "88% used" in refused.status.message
        assert "Workers" in refused.status.message

        store.consumer_offsets.commit("Workers", TOPIC, 0, MESSAGES)  # the group catches up
        cleanup = admin.Cleanup(admin_pb2.CleanupRequest(trigger=True), timeout=10)
        assert cleanup.last_result.commitlog_files_deleted == files - 1
        assert send(stub, MESSAGES).status.code == Code.OK


def test_a_disk_hovering_at_the_warning_ratio_keeps_refusing_until_two_points_below(
    broker,
) -> None:
    store = broker.broker.store
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name=TOPIC, queue_nums=1), timeout=10)
        assert send(stub, 0).status.code == Code.OK

        def measured(ratio: float) -> str:
            """A cleanup pass at ``ratio`` and a send; the send's status message ("" = OK)."""
            store.cleaner.ratio_probe = lambda path: ratio
            admin.Cleanup(admin_pb2.CleanupRequest(trigger=True), timeout=10)
            reply = send(stub, 1)
            if reply.status.code == Code.OK:
                return ""
            assert reply.status.code == Code.INTERNAL_SERVER_ERROR  # clients retry it
            return str(reply.status.message)

        assert "91% used, above the warning ratio (90%)" in measured(0.91)
        below = measured(0.895)  # under the warning ratio, not 2 points under it
        assert "89.5% used, not yet below 88% after rising above the warning ratio" in below
        assert admin.GetStatus(admin_pb2.GetStatusRequest(), timeout=10).store.disk_full
        assert measured(0.9005) != ""
        assert measured(0.879) == ""
        assert not admin.GetStatus(admin_pb2.GetStatusRequest(), timeout=10).store.disk_full
        assert measured(0.899) == ""  # below the warning ratio: no refusal to hold
