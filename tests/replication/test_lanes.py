"""Lanes (:mod:`gannet.node.replication.lanes`): what leader liveness and elections need
travels on several connections per peer, so one stalled TCP connection does not silence a peer
(issue 34: random packet loss alone deposed the leader); the data path (appends and their
answers) on one.

The pure rule (which kinds are copied, which not), then two peer transports in process joined
by a relay that stops forwarding the bytes of one connection (its first) without closing it,
as a TCP connection does while it retransmits with back-off: the heartbeats must keep arriving
on the other lanes, no gap as long as the keepalive needs to close the stalled connection (one
lane: a gap of at least ``KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS`` and a redial).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import get_args

from gannet.node.raft.ids import ByteOffset
from gannet.node.raft.messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    Message,
    NodeId,
    PreVoteRequest,
    PreVoteResponse,
    ResetLogStart,
    Term,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from gannet.node.replication import lanes
from gannet.node.replication.config import PeerSpec, ReplicationConfig
from gannet.node.replication.transport import KEEPALIVE_TIME_MS, PeerTransport

from .conftest import free_ports
from .test_liveness import Clock

TICK_S = 0.05
WAIT_S = 30.0
POLL_S = 0.02
HEARTBEATS_AFTER_STALL = 40
GAP_MAX_S = KEEPALIVE_TIME_MS / 1000
"""Below what the keepalive takes to notice the stalled connection (and a redial)."""

ONE, TWO = NodeId(1), NodeId(2)
ZERO = ByteOffset(0)


def test_liveness_and_election_kinds_go_on_every_lane_data_on_lane_zero_only() -> None:
    copied: list[Message] = [
        Heartbeat(ONE, TWO, Term(3), ZERO),
        HeartbeatResponse(TWO, ONE, Term(3), ByteOffset(7), ByteOffset(5)),
        PreVoteRequest(ONE, TWO, Term(4), Term(3), ZERO),
        PreVoteResponse(TWO, ONE, Term(4), True),
        VoteRequest(ONE, TWO, Term(4), Term(3), ZERO, False),
        VoteResponse(TWO, ONE, Term(4), True),
        TimeoutNow(ONE, TWO, Term(3)),
    ]
    for message in copied:
        assert lanes.lanes_for(message) == range(lanes.LANES), message
    lane_zero_only: list[Message] = [
        AppendEntries(ONE, TWO, Term(3), ZERO, Term(0), ByteOffset(3), Term(3), ZERO, b"abc"),
        AppendEntries(ONE, TWO, Term(3), ByteOffset(3), Term(3), ByteOffset(3), Term(3), ZERO),
        ResetLogStart(ONE, TWO, Term(3), ByteOffset(10), Term(2), ByteOffset(10)),
        AppendResponse(TWO, ONE, Term(3), True, match_offset=ByteOffset(3), durable_offset=ZERO),
        AppendResponse(
            TWO, ONE, Term(3), True, match_offset=ByteOffset(3), durable_offset=ByteOffset(3)
        ),
        AppendResponse(TWO, ONE, Term(3), False, rejected_prev_offset=ByteOffset(3)),
    ]
    for message in lane_zero_only:
        assert lanes.lanes_for(message) == range(1), message
    kinds = {type(m) for m in copied} | {type(m) for m in lane_zero_only}
    assert kinds == set(get_args(Message)), "every kind of message is decided here"
    assert set(lanes.COPIED_KINDS) == {type(m) for m in copied}
    assert lanes.LANES >= 2


class StallingRelay:
    """Forwards every connection to ``target_port``; :meth:`stall_first` stops forwarding the
    first connection's bytes (both ways) without closing it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.accepted = 0
        self.stalled: set[int] = set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stall_first(self) -> None:
        self.stalled.add(0)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self.accepted
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        tasks = {
            asyncio.create_task(self._relay(index, reader, up_writer)),
            asyncio.create_task(self._relay(index, up_reader, writer)),
        }
        self._tasks |= tasks
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for w in (writer, up_writer):
                w.close()

    async def _relay(
        self, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if index in self.stalled:
                    continue  # held by a retransmitting TCP: nothing gets through
                writer.write(data)
                await writer.drain()


async def _until(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S} s: {what}")
        await asyncio.sleep(POLL_S)


async def _one_stalled_connection() -> list[float]:
    port1, port2, client1, client2 = free_ports(4)
    relay = StallingRelay(port2)
    await relay.start()

    def config(node_id: int, peers: tuple[PeerSpec, ...], listen: int) -> ReplicationConfig:
        return ReplicationConfig(
            node_id=node_id, peers=peers, peer_listen=f"127.0.0.1:{listen}", tick_interval_s=TICK_S
        )

    me1, me2 = PeerSpec(1, "127.0.0.1", port1, client1), PeerSpec(2, "127.0.0.1", port2, client2)
    arrivals: list[float] = []
    heard: set[int] = set()

    def on_message(message: Message) -> None:
        if isinstance(message, Heartbeat) and message.leader_commit not in heard:
            heard.add(message.leader_commit)  # the first copy of each heartbeat counts
            arrivals.append(time.monotonic())

    leader = PeerTransport(config(1, (me1, PeerSpec(2, "127.0.0.1", relay.port, client2)), port1),
                           lambda _m: None)  # fmt: skip
    follower = PeerTransport(config(2, (me1, me2), port2), on_message)
    await follower.start()
    await leader.start()

    async def heartbeats() -> None:
        for number in itertools.count(1):
            leader.send(Heartbeat(ONE, TWO, Term(1), ByteOffset(number)))
            await asyncio.sleep(TICK_S)

    ticking = asyncio.create_task(heartbeats())
    try:
        await _until(lambda: leader.lanes_open(2) == lanes.LANES and arrivals, "lanes open")
        relay.stall_first()
        stalled_at = time.monotonic()
        start = len(arrivals)
        await _until(lambda: len(arrivals) >= start + HEARTBEATS_AFTER_STALL, "heartbeats")
        return [stalled_at, *arrivals[start:]]
    finally:
        ticking.cancel()
        await asyncio.gather(ticking, return_exceptions=True)
        await leader.stop()
        await follower.stop()
        await relay.stop()


def test_heartbeats_keep_arriving_while_one_connection_stalls() -> None:
    marks = asyncio.run(_one_stalled_connection())
    gaps = [b - a for a, b in itertools.pairwise(marks)]
    print(f"one connection stalled: longest gap between heartbeats {max(gaps):.2f} s")
    assert max(gaps) < GAP_MAX_S


def _append(prev: int, end: int) -> AppendEntries:
    payload = b"x" * (end - prev)
    return AppendEntries(
        ONE, TWO, Term(1), ByteOffset(prev), Term(1), ByteOffset(end), Term(1), ZERO, payload
    )


def test_an_append_that_resends_bytes_goes_on_every_lane() -> None:
    resends = lanes.AppendResends()
    assert not resends.resend(_append(0, 3))  # fresh ranges: lane 0 only
    assert not resends.resend(_append(3, 5))
    assert resends.resend(_append(3, 5))  # go-back-N after a stall
    assert resends.resend(_append(0, 7))  # a probe from the follower's match
    assert not resends.resend(_append(7, 9))
    big = lanes.RESEND_COPY_BYTES_MAX + 1
    assert not resends.resend(_append(9, 9 + big))
    assert not resends.resend(_append(9, 9 + big))  # too big to copy: lane 0 only
    assert not resends.resend(Heartbeat(ONE, TWO, Term(1), ZERO))  # copied anyway (its kind)
    assert lanes.lanes_for(_append(3, 5), resend=True) == range(lanes.LANES)
    assert lanes.lanes_for(_append(9, 11), resend=False) == range(1)
    other = AppendEntries(ONE, NodeId(3), Term(1), ZERO, Term(0), ByteOffset(3), Term(1), ZERO)
    assert not resends.resend(other)  # per peer
    resends.forget(2)
    assert not resends.resend(_append(0, 3))


async def _resend_with_lane_zero_blackholed() -> float:
    """The leader's lane 0 to node 2 takes messages and never delivers them (a connection that
    retransmits); the seconds until a resent range reaches node 2."""
    port1, port2, client1, client2 = free_ports(4)

    def config(node_id: int, listen: int) -> ReplicationConfig:
        peers = (PeerSpec(1, "127.0.0.1", port1, client1), PeerSpec(2, "127.0.0.1", port2, client2))
        return ReplicationConfig(
            node_id=node_id, peers=peers, peer_listen=f"127.0.0.1:{listen}", tick_interval_s=TICK_S
        )

    ranges: list[tuple[int, int]] = []
    arrived = asyncio.Event()

    def on_message(message: Message) -> None:
        if isinstance(message, AppendEntries):
            ranges.append((message.prev_offset, message.end_offset))
            arrived.set()

    leader = PeerTransport(config(1, port1), lambda _m: None)
    follower = PeerTransport(config(2, port2), on_message)
    await follower.start()
    await leader.start()
    try:
        await _until(lambda: leader.lanes_open(2) == lanes.LANES, "lanes open")
        leader._outboxes[2][0].put = lambda _m: None  # type: ignore[method-assign, assignment]
        leader.send(_append(0, 3))  # lost on lane 0
        await asyncio.sleep(TICK_S)
        assert ranges == []
        resent_at = time.monotonic()
        leader.send(_append(0, 3))  # the leader's go-back-N: the same range again
        await asyncio.wait_for(arrived.wait(), WAIT_S)
        assert ranges[0] == (0, 3)
        return time.monotonic() - resent_at
    finally:
        await leader.stop()
        await follower.stop()


def test_a_resent_range_reaches_the_follower_while_lane_zero_stalls() -> None:
    took_s = asyncio.run(_resend_with_lane_zero_blackholed())
    print(f"lane 0 blackholed: resent range arrived after {took_s:.3f} s")
    assert took_s < GAP_MAX_S


def test_a_lane_copy_taken_just_before_is_dropped_once_per_message() -> None:
    clock = Clock()
    copies = lanes.LaneCopies(0.05, clock)
    beat = Heartbeat(ONE, TWO, Term(3), ByteOffset(9), 1000)
    assert not copies.is_copy(beat)  # the first copy is taken
    clock.now_s += 0.01
    assert copies.is_copy(Heartbeat(ONE, TWO, Term(3), ByteOffset(9), 1000))  # equal: dropped
    assert not copies.is_copy(Heartbeat(ONE, TWO, Term(3), ByteOffset(10), 1000))  # differs
    assert not copies.is_copy(Heartbeat(NodeId(3), TWO, Term(3), ByteOffset(9), 1000))  # sender
    answer = HeartbeatResponse(TWO, ONE, Term(3), ByteOffset(7), ByteOffset(5))
    assert not copies.is_copy(answer)  # another kind
    assert copies.is_copy(answer)
    clock.now_s += 0.1  # a tick later
    assert not copies.is_copy(answer)  # the next heartbeat's equal answer, a tick later: taken
    append = _append(0, 3)
    assert not copies.is_copy(append)
    assert not copies.is_copy(append)  # data is never dropped here (resends: the core decides)


def test_lane_copies_remember_a_bounded_number_of_senders() -> None:
    copies = lanes.LaneCopies(1.0, Clock())
    for sender in range(1, lanes.COPIES_REMEMBERED_MAX + 2):
        assert not copies.is_copy(Heartbeat(NodeId(sender), TWO, Term(1), ZERO))
    assert len(copies._taken) <= lanes.COPIES_REMEMBERED_MAX


async def _one_heartbeat_on_every_lane() -> tuple[list[Message], int]:
    port1, port2, client1, client2 = free_ports(4)
    peers = (PeerSpec(1, "127.0.0.1", port1, client1), PeerSpec(2, "127.0.0.1", port2, client2))

    def config(node_id: int, listen: int) -> ReplicationConfig:
        return ReplicationConfig(
            node_id=node_id, peers=peers, peer_listen=f"127.0.0.1:{listen}", tick_interval_s=10.0
        )

    stepped: list[Message] = []
    leader = PeerTransport(config(1, port1), lambda _m: None)
    follower = PeerTransport(config(2, port2), stepped.append)
    await follower.start()
    await leader.start()
    try:
        await _until(lambda: leader.lanes_open(2) == lanes.LANES, "lanes open")
        leader.send(Heartbeat(ONE, TWO, Term(1), ByteOffset(5)))
        await _until(lambda: follower.received_total == lanes.LANES, "every lane's copy")
        return stepped, follower.lane_copies_dropped_total
    finally:
        await leader.stop()
        await follower.stop()


def test_the_copies_of_one_heartbeat_reach_the_core_once() -> None:
    stepped, dropped = asyncio.run(_one_heartbeat_on_every_lane())
    assert stepped == [Heartbeat(ONE, TWO, Term(1), ByteOffset(5))]
    assert dropped == lanes.LANES - 1
