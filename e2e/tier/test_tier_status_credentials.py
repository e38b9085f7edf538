"""``GetTierStatus`` of a broker whose tier credentials the real S3 server refuses.

A broker (in-process, real sockets) over a store with sealed files, offloading to the session's
SeaweedFS with a wrong secret: ``gannet tier status -o json`` reports ``failing_reason
credentials`` and ``credentials_rejected`` (what the operator's ``TierCredentialsRejected``
Event is made of), the error names the refusal, and no object was recorded.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from e2e.tier import seaweedfs
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.cli.root import main
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.message_store import MessageStore
from gannet.node.store.tier import offloading, planning
from tests.store.test_cleanup_policy import fill

WAIT_S = 30.0


def _status(endpoint: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["tier", "status", "--endpoint", endpoint, "-o", "json"])
    assert result.exit_code in (0, 1), result
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_wrong_credentials_are_reported_as_rejected(
    seaweed: seaweedfs.SeaweedS3, prefix: str, tmp_path: Path
) -> None:
    config = StoreConfig.for_tests(tmp_path / "store", flush_mode=FlushMode.SYNC_FLUSH)
    with MessageStore(config).open() as store:
        fill(store)
    wrong = dataclasses.replace(
        seaweed.bucket_config(seaweedfs.BUCKET), secret_key="not-the-secret"
    )
    tier = offloading.TierConfig(wrong, prefix, planning.TierPolicy(offload_age_s_min=0), 0.1, 1.0)
    running = threads.start(BrokerConfig(store=config, listen_port=0, tier=tier))
    try:
        deadline = time.monotonic() + WAIT_S
        document = _status(running.endpoint)
        while document["offload"]["failing_reason"] is None and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the broker's answer with a deadline
            document = _status(running.endpoint)
    finally:
        running.stop()
    offload = document["offload"]
    assert offload["failing_reason"] == "credentials", document
    assert offload["credentials_rejected"] is True
    assert "not-the-secret" not in json.dumps(document)
    assert document["manifest"]["objects"] == 0
