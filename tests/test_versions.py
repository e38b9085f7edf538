"""The version the broker reports (:mod:`gannet.node.protocol.versions`): the installed
distribution's, in the admin API and the ``gannet_broker_info`` metric alike."""

from __future__ import annotations

from importlib import metadata

import pytest

from gannet.node.metrics import broker_metrics
from gannet.node.protocol import versions


def test_the_installed_version_is_reported() -> None:
    assert versions.gannet_version() == metadata.version("gannet")


def test_a_tree_that_was_not_installed_reports_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert versions.gannet_version() == "unknown"


def test_the_broker_info_metric_carries_the_version() -> None:
    metrics = broker_metrics.BrokerMetrics()
    metrics.describe_broker(broker_name="broker-a", cluster="cluster-a")
    [info] = [f for f in metrics.registry.collect() if f.name == "gannet_broker"]
    assert info.samples[0].labels["version"] == metadata.version("gannet")
