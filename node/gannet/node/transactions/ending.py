"""The end of transactions on the leader: append what ends them, commit, settle the book.

:func:`append_ending` appends the records that end half messages (an EndTransaction's commit
copy and op record; the op records and discard copies of orphan checks that used up their
checks) in a worker thread, waits for :meth:`~gannet.node.domain.committing.Committer.commit`,
and then marks the half messages done in the book (:meth:`TransactionBook.end_done`). On any
failure of the append or the commit they are left to the log to decide
(:meth:`TransactionBook.end_failed`) and the error goes on unchanged, a domain error for the
protocol layer to map.

Called by :class:`gannet.node.api.transactions.TransactionHandler` (EndTransaction and the
orphan check task).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from gannet.node.domain.committing import Appended
from gannet.node.store.log import records
from gannet.node.transactions.service import TransactionService

Commit = Callable[[Appended], Awaitable[None]]
"""The broker's commit rule (:meth:`Committer.commit`)."""


async def append_ending(
    service: TransactionService,
    commit: Commit,
    writes: list[records.Message],
    ending: Iterable[int],
) -> None:
    """Append ``writes`` and wait for their commit; then the half messages at offsets
    ``ending`` are done in the book, or, on any failure, left to the log to decide."""
    book = service.book
    try:
        _, durable_at = await asyncio.to_thread(service.append, writes)
        await commit(Appended(durable_at))
    except BaseException:
        for offset in ending:
            book.end_failed(offset)
        raise
    for offset in ending:
        book.end_done(offset)
