"""A prometheus_client collector over a figures source: per scrape it calls ``source()`` and
exports ``families(figures)``, nothing when the source returns None (not serving, no Raft) or
fails (logged as a warning naming what was unavailable; a scrape never fails for it).

The shape of :class:`gannet.node.metrics.raft_collecting.RaftCollector`,
:class:`gannet.node.metrics.failover_collecting.FailoverCollector` and
:class:`gannet.node.metrics.transaction_collecting.TransactionCollector`, which subclass it;
:func:`counter_by` is their counter family with one label (a tally by reason, method...).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from prometheus_client.core import CounterMetricFamily, Metric

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


def counter_by(
    name: str, documentation: str, label: str, counts: Mapping[str, int]
) -> CounterMetricFamily:
    """A counter family with one sample per key of ``counts`` (label ``label``), sorted."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key, count in sorted(counts.items()):
        family.add_metric([key], count)
    return family
