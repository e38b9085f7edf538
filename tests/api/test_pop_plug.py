"""Pop consumption plugs into the v2 servicer: its handlers get the calls and the lifecycle."""

from __future__ import annotations

from pathlib import Path

from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api.plugs import ServicerParts
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.cli import calls
from gannet.node.store.config import FlushMode, StoreConfig

from .conftest import CLIENT_ID


class FakePop:
    def __init__(self, servicer: ServicerParts) -> None:
        self.servicer = servicer
        self.calls: list[str] = []

    async def ReceiveMessage(self, request, context):
        self.calls.append("receive")
        yield service_pb2.ReceiveMessageResponse(status=definition_pb2.Status(code=Code.OK))

    async def AckMessage(self, request, context):
        self.calls.append("ack")
        return service_pb2.AckMessageResponse(status=definition_pb2.Status(code=Code.OK))

    async def ChangeInvisibleDuration(self, request, context):
        self.calls.append("change")
        return service_pb2.ChangeInvisibleDurationResponse(
            status=definition_pb2.Status(code=Code.OK), receipt_handle="new"
        )

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        self.calls.append("dlq")
        return service_pb2.ForwardMessageToDeadLetterQueueResponse(
            status=definition_pb2.Status(code=Code.OK)
        )

    def begin_shutdown(self) -> None:
        self.calls.append("begin_shutdown")

    def close(self) -> None:
        assert self.servicer.store.commitlog is not None  # the store is still open
        self.calls.append("close")


def test_pop_handlers_receive_the_calls_and_the_lifecycle(tmp_path: Path) -> None:
    made: list[FakePop] = []

    def factory(servicer: ServicerParts) -> FakePop:
        made.append(FakePop(servicer))
        return made[-1]

    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    running = threads.start(BrokerConfig(store=store, listen_port=0), pop=factory)
    with calls.channel(running.endpoint) as plain:
        stub = service_pb2_grpc.MessagingServiceStub(plain)
        frames = list(
            stub.ReceiveMessage(service_pb2.ReceiveMessageRequest(), timeout=5, metadata=CLIENT_ID)
        )
        assert [f.status.code for f in frames] == [Code.OK]
        assert (
            stub.AckMessage(
                service_pb2.AckMessageRequest(), timeout=5, metadata=CLIENT_ID
            ).status.code
            == Code.OK
        )
        change = stub.ChangeInvisibleDuration(
            service_pb2.ChangeInvisibleDurationRequest(), timeout=5, metadata=CLIENT_ID
        )
        assert change.receipt_handle == "new"
        forward = service_pb2.ForwardMessageToDeadLetterQueueRequest()
        assert (
            stub.ForwardMessageToDeadLetterQueue(forward, timeout=5, metadata=CLIENT_ID).status.code
            == Code.OK
        )
    running.stop()
    assert made[0].calls == ["receive", "ack", "change", "dlq", "begin_shutdown", "close"]
