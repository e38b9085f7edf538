"""Gannet as real pods on a kind cluster (make e2e-kind), in the order of issue 33's priorities.

Each scenario prints its figures (``e2e-kind: …`` lines; run with ``-s`` to see them live).
The tests share one cluster and run in file order: a later one builds on the state an earlier
one leaves (the examples applied, the client pod running).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import pytest

from e2e.kind import cluster
from e2e.kind.cluster import Load
from e2e.kind.conftest import HELM_VALUES, RELEASE, helm
from e2e.kube.harness import Kubectl

NS = cluster.NAMESPACE
OUTAGE_S_MAX = 3.0
PODS = "gannet.io/cluster=main"
WAIT = f"--timeout={300}s"


def say(text: str) -> None:
    print(f"e2e-kind: {text}", flush=True)


def get(kube: Kubectl, *args: str) -> Any:
    return kube.json("-n", NS, "get", *args)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


def events(kube: Kubectl, kind: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    return list(get(kube, "events", "--field-selector", selector).get("items") or ())


def broker_pods(kube: Kubectl) -> dict[str, dict[str, Any]]:
    listed = get(kube, "pods", "-l", PODS)
    return {pod["metadata"]["name"]: pod for pod in listed["items"]}


class FewestReady:
    """The fewest broker pods Ready and not being deleted, sampled every 0.5 s from
    :meth:`start` to :meth:`stop` (the PodDisruptionBudget allows one member down)."""

    def __init__(self, kube: Kubectl, members: int = 3) -> None:
        self.kube = kube
        self.fewest = members
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _watch(self) -> None:
        while not self._stop.is_set():
            ready = sum(
                1
                for pod in broker_pods(self.kube).values()
                if conditions(pod).get("Ready", {}).get("status") == "True"
                and pod["metadata"].get("deletionTimestamp") is None
            )
            self.fewest = min(self.fewest, ready)
            self._stop.wait(0.5)


def claims(kube: Kubectl) -> dict[str, str]:
    """PVC name -> uid of the brokers' claims."""
    listed = get(kube, "pvc")
    return {
        pvc["metadata"]["name"]: pvc["metadata"]["uid"]
        for pvc in listed["items"]
        if pvc["metadata"]["name"].startswith("data-main-")
    }


def wait_members_ready(kube: Kubectl, replicas: int = 3) -> None:
    """Every member Ready as the operator reports it (status.readyReplicas, from the brokers)."""
    kube.run(
        "-n",
        NS,
        "wait",
        "gannetcluster/main",
        f"--for=jsonpath={{.status.readyReplicas}}={replicas}",
        WAIT,
    )
    kube.run("-n", NS, "wait", "gannetcluster/main", "--for=condition=Ready", WAIT)


def wait_replaced(kube: Kubectl, old: dict[str, str]) -> None:
    """Until every pod named in ``old`` (name -> uid) is a new pod and Ready. Polled every
    0.5 s: `kubectl wait` cannot wait for "another uid", and the old pod stays Ready while it
    terminates."""
    deadline = time.monotonic() + 300
    while True:
        pods = broker_pods(kube)
        fresh = [
            name
            for name, uid in old.items()
            if name in pods
            and pods[name]["metadata"]["uid"] != uid
            and conditions(pods[name]).get("Ready", {}).get("status") == "True"
        ]
        if len(fresh) == len(old):
            return
        assert time.monotonic() < deadline, f"pods not replaced and Ready: {set(old) - set(fresh)}"
        time.sleep(0.5)


LEADER_REPORTED_S = 30.0
"""How long the operator may take to report the leader: a pass whose raft query met no leader
(an election, or the client Service sending it to a member whose port is still closed)
reports none, the next pass (``refreshIntervalSeconds``: 2 here, or a change) does."""


def leader(kube: Kubectl) -> str:
    """The leader pod the GannetCluster reports, once it reports one."""
    deadline = time.monotonic() + LEADER_REPORTED_S
    while True:
        found = get(kube, "gannetcluster", "main")["status"].get("leader")
        if found:
            return str(found)
        assert time.monotonic() < deadline, (
            f"the GannetCluster reports no leader after {LEADER_REPORTED_S:.0f} s"
        )
        time.sleep(0.5)


