"""The operator's flows against a real kube-apiserver (``make e2e-kube``; fixtures in conftest).

Each test applies resources with kubectl as a user would, waits on watch streams for the
states the operator writes, and checks the broker process (signed admin calls) and the API
server's audit log. The tests share one session (control plane, chart, broker, operator) and
use resource names of their own.
"""

from __future__ import annotations

import datetime as dt
import signal
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from e2e.kube import harness
from e2e.kube.control_plane import ControlPlane
from e2e.kube.harness import NAMESPACE, Kubectl, Process, condition, ready, resource, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
FINALIZER = "gannet.io/finalizer"


def _operator_user(release: dict[str, Any]) -> str:
    account = release["spec"]["template"]["spec"]["serviceAccountName"]
    return f"system:serviceaccount:{NAMESPACE}:{account}"


def _refusals(plane: ControlPlane, user: str) -> list[str]:
    """The operator's requests the server refused: 403 (RBAC), 422 (schema), 5xx; in this
    module's namespace or cluster-wide. Another module's namespace is left out: the broker
    groups test deletes its namespace while the operator still reconciles there, and an event
    into a terminating namespace is refused with 403 whatever the RBAC."""
    return [
        f"{e['responseStatus'].get('code')} {e['verb']} {e['requestURI']}"
        for e in plane.audit()
        if e["user"]["username"] == user
        and (e["responseStatus"].get("code") in (403, 422) or e["responseStatus"]["code"] >= 500)
        and e.get("objectRef", {}).get("namespace") in (None, NAMESPACE)
    ]


def _topic_spec(queues: int) -> dict[str, Any]:
    return {"cluster": "main", "queues": queues}


@pytest.fixture(scope="module")
def examples(plane: ControlPlane, admin: Kubectl, operator: Process) -> dict[str, dict[str, Any]]:
    """deploy/examples applied with ``kubectl apply -f`` (not the secured cluster: it needs
    cert-manager); every resource reconciled."""
    for name in ("gannetcluster.yaml", "topic.yaml", "consumergroup.yaml"):
        admin.run("apply", "-f", str(EXAMPLES / name))
    found: dict[str, dict[str, Any]] = {}
    cluster = wait_for(plane, "GannetCluster", "main", _settings_applied)
    assert cluster is not None
    found["main"] = cluster
    for kind, name in (
        ("Topic", "orders"),
        ("Topic", "payments-fifo"),
        ("ConsumerGroup", "billing"),
    ):
        reconciled = wait_for(plane, kind, name, ready)
        assert reconciled is not None
        found[name] = reconciled
    return found


def _settings_applied(obj: dict[str, Any] | None) -> bool:
    found = condition(obj, "BrokerSettings")
    return (
        found is not None
        and found["status"] == "True"
        and (obj or {})["status"].get("observedGeneration") == (obj or {})["metadata"]["generation"]
    )


def test_examples_reconcile_with_status_on_the_real_server(
    plane: ControlPlane,
    admin: Kubectl,
    examples: dict[str, dict[str, Any]],
    broker: tuple[Process, str],
    credentials: dict[str, str],
    release: dict[str, Any],
) -> None:
    endpoint = broker[1]
    orders = examples["orders"]
    assert orders["status"]["topicName"] == "orders"
    assert orders["status"]["queues"] == 8
    assert FINALIZER in orders["metadata"]["finalizers"]
    # The status subresource: the operator's status writes leave the generation alone.
    assert orders["metadata"]["generation"] == 1
    assert harness.broker_topic(endpoint, credentials, "orders").queues == 8
    fifo = harness.broker_topic(endpoint, credentials, "Payments_FIFO")
    assert (fifo.queues, fifo.message_type) == (4, "FIFO")
    group = harness.broker_group(endpoint, credentials, "billing")
    # maxDeliveryAttempts 5: the first delivery and 4 retries.
    assert (group.retry_max_times, group.fifo) == (4, False)

    cluster = examples["main"]
    assert cluster["status"]["reviveQueues"]["active"] == 8
    assert cluster["status"]["replicas"] == 3
    # No kubelet: no pod ever gets ready, and Ready says so.
    assert condition(cluster, "Ready")["status"] == "False"  # type: ignore[index]
    sts = admin.json("get", "statefulset", "-n", NAMESPACE, "main")
    owner = sts["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "GannetCluster",
        "main",
        cluster["metadata"]["uid"],
    )
    assert sts["spec"]["replicas"] == 3
    # Each object the operator builds exists, owned by the GannetCluster (garbage collection).
    for kind, name in (
        ("configmap", "main-config"),
        ("service", "main-peers"),
        ("service", "main-client"),
        ("poddisruptionbudget", "main"),
    ):
        made = admin.json("get", kind, name, "-n", NAMESPACE)
        assert made["metadata"]["ownerReferences"][0]["uid"] == cluster["metadata"]["uid"]
    # The StatefulSet controller of kube-controller-manager made the first Pod (never runs).
    pod = harness.watch_for(plane, f"/api/v1/namespaces/{NAMESPACE}/pods", "main-0", bool)
    assert pod is not None
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    assert _refusals(plane, _operator_user(release)) == []


