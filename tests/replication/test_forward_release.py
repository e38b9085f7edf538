"""A member closing its client port answers the requests it holds for a leader at once
(``Forwarder.release_held``, used by ``broker.port_gate``'s closing), and holds again once the
port reopens (``hold_again``). A stand-in replication node that knows no leader; the held
request is awaited, never slept on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import pytest
from rocketmq.grpc_protocol import Code, service_pb2

from gannet.node.api import forwarding
from gannet.node.protocol.statuses import ApiError
from gannet.node.replication.driver import ReplicationNode

HOLD_S = 30.0


@dataclass
class _Config:
    node_id: int = 1


class _Leaderless:
    """Knows no leader; ``wait_until`` re-checks its predicate when woken."""

    def __init__(self) -> None:
        self.config = _Config()
        self.woken = asyncio.Event()

    def leader(self) -> None:
        return None

    def is_serving_leader(self) -> bool:
        return False

    def knows_removed(self) -> bool:
        return False

    def wake_waiters(self) -> None:
        self.woken.set()

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await self.woken.wait()
                self.woken.clear()


class _Context:
    def time_remaining(self) -> float:
        return HOLD_S


async def _send(forwarder: forwarding.Forwarder) -> service_pb2.SendMessageResponse:
    async def local() -> service_pb2.SendMessageResponse:
        raise AssertionError("a member without a leader served a send")

    return await forwarder.unary(
        "SendMessage",
        service_pb2.SendMessageRequest(),
        _Context(),
        local,
        service_pb2.SendMessageResponse,
    )


async def _release_and_hold_again() -> None:
    forwarder = forwarding.Forwarder(cast(ReplicationNode, _Leaderless()))
    held = asyncio.ensure_future(_send(forwarder))
    while forwarder.stats.held_total == 0:  # the request reached the hold
        await asyncio.sleep(0)
    assert not held.done()
    loop = asyncio.get_running_loop()
    released_at = loop.time()
    forwarder.release_held()
    with pytest.raises(ApiError) as refused:
        await held
    assert refused.value.code == Code.HA_NOT_AVAILABLE
    assert loop.time() - released_at < HOLD_S / 2  # answered at once, not at the deadline
    with pytest.raises(ApiError):  # while released, nothing is held
        await _send(forwarder)
    assert forwarder.stats.held_total == 1
    forwarder.hold_again()
    again = asyncio.ensure_future(_send(forwarder))
    while forwarder.stats.held_total == 1:
        await asyncio.sleep(0)
    assert not again.done()
    again.cancel()
    await asyncio.gather(again, return_exceptions=True)


def test_held_requests_are_answered_when_the_port_closes_and_held_again_after() -> None:
    asyncio.run(_release_and_hold_again())
