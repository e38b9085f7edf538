"""The pieces the e2e-kube tests drive: kubectl and helm, watches, broker and operator processes.

Used by ``e2e/kube/conftest.py`` and the tests beside it. Everything goes to the real
kube-apiserver of :mod:`e2e.kube.control_plane`: resources are applied with kubectl as a user
would, states are awaited on watch streams (nothing polls a resource on a timer), and the
operator runs as ``gannet operator run`` under its ServiceAccount's token.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from e2e.kube import tools
from e2e.kube.control_plane import ControlPlane
from e2e.processes import free_port

NAMESPACE = "gannet"
GROUP_VERSION = "gannet.io/v1alpha1"
PLURALS = {"GannetCluster": "gannetclusters", "Topic": "topics", "ConsumerGroup": "consumergroups"}
WAIT_S = 60.0  # an upper bound only: a busy 2-core machine can be slow
START_TIMEOUT_S = 60.0


def gannet_command() -> list[str]:
    found = Path(sys.executable).parent / "gannet"
    return [str(found)] if found.exists() else [sys.executable, "-m", "gannet.node.cli"]


@dataclasses.dataclass
class Kubectl:
    """kubectl v1.34.4 (built by :mod:`e2e.kube.tools`) with a given kubeconfig."""

    kubeconfig: Path

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(tools.kube_binary("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}{done.stdout}")
        return done

    def apply(
        self, *objects: dict[str, Any], check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        text = "\n".join(json.dumps(obj) for obj in objects)
        return self.run("apply", "-f", "-", stdin=text, check=check)

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)


def resource(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE, **meta},
        "spec": spec,
    }


def path_of(kind: str, name: str | None = None, namespace: str = NAMESPACE) -> str:
    base = f"/apis/{GROUP_VERSION}/namespaces/{namespace}/{PLURALS[kind]}"
    return base if name is None else f"{base}/{name}"


def get(plane: ControlPlane, kind: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = plane.request("GET", path_of(kind, name))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return found


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for found in ((obj or {}).get("status") or {}).get("conditions") or ():
        if found.get("type") == kind:
            return dict(found)
    return None


def ready(obj: dict[str, Any] | None, status: str = "True", reason: str | None = None) -> bool:
    """Ready has ``status`` (and ``reason``) for the object's current generation."""
    found = condition(obj, "Ready")
    return (
        obj is not None
        and found is not None
        and found["status"] == status
        and (reason is None or found.get("reason") == reason)
        and (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
    )


def wait_for(
    plane: ControlPlane,
    kind: str,
    name: str,
    predicate: Callable[[dict[str, Any] | None], bool],
    *,
    timeout_s: float = WAIT_S,
) -> dict[str, Any] | None:
    """The first state of a gannet.io object (None: gone) that satisfies ``predicate``."""
    return watch_for(plane, path_of(kind), name, predicate, timeout_s=timeout_s)


def watch_for(
    plane: ControlPlane,
    collection: str,
    name: str,
    predicate: Callable[[dict[str, Any] | None], bool],
    *,
    timeout_s: float = WAIT_S,
) -> dict[str, Any] | None:
    """The first state of object ``name`` of a collection (an API path such as
    ``/apis/apps/v1/namespaces/gannet/statefulsets``; None: gone) that satisfies
    ``predicate``: a list, then a watch from the list's resourceVersion, so no change in
    between is missed; a watch that expires (410) lists again."""
    deadline = time.monotonic() + timeout_s
    selector = f"fieldSelector=metadata.name%3D{name}"
    last: dict[str, Any] | None = None
    while True:
        listed = plane.request("GET", f"{collection}?{selector}")
        items = listed.get("items") or []
        last = items[0] if items else None
        if predicate(last):
            return last
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"{name} in {collection} never matched; last state:\n{json.dumps(last)}"
            )
        version = listed["metadata"]["resourceVersion"]
        url = (
            f"{plane.server}{collection}?watch=true&{selector}&resourceVersion={version}"
            f"&timeoutSeconds={max(1, int(left))}"
        )
        try:
            with urllib.request.urlopen(
                url, context=plane.ssl_context(), timeout=left + 5
            ) as stream:
                for line in stream:
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # 410 Gone: list again, watch from there
                        break
                    last = None if event["type"] == "DELETED" else event["object"]
                    if predicate(last):
                        return last
        except TimeoutError:
            pass


