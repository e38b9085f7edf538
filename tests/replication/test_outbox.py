"""A peer stream's outbox (``transport._Outbox``): when a stream ends while its request iterator
waits on an empty outbox, that iterator ends too. Before, it stayed waiting: the next stream's
first message woke it as well, and it could take that message into the dead call (lost), and a
broker's loop closed with the task still pending ("Task was destroyed but it is pending!",
once per stream ended on an idle lane)."""

from __future__ import annotations

import asyncio

from gannet.node.raft.ids import ByteOffset
from gannet.node.raft.messages import Heartbeat, NodeId, Term
from gannet.node.replication.transport import _Outbox

HEARTBEAT = Heartbeat(NodeId(1), NodeId(2), Term(1), ByteOffset(0))


async def _ended_stream_then_next() -> None:
    outbox = _Outbox(messages_max=8, bytes_max=1 << 20)
    ended = asyncio.Event()
    waiting = asyncio.create_task(outbox.get(ended))  # the ended stream's iterator
    await asyncio.sleep(0)
    assert not waiting.done()
    ended.set()
    outbox.wake()
    assert await asyncio.wait_for(waiting, 5) is None
    outbox.put(HEARTBEAT)  # the next stream's message is the next stream's
    assert await asyncio.wait_for(outbox.get(asyncio.Event()), 5) == HEARTBEAT


def test_the_iterator_of_an_ended_stream_ends_and_takes_nothing() -> None:
    asyncio.run(_ended_stream_then_next())


async def _queued_messages_stay() -> None:
    outbox = _Outbox(messages_max=8, bytes_max=1 << 20)
    outbox.put(HEARTBEAT)
    ended = asyncio.Event()
    ended.set()
    assert await outbox.get(ended) is None  # not written into the ended call
    assert await outbox.get(asyncio.Event()) == HEARTBEAT


def test_an_ended_stream_takes_no_queued_message() -> None:
    asyncio.run(_queued_messages_stay())
