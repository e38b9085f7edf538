"""A forwarded send is copied to another forward lane when its first connection gives no answer
(``api/forwarding.py``, issue 34).

Measured at 30 % packet loss on the peer links (docs/architecture.md): most of a send's time
went to its ``Forward`` call, which ran on one peer connection stalled by TCP's retransmission
back-off, while the leader had committed it long before. Here the leader is two real gRPC
servers of ``Peer/Forward``: the one behind lane 0 never answers (a stalled connection), the one
behind the other lanes answers at once. A one-message send is answered within about
``HEDGE_AFTER_S``; a request the leader could apply twice is never copied.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import grpc
import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.api import forwarding
from gannet.node.protocol.gen import peer_pb2, peer_pb2_grpc
from gannet.node.protocol.statuses import ApiError
from gannet.node.replication.config import PeerSpec
from gannet.node.replication.driver import ReplicationNode

LEADER = PeerSpec(2, "127.0.0.1", 0, 0)
ANSWER = service_pb2.SendMessageResponse(
    entries=[service_pb2.SendResultEntry(message_id="M1", offset=7)]
)


class _Leader(peer_pb2_grpc.PeerServicer):
    """``Forward`` of one lane's connection: answers at once, or never (``silent``)."""

    def __init__(self, silent: bool) -> None:
        self.silent = silent
        self.calls: list[str] = []
        self.called = asyncio.Event()

    async def Forward(
        self, request: peer_pb2.ForwardRequest, context: Any
    ) -> AsyncIterator[peer_pb2.ForwardReply]:
        self.calls.append(request.method)
        self.called.set()
        if self.silent:
            await asyncio.Event().wait()
        yield peer_pb2.ForwardReply(response=ANSWER.SerializeToString())


@dataclass
class _Config:
    node_id: int = 1
    group: str = "g"


class _Transport:
    partitioned = False

    def __init__(self, channels: list[grpc.aio.Channel]) -> None:
        self.channels = channels
        self.lanes: list[int] = []

    def forward_channel(self, node_id: int, lane: int = 0) -> grpc.aio.Channel:
        assert node_id == LEADER.node_id
        self.lanes.append(lane)
        return self.channels[lane]

    def hello_metadata(self, node_id: int) -> tuple[tuple[str, str], ...]:
        return ()


class _Replication:
    """Node 1, following node 2."""

    def __init__(self, transport: _Transport) -> None:
        self.config = _Config()
        self.transport = transport

    def leader(self) -> PeerSpec:
        return LEADER

    def is_serving_leader(self) -> bool:
        return False

    async def wait_until(self, predicate: Any, timeout_s: float) -> None:
        await asyncio.sleep(timeout_s)


class _Context:
    def __init__(self, remaining_s: float) -> None:
        self.remaining_s = remaining_s

    def time_remaining(self) -> float:
        return self.remaining_s

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-mq-client-id", "c1"),)

    def peer(self) -> str:
        return "ipv4:10.0.0.9:5555"


def _send(message_type: int = definition_pb2.NORMAL) -> service_pb2.SendMessageRequest:
    request = service_pb2.SendMessageRequest()
    message = request.messages.add()
    message.topic.name = "T"
    message.body = b"x"
    message.system_properties.message_id = "M1"
    message.system_properties.message_type = message_type
    return request


async def _local() -> service_pb2.SendMessageResponse:
    raise AssertionError("node 1 does not lead: nothing is served here")


@dataclass
class _Group:
    silent: _Leader
    answering: _Leader
    transport: _Transport


async def _run(
    request: service_pb2.SendMessageRequest,
    remaining_s: float,
    hedge_after_s: float | None = forwarding.HEDGE_AFTER_S,
) -> tuple[service_pb2.SendMessageResponse | ApiError, float, _Group, forwarding.Forwarder]:
    silent, answering = _Leader(silent=True), _Leader(silent=False)
    servers, channels = [], []
    for servicer in (silent, answering):
        server = grpc.aio.server()
        peer_pb2_grpc.add_PeerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        channels.append(grpc.aio.insecure_channel(f"127.0.0.1:{port}"))
    transport = _Transport([channels[0], channels[1], channels[1]])
    replication = _Replication(transport)
    forwarder = forwarding.Forwarder(
        cast(ReplicationNode, replication), hedge_after_s=hedge_after_s
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome: service_pb2.SendMessageResponse | ApiError
    try:
        outcome = await forwarder.unary(
            "SendMessage",
            request,
            _Context(remaining_s),
            _local,
            service_pb2.SendMessageResponse,
            follows_leader=False,
        )
    except ApiError as exc:
        outcome = exc
    took_s = loop.time() - started
    await asyncio.wait_for(silent.called.wait(), 1.0)  # the first copy reached lane 0
    for channel in channels:
        await channel.close(None)
    for server in servers:
        await server.stop(None)
    return outcome, took_s, _Group(silent, answering, transport), forwarder


def test_a_send_unanswered_on_its_lane_is_answered_on_the_next() -> None:
    outcome, took_s, group, forwarder = asyncio.run(_run(_send(), remaining_s=3.0))
    assert outcome == ANSWER
    # Copied once HEDGE_AFTER_S passed: long before the 2.8 s deadline it waited for before.
    assert took_s < forwarding.HEDGE_AFTER_S + 1.0
    assert group.transport.lanes == [0, 1]
    assert group.silent.calls == ["SendMessage"]
    assert group.answering.calls == ["SendMessage"]
    assert forwarder.stats.hedged_total == 1
    assert forwarder.stats.forwarded_total == {"SendMessage": 1}  # one request, two copies


@pytest.mark.parametrize(
    ("request_", "hedge_after_s"),
    [
        (_send(definition_pb2.TRANSACTION), forwarding.HEDGE_AFTER_S),  # a half message
        (_send(), None),  # deduplication off: the leader would append a copy again
    ],
    ids=["transactional", "dedup-off"],
)
def test_a_request_the_leader_could_apply_twice_is_not_copied(
    request_: service_pb2.SendMessageRequest, hedge_after_s: float | None
) -> None:
    outcome, _, group, forwarder = asyncio.run(
        _run(request_, remaining_s=1.0, hedge_after_s=hedge_after_s)
    )
    assert isinstance(outcome, ApiError)
    assert outcome.code == Code.PROXY_TIMEOUT
    assert group.answering.calls == []
    assert set(group.transport.lanes) == {0}
    assert forwarder.stats.hedged_total == 0


def test_only_one_message_sends_with_an_id_are_hedgeable() -> None:
    assert forwarding.hedgeable("SendMessage", _send())
    assert not forwarding.hedgeable("SendMessage", _send(definition_pb2.TRANSACTION))
    two = _send()
    two.messages.add().CopyFrom(two.messages[0])
    assert not forwarding.hedgeable("SendMessage", two)
    anonymous = _send()
    anonymous.messages[0].system_properties.message_id = ""
    assert not forwarding.hedgeable("SendMessage", anonymous)
    assert not forwarding.hedgeable("AckMessage", service_pb2.AckMessageRequest())