def check_all_back(kube: Kubectl, acks: list[cluster.Ack], what: str) -> dict[str, Any]:
    keys = [ack.key for ack in acks]
    summary = cluster.consume(kube, "orders", keys)
    say(
        f"{what}: {len(keys)} acknowledged, consumer received {summary['received']} "
        f"({summary['unique']} distinct), missing {summary['missing_count']}, "
        f"duplicates {summary['duplicates']}"
    )
    assert summary["missing_count"] == 0, f"acknowledged messages lost: {summary['missing']}"
    return summary


# (1) The operator Ready; the examples applied with kubectl; all three Ready with conditions
# and Events as `kubectl describe` shows them.
def test_operator_and_examples_ready(kube: Kubectl, release: float, examples: float) -> None:
    say(f"helm install -> operator Ready: {release:.1f} s")
    say(
        "kubectl apply deploy/examples -> GannetCluster, Topic, ConsumerGroup Ready: "
        f"{examples:.1f} s"
    )
    for kind, name in (
        ("gannetcluster", "main"),
        ("topic", "orders"),
        ("consumergroup", "billing"),
    ):
        obj = get(kube, kind, name)
        ready = conditions(obj)["Ready"]
        assert ready["status"] == "True", ready
        assert obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        described = kube.run("-n", NS, "describe", kind, name).stdout
        assert "Conditions:" in described, described
    main = get(kube, "gannetcluster", "main")
    assert main["status"]["replicas"] == 3
    assert main["status"]["readyReplicas"] == 3
    assert leader(kube).startswith("main-")
    seen = events(kube, "GannetCluster", "main")
    say("GannetCluster events: " + "; ".join(f"{e['reason']}: {e['message']}" for e in seen[:8]))
    assert seen, "no Events about the GannetCluster"
    described = kube.run("-n", NS, "describe", "gannetcluster", "main").stdout
    assert "Events:" in described
    assert seen[0]["reason"] in described
    pods = broker_pods(kube)
    assert len(pods) == 3
    for pod in pods.values():
        user = pod["spec"]["securityContext"].get("runAsUser") or 10001
        assert user != 0
        assert pod["status"]["phase"] == "Running"
    assert len(claims(kube)) == 3, "one PVC per member"


# (2) The official Python client inside the cluster, through the client Service.
def test_client_in_cluster_every_message_back_once(client: Kubectl) -> None:
    load = Load(client, "orders", "s2")
    load.wait_acks(200)
    acks = load.stop()
    assert not load.failures, load.failures[:5]
    summary = check_all_back(client, acks, "in-cluster client")
    assert summary["duplicates"] == 0


# Multi-node only (make e2e-kind-drain, GANNET_KIND_NODES=3): kubectl drain of the worker that
# runs the most brokers, under load. The claims are local-path volumes bound to their node, so
# an evicted broker stays Pending while its node is cordoned: the PodDisruptionBudget (at most 1
# member down of 3) must refuse every further eviction. Then uncordon: every member back.
def test_node_drain_respects_the_disruption_budget(client: Kubectl) -> None:
    nodes = get(client, "nodes")["items"]
    if len(nodes) < 2:
        pytest.skip("one node: run make e2e-kind-drain (GANNET_KIND_NODES=3)")
    placed: dict[str, list[str]] = {}
    for name, pod in broker_pods(client).items():
        placed.setdefault(pod["spec"]["nodeName"], []).append(name)
    node, on_node = max(placed.items(), key=lambda item: len(item[1]))
    say(f"brokers per node: {placed}; draining {node}")
    ready = FewestReady(client)
    load = Load(client, "orders", "sd")
    try:
        load.wait_acks(30)
        at = time.time()
        ready.start()
        drained = client.run(
            "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
            f"--pod-selector={PODS}", "--timeout=45s", check=False,
        )  # fmt: skip
        output = drained.stdout + drained.stderr
        load.wait_acks(20, after=time.time())
        outage = load.outage_s(at)
        client.run("uncordon", node)
        wait_members_ready(client)
        load.wait_acks(20, after=time.time())
    finally:
        ready.stop()
        acks = load.stop()
    refused = "disruption budget" in output
    say(
        f"drain of {node} ({len(on_node)} brokers): exit {drained.returncode}, PDB refusals "
        f"seen {refused}, fewest Ready brokers {ready.fewest} of 3, longest client gap "
        f"{outage:.2f} s, failed sends {len(load.failures)}"
    )
    assert ready.fewest >= 2, "more than one broker down at a time (the PDB allows 1)"
    if len(on_node) > 1:
        assert drained.returncode != 0, output
        assert refused, output
    check_all_back(client, acks, "node drain")
    assert outage <= OUTAGE_S_MAX, f"client outage {outage:.2f} s > {OUTAGE_S_MAX} s"


