"""Three defects the real API server shows and KMock hid (issue 24): two GannetCluster passes
at once (409 on create in the audit log), no Kubernetes Events, and ``--verbose`` ignored."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python

from e2e.kube import harness
from e2e.kube.control_plane import ControlPlane
from e2e.kube.harness import NAMESPACE, Kubectl, Process, ready, resource, wait_for

EVENT_WAIT_S = 20.0


def _settings_applied(obj: dict[str, Any] | None) -> bool:
    found = harness.condition(obj, "BrokerSettings")
    return found is not None and found["status"] == "True"


def test_one_gannetcluster_pass_at_a_time_no_409(
    plane: ControlPlane, admin: Kubectl, running_operator: Process, release: dict[str, Any]
) -> None:
    """Creating a GannetCluster must not run its create handler and its refresh timer at once:
    two passes both create the StatefulSet, ConfigMap, PDB and Services, and one gets 409."""
    account = release["spec"]["template"]["spec"]["serviceAccountName"]
    user = f"system:serviceaccount:{NAMESPACE}:{account}"
    names = [f"solo-{i}" for i in range(3)]
    admin.apply(*(resource("GannetCluster", name, {"replicas": 1}) for name in names))
    for name in names:
        assert wait_for(plane, "GannetCluster", name, _settings_applied) is not None
    conflicts = [
        f"{e['verb']} {e['requestURI']}: {e['responseStatus'].get('message', '')}"
        for e in plane.audit()
        if e["user"]["username"] == user and e["responseStatus"].get("code") == 409
    ]
    for name in names:
        admin.run("delete", "gannetcluster", name, "-n", NAMESPACE, "--wait=false")
    assert conflicts == []


def _wait_event(
    plane: ControlPlane, name: str, predicate: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Events about object ``name`` until one satisfies ``predicate`` (watched, bounded)."""
    collection = f"/api/v1/namespaces/{NAMESPACE}/events"
    selector = f"fieldSelector=involvedObject.name%3D{name}"
    listed = plane.request("GET", f"{collection}?{selector}")
    seen: list[dict[str, Any]] = list(listed.get("items") or ())
    if any(predicate(e) for e in seen):
        return seen
    url = (
        f"{plane.server}{collection}?watch=true&{selector}"
        f"&resourceVersion={listed['metadata']['resourceVersion']}"
        f"&timeoutSeconds={int(EVENT_WAIT_S)}"
    )
    with urllib.request.urlopen(url, context=plane.ssl_context(), timeout=EVENT_WAIT_S + 5) as s:
        for line in s:
            event = json.loads(line)
            if event["type"] in ("ADDED", "MODIFIED"):
                seen.append(event["object"])
                if predicate(event["object"]):
                    return seen
    summary = [(e.get("type"), e.get("reason"), e.get("message")) for e in seen]
    raise AssertionError(f"no matching Event for {name} in {EVENT_WAIT_S} s; saw {summary}")


def test_events_are_posted_for_steps_refusals_and_failures(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    broker: tuple[Process, str],
) -> None:
    """``kubectl describe`` shows a Normal Event for a step, a Warning for a refused shrink and
    a Warning for a failure (broker down)."""
    admin.apply(resource("Topic", "evented", {"cluster": "main", "queues": 4}))
    try:
        assert wait_for(plane, "Topic", "evented", ready) is not None
        _wait_event(plane, "evented", lambda e: e.get("type") == "Normal")
        admin.apply(resource("Topic", "evented", {"cluster": "main", "queues": 2}))
        _wait_event(
            plane,
            "evented",
            lambda e: e.get("type") == "Warning" and "NotSupported" in json.dumps(e),
        )
        broker[0].stop()
        try:
            admin.apply(resource("Topic", "evented", {"cluster": "main", "queues": 6}))
            _wait_event(
                plane,
                "evented",
                lambda e: e.get("type") == "Warning" and "navailable" in json.dumps(e),
            )
        finally:
            broker[0].start()
        described = admin.run("describe", "topic", "evented", "-n", NAMESPACE).stdout
        assert "Warning" in described, described
        assert "Normal" in described, described
    finally:
        admin.run("delete", "topic", "evented", "-n", NAMESPACE, "--wait=false")


def test_verbose_operator_logs_at_debug(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    release: dict[str, Any],
    operator_kubeconfig: Path,
    broker: tuple[Process, str],
    credentials: dict[str, str],
    workdir: Path,
) -> None:
    """The chart's ``operator.verbose: true`` adds ``--verbose``; the operator then logs at
    DEBUG (its own loggers and kopf's)."""
    chart = helm_python.Chart.load(harness_chart())
    try:
        files = chart.render(
            {"operator": {"verbose": True}}, name="gannet", namespace=NAMESPACE, is_install=True
        )
    finally:
        chart.close()
    assert "- --verbose" in files["gannet/templates/operator-deployment.yaml"]
    running_operator.stop()
    verbose = harness.operator_process(
        workdir,
        [*harness.operator_args(release), "--verbose"],
        kubeconfig=operator_kubeconfig,
        broker=broker[1],
        credentials=credentials,
        log_name="operator-verbose.log",
    )
    try:
        with harness.started(verbose):
            admin.apply(resource("Topic", "chatty", {"cluster": "main", "queues": 1}))
            assert wait_for(plane, "Topic", "chatty", ready) is not None
            admin.run("delete", "topic", "chatty", "-n", NAMESPACE, "--wait=true")
            deadline = time.monotonic() + 5
            while " DEBUG " not in verbose.log.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)  # the log of another process: nothing to await
    finally:
        running_operator.start()
    debug = [line for line in verbose.log.read_text().splitlines() if " DEBUG " in line]
    assert debug, verbose.log.read_text()[-3000:]


def harness_chart() -> Path:
    return Path(__file__).resolve().parents[2] / "charts" / "gannet"
