"""A GannetCluster with ``spec.tier`` on the real kube-apiserver (``make e2e-kube``).

Real: kube-apiserver and etcd, the chart's CRD (its schema accepts the tier and defaults
``credentialsSecret.key``), the operator process under the chart's RBAC, and a ``gannet broker
run`` with ``--tier-*`` pointed at a closed port (the honest "bucket unreachable"): its offload
loop fails every pass with reason ``unavailable``, and ``GetTierStatus`` says so.

Checked: the StatefulSet the operator applies carries every ``--tier-*`` argument with the
group's own prefix and mounts the Secret's key as the credentials file the broker reads; the
cluster gets ``TierOffload=False reason=TierOffloadFailing`` and exactly one Warning Event of
that reason while the broker keeps failing pass after pass (not one per operator pass).

The session's broker is swapped for the tier broker on the same endpoint for this test (the
operator reaches every cluster through ``--broker-endpoint``) and put back afterwards.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.kube import harness
from e2e.kube.control_plane import ControlPlane
from e2e.kube.harness import NAMESPACE, WAIT_S, Kubectl, Process
from e2e.processes import free_port

CLUSTER = "tiered"
TOPIC = "TierFill"
BODY_CHARS = 60_000
BODIES = 20  # 1.2 MB: seals the first 1 MiB commit-log file
MORE_PASSES = 6  # of every GannetCluster in the session: at least 3 of this one


def _cli(
    endpoint: str, credentials: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*harness.gannet_command(), *args, "--endpoint", endpoint],
        env={**os.environ, **credentials},
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


def _tier_status(endpoint: str, credentials: dict[str, str]) -> dict[str, Any]:
    done = _cli(endpoint, credentials, "tier", "status", "-o", "json")
    assert done.returncode in (0, 1), done.stderr
    status: dict[str, Any] = json.loads(done.stdout)
    return status


def _await_status(
    endpoint: str, credentials: dict[str, str], what: str, check: Any
) -> dict[str, Any]:
    """Poll the broker's ``GetTierStatus`` (another process: nothing to await) until ``check``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        status = _tier_status(endpoint, credentials)
        if check(status):
            return status
        assert time.monotonic() < deadline, f"never {what}: {status}"
        time.sleep(0.2)


@pytest.fixture
def tier_broker(
    workdir: Path, broker: tuple[Process, str], credentials: dict[str, str]
) -> Iterator[str]:
    """The session broker's command with its own store, 1 MiB files and a tier at a closed
    port, on the session broker's endpoint; the session broker is back afterwards."""
    session, endpoint = broker
    home = workdir / "tier-broker"
    home.mkdir(exist_ok=True)
    (home / "credentials").write_text(
        "[default]\naws_access_key_id = gannet\naws_secret_access_key = not-checked\n"
    )
    command = list(session.command)
    command[command.index("--data-dir") + 1] = str(home / "store")
    command[command.index("--file-size-mb") + 1] = "1"
    command += [
        "--tier-endpoint",
        f"http://127.0.0.1:{free_port()}",  # nothing listens: connection refused
        "--tier-bucket",
        "gannet",
        "--tier-prefix",
        f"gannet/{NAMESPACE}/{CLUSTER}/broker-0",
        "--tier-credentials-file",
        str(home / "credentials"),
        "--tier-offload-after-s",
        "0",
        "--tier-pass-interval-s",
        "0.2",
    ]
    tier = Process(command, home / "broker.log", session.ready_url, session.env)
    session.stop()
    try:
        tier.start()
        try:
            yield endpoint
        finally:
            tier.stop()
    finally:
        session.start()


