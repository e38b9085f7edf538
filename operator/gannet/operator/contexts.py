"""What every handler gets: the broker and Kubernetes clients, metrics, endpoints and the clock.

Built once by :mod:`gannet.operator.running` (or by a test) and closed over by the handlers of
:mod:`gannet.operator.handlers` and :mod:`gannet.operator.cluster_handling`. ``Endpoints`` says
where a cluster's brokers answer the admin API: the in-cluster Service names by default, one
fixed address for brokers outside Kubernetes and for tests.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Protocol

from gannet.operator import manifests
from gannet.operator.brokers import Brokers
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
