"""Failover figures of a Raft member at scrape time: forwarding, peer refusals, duplicates.

Families (a group of one exports none of them):

* ``gannet_forwarded_requests_total{method}`` — client requests (v2 and admin writes, e.g.
  ``SendMessage``, ``CreateTopic``) this member took and forwarded to the leader
  (:mod:`gannet.node.api.forwarding`);
* ``gannet_forward_rerouted_total`` — forwarded calls routed again (leader refused, died or
  changed); ``gannet_forward_held_total`` — requests that waited for a leader;
  ``gannet_forward_unanswered_total`` — requests answered with a retryable refusal because no
  leader served them in time; ``gannet_forward_hedged_total`` — copies of a forwarded send sent
  on another connection to the leader because the first gave no answer in time;
* ``gannet_raft_peer_messages_dropped_total{reason}`` — peer calls and messages refused
  (:mod:`gannet.node.replication.peer_auth`: ``unauthenticated``, ``not_a_member``,
  ``sender_mismatch``, ``replayed``, ``certificate_names_no_member``, ``term_jump``,
  ``timeout_now_not_from_leader``).

And on every broker (a group of one too): ``gannet_send_duplicates_dropped_total`` — sends
answered with the original receipt instead of being appended again, and
``gannet_send_dedup_log_lookups_total`` — sends whose original was looked up in the index files
because the window map may not hold it (:mod:`gannet.node.api.dedup`; :class:`DuplicatesCollector`).

Registered by the broker (:mod:`gannet.node.broker.serving`) with a callable returning the
:class:`FailoverFigures` of the moment, or None while not serving.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric

from gannet.node.metrics.figures_collecting import FiguresCollector, counter_by

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FailoverFigures:
    forwarded_by_method: dict[str, int]
    rerouted_total: int
    held_total: int
    unanswered_total: int
    peer_drops_by_reason: dict[str, int]
    hedged_total: int = 0


FailoverSource = Callable[[], FailoverFigures | None]


def families(figures: FailoverFigures) -> list[Metric]:
    forwarded = counter_by(
        "gannet_forwarded_requests",
        "Client requests forwarded to the Raft leader by this member.",
        "method",
        figures.forwarded_by_method,
    )
    dropped = counter_by(
        "gannet_raft_peer_messages_dropped",
        "Peer calls and messages refused (not a member, unauthenticated, lone term moves).",
        "reason",
        figures.peer_drops_by_reason,
    )
    return [
        forwarded,
        CounterMetricFamily(
            "gannet_forward_rerouted",
            "Forwarded calls routed again (the leader refused, died or changed).",
            value=figures.rerouted_total,
        ),
        CounterMetricFamily(
            "gannet_forward_held",
            "Leader-only requests that waited for a leader to be known or ready.",
            value=figures.held_total,
        ),
        CounterMetricFamily(
            "gannet_forward_unanswered",
            "Leader-only requests refused with a retryable code: no leader in time.",
            value=figures.unanswered_total,
        ),
        CounterMetricFamily(
            "gannet_forward_hedged",
            "Copies of a forwarded send sent on another connection to the leader (no answer).",
            value=figures.hedged_total,
        ),
        dropped,
    ]


class FailoverCollector(FiguresCollector[FailoverFigures]):
    """Exports :func:`families` of ``source()`` per scrape; nothing when it is None."""

    def __init__(self, source: FailoverSource) -> None:
        super().__init__(source, families, what="failover figures", log=log)


class DuplicatesCollector:
    """``gannet_send_duplicates_dropped_total`` from ``duplicates()`` and
    ``gannet_send_dedup_log_lookups_total`` from ``log_lookups()`` (None: not serving)."""

    def __init__(
        self,
        duplicates: Callable[[], int | None],
        log_lookups: Callable[[], int | None] | None = None,
    ) -> None:
        self._duplicates = duplicates
        self._log_lookups = log_lookups

    def collect(self) -> Iterator[Metric]:
        count = self._duplicates()
        if count is not None:
            yield CounterMetricFamily(
                "gannet_send_duplicates_dropped",
                "Retried sends (same client message id, within the window) answered with the "
                "original receipt instead of being stored again.",
                value=count,
            )
        lookups = self._log_lookups() if self._log_lookups is not None else None
        if lookups is not None:
            yield CounterMetricFamily(
                "gannet_send_dedup_log_lookups",
                "Sends whose original was looked up in the index files (the window map may "
                "not hold it: dropped for room, or stored before the process started).",
                value=lookups,
            )
