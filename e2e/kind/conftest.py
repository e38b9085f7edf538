"""Session fixtures of make e2e-kind: a kind cluster, the chart installed with helm, the
examples applied with kubectl, a client pod. Runs inside the e2e's network namespace
(``python -m e2e.kind.run`` starts pytest there after building the images).

Teardown: ``kind delete cluster`` runs in the session fixture's finalizer, after a failure too;
the engine and the namespace are stopped by :mod:`e2e.kind.run` around the whole session.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import helm_python
import pytest

from e2e.kind import cluster
from e2e.kube.harness import Kubectl

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gannet"
EXAMPLES = REPO / "deploy" / "examples"
RELEASE = "gannet"
# A short refresh so status figures move quickly; the rest are the chart's defaults.
HELM_VALUES: dict[str, object] = {"operator": {"refreshIntervalSeconds": 2}}
READY_S_MAX = 300


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kind")


@pytest.fixture(scope="session")
def kube(workdir: Path) -> Iterator[Kubectl]:
    node = os.environ.get("GANNET_KIND_NODE_IMAGE")
    if not node:
        pytest.skip("run through `make e2e-kind` (python -m e2e.kind.run): it builds the images")
    nodes = int(os.environ.get("GANNET_KIND_NODES", "1"))
    with cluster.created(node, workdir / "kubeconfig", (cluster.IMAGE,), nodes=nodes) as kubectl:
        yield kubectl


def helm(kubectl: Kubectl) -> helm_python.Config:
    return helm_python.Config(kubeconfig_path=kubectl.kubeconfig, namespace=cluster.NAMESPACE)


@pytest.fixture(scope="session")
def release(kube: Kubectl) -> float:
    """``helm install`` of the chart; returns the seconds until the operator was Ready."""
    started = time.monotonic()
    config = helm(kube)
    chart = helm_python.Chart.load(CHART)
    try:
        config.install(
            chart, RELEASE, HELM_VALUES, namespace=cluster.NAMESPACE, create_namespace=True
        )
    finally:
        chart.close()
        config.close()
    kube.run(
        "-n",
        cluster.NAMESPACE,
        "rollout",
        "status",
        f"deployment/{RELEASE}-gannet-operator",
        f"--timeout={READY_S_MAX}s",
    )
    return time.monotonic() - started


@pytest.fixture(scope="session")
def examples(kube: Kubectl, release: float) -> float:
    """deploy/examples applied with kubectl; returns the seconds until all three were Ready."""
    started = time.monotonic()
    kube.run("apply", "-f", str(EXAMPLES / "gannetcluster.yaml"))
    wait = ["-n", cluster.NAMESPACE, "wait", "--for=condition=Ready", f"--timeout={READY_S_MAX}s"]
    kube.run(*wait, "gannetcluster/main")
    kube.run(
        "apply", "-f", str(EXAMPLES / "topic.yaml"), "-f", str(EXAMPLES / "consumergroup.yaml")
    )
    kube.run(*wait, "topic/orders", "consumergroup/billing")
    return time.monotonic() - started


@pytest.fixture(scope="session")
def client(kube: Kubectl, examples: float) -> Kubectl:
    cluster.client_pod(kube)
    return kube
