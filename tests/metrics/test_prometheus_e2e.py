"""The Prometheus end-to-end scenario (``e2e/prometheus/scenario.py``, about 25 s): a real
Prometheus scrapes a broker process under official-client load; every dashboard expression
returns data, every alert expression is silent while healthy, and the provoked ones fire."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deploy.dashboards import build
from e2e.prometheus import scenario


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_every_dashboard_and_alert_expression_against_a_real_prometheus(tmp_path: Path) -> None:
    if shutil.which("prometheus") is None and not Path("/usr/bin/prometheus").exists():
        pytest.skip("prometheus is not installed (make unit installs Debian's prometheus package)")
    report = scenario.run(tmp_path)
    print(report.text())
    assert report.panels_checked
    assert not report.panels_empty, report.panels_empty
    assert not report.alerts_noisy_when_healthy, report.alerts_noisy_when_healthy
    assert set(scenario.PROVOKED) <= set(report.alerts_fired), report.alerts_not_fired
    # Only panels that need Raft or the operator may go unchecked (a single node without
    # replication or operator exports neither).
    needing = {f"{d.uid}/{p.title}" for d in build.dashboards() for p in d.panels() if p.requires}
    for where in report.panels_not_checked:
        assert where.rsplit("#", 1)[0] in needing, where
