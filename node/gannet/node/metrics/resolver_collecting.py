"""How a Raft member resolves the other members' host names, at scrape time.

Families (a group of one exports none; peers bounded by the group size):

* ``gannet_peer_resolve_seconds{peer}`` — histogram of the lookups of a member's host name
  (successes and failures; IPv4 and IPv6 raced, the first answer ends it);
* ``gannet_peer_resolve_failures_total{peer}`` — lookups that found no address in time (0 from
  the first lookup on);
* ``gannet_peer_address_family{peer, family}`` — 1 for the family dialed now (``ipv4``,
  ``ipv6``, or ``literal``: an address written in ``--peers``), 0 for the others.

Figures are :class:`gannet.node.replication.peer_resolving.ResolveFigures`, registered by the
broker (:mod:`gannet.node.broker.serving`) with a callable returning them, or None while not
replicating.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from gannet.node.metrics.figures_collecting import FiguresCollector
from gannet.node.replication.peer_resolving import RESOLVE_SECONDS_BUCKETS, ResolveFigures

log = logging.getLogger(__name__)

FAMILIES = ("ipv4", "ipv6", "literal")
PEERS_MAX = 16

ResolveSource = Callable[[], ResolveFigures | None]


def families(figures: ResolveFigures) -> list[Metric]:
    seconds = HistogramMetricFamily(
        "gannet_peer_resolve_seconds",
        "Lookups of a member's host name (IPv4 and IPv6 raced; failures included).",
        labels=["peer"],
    )
    for node_id, counts in sorted(list(figures.seconds.items())[:PEERS_MAX]):
        total = 0.0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip((*RESOLVE_SECONDS_BUCKETS, float("inf")), counts, strict=True):
            total += count
            buckets.append((floatToGoString(bound), total))  # type: ignore[no-untyped-call]
        seconds.add_metric([str(node_id)], buckets, figures.seconds_sum.get(node_id, 0.0))
    failures = CounterMetricFamily(
        "gannet_peer_resolve_failures",
        "Lookups of a member's host name that found no address in time.",
        labels=["peer"],
    )
    family = GaugeMetricFamily(
        "gannet_peer_address_family",
        "1 for the address family dialed to reach a member (ipv4, ipv6, literal).",
        labels=["peer", "family"],
    )
    peers = sorted({*figures.seconds, *figures.family})[:PEERS_MAX]
    for node_id in peers:
        name = str(node_id)
        if node_id in figures.seconds:
            failures.add_metric([name], figures.failures_total.get(node_id, 0))
        dialed = figures.family.get(node_id)
        if dialed is not None:
            for each in FAMILIES:
                family.add_metric([name, each], int(each == dialed))
    return [seconds, failures, family]


class ResolveCollector(FiguresCollector[ResolveFigures]):
    """Exports :func:`families` of ``source()`` per scrape; nothing when it is None."""

    def __init__(self, source: ResolveSource) -> None:
        super().__init__(source, families, what="peer resolve figures", log=log)
