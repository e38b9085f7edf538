"""What every handler gets: the broker and Kubernetes clients, metrics, endpoints and the clock.

Built once by :mod:`gannet.operator.running` (or by a test) and closed over by the handlers of
:mod:`gannet.operator.handlers` and :mod:`gannet.operator.cluster_handling`. ``Endpoints`` says
where a cluster's brokers answer the admin API: the in-cluster Service names by default, one
fixed address for brokers outside Kubernetes and for tests. :func:`admin_endpoint` finds the
member that accepts admin writes (the Raft leader).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Protocol

from gannet.operator import cluster_planning, manifests
from gannet.operator.brokers import BrokerError, Brokers
from gannet.operator.kube import Kube
from gannet.operator.metrics import OperatorMetrics


class Endpoints(Protocol):
    """Where a cluster's brokers answer the admin API."""

    def client(self, namespace: str, cluster: str) -> str: ...

    def pod(self, namespace: str, cluster: str, ordinal: int) -> str: ...


class ServiceEndpoints:
    """In-cluster DNS names of the Services that :mod:`manifests` creates."""

    def client(self, namespace: str, cluster: str) -> str:
        return manifests.client_endpoint(cluster, namespace)

    def pod(self, namespace: str, cluster: str, ordinal: int) -> str:
        return manifests.pod_endpoint(cluster, namespace, ordinal)


@dataclasses.dataclass(frozen=True, slots=True)
class FixedEndpoints:
    """One endpoint for every cluster and member (brokers outside Kubernetes; tests)."""

    endpoint: str

    def client(self, namespace: str, cluster: str) -> str:
        return self.endpoint

    def pod(self, namespace: str, cluster: str, ordinal: int) -> str:
        return self.endpoint


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclasses.dataclass
class Context:
    brokers: Brokers
    kube: Kube
    metrics: OperatorMetrics
    endpoints: Endpoints = dataclasses.field(default_factory=ServiceEndpoints)
    clock: Callable[[], dt.datetime] = utc_now
    refresh_interval_s: float = 30.0
    retry_delay_s: float = 10.0


async def admin_endpoint(ctx: Context, namespace: str, cluster: str) -> str:
    """Where admin writes go: the Raft leader's client endpoint, as followers refuse them
    ("send admin writes to the leader"). Falls back to the client Service when no leader is
    known; the call that follows then reports the broker's state."""
    client = ctx.endpoints.client(namespace, cluster)
    try:
        view = await ctx.brokers.raft_status(client)
    except BrokerError:
        return client
    ordinal = cluster_planning.node_ordinal(view.leader_id)
    return ctx.endpoints.pod(namespace, cluster, ordinal) if ordinal >= 0 else client
