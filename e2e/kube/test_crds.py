"""The CRDs as the real kube-apiserver serves them: every invalid spec of
tests/operator/data/bad-resources.yaml is refused with a message naming the field, and every
kind's printer columns show in ``kubectl get`` with the values the operator wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kube import harness
from e2e.kube.control_plane import ControlPlane
from e2e.kube.harness import NAMESPACE, Kubectl, Process, ready, resource, wait_for

ROOT = Path(__file__).resolve().parents[2]
BAD = [
    d
    for d in yaml.safe_load_all((ROOT / "tests/operator/data/bad-resources.yaml").read_text())
    if d
]
CRDS = {
    crd["spec"]["names"]["kind"]: crd
    for path in sorted((ROOT / "charts/gannet/crds").glob("*.yaml"))
    for crd in [yaml.safe_load(path.read_text())]
}
# The field each bad document gets wrong, as the server's message must name it.
FIELD = {
    "negative": "spec.queues",
    "unknown-type": "spec.messageType",
    "too-many": "spec.queues",
    "no-cluster": "spec.cluster",
    "typo": "spec.queue",
    "bad-perm": "spec.permission",
    "zero": "spec.maxDeliveryAttempts",
    "fifo-text": "spec.fifo",
    "ten": "spec.replicas",
    "revive": "spec.pop.reviveQueueCount",
    "cron": "spec.cleanup.schedule",
    "ratio": "spec.cleanup.diskWarningRatio",
    "reserved": "spec.cleanup.fileReservedHours",
    "storage": "spec.storage.type",
    "flush": "spec.flushMode",
    "size": "spec.storage.size",
    "issuer-kind": "spec.security.tls.certManager.issuerRef.kind",
    "secret-name": "spec.security.auth.credentialsSecret",
    "issuer-name": "spec.security.peerTls.certManager.issuerRef.name",
    "auth-no-secret": "spec.security.auth",
    "tls-no-source": "spec.security.tls",
    "tls-two-sources": "spec.security.peerTls",
    "no-groups": "spec.brokerGroups",
    "negative-retention": "spec.tier.remoteRetentionSeconds",
    "tier-no-secret": "spec.tier.credentialsSecret",
    "tier-bad-bucket": "spec.tier.bucket",
    "tier-bad-prefix": "spec.tier.prefix",
    "tier-bad-ratio": "spec.tier.offloadDiskRatio",
    "tier-bad-endpoint": "spec.tier.endpoint",
}


def test_every_bad_document_has_its_field() -> None:
    assert sorted(FIELD) == sorted(d["metadata"]["name"] for d in BAD)


@pytest.mark.parametrize("document", BAD, ids=lambda d: d["metadata"]["name"])
def test_invalid_spec_is_refused_naming_the_field(
    admin: Kubectl, release: dict[str, Any], document: dict[str, Any]
) -> None:
    bad = json.loads(json.dumps(document))
    bad["metadata"]["namespace"] = NAMESPACE
    bad["metadata"]["name"] = f"bad-{bad['metadata']['name']}"
    refused = admin.apply(bad, check=False)
    assert refused.returncode != 0, f"accepted: {document}"
    field = FIELD[document["metadata"]["name"]]
    assert field in refused.stderr, refused.stderr
    assert "is invalid" in refused.stderr or "unknown field" in refused.stderr, refused.stderr


def _table(admin: Kubectl, plural: str, name: str) -> dict[str, str]:
    """``kubectl get -o wide``: column header -> the object's cell."""
    lines = admin.run("get", plural, name, "-n", NAMESPACE, "-o", "wide").stdout.splitlines()
    header, row = lines[0], lines[1]
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    cells = {}
    for at, start in enumerate(starts):
        end = starts[at + 1] if at + 1 < len(starts) else None
        cells[header[start:end].strip()] = row[start:end].strip()
    return cells


def _columns(kind: str) -> list[str]:
    version = CRDS[kind]["spec"]["versions"][0]
    return ["NAME"] + [c["name"].upper() for c in version["additionalPrinterColumns"]]


def test_printer_columns_of_every_kind(
    plane: ControlPlane, admin: Kubectl, running_operator: Process
) -> None:
    admin.apply(
        resource("GannetCluster", "columns", {"replicas": 1, "cleanup": {"schedule": "0 4 * * *"}}),
        resource("Topic", "columns", {"cluster": "columns", "queues": 3, "messageType": "DELAY"}),
        resource("ConsumerGroup", "columns", {"cluster": "columns", "fifo": True}),
    )
    topic = wait_for(plane, "Topic", "columns", ready)
    group = wait_for(plane, "ConsumerGroup", "columns", ready)
    cluster = wait_for(
        plane, "GannetCluster", "columns", lambda o: "cleanup" in ((o or {}).get("status") or {})
    )
    assert topic is not None
    assert group is not None
    assert cluster is not None

    cells = _table(admin, "topics", "columns")
    assert list(cells) == _columns("Topic")
    assert {k: cells[k] for k in ("CLUSTER", "TOPIC", "QUEUES", "TYPE", "READY", "REASON")} == {
        "CLUSTER": "columns",
        "TOPIC": "columns",
        "QUEUES": "3",
        "TYPE": "DELAY",
        "READY": "True",
        "REASON": "Reconciled",
    }
    cells = _table(admin, "consumergroups", "columns")
    assert list(cells) == _columns("ConsumerGroup")
    assert {k: cells[k] for k in ("CLUSTER", "GROUP", "FIFO", "LAG", "READY")} == {
        "CLUSTER": "columns",
        "GROUP": "columns",
        "FIFO": "true",
        "LAG": "0",
        "READY": "True",
    }
    cells = _table(admin, "gannetclusters", "columns")
    assert list(cells) == _columns("GannetCluster")
    assert cells["REPLICAS"] == "1"
    assert cells["READY-REPLICAS"] == "0"
    assert cells["READY"] == "False"  # no kubelet: the broker pod never runs
    assert cells["NEXT-CLEANUP"] == cluster["status"]["cleanup"]["nextRunTime"]
    # The short names of the CRDs work too.
    for kind, crd in CRDS.items():
        for short in crd["spec"]["names"].get("shortNames") or ():
            listed = admin.run("get", short, "-n", NAMESPACE, "-o", "name").stdout
            assert "/columns" in listed, (kind, short, listed)
    for plural in ("topics", "consumergroups", "gannetclusters"):
        admin.run("delete", plural, "columns", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    assert harness.get(plane, "Topic", "columns") is None
