"""A forwarded request whose deadline passes while it is routed again is ``PROXY_TIMEOUT``,
never ``TOO_MANY_REQUESTS`` (``api/forwarding.py``, issue 34).

Seen at 30 % packet loss on the peer links (``make e2e-lossy-links``): a send through a
follower whose ``Forward`` calls all failed until the client's deadline was answered
``TOO_MANY_REQUESTS`` ("too many requests forwarded to the leader at once; slow down") by the
slot wait of the next attempt, which has no time left; the official Python client does not
retry that code, so the send failed although no slot was ever short. Here every ``Forward``
fails at once (the node's transport is cut off) and the forwarder routes again until the
deadline: the answer is ``PROXY_TIMEOUT`` (retried by the clients).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import cast

import grpc
from rocketmq.grpc_protocol import Code, service_pb2

from gannet.node.api import forwarding
from gannet.node.protocol.statuses import ApiError
from gannet.node.replication.config import PeerSpec
from gannet.node.replication.driver import ReplicationNode

LEADER = PeerSpec(2, "127.0.0.1", 0, 0)


@dataclass
class _Config:
    node_id: int = 1
    group: str = "g"


class _CutOffTransport:
    """Nothing leaves the node: every ``Forward`` is routed again at once."""

    partitioned = True

    def forward_channel(self, node_id: int, lane: int = 0) -> grpc.aio.Channel:
        raise AssertionError("a cut-off transport opens no channel")


class _Replication:
    def __init__(self) -> None:
        self.config = _Config()
        self.transport = _CutOffTransport()

    def leader(self) -> PeerSpec:
        return LEADER

    def is_serving_leader(self) -> bool:
        return False


class _Context:
    def time_remaining(self) -> float:
        return 0.6  # the forwarder's deadline: 0.4 s from now (DEADLINE_MARGIN_S earlier)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-mq-client-id", "c1"),)

    def peer(self) -> str:
        return "ipv4:10.0.0.9:5555"


async def _local() -> service_pb2.SendMessageResponse:
    raise AssertionError("node 1 does not lead: nothing is served here")


async def _forward(forwarder: forwarding.Forwarder) -> ApiError:
    request = service_pb2.SendMessageRequest()
    request.messages.add().topic.name = "T"
    try:
        await forwarder.unary(
            "SendMessage",
            request,
            _Context(),
            _local,
            service_pb2.SendMessageResponse,
            follows_leader=False,
        )
    except ApiError as exc:
        return exc
    raise AssertionError("a cut-off member answered a forwarded send")


def test_a_deadline_passed_while_routing_again_is_proxy_timeout() -> None:
    forwarder = forwarding.Forwarder(cast(ReplicationNode, _Replication()))
    error = asyncio.run(_forward(forwarder))
    assert error.code == Code.PROXY_TIMEOUT, error
    assert "node 2" in str(error)
    assert "may or may not have taken effect" in str(error)
    assert forwarder.stats.forwarded_total["SendMessage"] >= 2  # routed again until the deadline
    assert forwarder.stats.unanswered_total == 1


def test_slots_all_taken_until_the_deadline_is_too_many_requests() -> None:
    async def run() -> ApiError:
        forwarder = forwarding.Forwarder(cast(ReplicationNode, _Replication()), inflight_max=1)
        async with forwarder._slot(asyncio.get_running_loop().time() + 10):
            deadline = asyncio.get_running_loop().time() + 0.1
            try:
                async with forwarder._slot(deadline):
                    pass
            except ApiError as exc:
                return exc
        raise AssertionError("a second slot out of one")

    error = asyncio.run(run())
    assert error.code == Code.TOO_MANY_REQUESTS
