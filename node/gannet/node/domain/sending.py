"""The domain tail of every write of messages: check leadership, append, commit.

:meth:`Sender.send` is what a producer's send comes to once its protocol layer has turned the
request into records and chosen their queue (:mod:`gannet.node.api.messaging` for gRPC v2;
the remoting port reaches it through the v2 servicer): check that this node may write, append
to the store, tell the observer, and return once the append may be answered
(:meth:`Committer.commit`). :meth:`Sender.append_own` does the same for records the broker
makes itself (a remoting consumer's send-back to its retry or dead-letter topic).

Invariant (fault seeds 107, 108): the leader check and the append run in one synchronous
stretch, with no ``await`` between them. A check made before an ``await`` may be stale after
it (a retry that waited for its original, an index lookup): bytes appended on a node that lost
leadership, or that leads a new term and has not applied the earlier terms yet, would be
proposed later past the dedup gate. Callers may check earlier too, for an early refusal; this
check is the one that counts.

Errors are domain errors (:class:`~gannet.node.replication.errors.ReplicationError`,
:class:`~gannet.node.domain.committing.PersistenceTimeout`, the store's); each protocol layer maps
them (:func:`gannet.node.api.routes.commit_refusal`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gannet.node.domain.committing import Appended, Committer
from gannet.node.replication.driver import ReplicationNode
from gannet.node.store.log import records
from gannet.node.store.log.commitlog import AppendResult
from gannet.node.store.message_store import MessageStore

SentObserver = Callable[[str, Sequence[records.Message]], None]
"""Told (topic, messages) after each send appended its messages; metrics use it."""


class Sender:
    """One per broker, beside its :class:`Committer`; ``store`` is open."""

    def __init__(
        self,
        store: MessageStore,
        replication: ReplicationNode | None,
        committer: Committer,
        on_sent: SentObserver | None = None,
    ) -> None:
        self._store = store
        self._replication = replication
        self._committer = committer
        self._on_sent = on_sent

    async def send(self, topic: str, messages: list[records.Message]) -> list[AppendResult]:
        """Append a producer's ``messages`` of ``topic`` (their queue set) and return their
        results once they may be answered."""
        if self._replication is not None:
            self._replication.check_leader()  # no await from here to the append (docstring)
        results, durable_at = self._store.put_messages_nowait(messages, dispatch_inline=True)
        if self._on_sent is not None:
            self._on_sent(topic, messages)
        await self._committer.commit(Appended(durable_at))
        return results

    async def append_own(self, messages: list[records.Message]) -> None:
        """Append records the broker made itself and return once they may be answered; not
        told to the observer (they are no producer's send)."""
        if self._replication is not None:
            self._replication.check_leader()  # no await from here to the append (docstring)
        _, durable_at = self._store.put_messages_nowait(messages, dispatch_inline=True)
        await self._committer.commit(Appended(durable_at))