def events_for(
    kubectl: Kubectl, kind: str, name: str, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    """Kubernetes Events about one object (core/v1, as ``kubectl describe`` shows them)."""
    found = kubectl.json(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.kind={kind},involvedObject.name={name}",
    )
    return list(found.get("items") or ())


@dataclasses.dataclass
class Process:
    """A local process (broker or operator) with its log file; restartable."""

    command: list[str]
    log: Path
    ready_url: str | None
    env: dict[str, str] | None = None
    running: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.running = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env
            )
        if self.ready_url is not None:
            self.wait_answers(self.ready_url)

    def wait_answers(self, url: str) -> None:
        """Poll the process's HTTP endpoint (another process: nothing to await)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self.running is not None
            if self.running.poll() is not None:
                raise RuntimeError(
                    f"{self.command[:3]} exited with {self.running.returncode}:\n"
                    + self.log.read_text()[-4000:]
                )
            try:
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if int(answer.status) == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer in {START_TIMEOUT_S} s")
            time.sleep(0.1)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.running is None:
            return
        if self.running.poll() is None:
            self.running.send_signal(sig)
            try:
                self.running.wait(20)
            except subprocess.TimeoutExpired:
                self.running.kill()
                self.running.wait()
        self.running = None

    def pause(self) -> None:
        assert self.running is not None
        self.running.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.running is not None
        self.running.send_signal(signal.SIGCONT)


def broker_process(workdir: Path, auth_file: Path) -> tuple[Process, str]:
    """A ``gannet broker run`` that requires signed requests (the chart's admin key)."""
    listen = f"127.0.0.1:{free_port()}"
    metrics_listen = f"127.0.0.1:{free_port()}"
    command = [
        *gannet_command(),
        "broker",
        "run",
        "--data-dir",
        str(workdir / "store"),
        "--listen",
        listen,
        "--metrics-listen",
        metrics_listen,
        "--auth-file",
        str(auth_file),
        "--flush",
        "async",
        "--file-size-mb",
        "16",
    ]
    return Process(command, workdir / "broker.log", f"http://{metrics_listen}/readyz"), listen


def operator_args(deployment: Any) -> list[str]:
    """The operator container's arguments in the chart's Deployment."""
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def operator_process(
    workdir: Path,
    args: list[str],
    *,
    kubeconfig: Path,
    broker: str,
    credentials: dict[str, str],
    log_name: str = "operator.log",
) -> Process:
    """``gannet operator run`` with the chart Deployment's arguments, its metrics port moved to
    a free local one, every admin call sent to ``broker``, under ``kubeconfig``."""
    metrics_listen = f"127.0.0.1:{free_port()}"
    rest = list(args)
    if "--metrics-listen" in rest:
        at = rest.index("--metrics-listen")
        rest[at + 1] = metrics_listen
    else:
        rest += ["--metrics-listen", metrics_listen]
    env = {k: v for k, v in os.environ.items() if k not in {"KUBERNETES_SERVICE_HOST"}}
    env.update(credentials)
    env["KUBECONFIG"] = str(kubeconfig)
    env["PYTHONUNBUFFERED"] = "1"
    command = [*gannet_command(), *rest, "--broker-endpoint", broker]
    return Process(command, workdir / log_name, f"http://{metrics_listen}/healthz", env)


@contextlib.contextmanager
def started(process: Process) -> Iterator[Process]:
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _on_broker(endpoint: str, credentials: dict[str, str], call: str, name: str) -> Any:
    import asyncio  # noqa: PLC0415

    from gannet.operator.brokers import Brokers, Security  # noqa: PLC0415

    async def ask() -> Any:
        security = Security(
            access_key=credentials["GANNET_ACCESS_KEY"],
            secret_key=credentials["GANNET_SECRET_KEY"],
        )
        client = Brokers(timeout_s=10, security=security)
        try:
            found = await getattr(client, call)(endpoint, name)
        finally:
            await client.close()
        return None if found is None else found[0]

    return asyncio.run(ask())


def broker_topic(endpoint: str, credentials: dict[str, str], name: str) -> Any:
    """The topic as the broker has it (signed admin call), or None."""
    return _on_broker(endpoint, credentials, "describe_topic", name)


def broker_group(endpoint: str, credentials: dict[str, str], name: str) -> Any:
    """The consumer group as the broker has it (signed admin call), or None."""
    return _on_broker(endpoint, credentials, "describe_group", name)
