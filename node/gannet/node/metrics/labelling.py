"""Constant labels applied once, at exposition: every sample of a broker's ``/metrics`` carries
``broker="<broker name>"`` (the ``--broker-name``: the broker group, RocketMQ's
``brokerName``), so dashboards and alerts can split a cluster of many broker groups without
each collector knowing the name.

:class:`LabelledRegistry` is a read-only view of another registry: its :meth:`collect` yields
the wrapped registry's families with the constant labels added to every sample (a label the
sample already has wins, so nothing is overwritten). Collectors keep registering on the plain
registry, and in-process readers (tests, ``bench/metrics.py``) see the plain samples; only the
HTTP endpoint (:mod:`http_serving`) serves the view.

The label is ``broker``, not ``group``: ``group`` is already the consumer group of the
``gannet_consumer_*`` and ``gannet_*_out_total`` families.

Created by :meth:`gannet.node.metrics.broker_metrics.BrokerMetrics.describe_broker`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

BROKER_LABEL = "broker"


class LabelledRegistry(CollectorRegistry):
    """``wrapped``'s samples with ``labels`` added (for exposition only; nothing registers
    here)."""

    def __init__(self, wrapped: CollectorRegistry, labels: Mapping[str, str]) -> None:
        super().__init__(auto_describe=False)
        self._wrapped = wrapped
        self._labels = dict(labels)

    def collect(self) -> Iterable[Metric]:
        for family in self._wrapped.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [self._label(sample) for sample in family.samples]
            yield labelled

    def _label(self, sample: Sample) -> Sample:
        extra = {name: value for name, value in self._labels.items() if name not in sample.labels}
        return sample._replace(labels={**sample.labels, **extra})
