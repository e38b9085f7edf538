"""The forwarder watches each leader once for all its calls in flight (``api/forwarding.py``).

A forwarded call races its answer against "the leader it went to no longer leads". One watcher
per call woke on every Raft step, each, and made a forwarded send cost about three times the
broker CPU of a direct one (``bench/forwarding.py``); the calls in flight to one member now
share one watcher, which ends once no call waits on it. A stand-in replication node answers
``leader()`` and ``wait_until`` (woken when the test moves the leader).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import pytest

from gannet.node.api import forwarding
from gannet.node.replication.driver import ReplicationNode


@dataclass
class _Leader:
    node_id: int


class _Replication:
    def __init__(self, leader: int) -> None:
        self._leader: _Leader | None = _Leader(leader)
        self.changed = asyncio.Event()
        self.waits = 0

    def leader(self) -> _Leader | None:
        return self._leader

    def move(self, leader: int | None) -> None:
        self._leader = None if leader is None else _Leader(leader)
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        self.waits += 1
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await self.changed.wait()


def _forwarder(replication: _Replication) -> forwarding.Forwarder:
    return forwarding.Forwarder(cast(ReplicationNode, replication))


def test_calls_to_one_leader_share_one_watcher_until_it_moves() -> None:
    asyncio.run(_share())


async def _share() -> None:
    replication = _Replication(leader=3)
    forwarder = _forwarder(replication)
    first = forwarder._leader_moved(3)
    forwarder._watching[3] = 2  # two calls in flight wait on it
    assert forwarder._leader_moved(3) is first
    other = forwarder._leader_moved(2)
    assert other is not first
    await asyncio.sleep(0)
    assert len(forwarder._watchers) == 2
    assert not first.done()
    replication.move(1)
    await asyncio.wait_for(first, 1.0)
    assert other.done()  # node 2 does not lead either
    assert forwarder._leader_moved(3) is not first  # a resolved watch is not reused


def test_a_watcher_without_calls_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forwarding, "WATCH_SLICE_S", 0.01)
    asyncio.run(_idle())


async def _idle() -> None:
    replication = _Replication(leader=3)
    forwarder = _forwarder(replication)
    moved = forwarder._leader_moved(3)
    await asyncio.sleep(0)
    (watcher,) = forwarder._watchers
    await asyncio.wait_for(watcher, 1.0)  # no call counted in _watching: it gives up
    assert moved.cancelled()
    assert forwarder._moved == {}
    assert forwarder._watchers == set()
