"""A prometheus_client collector over a figures source: per scrape it calls ``source()`` and
exports ``families(figures)``, nothing when the source returns None (not serving, no Raft) or
fails (logged as a warning naming what was unavailable; a scrape never fails for it).

The shape of :class:`gannet.node.metrics.raft_collecting.RaftCollector`,
:class:`gannet.node.metrics.failover_collecting.FailoverCollector` and
:class:`gannet.node.metrics.transaction_collecting.TransactionCollector`, which subclass it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client.core import Metric

T = TypeVar("T")


class FiguresCollector(Generic[T]):
    """Exports ``families`` of ``source()`` per scrape; nothing when it is None."""

    def __init__(
        self,
        source: Callable[[], T | None],
        families: Callable[[T], Sequence[Metric]],
        *,
        what: str,
        log: logging.Logger,
    ) -> None:
        self._source = source
        self._families = families
        self._what = what
        self._log = log

    def collect(self) -> Iterator[Metric]:
        try:
            figures = self._source()
        except Exception:
            self._log.warning("%s unavailable for metrics", self._what, exc_info=True)
            return
        if figures is not None:
            yield from self._families(figures)