def test_topic_grows_and_a_shrink_is_refused(
    plane: ControlPlane,
    admin: Kubectl,
    examples: dict[str, dict[str, Any]],
    broker: tuple[Process, str],
    credentials: dict[str, str],
) -> None:
    admin.run(
        "patch",
        "topic",
        "orders",
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        '{"spec": {"queues": 12}}',
    )
    grown = wait_for(
        plane, "Topic", "orders", lambda o: ready(o) and (o or {})["status"]["queues"] == 12
    )
    assert grown is not None
    assert grown["metadata"]["generation"] == 2
    assert harness.broker_topic(broker[1], credentials, "orders").queues == 12
    admin.run(
        "patch", "topic", "orders", "-n", NAMESPACE, "--type=merge", "-p", '{"spec": {"queues": 4}}'
    )
    refused = wait_for(plane, "Topic", "orders", lambda o: ready(o, "False", "NotSupported"))
    assert "from 12 to 4 is not supported" in condition(refused, "Ready")["message"]  # type: ignore[index]
    assert harness.broker_topic(broker[1], credentials, "orders").queues == 12
    admin.run(
        "patch",
        "topic",
        "orders",
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        '{"spec": {"queues": 12}}',
    )
    assert wait_for(plane, "Topic", "orders", ready) is not None


def test_consumer_group_update_and_delete(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    broker: tuple[Process, str],
    credentials: dict[str, str],
) -> None:
    admin.apply(
        resource("ConsumerGroup", "auditors", {"cluster": "main", "maxDeliveryAttempts": 4})
    )
    assert wait_for(plane, "ConsumerGroup", "auditors", ready) is not None
    assert harness.broker_group(broker[1], credentials, "auditors").retry_max_times == 3
    admin.apply(
        resource("ConsumerGroup", "auditors", {"cluster": "main", "maxDeliveryAttempts": 2})
    )
    updated = wait_for(plane, "ConsumerGroup", "auditors", ready)
    assert updated is not None
    assert updated["metadata"]["generation"] == 2
    assert harness.broker_group(broker[1], credentials, "auditors").retry_max_times == 1
    assert updated["status"]["groupName"] == "auditors"
    admin.run("delete", "consumergroup", "auditors", "-n", NAMESPACE, "--wait=false")
    assert wait_for(plane, "ConsumerGroup", "auditors", lambda o: o is None) is None
    assert harness.broker_group(broker[1], credentials, "auditors") is None


def test_revive_queue_count_change_reaches_the_broker(
    plane: ControlPlane, admin: Kubectl, examples: dict[str, dict[str, Any]]
) -> None:
    admin.run(
        "patch",
        "gannetcluster",
        "main",
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        '{"spec": {"pop": {"reviveQueueCount": 2}}}',
    )
    changed = wait_for(
        plane,
        "GannetCluster",
        "main",
        lambda o: _settings_applied(o) and (o or {})["status"]["reviveQueues"]["active"] == 2,
    )
    assert changed is not None
    # The queues above the new count drain (none hold checkpoints here, so they may be gone).
    assert set(changed["status"]["reviveQueues"]["draining"]) <= set(range(2, 8))


def _next_0400(now: dt.datetime) -> dt.datetime:
    today = now.replace(hour=4, minute=0, second=0, microsecond=0)
    return today if today > now else today + dt.timedelta(days=1)


def test_cleanup_schedule_runs_once_when_due(
    plane: ControlPlane,
    examples: dict[str, dict[str, Any]],
    running_operator: Process,
) -> None:
    """The example's ``0 4 * * *`` is recorded as the next run; a run that fell due while the
    operator was down (nextRunTime in the past) runs once when it is back, then the next one is
    scheduled again."""
    cluster = examples["main"]
    recorded = dt.datetime.fromisoformat(cluster["status"]["cleanup"]["nextRunTime"])
    assert recorded == _next_0400(dt.datetime.now(dt.UTC))
    running_operator.stop()
    overdue = (recorded - dt.timedelta(days=1)).isoformat().replace("+00:00", "Z")
    plane.request(
        "PATCH",
        harness.path_of("GannetCluster", "main") + "/status",
        {"status": {"cleanup": {"nextRunTime": overdue}}},
    )
    running_operator.start()
    ran = wait_for(
        plane, "GannetCluster", "main", lambda o: "lastRunTime" in (o or {})["status"]["cleanup"]
    )
    assert ran is not None
    section = ran["status"]["cleanup"]
    assert section["lastRunBrokers"] == 3
    assert section["lastRunErrors"] == []
    assert dt.datetime.fromisoformat(section["nextRunTime"]) == _next_0400(dt.datetime.now(dt.UTC))


