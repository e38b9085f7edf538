"""Commit waiters of the replication driver (``driver_state.CommitWaiters``).

A send awaits ``wait_committed``; when its client goes away the call is cancelled. The waiter
it left must go with it: a waiter failed later by a leadership change with nobody awaiting it
made asyncio log "Future exception was never retrieved: CommitUncertain" after failovers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gannet.node.raft.ready import Role
from gannet.node.replication.config import PeerSpec, ReplicationConfig
from gannet.node.replication.driver import ReplicationNode
from gannet.node.replication.errors import CommitUncertain
from gannet.node.store.config import StoreConfig
from gannet.node.store.message_store import MessageStore


def _node(tmp_path: Path) -> ReplicationNode:
    store = MessageStore(StoreConfig.for_tests(tmp_path))
    peers = (PeerSpec(1, "127.0.0.1", 8091, 8081), PeerSpec(2, "127.0.0.1", 8092, 8082))
    node = ReplicationNode(store, ReplicationConfig(node_id=1, peers=peers))
    core: Any = SimpleNamespace(committed_offset=0, role=Role.LEADER, term=1)
    node.core = core
    return node


def test_a_cancelled_wait_leaves_no_waiter_to_fail(tmp_path: Path) -> None:
    node = _node(tmp_path)
    failed_unretrieved: list[dict[str, Any]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: failed_unretrieved.append(ctx))
        waiting = asyncio.create_task(node.wait_committed(100, timeout_s=30))
        while not node.waiters:
            await asyncio.sleep(0)
        future = node.waiters.futures()[0]
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert future.cancelled()
        node.waiters.fail("leadership lost")  # what a step-down does
        assert not node.waiters

    asyncio.run(scenario())
    assert failed_unretrieved == []


def test_a_wait_still_awaited_gets_the_failure(tmp_path: Path) -> None:
    node = _node(tmp_path)

    async def scenario() -> BaseException | None:
        waiting = asyncio.create_task(node.wait_committed(100, timeout_s=30))
        while not node.waiters:
            await asyncio.sleep(0)
        node.waiters.fail("leadership lost")
        results = await asyncio.gather(waiting, return_exceptions=True)
        return results[0] if isinstance(results[0], BaseException) else None

    error = asyncio.run(scenario())
    assert isinstance(error, CommitUncertain)
    assert "leadership lost" in str(error)
