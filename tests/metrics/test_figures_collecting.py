"""The shared figures collector (:mod:`gannet.node.metrics.figures_collecting`): families of
the source's figures per scrape, nothing while the source returns None or fails."""

from __future__ import annotations

import logging

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric

from gannet.node.metrics.figures_collecting import FiguresCollector, counter_by

log = logging.getLogger(__name__)


def _families(value: int) -> list[Metric]:
    return [GaugeMetricFamily("gannet_test_value", "A test figure.", value=value)]


def test_exports_the_families_of_the_current_figures() -> None:
    figures = [3]
    collector = FiguresCollector(lambda: figures[0], _families, what="test figures", log=log)
    assert [s.value for f in collector.collect() for s in f.samples] == [3]
    figures[0] = 5
    assert [s.value for f in collector.collect() for s in f.samples] == [5]


def test_exports_nothing_while_the_source_gives_none() -> None:
    collector = FiguresCollector(lambda: None, _families, what="test figures", log=log)
    assert list(collector.collect()) == []


def test_a_failing_source_is_logged_and_exports_nothing(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> int:
        raise RuntimeError("closed under the scrape")

    collector = FiguresCollector(broken, _families, what="test figures", log=log)
    with caplog.at_level(logging.WARNING):
        assert list(collector.collect()) == []
    assert "test figures unavailable for metrics" in caplog.text


def test_counter_by_gives_one_sample_per_key_in_order() -> None:
    family = counter_by("gannet_test_drops", "Drops by reason.", "reason", {"b": 2, "a": 1})
    assert [(s.name, s.labels, s.value) for s in family.samples] == [
        ("gannet_test_drops_total", {"reason": "a"}, 1),
        ("gannet_test_drops_total", {"reason": "b"}, 2),
    ]
