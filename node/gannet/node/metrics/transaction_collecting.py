"""Transaction figures of a broker at scrape time (:mod:`gannet.node.transactions.service`).

Families:

* ``gannet_transaction_half_messages_pending`` (gauge) — open transactions: half messages
  without a commit or rollback in the committed log (the same on every member of a group);
* ``gannet_transaction_checks_total`` — ``RecoverOrphanedTransactionCommand`` s this broker
  pushed to a producer's Telemetry stream;
* ``gannet_transaction_check_records_total`` — checks this broker wrote to the log as leader
  (a check counts whether or not a producer was connected);
* ``gannet_transaction_resolutions_total{resolution}`` — ``commit``, ``rollback`` and
  ``discard`` (unresolved after the last check) this broker wrote as leader.

Registered by the broker (:mod:`gannet.node.broker.serving`) with a callable returning the
:class:`TransactionFigures` of the moment, or None while not serving.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gannet.node.metrics.figures_collecting import FiguresCollector, counter_by

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TransactionFigures:
    pending: int
    checks_sent_total: int
    check_records_total: int
    resolutions_total: dict[str, int]


TransactionSource = Callable[[], TransactionFigures | None]


def families(figures: TransactionFigures) -> list[Metric]:
    resolutions = counter_by(
        "gannet_transaction_resolutions",
        "Transactions this broker resolved as leader: commit, rollback, discard.",
        "resolution",
        figures.resolutions_total,
    )
    return [
        GaugeMetricFamily(
            "gannet_transaction_half_messages_pending",
            "Open transactions: half messages without a commit or rollback in the log.",
            value=figures.pending,
        ),
        CounterMetricFamily(
            "gannet_transaction_checks",
            "Transaction checks pushed to a producer's Telemetry stream by this broker.",
            value=figures.checks_sent_total,
        ),
        CounterMetricFamily(
            "gannet_transaction_check_records",
            "Transaction checks this broker wrote to the log as leader.",
            value=figures.check_records_total,
        ),
        resolutions,
    ]


class TransactionCollector(FiguresCollector[TransactionFigures]):
    """Exports :func:`families` of ``source()`` per scrape; nothing when it is None."""

    def __init__(self, source: TransactionSource) -> None:
        super().__init__(source, families, what="transaction figures", log=log)
