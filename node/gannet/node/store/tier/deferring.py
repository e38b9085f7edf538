"""Store calls of the protocol layers that never hold a thread while the tier fetches.

Who calls it: the v2 pull and receive handlers, the admin service's reads and the remoting
reads (``api/pulling.py``, ``api/receiving.py``, ``api/admin.py``) — every consumer path that
may read offloaded records. They used to run the store call in asyncio's default pool
(``asyncio.to_thread``), where a read of an offloaded offset waited for the bucket in that
thread: a hung bucket could take the threads that reads and writes at the head need.

:func:`call` runs the same call with tier waits deferred (:func:`reading.deferring_waits`): a
read that needs a block being fetched raises :class:`reading.BlockPending` instead of waiting;
the event loop awaits the fetch's future (no thread held; the GET runs on the tier reader's own
threads) and runs the call again, which now finds the block cached. A call is read-only up to
its tier reads or undoes what it did when one fails (Pop withdraws its checkpoints), so running
it again is safe. ``attempts_max`` bounds the rounds of one call; a read that still finds
blocks missing after them fails with a retryable :class:`errors.TierUnavailable`, as a read
during an outage does. :func:`call_now` is the same for a call tried on the event loop itself
(a Pop that would not wait for a lock, ``PopBroker.now_or_none``): it never blocks the loop on
the bucket either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from gannet.node.store.tier import errors, reading

T = TypeVar("T")

ATTEMPTS_MAX = 8
"""Rounds of one call: a read of several blocks (or Pop over several queues) may need more."""


def _deferred(work: Callable[[], T]) -> T:
    with reading.deferring_waits():
        return work()


async def call(work: Callable[[], T], *, attempts_max: int = ATTEMPTS_MAX) -> T:
    """``work()`` in a worker thread, awaiting on the loop every tier block it waits for."""
    return await call_now(_later, work, attempts_max=attempts_max)


def _later() -> None:
    return None


async def call_now(
    now: Callable[[], T | None],
    work: Callable[[], T],
    *,
    attempts_max: int = ATTEMPTS_MAX,
) -> T:
    """``now()`` on the loop, or ``work()`` in a worker thread when ``now()`` answers None,
    both with tier waits deferred (module docstring)."""
    pending: reading.BlockPending | None = None
    for _ in range(attempts_max):
        try:
            result = _deferred(now)
            if result is None:
                result = await asyncio.to_thread(_deferred, work)
            return result
        except reading.BlockPending as exc:
            pending = exc
        await asyncio.wrap_future(pending.future)  # the fetch's error, if any, is raised here
    raise errors.TierUnavailable(
        f"tier blocks were still missing after {attempts_max} fetches ({pending}); retry"
    )
