"""``GetTierStatus`` and ``gannet tier status`` (fast, no S3 server).

- Pure: :func:`tier_status.status_pb` without a tier says only ``enabled=False``; a manifest
  is summarised (objects, bytes, offsets); a failing pass names its reason, and the flags the
  operator posts Events for (``credentials_rejected``, ``gap``) follow the reason.
- A real broker (in-process, real sockets) over a store with sealed files and a tier at a dead
  endpoint: ``gannet tier status -o json`` reports offload failing with reason ``unavailable``
  and exits 1; a broker without a tier answers ``enabled: false`` (exit 1 too).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gannet.node.api import tier_status
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.cli.root import main
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.message_store import MessageStore
from gannet.node.store.tier import manifests, offloading, planning

from ..store.test_cleanup_policy import fill
from .test_offload_store import PREFIX, _dead_bucket

WAIT_S = 20.0


def _config() -> offloading.TierConfig:
    policy = planning.TierPolicy(offload_age_s_min=0)
    return offloading.TierConfig(_dead_bucket(), PREFIX, policy, 0.05, 0.1)


def test_without_a_tier_only_enabled_false() -> None:
    answer = tier_status.status_pb(None, None, None, local_start_offset=7, leader=True)
    assert answer.enabled is False
    assert (answer.bucket, answer.local_start_offset) == ("", 0)


def test_manifest_and_failures_are_summarised() -> None:
    objects = (
        manifests.TierObject(0, 100, "a" * 32, 1),
        manifests.TierObject(100, 50, "b" * 32, 2),
    )
    figures = offloading.OffloadFigures(passes_total=5, failures_total={"credentials": 3})
    figures.failing_reason, figures.last_failure = (
        "credentials",
        "credentials: 403 SignatureDoesNotMatch",
    )
    answer = tier_status.status_pb(
        _config(), manifests.Manifest(PREFIX, objects), figures, local_start_offset=150, leader=True
    )
    assert (answer.objects, answer.bytes, answer.start_offset, answer.end_offset) == (
        2,
        150,
        0,
        150,
    )
    assert (answer.has_objects, answer.local_start_offset, answer.leader) == (True, 150, True)
    assert (answer.failing_reason, answer.credentials_rejected) == ("credentials", True)
    assert not answer.gap
    assert dict(answer.failures_total) == {"credentials": 3}
    figures.failing_reason = "gap"
    gap = tier_status.status_pb(
        _config(), manifests.Manifest(PREFIX), figures, local_start_offset=0, leader=True
    )
    assert (gap.gap, gap.credentials_rejected, gap.has_objects) == (True, False, False)


def _status(endpoint: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, ["tier", "status", "--endpoint", endpoint, "-o", "json"])
    assert result.stdout, result
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def sealed_store(tmp_path: Path) -> StoreConfig:
    config = StoreConfig.for_tests(tmp_path / "store", flush_mode=FlushMode.SYNC_FLUSH)
    with MessageStore(config).open() as store:
        fill(store)
    return config


def test_a_broker_reports_offload_failing_against_a_dead_endpoint(
    sealed_store: StoreConfig,
) -> None:
    running = threads.start(BrokerConfig(store=sealed_store, listen_port=0, tier=_config()))
    try:
        deadline = time.monotonic() + WAIT_S
        code, document = _status(running.endpoint)
        while document["offload"]["failing_reason"] is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the broker's answer with a deadline
            code, document = _status(running.endpoint)
    finally:
        running.stop()
    assert code == 1, document
    assert (document["enabled"], document["prefix"]) == (True, PREFIX)
    offload = document["offload"]
    assert offload["failing_reason"] == "unavailable"
    assert offload["failures"]["unavailable"] >= 1
    assert "unavailable" in offload["last_error"]
    assert (offload["leader"], offload["credentials_rejected"], offload["gap"]) == (
        True,
        False,
        False,
    )
    assert offload["last_success_ms"] is None
    assert document["manifest"]["objects"] == 0
    assert document["manifest"]["start_offset"] is None


def test_a_broker_without_a_tier_says_so(tmp_path: Path) -> None:
    config = StoreConfig.for_tests(tmp_path / "store", flush_mode=FlushMode.SYNC_FLUSH)
    running = threads.start(BrokerConfig(store=config, listen_port=0))
    try:
        code, document = _status(running.endpoint)
    finally:
        running.stop()
    assert (code, document) == (1, {"enabled": False})
