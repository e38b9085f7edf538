"""Raft replication figures at scrape time, from a ``raft_status()`` callable.

The callable returns anything shaped like the admin API's ``RaftStatus`` message
(``gannet.admin.v1``: ``node_id``, ``role``, ``term``, ``commit_offset``, ``last_offset``,
``peers[].node_id`` / ``lag_bytes`` / ``reachable``, ``elections_total``,
``leader_changes_total``) — the protobuf itself or the replication layer's own
``replication.driver_state.NodeStatus`` (integer node ids become label strings) —
or None when this node does not replicate (then nothing is exported, so a single-node broker
without Raft shows no ``gannet_raft_*`` series at all).

Families (all per node; peers bounded by the group size):

* ``gannet_raft_role{role}`` — 1 for the current role, 0 for the other three
  (``leader``, ``follower``, ``candidate``, ``pre-candidate``), so ``sum(gannet_raft_role
  {role="leader"})`` counts leaders and a dashboard can draw the leader map;
* ``gannet_raft_term``, ``gannet_raft_commit_offset_bytes``, ``gannet_raft_last_offset_bytes``;
* ``gannet_raft_follower_lag_bytes{peer}`` and ``gannet_raft_peer_reachable{peer}`` — the
  leader's view of each follower (followers export none); reachable means answered lately, not
  merely connected (``replication.liveness``: a silent link reads 0 within 3 election timeouts);
* ``gannet_raft_elections_total``, ``gannet_raft_leader_changes_total``.

Wired by whoever builds the replication layer:
``BrokerMetrics.watch_raft(lambda: node.status() if node is running else None)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gannet.node.metrics.figures_collecting import FiguresCollector

log = logging.getLogger(__name__)

ROLES = ("leader", "follower", "candidate", "pre-candidate")
PEERS_MAX = 16


class RaftPeerLike(Protocol):
    @property
    def node_id(self) -> str | int: ...

    @property
    def lag_bytes(self) -> int: ...

    @property
    def reachable(self) -> bool: ...


class RaftStatusLike(Protocol):
    @property
    def node_id(self) -> str | int: ...

    @property
    def role(self) -> str: ...

    @property
    def term(self) -> int: ...

    @property
    def commit_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def peers(self) -> Sequence[RaftPeerLike]: ...

    @property
    def elections_total(self) -> int: ...

    @property
    def leader_changes_total(self) -> int: ...


RaftStatusSource = Callable[[], RaftStatusLike | None]


def families(status: RaftStatusLike) -> list[Metric]:
    """The ``gannet_raft_*`` families of one status."""
    role = GaugeMetricFamily(
        "gannet_raft_role", "1 for this node's current Raft role, 0 otherwise.", labels=["role"]
    )
    for name in ROLES:
        role.add_metric([name], int(status.role == name))
    lag = GaugeMetricFamily(
        "gannet_raft_follower_lag_bytes",
        "Leader's last offset minus a follower's match offset (exported by the leader).",
        labels=["peer"],
    )
    reachable = GaugeMetricFamily(
        "gannet_raft_peer_reachable",
        "1 while the leader's stream to the follower is open and the follower answered within "
        "the last 3 election timeouts.",
        labels=["peer"],
    )
    if status.role == "leader":
        for peer in list(status.peers)[:PEERS_MAX]:
            if peer.node_id == status.node_id:
                continue
            name = str(peer.node_id)
            if peer.lag_bytes >= 0:  # -1: the leader does not know the follower's match yet
                lag.add_metric([name], int(peer.lag_bytes))
            reachable.add_metric([name], int(bool(peer.reachable)))
    return [
        role,
        GaugeMetricFamily("gannet_raft_term", "Current Raft term.", value=status.term),
        GaugeMetricFamily(
            "gannet_raft_commit_offset_bytes",
            "Commit-log offset durable on a majority.",
            value=status.commit_offset,
        ),
        GaugeMetricFamily(
            "gannet_raft_last_offset_bytes",
            "End of this node's Raft log (commit-log end offset).",
            value=status.last_offset,
        ),
        lag,
        reachable,
        CounterMetricFamily(
            "gannet_raft_elections", "Elections this node started.", value=status.elections_total
        ),
        CounterMetricFamily(
            "gannet_raft_leader_changes",
            "Times this node saw the leader change.",
            value=status.leader_changes_total,
        ),
    ]


class RaftCollector(FiguresCollector[RaftStatusLike]):
    """Exports :func:`families` of ``raft_status()`` per scrape; nothing when it is None."""

    def __init__(self, raft_status: RaftStatusSource) -> None:
        super().__init__(raft_status, families, what="raft status", log=log)