def test_deletion_waits_for_a_broker_that_is_down(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    broker: tuple[Process, str],
    credentials: dict[str, str],
) -> None:
    admin.apply(resource("Topic", "doomed", _topic_spec(2)))
    assert wait_for(plane, "Topic", "doomed", ready) is not None
    broker_process, endpoint = broker
    broker_process.stop()
    try:
        admin.run("delete", "topic", "doomed", "-n", NAMESPACE, "--wait=false")
        held = wait_for(
            plane,
            "Topic",
            "doomed",
            lambda o: o is not None and "deletionTimestamp" in o["metadata"],
        )
        assert held is not None
        assert held["metadata"]["finalizers"] == [FINALIZER]
        # The operator tried (and failed) to release it; the object stays while it cannot.
        assert harness.get(plane, "Topic", "doomed") is not None
    finally:
        broker_process.start()
    assert wait_for(plane, "Topic", "doomed", lambda o: o is None) is None
    assert harness.broker_topic(endpoint, credentials, "doomed") is None


def test_operator_killed_mid_reconcile_finishes_after_restart(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    broker: tuple[Process, str],
    credentials: dict[str, str],
    release: dict[str, Any],
) -> None:
    """The broker hangs (SIGSTOP) so the create is stuck in its admin call after the finalizer
    was written; the operator is SIGKILLed there and a new one finishes the job."""
    broker_process, endpoint = broker
    user = _operator_user(release)
    broker_process.pause()
    try:
        admin.apply(resource("Topic", "midway", _topic_spec(3)))
        started = wait_for(
            plane,
            "Topic",
            "midway",
            lambda o: FINALIZER in (o or {}).get("metadata", {}).get("finalizers", ()),
        )
        assert started is not None
        assert any(
            e["user"]["username"] == user and "/topics/midway" in e["requestURI"]
            for e in plane.audit()
        )
        running_operator.stop(signal.SIGKILL)
    finally:
        broker_process.resume()
    running_operator.start()
    done = wait_for(plane, "Topic", "midway", ready)
    assert done is not None
    assert done["metadata"]["finalizers"] == [FINALIZER]
    assert harness.broker_topic(endpoint, credentials, "midway").queues == 3


def test_stale_resource_version_is_a_conflict_and_the_operator_follows(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    broker: tuple[Process, str],
    credentials: dict[str, str],
) -> None:
    admin.apply(resource("Topic", "stale", _topic_spec(2)))
    first = wait_for(plane, "Topic", "stale", ready)
    assert first is not None
    admin.apply(resource("Topic", "stale", _topic_spec(3)))
    stale = dict(first)
    stale["spec"] = _topic_spec(5)
    with pytest.raises(urllib.error.HTTPError) as conflict:
        plane.request("PUT", harness.path_of("Topic", "stale"), stale)
    assert conflict.value.code == 409
    assert "the object has been modified" in conflict.value.read().decode()
    # A client that re-reads and retries wins (the operator's status writes move the
    # resourceVersion too, so a retry may meet another 409); the operator reconciles it.
    for _ in range(10):
        fresh = harness.get(plane, "Topic", "stale")
        assert fresh is not None
        assert fresh["spec"]["queues"] == 3
        fresh["spec"] = _topic_spec(5)
        try:
            plane.request("PUT", harness.path_of("Topic", "stale"), fresh)
            break
        except urllib.error.HTTPError as again:
            if again.code != 409:
                raise
    else:
        raise AssertionError("10 conflicts in a row")
    done = wait_for(plane, "Topic", "stale", lambda o: ready(o) and o["status"]["queues"] == 5)  # type: ignore[index]
    assert done is not None
    assert done["metadata"]["generation"] == 3
    assert harness.broker_topic(broker[1], credentials, "stale").queues == 5


def test_topic_delete_releases_it_on_the_broker(
    plane: ControlPlane,
    admin: Kubectl,
    examples: dict[str, dict[str, Any]],
    broker: tuple[Process, str],
    credentials: dict[str, str],
) -> None:
    admin.run("delete", "-f", str(EXAMPLES / "topic.yaml"), "--wait=true", "--timeout=60s")
    assert harness.get(plane, "Topic", "orders") is None
    assert harness.broker_topic(broker[1], credentials, "orders") is None
    assert harness.broker_topic(broker[1], credentials, "Payments_FIFO") is None


def test_cluster_delete_garbage_collects_what_it_owns(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
) -> None:
    admin.apply(resource("GannetCluster", "scratch", {"replicas": 1}))
    made = wait_for(plane, "GannetCluster", "scratch", _settings_applied)
    assert made is not None
    assert admin.run("get", "statefulset", "scratch", "-n", NAMESPACE, check=False).returncode == 0
    admin.run("scale", "gannetcluster", "scratch", "-n", NAMESPACE, "--replicas=2")
    # The scale subresource wrote spec.replicas and the operator took it up; the new member
    # joins through the group's membership calls (test_membership.py), which this lone
    # broker does not serve, so the Scaling condition says what it waits for.
    scaled = wait_for(
        plane,
        "GannetCluster",
        "scratch",
        lambda o: (
            (o or {}).get("status", {}).get("observedGeneration") == 2
            and (condition(o, "Scaling") or {}).get("observedGeneration") == 2
        ),
    )
    assert scaled is not None
    assert scaled["spec"]["replicas"] == 2
    admin.run("delete", "gannetcluster", "scratch", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    # The garbage collector of kube-controller-manager follows the owner references.
    statefulsets = f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets"
    assert harness.watch_for(plane, statefulsets, "scratch", lambda o: o is None) is None
