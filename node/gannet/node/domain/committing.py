"""The one rule for when a write may be answered: :meth:`Committer.commit`.

Every write path of the broker (sends, EndTransaction, offset updates, Pop acks, invisible-time
changes, DLQ forwards, remoting send-backs) appends first and then awaits ``commit`` before it
answers. On a Raft group the rule is "a majority has it durable": ``commit`` proposes what this
node appended (``propose_local``) and waits for the commit point (``wait_committed``). On one
node it is the flush mode: ``commit`` waits until the appended bytes are flushed, when the
append says so (``durable_at``; ASYNC_FLUSH appends say nothing and are answered at once).

Errors are domain errors, never a protocol's status: a Raft refusal is the replication layer's
:class:`~gannet.node.replication.errors.ReplicationError`, passed through unchanged; a flush that
does not finish in time is :class:`PersistenceTimeout`. Each protocol layer maps them once
(:func:`gannet.node.api.routes.commit_refusal` for gRPC v2).

Called by :mod:`gannet.node.api` (messaging, receiving, transactions); built once per broker
by the v2 servicer inside the server's event loop.

The flush half has a second, blocking entry point for work that runs in a worker or
housekeeping thread rather than on the loop: :func:`blocking_flush_wait` (:func:`pop_flush_wait`:
Pop's checkpoint and ACK appends, its buffer scan and revive passes; handed to
:class:`~gannet.node.pop.service.PopBroker` by its builder, since Pop sits below this layer).
On a Raft group a Pop answer still awaits :meth:`Committer.commit` on the loop.

``tests/test_commit_rule.py`` keeps the rule here: no other module of the broker above the
store proposes, waits for a commit or waits for a flush.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gannet.node.pop.context import REVIVE_LOG_WRITE, DurableWait
from gannet.node.replication.driver import ReplicationNode
from gannet.node.store.errors import FlushTimeout
from gannet.node.store.message_store import MessageStore


@dataclass(frozen=True, slots=True)
class Appended:
    """What this node just appended. ``durable_at``: the commit-log offset the flush mode
    must reach before an answer (None: nothing to wait for, or the flush mode does not
    wait)."""

    durable_at: int | None = None


NOTHING_TO_FLUSH = Appended()
"""An append whose answer waits for no flush (records of Pop, offset commits): on a Raft group
it is still proposed and committed."""


class PersistenceTimeout(Exception):
    """Written, but not flushed within ``sync_flush_timeout_ms``: it may or may not survive a
    crash."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            f"written but not flushed within {timeout_s:.1f} s; the message may "
            "or may not survive a crash"
        )
        self.timeout_s = timeout_s


class Committer:
    """The broker's one ``commit``; ``store`` is open (its flush service runs)."""

    def __init__(self, store: MessageStore, replication: ReplicationNode | None) -> None:
        self._replication = replication
        self._waiters = store.durable_waiters(asyncio.get_running_loop())
        self._flush_timeout_s = store.config.sync_flush_timeout_ms / 1000

    async def commit(self, appended: Appended) -> None:
        """Return once what this node just appended may be answered.

        Raft group: propose what was appended and wait until a majority has it durable;
        :class:`ReplicationError` passes through unchanged. One node: wait until
        ``appended.durable_at`` is flushed; :class:`PersistenceTimeout` after
        ``sync_flush_timeout_ms``. Called after the append; a caller that checks leadership
        does so with no ``await`` between the check and the append (fault seeds 107, 108).
        """
        replication = self._replication
        if replication is not None:
            await replication.wait_committed(replication.propose_local())
        elif appended.durable_at is not None:
            try:
                await asyncio.wait_for(
                    self._waiters.wait(appended.durable_at), self._flush_timeout_s
                )
            except TimeoutError:
                raise PersistenceTimeout(self._flush_timeout_s) from None


def blocking_flush_wait(store: MessageStore, what: str) -> DurableWait:
    """The flush half of :meth:`Committer.commit` for a thread that may block: a function that
    waits until the commit-log offset it is given is flushed (None, or a store whose flush
    service has not started: at once), raising :class:`FlushTimeout` naming ``what`` after
    ``sync_flush_timeout_ms``. Call it outside any lock, so that concurrent writers share one
    group commit. On a Raft group the caller's answer still awaits :meth:`Committer.commit`,
    which proposes what was appended."""

    def wait(durable_at: int | None) -> None:
        flush = store.flush
        if durable_at is None or flush is None:
            return
        timeout_s = store.config.sync_flush_timeout_ms / 1000
        if not flush.wait_flushed(durable_at, timeout_s):
            raise FlushTimeout(f"{what} up to {durable_at} not flushed within {timeout_s:.1f} s")

    return wait


def pop_flush_wait(store: MessageStore) -> DurableWait:
    """:func:`blocking_flush_wait` for the revive-log writes of a
    :class:`~gannet.node.pop.service.PopBroker` on ``store``."""
    return blocking_flush_wait(store, REVIVE_LOG_WRITE)
