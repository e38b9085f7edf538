"""The kind cluster of make e2e-kind and what the tests drive on it: kubectl, helm, client load.

Everything here runs inside the e2e's network namespace (:mod:`e2e.kind.run` starts pytest
there): the cluster's API server listens on the namespace's loopback, pods and Services have
addresses that exist only inside it.

- :func:`created`: ``kind create cluster`` from the locally built node image, CoreDNS switched to
  the offline Corefile (``files/coredns.yaml``), ``kind load`` of the Gannet image; ``kind delete
  cluster`` on exit, also after a failure.
- :class:`Load`: the official Python client producing from the ``e2e-client`` pod
  (``kubectl exec -i … load.py produce``), every answer recorded as it arrives, so tests await
  "n more acknowledged sends" instead of sleeping.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from e2e.kind import engine, pod_network, tools
from e2e.kube.harness import Kubectl

NAME = "gannet-e2e"
NAMESPACE = "gannet"
IMAGE = "ghcr.io/gannet/gannet:0.1.0"  # the chart's and the examples' image: no pull happens
CLIENT_POD = "e2e-client"
CLIENT_SERVICE = f"main-client.{NAMESPACE}.svc.cluster.local:8081"
LOAD_SCRIPT = Path(__file__).resolve().parent / "load.py"
KUBECTL_S_MAX = 660  # above every `kubectl wait --timeout` the tests pass


class Kube(Kubectl):
    """kubectl with room for ``kubectl wait --timeout=300s`` (the e2e-kube harness allows 120 s)."""

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(tools.cache_dir() / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=KUBECTL_S_MAX,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}{done.stdout}")
        return done


def kind(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools.aux_binary("kind")), *args],
        env=engine.environment(),
        check=True,
        text=True,
        **kwargs,
    )


@contextlib.contextmanager
def created(
    node_image: str, kubeconfig: Path, images: tuple[str, ...], *, nodes: int = 1
) -> Iterator[Kubectl]:
    """One node (``files/cluster.yaml``), or a control plane and two workers (``nodes`` 3,
    ``files/cluster-3.yaml``, connected by :mod:`e2e.kind.pod_network`)."""
    if nodes not in (1, 3):
        raise ValueError(f"GANNET_KIND_NODES is {nodes}; use 1 or 3")
    started = time.monotonic()
    kind("delete", "cluster", "--name", NAME)  # a leftover of a killed run
    try:
        kind(
            "create",
            "cluster",
            "--name",
            NAME,
            "--image",
            node_image,
            "--config",
            str(tools.FILES / ("cluster.yaml" if nodes == 1 else f"cluster-{nodes}.yaml")),
            "--kubeconfig",
            str(kubeconfig),
            "--wait",
            "180s",
        )
        kubectl = Kube(kubeconfig)
        if nodes > 1:
            cidrs = pod_network.connect(kubectl)
            print(f"e2e-kind: pod network (host-gw) {cidrs}", flush=True)
        kubectl.run("apply", "-f", str(tools.FILES / "coredns.yaml"))
        kubectl.run("-n", "kube-system", "rollout", "restart", "deployment/coredns")
        kubectl.run(
            "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=180s"
        )
        for image in images:
            kind("load", "docker-image", image, "--name", NAME)
        print(f"e2e-kind: cluster ready in {time.monotonic() - started:.0f} s", flush=True)
        yield kubectl
    finally:
        kind("delete", "cluster", "--name", NAME)


def client_pod(kubectl: Kubectl) -> None:
    """A pod of the Gannet image that sleeps, with load.py mounted: the tests exec the client."""
    kubectl.run("-n", NAMESPACE, "create", "configmap", "e2e-load", f"--from-file={LOAD_SCRIPT}")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": CLIENT_POD, "namespace": NAMESPACE},
        "spec": {
            "containers": [
                {
                    "name": "client",
                    "image": IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-c", "import time; time.sleep(10**9)"],
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                    "volumeMounts": [{"name": "load", "mountPath": "/load"}],
                }
            ],
            "volumes": [{"name": "load", "configMap": {"name": "e2e-load"}}],
            "terminationGracePeriodSeconds": 1,
        },
    }
    kubectl.apply(pod)
    kubectl.run(
        "-n", NAMESPACE, "wait", f"pod/{CLIENT_POD}", "--for=condition=Ready", "--timeout=120s"
    )


def exec_args(kubectl: Kubectl, *args: str) -> list[str]:
    return [
        str(tools.cache_dir() / "kubectl"),
        f"--kubeconfig={kubectl.kubeconfig}",
        "-n",
        NAMESPACE,
        "exec",
        "-i",
        CLIENT_POD,
        "--",
        "python",
        "/load/load.py",
        *args,
    ]


@dataclasses.dataclass(frozen=True, slots=True)
class Ack:
    key: str
    began: float
    answered: float


class Load:
    """One official Producer in the client pod sending until :meth:`stop`; acks as they come."""

    def __init__(self, kubectl: Kubectl, topic: str, prefix: str) -> None:
        self.prefix = prefix
        self.acks: list[Ack] = []
        self.failures: list[dict[str, Any]] = []
        self.done: int | None = None
        self.progress = threading.Condition()
        command = exec_args(kubectl, "produce", "--endpoint", CLIENT_SERVICE, "--topic", topic)
        self.process = subprocess.Popen(
            [*command, "--prefix", prefix],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self.reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            with self.progress:
                if "ack" in record:
                    self.acks.append(Ack(record["ack"], record["t0"], record["t1"]))
                elif "fail" in record:
                    self.failures.append(record)
                elif "done" in record:
                    self.done = int(record["done"])
                self.progress.notify_all()
        with self.progress:
            self.progress.notify_all()

    def wait_acks(self, count: int, *, after: float = 0.0, timeout_s: float = 120.0) -> None:
        """Until ``count`` sends answered after wall time ``after`` were acknowledged."""

        def enough() -> bool:
            return sum(1 for ack in self.acks if ack.answered > after) >= count

        with self.progress:
            if not self.progress.wait_for(
                lambda: enough() or not self.reader.is_alive(), timeout=timeout_s
            ):
                raise AssertionError(
                    f"{count} acks after {after} not seen in {timeout_s} s "
                    f"({len(self.acks)} acks, {len(self.failures)} failures so far)"
                )
            if not enough():
                raise AssertionError(f"the producer ended: {self.failures[-5:]}")

    def outage_s(self, at: float) -> float:
        """The client's longest outage since a fault at wall time ``at``: the longest time
        between two consecutive acknowledged answers, the later one after ``at`` (a pod
        terminating gracefully keeps serving for a while: the gap can come well after ``at``)."""
        with self.progress:
            answered = sorted(ack.answered for ack in self.acks)
        gaps = [b - a for a, b in itertools.pairwise(answered) if b > at]
        if not gaps:
            raise AssertionError("no acknowledged send after the fault")
        return max(gaps)

    def stop(self) -> list[Ack]:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.reader.join(timeout=10)
        return list(self.acks)


def consume(
    kubectl: Kubectl, topic: str, keys: list[str], group: str = "billing"
) -> dict[str, Any]:
    """Read ``group`` until every key came back (in the client pod); the consumer's figures."""
    command = exec_args(kubectl, "consume", "--endpoint", CLIENT_SERVICE, "--topic", topic)
    done = subprocess.run(
        [*command, "--group", group],
        input="".join(f"{key}\n" for key in keys),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    summary = [line for line in lines if "received" in line]
    if done.returncode != 0 or not summary:
        raise AssertionError(f"consumer failed ({done.returncode}): {done.stderr[-2000:]}")
    return dict(summary[-1])
