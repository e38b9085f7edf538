"""The fast variant of the Prometheus end-to-end scenario (``e2e/prometheus/scenario.py``,
about 35 s on one broker process; ``make e2e-prometheus`` runs the same scenario on a local
3-node Raft group, about 45 s, where the Raft panels and the no-leader alert are checked too):
a real Prometheus scrapes the broker and the operator (against the KMock API) under
official-client load; every dashboard expression returns data (the broker-group variable set
to the broker's name, so the ``broker`` label is proven on every series a panel selects),
every alert expression is silent while healthy, and the provoked ones (consumer lag, dead
letters, broker down, operator reconcile failures) fire."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deploy.dashboards import build
from e2e.prometheus import harness, scenario


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_every_dashboard_and_alert_expression_against_a_real_prometheus(tmp_path: Path) -> None:
    if shutil.which("prometheus") is None and not Path("/usr/bin/prometheus").exists():
        pytest.skip("prometheus is not installed (make unit installs Debian's prometheus package)")
    report = scenario.run(tmp_path, start_cluster=harness.start_single_node)
    print(report.text())
    assert len(report.panels_checked) > 45
    assert not report.panels_empty, report.panels_empty
    assert not report.alerts_noisy_when_healthy, report.alerts_noisy_when_healthy
    assert not report.double_counted, report.double_counted
    # Every broker series names its broker group (the operator's carry no broker label).
    assert report.broker_groups == ["", "broker-a"], report.broker_groups
    provoked = {*scenario.PROVOKED, "GannetOperatorReconcileFailures"}
    assert provoked <= set(report.alerts_fired), report.alerts_not_fired
    # Only panels that need Raft (a single node does not replicate) or tiered storage (no S3
    # server runs here; `make e2e-tier` checks the tier's metrics) may go unchecked.
    needing = {
        f"{d.uid}/{p.title}"
        for d in build.dashboards()
        for p in build.panels(d)
        if build.requires(p) in ("raft", "tier")
    }
    for where in report.panels_not_checked:
        assert where.rsplit("#", 1)[0] in needing, where