# (3) kubectl delete pod of the Raft leader under load.
def test_leader_pod_deleted_under_load(client: Kubectl) -> None:
    victim = leader(client)
    before = broker_pods(client)[victim]
    claim = next(
        v["persistentVolumeClaim"]["claimName"]
        for v in before["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    )
    claim_uid = claims(client)[claim]
    load = Load(client, "orders", "s3")
    try:
        load.wait_acks(50)
        at = time.time()
        client.run("-n", NS, "delete", "pod", victim, "--wait=false")
        load.wait_acks(50, after=at)
        wait_replaced(client, {victim: before["metadata"]["uid"]})
        back = time.time() - at
        wait_members_ready(client)
        assert claims(client)[claim] == claim_uid, "the pod came back with another volume"
        load.wait_acks(20, after=time.time())
    finally:
        acks = load.stop()
    outage = load.outage_s(at)
    say(
        f"leader {victim} deleted: longest client gap {outage:.2f} s, failed sends "
        f"{len(load.failures)}, pod back and Ready after {back:.1f} s"
    )
    new_leader = leader(client)
    say(f"new leader {new_leader}; {victim} back with its claim {claim} and Ready")
    check_all_back(client, acks, "leader pod deleted")
    assert outage <= OUTAGE_S_MAX, f"client outage {outage:.2f} s > {OUTAGE_S_MAX} s"


# (6) Every broker pod deleted at once: a full restart.
def test_all_pods_deleted_at_once(client: Kubectl) -> None:
    before = claims(client)
    uids = {name: pod["metadata"]["uid"] for name, pod in broker_pods(client).items()}
    load = Load(client, "orders", "s6")
    try:
        load.wait_acks(50)
        at = time.time()
        client.run("-n", NS, "delete", "pod", "-l", PODS, "--wait=false")
        wait_replaced(client, uids)
        wait_members_ready(client)
        load.wait_acks(20, after=time.time(), timeout_s=300)
    finally:
        acks = load.stop()
    outage = load.outage_s(at)
    say(
        f"all pods deleted: longest client gap {outage:.1f} s until the group served again, "
        f"failed sends {len(load.failures)}"
    )
    assert claims(client) == before, "the claims changed across the restart"
    check_all_back(client, acks, "full restart")


# (4) Scale 3 -> 5 -> 3 with kubectl patch under load.
def test_scale_3_5_3_under_load(client: Kubectl) -> None:
    load = Load(client, "orders", "s4")
    patch = ["-n", NS, "patch", "gannetcluster", "main", "--type", "merge", "-p"]
    try:
        load.wait_acks(30)
        started = time.monotonic()
        client.run(*patch, '{"spec": {"replicas": 5}}')
        wait_members_ready(client, 5)
        members = get(client, "gannetcluster", "main")["status"].get("members") or []
        assert len(members) == 5, members
        grown = time.monotonic() - started
        load.wait_acks(20, after=time.time())
        started = time.monotonic()
        client.run(*patch, '{"spec": {"replicas": 3}}')
        client.run(
            "-n", NS, "wait", "gannetcluster/main", "--for=jsonpath={.status.replicas}=3", WAIT
        )
        wait_members_ready(client, 3)
        shrunk = time.monotonic() - started
        members = get(client, "gannetcluster", "main")["status"].get("members") or []
        assert len(members) == 3, members
        load.wait_acks(20, after=time.time())
    finally:
        acks = load.stop()
    kept = sorted(claims(client))
    say(
        f"scale 3 -> 5 in {grown:.0f} s, 5 -> 3 in {shrunk:.0f} s under load; "
        f"failed sends {len(load.failures)}; claims now {kept}"
    )
    # deleteClaim: false (the example): the removed members' claims are kept (docs/operator.md).
    assert {"data-main-3", "data-main-4"} <= set(kept)
    check_all_back(client, acks, "scale 3 -> 5 -> 3")


# (5) A rolling upgrade to a new image tag built by the test.
def test_rolling_upgrade_to_a_new_tag(client: Kubectl) -> None:
    from e2e.kind import engine  # noqa: PLC0415

    tag = cluster.IMAGE.rsplit(":", 1)[0] + ":0.1.0-e2e-upgrade"
    dockerfile = f"FROM {cluster.IMAGE}\nLABEL io.gannet.e2e=upgrade\n"
    subprocess.run(
        [engine.DOCKER_CLI, "build", "-q", "-t", tag, "-"],
        input=dockerfile,
        text=True,
        env={**engine.environment(), "DOCKER_BUILDKIT": "0"},
        check=True,
        capture_output=True,
    )
    cluster.kind("load", "docker-image", tag, "--name", cluster.NAME)
    pdb = get(client, "pdb", "-l", PODS)["items"]
    assert pdb, "no PodDisruptionBudget for the brokers"
    ready = FewestReady(client)
    load = Load(client, "orders", "s5")
    try:
        load.wait_acks(30)
        at = time.time()
        ready.start()
        # One roll for the new image and scenario 8's access from outside.
        patch = json.dumps({"spec": {"image": tag, **external_spec(node_address())}})
        client.run("-n", NS, "patch", "gannetcluster", "main", "--type", "merge", "-p", patch)
        for name in ("main-0", "main-1", "main-2"):
            client.run(
                "-n",
                NS,
                "wait",
                f"pod/{name}",
                f"--for=jsonpath={{.spec.containers[0].image}}={tag}",
                WAIT,
            )
        wait_members_ready(client)
        load.wait_acks(20, after=time.time())
    finally:
        ready.stop()
        acks = load.stop()
    gaps = sorted(
        (later.answered - earlier.answered, earlier.answered)
        for earlier, later in itertools.pairwise(acks)
        if earlier.answered >= at
    )
    worst = [round(gap, 2) for gap, _ in gaps[-3:]]
    say(
        f"rolling upgrade to {tag}: fewest Ready brokers {ready.fewest} of 3, "
        f"longest client gaps {worst} s, failed sends {len(load.failures)}"
    )
    assert ready.fewest >= 2, "more than one broker down at a time (the PDB allows 1)"
    check_all_back(client, acks, "rolling upgrade")
    assert gaps[-1][0] <= OUTAGE_S_MAX, f"client outage {gaps[-1][0]:.2f} s > {OUTAGE_S_MAX} s"


# (8) A client outside the cluster: a process of the e2e's network namespace, on the host side
# of the kind network, reaching the pods through their NodePorts at the node's address.
CLIENT_NODE_PORT = 30081
REMOTING_NODE_PORT = 30911
OUTSIDE_MESSAGES = 200


def node_address() -> str:
    from e2e.kind import engine  # noqa: PLC0415

    found = engine.docker(
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        f"{cluster.NAME}-control-plane",
        capture_output=True,
    ).stdout.strip()
    assert found, "the kind node has no address"
    return str(found)


def outside_run(
    *args: str, stdin: str | None = None, timeout_s: float = 300
) -> list[dict[str, Any]]:
    """load.py run here, outside the cluster, with the official Python client of this venv.
    ``stdin`` None: kept open until the process ends (the producer stops when it closes)."""
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            [sys.executable, str(cluster.LOAD_SCRIPT), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        try:
            if stdin is not None:
                out, _ = process.communicate(stdin, timeout=timeout_s)
            else:
                assert process.stdout is not None
                assert process.stdin is not None
                out = process.stdout.read()  # to its end: the producer exits after --count
                process.wait(timeout=timeout_s)
                process.stdin.close()
        finally:
            if process.poll() is None:
                process.kill()
        errors.seek(0)
        assert process.returncode == 0, f"outside client failed: {errors.read()[-2000:]}"
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def external_spec(host: str) -> dict[str, Any]:
    """spec.remoting and spec.external of scenario 8 (NodePorts at the node's address)."""
    external = {
        "type": "NodePort",
        "host": host,
        "nodePorts": {"client": CLIENT_NODE_PORT, "remoting": REMOTING_NODE_PORT},
    }
    return {"remoting": {"enabled": True}, "external": external}


def grpc_route(dialed: tuple[str, int]) -> list[tuple[str, int]]:
    """The addresses QueryRoute hands a client that dialed ``dialed`` (as the clients ask)."""
    import grpc  # noqa: PLC0415
    from rocketmq.grpc_protocol import (  # type: ignore[import-untyped, unused-ignore]  # noqa: PLC0415
        definition_pb2,
        service_pb2,
        service_pb2_grpc,
    )

    endpoints = definition_pb2.Endpoints(
        scheme=definition_pb2.IPv4,
        addresses=[definition_pb2.Address(host=dialed[0], port=dialed[1])],
    )
    with grpc.insecure_channel(f"{dialed[0]}:{dialed[1]}") as channel:
        reply = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
            service_pb2.QueryRouteRequest(
                topic=definition_pb2.Resource(name="orders"), endpoints=endpoints
            ),
            timeout=10,
            metadata=[("x-mq-client-id", "e2e-outside"), ("x-mq-language", "PYTHON")],
        )
    assert reply.status.code == 20000, reply.status.message
    return sorted(
        {(a.host, a.port) for q in reply.message_queues for a in q.broker.endpoints.addresses}
    )


def remoting_master(dialed: tuple[str, int]) -> str:
    """brokerId 0's address in the name-server route a remoting client at ``dialed`` gets."""
    from gannet.node.remoting import codes  # noqa: PLC0415
    from tests.remoting.client import RawClient  # noqa: PLC0415

    with RawClient(f"{dialed[0]}:{dialed[1]}") as raw:
        answer = raw.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    assert answer.code == codes.SUCCESS, answer.remark
    text = answer.body.decode()
    start = text.index('"brokerAddrs":{0:') + len('"brokerAddrs":{0:')
    return str(json.loads(text[start : text.index("}", start)].split(",")[0]))


def test_client_outside_through_node_ports(client: Kubectl) -> None:
    host = node_address()
    if "external" not in get(client, "gannetcluster", "main")["spec"]:
        # Scenario 5's rolling upgrade turns it on with the new image (one roll for both).
        before = {n: p["metadata"]["uid"] for n, p in broker_pods(client).items()}
        patch = json.dumps({"spec": external_spec(host)})
        started = time.monotonic()
        client.run("-n", NS, "patch", "gannetcluster", "main", "--type", "merge", "-p", patch)
        wait_replaced(client, before)  # the new arguments roll the pods, one at a time
        wait_members_ready(client)
        say(f"external access enabled (pods rolled) in {time.monotonic() - started:.1f} s")
    services = [get(client, "service", f"main-{i}-external") for i in range(3)]
    assert [s["spec"]["type"] for s in services] == ["NodePort"] * 3
    assert [s["spec"]["ports"][0]["nodePort"] for s in services] == [30081, 30082, 30083]

    # Routes: every member names the leader's external address, whichever one is asked.
    def settled() -> tuple[str, list[list[tuple[str, int]]], list[str]]:
        for _ in range(20):
            first = leader(client)
            answers = [grpc_route((host, CLIENT_NODE_PORT + i)) for i in range(3)]
            masters = [remoting_master((host, REMOTING_NODE_PORT + i)) for i in range(3)]
            if leader(client) == first:
                return first, answers, masters
        raise AssertionError("the leader kept changing")

    lead, answers, masters = settled()
    ordinal = int(lead.rsplit("-", 1)[1])
    say(f"routes from outside (leader {lead}): gRPC {answers}, remoting brokerId 0 {masters}")
    assert answers == [[(host, CLIENT_NODE_PORT + ordinal)]] * 3
    assert masters == [f"{host}:{REMOTING_NODE_PORT + ordinal}"] * 3

    # The official Python client, outside, through a follower's NodePort.
    follower = (ordinal + 1) % 3
    endpoint = f"{host}:{CLIENT_NODE_PORT + follower}"
    produced = outside_run(
        "produce", "--endpoint", endpoint, "--topic", "orders", "--prefix", "s8",
        "--count", str(OUTSIDE_MESSAGES),
    )  # fmt: skip
    assert any("started" in line for line in produced), produced[:5]
    keys = [line["ack"] for line in produced if "ack" in line]
    failed = [line for line in produced if "fail" in line]
    summary = outside_run(
        "consume", "--endpoint", endpoint, "--topic", "orders", "--group", "billing",
        stdin="".join(f"{key}\n" for key in keys),
    )[-1]  # fmt: skip
    say(
        f"outside client via {endpoint}: {len(keys)} acknowledged, {len(failed)} failed sends, "
        f"consumer received {summary['received']} ({summary['unique']} distinct, earlier "
        f"scenarios' leftovers included), missing {summary['missing_count']}, duplicates of "
        f"its own {summary['wanted_duplicates']} (of any {summary['duplicates']})"
    )
    assert len(keys) == OUTSIDE_MESSAGES, failed[:5]
    assert summary["missing_count"] == 0, summary["missing"]
    assert summary["wanted_duplicates"] == 0


# (7) helm upgrade with a changed value, then helm uninstall: data as docs/kubernetes.md says.
def test_helm_upgrade_then_uninstall(client: Kubectl) -> None:
    from helm_python import Chart  # noqa: PLC0415 - a dev dependency, as in conftest

    from e2e.kind.conftest import CHART  # noqa: PLC0415

    secret_before = get(client, "secret", f"{RELEASE}-gannet-admin")["data"]["secretKey"]
    pods_before = {n: p["metadata"]["uid"] for n, p in broker_pods(client).items()}
    claims_before = claims(client)
    values = json.loads(json.dumps(HELM_VALUES))
    values["operator"]["refreshIntervalSeconds"] = 3
    config = helm(client)
    chart = Chart.load(CHART)
    try:
        config.upgrade(chart, RELEASE, values, namespace=NS)
    finally:
        chart.close()
    deployment = f"deployment/{RELEASE}-gannet-operator"
    client.run("-n", NS, "rollout", "status", deployment, WAIT)
    args = get(client, deployment)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "3" in args, args
    assert get(client, "secret", f"{RELEASE}-gannet-admin")["data"]["secretKey"] == secret_before
    wait_members_ready(client)
    assert {n: p["metadata"]["uid"] for n, p in broker_pods(client).items()} == pods_before
    say(
        "helm upgrade (operator.refreshIntervalSeconds 2 -> 3): operator rolled, "
        "admin key kept, brokers untouched"
    )
    try:
        config.uninstall(RELEASE)
    finally:
        config.close()
    client.run("-n", NS, "wait", "--for=delete", deployment, WAIT)
    crds = client.json("get", "crd")["items"]
    assert any(c["metadata"]["name"] == "gannetclusters.gannet.io" for c in crds), "CRDs removed"
    assert get(client, "gannetcluster", "main")["metadata"]["name"] == "main"
    assert claims(client) == claims_before, "helm uninstall touched the brokers' claims"
    kept = get(client, "secret", f"{RELEASE}-gannet-admin")["data"]["secretKey"]
    assert kept == secret_before, "the admin key Secret (resource-policy keep) changed or went"
    assert set(broker_pods(client)) == set(pods_before)
    say(
        f"helm uninstall: operator gone; CRDs, GannetCluster, {len(claims_before)} PVCs "
        "and pods kept"
    )
