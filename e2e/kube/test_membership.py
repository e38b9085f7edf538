"""GannetCluster membership changes on the real kube-apiserver (``make e2e-kube``).

What is real here: kube-apiserver and etcd, kube-controller-manager (its StatefulSet controller
creates and deletes the pods and claims, its garbage collector and claim protection act), the
chart's RBAC (the operator runs under the chart's ServiceAccount token) and the operator process
(``gannet operator run``). What is played: there is no kubelet, so a thread of this test marks
each new pod ``Running`` (:class:`Kubelet`), and no broker runs in those pods, so the Raft
group's admin API is :class:`tests.operator.fake_admin.FakeAdmin` (a gRPC server in this
process, following the membership contract and recording the calls in order). The broker side
of the same flows runs with real processes in the broker's own e2e tests.

The session's operator is stopped for this test; one that watches only :data:`MEMBERS_NS` and
sends every admin call to the fake takes its place, and the session's comes back afterwards.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from e2e.kube import harness
from e2e.kube.control_plane import ControlPlane
from e2e.kube.harness import Kubectl, Process, condition
from tests.operator import fake_admin

MEMBERS_NS = "gannet-members"
CLUSTER = "grow"
PODS = f"/api/v1/namespaces/{MEMBERS_NS}/pods"
CLAIMS = f"/api/v1/namespaces/{MEMBERS_NS}/persistentvolumeclaims"


class Kubelet:
    """Marks every pod of :data:`MEMBERS_NS` (or of the collection ``pods``) ``Running`` when it
    appears (no kubelet runs)."""

    def __init__(self, plane: ControlPlane, pods: str = PODS) -> None:
        self.plane = plane
        self.pods = pods  # the pods collection (another namespace's for other tests)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="kubelet", daemon=True)
        self.marked: list[str] = []

    def _mark(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") == "Running" or meta.get("deletionTimestamp"):
            return
        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        with contextlib.suppress(urllib.error.HTTPError):  # gone meanwhile
            self.plane.request("PATCH", f"{self.pods}/{meta['name']}/status", {"status": status})
            self.marked.append(str(meta["name"]))

    def _run(self) -> None:
        while not self.stopping.is_set():
            listed = self.plane.request("GET", self.pods)
            for pod in listed.get("items") or ():
                self._mark(pod)
            version = listed["metadata"]["resourceVersion"]
            query = f"watch=true&resourceVersion={version}&timeoutSeconds=2"
            url = f"{self.plane.server}{self.pods}?{query}"
            context = self.plane.ssl_context()
            with (
                contextlib.suppress(TimeoutError, urllib.error.URLError),
                urllib.request.urlopen(url, context=context, timeout=10) as stream,
            ):
                for line in stream:
                    event = json.loads(line)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._mark(event["object"])

    @contextlib.contextmanager
    def running(self) -> Iterator[Kubelet]:
        self.thread.start()
        try:
            yield self
        finally:
            self.stopping.set()
            self.thread.join(15)


def _cluster(plane: ControlPlane, predicate: Callable[[dict[str, Any] | None], bool]) -> Any:
    collection = harness.path_of("GannetCluster", namespace=MEMBERS_NS)
    return harness.watch_for(plane, collection, CLUSTER, predicate, timeout_s=120)


def _settled(generation: int, size: int) -> Callable[[dict[str, Any] | None], bool]:
    def check(obj: dict[str, Any] | None) -> bool:
        status = (obj or {}).get("status") or {}
        rows = status.get("members") or ()
        return (
            status.get("observedGeneration") == generation
            and (condition(obj, "Scaling") or {}).get("reason") == "AtDesiredSize"
            and len(rows) == size
            and all(r.get("role") == "voter" for r in rows)
        )

    return check


def _scale(admin: Kubectl, replicas: int) -> None:
    admin.run("scale", "gannetcluster", CLUSTER, "-n", MEMBERS_NS, f"--replicas={replicas}")


def _gone(plane: ControlPlane, collection: str, name: str) -> None:
    assert harness.watch_for(plane, collection, name, lambda o: o is None, timeout_s=120) is None


def test_scale_3_to_5_to_3_and_a_refused_scale_down_on_the_real_server(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    release: dict[str, Any],
    operator_kubeconfig: Path,
    credentials: dict[str, str],
    workdir: Path,
) -> None:
    group = fake_admin.FakeAdmin(
        leader_id="1", members={n: [True, 0, True] for n in ("1", "2", "3")}
    )
    admin.run("create", "namespace", MEMBERS_NS)
    running_operator.stop()  # one operator at a time
    try:
        with (
            fake_admin.serving(group) as endpoint,
            Kubelet(plane).running() as kubelet,
        ):
            process = harness.operator_process(
                workdir,
                [*harness.operator_args(release), "--namespace", MEMBERS_NS],
                kubeconfig=operator_kubeconfig,
                broker=endpoint,
                credentials=credentials,
                log_name="operator-members.log",
            )
            with harness.started(process):
                spec = {"replicas": 3, "storage": {"size": "1Gi", "deleteClaim": True}}
                admin.apply(
                    {
                        "apiVersion": harness.GROUP_VERSION,
                        "kind": "GannetCluster",
                        "metadata": {"name": CLUSTER, "namespace": MEMBERS_NS},
                        "spec": spec,
                    }
                )
                made = _cluster(plane, _settled(1, 3))
                assert made["status"]["nextNodeId"] == 4
                roster = admin.json("get", "configmap", f"{CLUSTER}-members", "-n", MEMBERS_NS)
                assert "--join" in roster["data"][f"{CLUSTER}-0"]  # sealed after bootstrap
                assert group.membership_calls() == []

                _scale(admin, 5)
                grown = _cluster(plane, _settled(2, 5))
                assert group.membership_calls() == [
                    ("AddMember", ("4", True)),
                    ("AddMember", ("4", False)),
                    ("AddMember", ("5", True)),
                    ("AddMember", ("5", False)),
                ]
                assert [m["nodeId"] for m in grown["status"]["members"]] == list("12345")
                sts = admin.json("get", "statefulset", CLUSTER, "-n", MEMBERS_NS)
                assert sts["spec"]["replicas"] == 5
                assert {f"{CLUSTER}-3", f"{CLUSTER}-4"} <= set(kubelet.marked)

                group.calls.clear()
                group.leader_id = "5"
                _scale(admin, 3)
                shrunk = _cluster(plane, _settled(3, 3))
                assert group.membership_calls() == [
                    ("TransferLeadership", "5"),
                    ("RemoveMember", "5"),
                    ("RemoveMember", "4"),
                ]
                assert shrunk["status"]["leader"] == f"{CLUSTER}-0"
                # kube-controller-manager deleted the pods; the operator their claims.
                _gone(plane, PODS, f"{CLUSTER}-4")
                _gone(plane, PODS, f"{CLUSTER}-3")
                _gone(plane, CLAIMS, f"data-{CLUSTER}-4")
                _gone(plane, CLAIMS, f"data-{CLUSTER}-3")

                # A lagging member: the operator refuses, then the broker refuses.
                group.calls.clear()
                group.members["2"][1] = 12_345_678
                _scale(admin, 2)
                blocked = _cluster(
                    plane,
                    lambda o: (condition(o, "Scaling") or {}).get("reason") == "ScaleDownBlocked",
                )
                message = condition(blocked, "Scaling")["message"]  # type: ignore[index]
                assert "node 2 12,345,678 bytes behind" in message
                assert group.membership_calls() == []
                group.refuse_remove = "node 2 is 12,345,678 bytes behind; wait for it to catch up"
                group.members["2"][1] = 0
                refused = _cluster(
                    plane,
                    lambda o: (
                        (condition(o, "Scaling") or {}).get("reason") == "MemberChangeRefused"
                    ),
                )
                message = condition(refused, "Scaling")["message"]  # type: ignore[index]
                assert "wait for it to catch up" in message
                sts = admin.json("get", "statefulset", CLUSTER, "-n", MEMBERS_NS)
                assert sts["spec"]["replicas"] == 3  # the pod stays while it is a member
                warnings = [
                    e["reason"]
                    for e in harness.events_for(admin, "GannetCluster", CLUSTER, MEMBERS_NS)
                    if e["type"] == "Warning"
                ]
                assert {"ScaleDownBlocked", "MemberChangeRefused"} <= set(warnings)
                group.refuse_remove = ""
                _cluster(plane, _settled(4, 2))
                assert group.membership_calls()[-1] == ("RemoveMember", "3")
                # Deleting it is not held up by a refresh timer caught mid-pass (kopf polled
                # such a timer every 60 s: running.settings polls every second).
                admin.run(
                    "delete",
                    "gannetcluster",
                    CLUSTER,
                    "-n",
                    MEMBERS_NS,
                    "--wait=true",
                    "--timeout=30s",
                )
    finally:
        running_operator.start()
        admin.run("delete", "namespace", MEMBERS_NS, "--wait=false", check=False)
