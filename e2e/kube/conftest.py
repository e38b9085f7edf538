"""Session fixtures of the e2e-kube suite: a real control plane, the chart installed with helm,
a broker process and the operator process under the chart's ServiceAccount.

Order of a session (``make e2e-kube``; about a minute before the first test on a warm cache):

1. etcd, kube-apiserver and kube-controller-manager start on 127.0.0.1
   (:mod:`e2e.kube.control_plane`); a missing binary skips the suite with a message naming
   it and the command that builds it.
2. ``helm install gannet charts/gannet -n gannet --create-namespace`` (the Helm SDK of
   helm-python-sdk, the admin kubeconfig): CRDs, RBAC, ServiceAccount, the admin key Secret,
   the operator Deployment (whose Pod never runs: there is no kubelet).
3. A token of the chart's ServiceAccount from the TokenRequest API (``kubectl create token``)
   goes into the operator's kubeconfig: the operator gets exactly the RBAC the chart grants.
4. A ``gannet broker run`` requiring signed requests with the Secret's ``admin.json``, and
   ``gannet operator run`` with the Deployment's own arguments and the Secret's admin key,
   plus ``--broker-endpoint`` (brokers run outside the cluster).

Logs and the audit log stay in ``$GANNET_KUBE_WORKDIR`` when set, else in pytest's temp dir.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import helm_python
import pytest

from e2e.kube import control_plane, harness, tools
from e2e.kube.control_plane import ControlPlane
from e2e.kube.harness import NAMESPACE, Kubectl, Process

CHART = Path(__file__).resolve().parents[2] / "charts" / "gannet"
RELEASE = "gannet"
# Values a user would set for a small test install: a short refresh so figures move quickly.
HELM_VALUES = {"operator": {"refreshIntervalSeconds": 2}}


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("GANNET_KUBE_WORKDIR")
    if chosen:
        path = Path(chosen)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("kube")


@pytest.fixture(scope="session")
def plane(workdir: Path) -> Iterator[ControlPlane]:
    problems = tools.missing()
    if problems:
        pytest.skip("e2e-kube needs its pinned tools: " + "; ".join(problems))
    with control_plane.running(workdir / "control-plane") as started:
        yield started


@pytest.fixture(scope="session")
def admin(plane: ControlPlane) -> Kubectl:
    return Kubectl(plane.admin_kubeconfig)


@pytest.fixture(scope="session")
def release(admin: Kubectl) -> dict[str, object]:
    """``helm install`` of the chart; returns the operator Deployment as installed."""
    config = helm_python.Config(kubeconfig_path=admin.kubeconfig, namespace=NAMESPACE)
    chart = helm_python.Chart.load(CHART)
    try:
        config.install(chart, RELEASE, HELM_VALUES, namespace=NAMESPACE, create_namespace=True)
    finally:
        chart.close()
        config.close()
    deployment: dict[str, object] = admin.json(
        "get", "deployment", "-n", NAMESPACE, f"{RELEASE}-gannet-operator"
    )
    return deployment


@pytest.fixture(scope="session")
def operator_kubeconfig(
    plane: ControlPlane, admin: Kubectl, release: dict[str, object], workdir: Path
) -> Path:
    """A kubeconfig with a token of the chart's ServiceAccount (TokenRequest API)."""
    pod_spec = release["spec"]["template"]["spec"]  # type: ignore[index]
    account = pod_spec["serviceAccountName"]
    token = admin.run("create", "token", account, "-n", NAMESPACE, "--duration=6h").stdout.strip()
    return control_plane.write_kubeconfig(
        workdir / "operator.kubeconfig",
        plane.server,
        plane.pki.ca,
        user={"token": token},
        namespace=NAMESPACE,
    )


@pytest.fixture(scope="session")
def admin_secret(admin: Kubectl, release: dict[str, object]) -> dict[str, str]:
    found = admin.json("get", "secret", "-n", NAMESPACE, f"{RELEASE}-gannet-admin")
    return {key: base64.b64decode(value).decode() for key, value in found["data"].items()}


@pytest.fixture(scope="session")
def credentials(admin_secret: dict[str, str]) -> dict[str, str]:
    """The operator's admin key as the chart's Deployment passes it (environment)."""
    return {
        "GANNET_ACCESS_KEY": admin_secret["accessKey"],
        "GANNET_SECRET_KEY": admin_secret["secretKey"],
    }


@pytest.fixture(scope="session")
def broker(workdir: Path, admin_secret: dict[str, str]) -> Iterator[tuple[Process, str]]:
    """A broker process that requires the chart's admin key; yields it and its endpoint."""
    home = workdir / "broker"
    home.mkdir(exist_ok=True)
    auth = home / "admin.json"
    auth.write_text(admin_secret["admin.json"])
    process, endpoint = harness.broker_process(home, auth)
    with harness.started(process):
        yield process, endpoint


@pytest.fixture(scope="session")
def operator(
    workdir: Path,
    release: dict[str, object],
    operator_kubeconfig: Path,
    broker: tuple[Process, str],
    credentials: dict[str, str],
) -> Iterator[Process]:
    """The operator as a local process; tests may stop and start it (it is started again
    before the next test if one left it stopped)."""
    process = harness.operator_process(
        workdir,
        harness.operator_args(release),
        kubeconfig=operator_kubeconfig,
        broker=broker[1],
        credentials=credentials,
    )
    with harness.started(process):
        yield process


@pytest.fixture
def running_operator(operator: Process, broker: tuple[Process, str]) -> Process:
    """The session's operator, running, and its broker answering (a test may have stopped
    either)."""
    if operator.running is None:
        operator.start()
    broker_process = broker[0]
    if broker_process.running is None:
        broker_process.start()
    return operator
