"""A silent link between two peer transports, in process: fault proxies that stop forwarding
bytes *without* closing the connection (``Mode.DROP``), as an iptables DROP does.

Node 1 plays a leader (a heartbeat every ``TICK_S``), node 2 answers each one. Node 1 dials node 2
through proxy ``a`` and node 2 dials node 1 through proxy ``b``. Every wait awaits a condition
under a generous deadline (``WAIT_S``); figures are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from gannet.node.raft.ids import ByteOffset
from gannet.node.raft.messages import Heartbeat, HeartbeatResponse, Message, NodeId, Term
from gannet.node.replication import lanes
from gannet.node.replication.config import PeerSpec, ReplicationConfig
from gannet.node.replication.transport import (
    KEEPALIVE_TIME_MS,
    KEEPALIVE_TIMEOUT_MS,
    PeerTransport,
)
from gannet.node.testing.fault_proxy import FaultProxy, Mode

from .conftest import free_ports

TICK_S = 0.05  # 10-tick election timeout: silence bound 1.5 s
WAIT_S = 30.0
POLL_S = 0.02


@dataclass
class Pair:
    leader: PeerTransport
    follower: PeerTransport
    a: FaultProxy  # 1 → 2
    b: FaultProxy  # 2 → 1
    beating: asyncio.Event  # cleared: no heartbeats, idle links


async def _until(condition: Callable[[], bool], what: str) -> float:
    """Seconds until ``condition()`` held; fails after ``WAIT_S``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > WAIT_S:
            raise AssertionError(f"not within {WAIT_S} s: {what}")
        await asyncio.sleep(POLL_S)
    return time.monotonic() - start


@contextlib.asynccontextmanager
async def _pair() -> AsyncIterator[Pair]:
    port1, port2, client1, client2 = free_ports(4)
    a = FaultProxy("127.0.0.1", port2)
    b = FaultProxy("127.0.0.1", port1)
    await a.start()
    await b.start()

    def config(node_id: int, peers: tuple[PeerSpec, ...], listen: int) -> ReplicationConfig:
        return ReplicationConfig(
            node_id=node_id, peers=peers, peer_listen=f"127.0.0.1:{listen}", tick_interval_s=TICK_S
        )

    me1, me2 = PeerSpec(1, "127.0.0.1", port1, client1), PeerSpec(2, "127.0.0.1", port2, client2)
    leader_config = config(1, (me1, PeerSpec(2, "127.0.0.1", a.port, client2)), port1)
    follower_config = config(2, (PeerSpec(1, "127.0.0.1", b.port, client1), me2), port2)
    follower: PeerTransport | None = None

    def answer(message: Message) -> None:
        if isinstance(message, Heartbeat) and follower is not None:
            follower.send(
                HeartbeatResponse(NodeId(2), NodeId(1), message.term, ByteOffset(0), ByteOffset(0))
            )

    leader = PeerTransport(leader_config, lambda _m: None)
    follower = PeerTransport(follower_config, answer)
    await leader.start()
    await follower.start()

    beating = asyncio.Event()
    beating.set()

    async def heartbeats() -> None:
        while True:
            await beating.wait()
            leader.send(Heartbeat(NodeId(1), NodeId(2), Term(1), ByteOffset(0)))
            await asyncio.sleep(TICK_S)

    ticking = asyncio.create_task(heartbeats())
    try:
        yield Pair(leader, follower, a, b, beating)
    finally:
        ticking.cancel()
        await asyncio.gather(ticking, return_exceptions=True)
        await leader.stop()
        await follower.stop()
        await a.stop()
        await b.stop()


async def _silent_link_scenario() -> None:
    async with _pair() as pair:
        await _until(lambda: pair.leader.reachable(2), "follower reachable at first")
        dialed = pair.a.counters.accepted_total
        for proxy in (pair.a, pair.b):
            proxy.set_mode(Mode.DROP)
        detect_s = await _until(lambda: not pair.leader.reachable(2), "follower unreachable")
        redial_s = await _until(
            lambda: pair.a.counters.accepted_total > dialed, "the leader redialed"
        )
        assert pair.a.counters.refused_total == 0  # nothing was closed: a silent link
        for proxy in (pair.a, pair.b):
            proxy.set_mode(Mode.PASS)
        back_s = await _until(lambda: pair.leader.reachable(2), "follower reachable again")
        bound_s = pair.leader.liveness.bound_s
        print(
            f"silent link: unreachable after {detect_s:.2f} s (bound {bound_s} s), redialed "
            f"after {redial_s:.2f} s, reachable {back_s:.2f} s after the heal"
        )


def test_a_silent_link_makes_the_peer_unreachable_and_is_redialed_after_the_heal() -> None:
    asyncio.run(_silent_link_scenario())


async def _keepalive_scenario() -> None:
    async with _pair() as pair:
        for transport in (pair.leader, pair.follower):
            transport.liveness.bound_s = 3600.0  # no stall check: keepalive alone
        await _until(lambda: pair.leader.reachable(2), "follower reachable at first")
        await _until(
            lambda: pair.leader.lanes_open(2) == pair.follower.lanes_open(1) == lanes.LANES,
            "every lane connected",
        )
        pair.beating.clear()
        # idle links keep their connections: the servers accept PINGs without data (no GOAWAY
        # too_many_pings, which would close them and make the senders redial)
        quiet_s = 4 * (KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS) / 1000
        dialed = (pair.a.counters.accepted_total, pair.b.counters.accepted_total)
        await asyncio.sleep(quiet_s)
        assert (pair.a.counters.accepted_total, pair.b.counters.accepted_total) == dialed
        for proxy in (pair.a, pair.b):
            proxy.set_mode(Mode.DROP)
        closed_s = await _until(
            lambda: pair.a.counters.accepted_total > dialed[0], "keepalive closed the stream"
        )
        print(f"keepalive: redialed {closed_s:.2f} s after the link went silent")


def test_keepalive_notices_a_silent_link_and_pings_are_accepted_meanwhile() -> None:
    asyncio.run(_keepalive_scenario())
