"""The operator end to end in CI: operator and broker as processes, the official client
producing and consuming on an operator-made topic, the revive-queue count changed under load
(:mod:`e2e.operator.scenario`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.operator import scenario


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning")
def test_topic_resource_to_messages_and_back(tmp_path: Path) -> None:
    report = scenario.run(tmp_path)
    assert (report.sent, report.received) == (scenario.MESSAGES, scenario.MESSAGES)
    # Revive-queue count 8 -> 2 under load: every message acked, none lost.
    assert report.revive_acked == report.revive_sent == 60
    assert report.revive_active_after == 2
    assert report.topic_queues_after_growth == 6
    assert report.shrink_reason == "NotSupported"
    assert report.topic_reconciliations >= 2
