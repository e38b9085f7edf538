"""Operator metrics (names and labels) and the liveness check that detects a stalled watch."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import aiohttp
import pytest

from gannet.operator import metrics

pytestmark = pytest.mark.timeout(30)


def listed(version: str) -> list[metrics.Listed]:
    return [metrics.Listed("Topic", "ns", "orders", version)]


def test_stall_detector_needs_the_watch_to_lag_for_the_whole_timeout() -> None:
    detector = metrics.StallDetector(stall_timeout_s=60)
    watched = {"Topic": {("ns", "orders"): "5"}}
    assert detector.check(listed("5"), watched, now_s=0)
    assert detector.check(listed("6"), watched, now_s=10)  # behind, but only just
    assert detector.check(listed("6"), watched, now_s=69)
    assert not detector.check(listed("7"), watched, now_s=70)  # 60 s behind: stalled
    watched["Topic"][("ns", "orders")] = "7"  # the watch caught up
    assert detector.check(listed("7"), watched, now_s=71)
    with pytest.raises(ValueError, match="stall_timeout_s"):
        metrics.StallDetector(stall_timeout_s=0)


def test_endpoint_serves_metrics_and_liveness() -> None:
    async def scenario() -> None:
        operator_metrics = metrics.OperatorMetrics()
        operator_metrics.observe("Topic", "success", 0.02)
        operator_metrics.observe("Topic", "refused", 0.01)
        operator_metrics.seen("Topic", "ns", "orders", "5", deleted=False)
        operator_metrics.seen("Topic", "ns", "old", "3", deleted=False)
        operator_metrics.seen("Topic", "ns", "old", "4", deleted=True)
        listing = listed("5")
        now = [0.0]

        async def lister() -> list[metrics.Listed]:
            return listing

        liveness = metrics.Liveness(
            operator_metrics, lister, stall_timeout_s=30, check_interval_s=0, clock=lambda: now[0]
        )
        runner = await metrics.serve(
            metrics.application(operator_metrics, liveness), "127.0.0.1", 0
        )
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                async with http.get("/metrics") as response:
                    text = await response.text()
                assert (
                    'gannet_operator_reconciliations_total{kind="Topic",result="success"} 1.0'
                    in text
                )
                assert (
                    'gannet_operator_reconciliations_total{kind="Topic",result="refused"} 1.0'
                    in text
                )
                assert 'gannet_operator_reconcile_duration_seconds_count{kind="Topic"} 2.0' in text
                assert 'gannet_operator_resources{kind="Topic"} 1.0' in text
                assert 'gannet_operator_resources{kind="GannetCluster"} 0.0' in text
                async with http.get("/healthz") as response:
                    assert response.status == 200
                listing[:] = listed("9")  # the API moved on; the watch delivered nothing
                now[0] = 1.0
                async with http.get("/healthz") as response:
                    assert response.status == 200
                now[0] = 40.0
                async with http.get("/healthz") as response:
                    assert response.status == 503
                    assert "stalled" in await response.text()
        finally:
            await runner.cleanup()

    asyncio.run(scenario())


def test_unknown_result_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="result 'ok'"):
        metrics.OperatorMetrics().observe("Topic", "ok", 0.1)


def test_promtool_finds_the_metric_names_clean() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (make unit installs Debian's prometheus package)")
    operator_metrics = metrics.OperatorMetrics()
    operator_metrics.observe("ConsumerGroup", "failed", 1.5)
    operator_metrics.seen("GannetCluster", "ns", "main", "1", deleted=False)
    checked = subprocess.run(
        [promtool, "check", "metrics"],
        input=operator_metrics.render(),
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == b""