def _cluster_passes(operator: Process) -> float:
    """GannetCluster reconcile passes the operator has counted (its own /metrics)."""
    listen = operator.command[operator.command.index("--metrics-listen") + 1]
    with urllib.request.urlopen(f"http://{listen}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    pattern = r'^gannet_operator_reconciliations_total\{[^}]*kind="GannetCluster"[^}]*\} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.MULTILINE))


def _warnings(admin: Kubectl, reason: str) -> list[dict[str, Any]]:
    found = harness.events_for(admin, "GannetCluster", CLUSTER)
    return [e for e in found if e.get("type") == "Warning" and e.get("reason") == reason]


def test_tier_spec_reaches_the_brokers_and_a_failing_offload_is_one_warning(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    tier_broker: str,
    credentials: dict[str, str],
) -> None:
    endpoint = tier_broker
    created = _cli(endpoint, credentials, "topic", "create", TOPIC, "--queues", "1")
    assert created.returncode == 0, created.stderr
    sent = _cli(
        endpoint, credentials, "message", "send", TOPIC, "x" * BODY_CHARS, "--count", str(BODIES)
    )
    assert sent.returncode == 0, sent.stderr
    failing = _await_status(
        endpoint,
        credentials,
        "offload failing",
        lambda s: s["offload"]["failing_reason"] == "unavailable",
    )
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tier-s3", "namespace": NAMESPACE},
        "stringData": {"aws": "[default]\naws_access_key_id = a\naws_secret_access_key = b\n"},
    }
    spec = {
        "replicas": 1,
        "storage": {"type": "ephemeral"},
        "tier": {
            "endpoint": "http://s3.storage.svc:8333",
            "bucket": "gannet",
            "credentialsSecret": {"name": "tier-s3", "key": "aws"},
            "offloadAfterSeconds": 0,
            "passIntervalSeconds": 0.2,
        },
    }
    admin.apply(secret, harness.resource("GannetCluster", CLUSTER, spec))
    try:
        stored = harness.get(plane, "GannetCluster", CLUSTER)
        assert stored is not None
        assert stored["spec"]["tier"]["offloadDiskRatio"] == 0.7  # the CRD's default
        sts = harness.watch_for(
            plane, f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets", CLUSTER, bool
        )
        assert sts is not None
        pod = sts["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        given = {
            args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--tier-")
        }
        assert given["--tier-endpoint"] == "http://s3.storage.svc:8333"
        assert given["--tier-bucket"] == "gannet"
        assert given["--tier-prefix"] == f"gannet/{NAMESPACE}/{CLUSTER}/broker-0"
        assert given["--tier-offload-after-s"] == "0"
        assert given["--tier-credentials-file"] == "/etc/gannet/tier/credentials"
        (volume,) = [v for v in pod["volumes"] if v["name"] == "tier-credentials"]
        assert volume["secret"]["secretName"] == "tier-s3"
        assert volume["secret"]["items"] == [{"key": "aws", "path": "credentials"}]
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["tier-credentials"] == "/etc/gannet/tier"

        found = harness.wait_for(
            plane,
            "GannetCluster",
            CLUSTER,
            lambda o: (
                (harness.condition(o, "TierOffload") or {}).get("reason") == "TierOffloadFailing"
            ),
        )
        condition = harness.condition(found, "TierOffload")
        assert condition is not None
        assert condition["status"] == "False"
        assert "broker-0: unavailable" in condition["message"]
        assert found is not None
        (row,) = found["status"]["tier"]["groups"]
        assert (row["brokerName"], row["failingReason"], row["objects"]) == (
            "broker-0",
            "unavailable",
            0,
        )
        deadline = time.monotonic() + WAIT_S
        while not _warnings(admin, "TierOffloadFailing"):
            assert time.monotonic() < deadline, "no TierOffloadFailing Event"
            time.sleep(0.2)
        # The broker keeps failing; the operator keeps polling it (a pass every 2 s per
        # cluster): after several more GannetCluster passes, still one Event.
        seen = _cluster_passes(running_operator)
        deadline = time.monotonic() + WAIT_S
        while _cluster_passes(running_operator) < seen + MORE_PASSES:
            assert time.monotonic() < deadline, "the operator stopped reconciling"
            time.sleep(0.2)
        status = _tier_status(endpoint, credentials)
        assert status["offload"]["failing_reason"] == "unavailable"
        assert (
            status["offload"]["failures"]["unavailable"]
            > failing["offload"]["failures"]["unavailable"]
        )
        (event,) = _warnings(admin, "TierOffloadFailing")
        assert "unavailable" in event["message"]
        assert not _warnings(admin, "TierCredentialsRejected")
    finally:
        admin.run("delete", "gannetcluster", CLUSTER, "-n", NAMESPACE, "--wait=false")
        admin.run("delete", "secret", "tier-s3", "-n", NAMESPACE, "--wait=false")
