"""A GannetCluster grown from 1 to 2 broker groups and drained back to 1 on the real
kube-apiserver (``make e2e-kube``), with two real broker processes as the groups.

Real: kube-apiserver and etcd, kube-controller-manager (the StatefulSet controller makes group
``broker-1``'s pod, the garbage collector and the deletes act), the chart's RBAC (the operator
deletes a drained group's StatefulSet, Services, PDB, NetworkPolicy and roster under it), the
operator process, and the brokers: group ``broker-0`` and group ``broker-1`` are each a
``gannet broker run`` Raft group of one member. The operator reaches them by
``--group-endpoint`` (the pods run no broker: no kubelet), so the seeds it sends
(``SetClusterSeeds``) are those local endpoints. Played: a thread marks pods ``Running``.

Checked at each step, with ``QueryRoute`` at group ``broker-0``'s broker (what the official
clients ask): before the grow only ``broker-0``'s queues; after it, ``broker-1``'s too (the
operator created the topic there); during the drain ``broker-1``'s queues stay, read-only,
while the condition names the consumer group and its lag; once the official SimpleConsumer has
consumed and acknowledged everything, ``broker-1`` is deleted and its queues leave the route.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from e2e.kube import harness
from e2e.kube.control_plane import ControlPlane, free_port
from e2e.kube.harness import Kubectl, Process, condition
from e2e.kube.test_membership import Kubelet

NS = "gannet-groups"
CLUSTER = "wide"
TOPIC = "orders"
CONSUMERS = "billing"
CLIENT_ID = (("x-mq-client-id", "e2e@1@0@groups"),)
ROUTE_WAIT_S = 20.0  # routes follow within a poll (2 s) and a pass (2 s) on a busy machine
RW = definition_pb2.READ_WRITE


def _broker(workdir: Path, name: str) -> tuple[Process, str]:
    """One broker group of one member: ``--broker-name name``, Raft node 1."""
    home = workdir / f"groups-{name}"
    home.mkdir(exist_ok=True)
    secret = home / "peer-secret"
    secret.write_text("e2e-groups-peer-secret\n")
    client, peer, metrics = free_port(), free_port(), free_port()
    command = [
        *harness.gannet_command(),
        "broker",
        "run",
        "--data-dir",
        str(home / "store"),
        "--listen",
        f"127.0.0.1:{client}",
        "--metrics-listen",
        f"127.0.0.1:{metrics}",
        "--node-id",
        "1",
        "--peers",
        f"1=127.0.0.1:{peer}/{client}",
        "--peer-listen",
        f"127.0.0.1:{peer}",
        "--peer-secret-file",
        str(secret),
        "--broker-name",
        name,
        "--flush",
        "async",
        "--file-size-mb",
        "16",
    ]
    ready = f"http://127.0.0.1:{metrics}/readyz"
    return Process(command, home / "broker.log", ready), f"127.0.0.1:{client}"


def _route(endpoint: str) -> list[tuple[str, int, int]]:
    """``QueryRoute`` of :data:`TOPIC`: (broker name, queue id, permission)."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=TOPIC))
        reply = stub.QueryRoute(request, metadata=CLIENT_ID, timeout=5)
    assert reply.status.code == Code.OK, reply.status
    return sorted((q.broker.name, q.id, q.permission) for q in reply.message_queues)


def _route_becomes(endpoint: str, want: set[tuple[str, int]]) -> list[tuple[str, int, int]]:
    """Poll the route (another process's poller decides it) until its set of (broker name,
    permission) is ``want``."""
    deadline = time.monotonic() + ROUTE_WAIT_S
    while True:
        route = _route(endpoint)
        if {(b, p) for b, _, p in route} == want:
            return route
        assert time.monotonic() < deadline, f"route {route} never became {want}"
        time.sleep(0.2)


def _cluster(plane: ControlPlane, predicate: Any, timeout_s: float = 120) -> Any:
    collection = harness.path_of("GannetCluster", namespace=NS)
    return harness.watch_for(plane, collection, CLUSTER, predicate, timeout_s=timeout_s)


def _groups(reason: str, count: int) -> Any:
    def check(obj: dict[str, Any] | None) -> bool:
        found = condition(obj, "BrokerGroups") or {}
        rows = ((obj or {}).get("status") or {}).get("brokerGroups") or ()
        return found.get("reason") == reason and len(rows) == count

    return check


def _spec(groups: int) -> dict[str, Any]:
    return {"replicas": 1, "brokerGroups": groups, "storage": {"type": "ephemeral"}}


def _consume_all(endpoint: str, want: int) -> int:
    """Receive and ack with :data:`CONSUMERS` until ``want`` messages came (official client)."""
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    consumer = SimpleConsumer(config, CONSUMERS, {TOPIC: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    got = 0
    try:
        deadline = time.monotonic() + 60
        while got < want and time.monotonic() < deadline:
            for message in consumer.receive(16, 30):
                consumer.ack(message)  # at the group the message came from
                got += 1
    finally:
        consumer.shutdown()
    return got


@pytest.fixture
def groups(workdir: Path) -> Iterator[tuple[str, str]]:
    zero, zero_endpoint = _broker(workdir, "broker-0")
    one, one_endpoint = _broker(workdir, "broker-1")
    with harness.started(zero), harness.started(one):
        yield zero_endpoint, one_endpoint


def test_grow_1_to_2_groups_and_drain_back_on_the_real_server(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    release: dict[str, Any],
    operator_kubeconfig: Path,
    credentials: dict[str, str],
    workdir: Path,
    groups: tuple[str, str],
) -> None:
    zero, one = groups
    admin.run("create", "namespace", NS)
    running_operator.stop()  # one operator at a time
    try:
        with Kubelet(plane, f"/api/v1/namespaces/{NS}/pods").running():
            args = [
                *harness.operator_args(release),
                "--namespace",
                NS,
                "--refresh-interval-s",
                "2",
                "--group-endpoint",
                f"{CLUSTER}={zero}",
                "--group-endpoint",
                f"{CLUSTER}-g1={one}",
            ]
            process = harness.operator_process(
                workdir,
                args,
                kubeconfig=operator_kubeconfig,
                broker=zero,
                credentials=credentials,
                log_name="operator-groups.log",
            )
            with harness.started(process):
                _run(plane, admin, zero, one)
    finally:
        running_operator.start()
        admin.run("delete", "namespace", NS, "--wait=false", check=False)


def _run(plane: ControlPlane, admin: Kubectl, zero: str, one: str) -> None:
    meta = {"namespace": NS}
    admin.apply(
        {
            "apiVersion": harness.GROUP_VERSION,
            "kind": "GannetCluster",
            "metadata": {"name": CLUSTER, **meta},
            "spec": _spec(1),
        },
        {
            "apiVersion": harness.GROUP_VERSION,
            "kind": "Topic",
            "metadata": {"name": TOPIC, **meta},
            "spec": {"cluster": CLUSTER, "queues": 2},
        },
        {
            "apiVersion": harness.GROUP_VERSION,
            "kind": "ConsumerGroup",
            "metadata": {"name": CONSUMERS, **meta},
            "spec": {"cluster": CLUSTER},
        },
    )
    topics = harness.path_of("Topic", namespace=NS)
    assert harness.watch_for(plane, topics, TOPIC, harness.ready, timeout_s=120)
    groups_path = harness.path_of("ConsumerGroup", namespace=NS)
    assert harness.watch_for(plane, groups_path, CONSUMERS, harness.ready, timeout_s=120)
    made = _cluster(plane, lambda o: len((o or {}).get("status", {}).get("brokerGroups") or ()))
    assert [r["brokerName"] for r in made["status"]["brokerGroups"]] == ["broker-0"]
    assert _route(zero) == [
        ("broker-0", 0, definition_pb2.READ_WRITE),
        ("broker-0", 1, definition_pb2.READ_WRITE),
    ]
    # billing consumes once on broker-0: from now on it subscribes the topic.
    config = ClientConfiguration(zero, Credentials(), request_timeout=5)
    producer = Producer(config, (TOPIC,))
    producer.startup()
    try:
        message = Message()
        message.topic, message.body = TOPIC, b"first"
        producer.send(message)
    finally:
        producer.shutdown()
    assert _consume_all(zero, 1) == 1

    # Grow: broker-1's objects, its roster, its definitions, and its queues in every route.
    admin.run("patch", "gannetcluster", CLUSTER, "-n", NS, "--type=merge", "-p",
              '{"spec":{"brokerGroups":2}}')  # fmt: skip
    grown = _cluster(plane, _groups("Reconciled", 2))
    rows = grown["status"]["brokerGroups"]
    assert [(r["brokerName"], r["statefulSet"], r["phase"]) for r in rows] == [
        ("broker-0", CLUSTER, "Serving"),
        ("broker-1", f"{CLUSTER}-g1", "Serving"),
    ]
    sts = admin.json("get", "statefulset", f"{CLUSTER}-g1", "-n", NS)
    assert sts["metadata"]["ownerReferences"][0]["name"] == CLUSTER
    env = {
        e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["GANNET_BROKER_NAME"] == "broker-1"
    for name in (f"{CLUSTER}-g1-client", f"{CLUSTER}-g1-peers"):
        admin.run("get", "service", name, "-n", NS)
    admin.run("get", "pdb", f"{CLUSTER}-g1", "-n", NS)
    roster = admin.json("get", "configmap", f"{CLUSTER}-g1-members", "-n", NS)
    assert f"{CLUSTER}-g1-0.{CLUSTER}-g1-peers.{NS}.svc" in roster["data"][f"{CLUSTER}-g1-0"]
    route = _route_becomes(zero, {("broker-0", RW), ("broker-1", RW)})
    assert len(route) == 4
    assert _route(one) == route  # either group answers the same route

    producer = Producer(config, (TOPIC,))
    producer.startup()
    sent: dict[str, int] = {}
    try:
        for i in range(8):
            message = Message()
            message.topic, message.body = TOPIC, f"m{i}".encode()
            receipt = producer.send(message)
            broker = receipt.message_queue.message_queue0().broker.name
            sent[broker] = sent.get(broker, 0) + 1
    finally:
        producer.shutdown()
    assert sent.get("broker-1", 0) > 0, sent

    # Drain: broker-1's queues turn read-only, stay routed while billing has lag there.
    admin.run("patch", "gannetcluster", CLUSTER, "-n", NS, "--type=merge", "-p",
              '{"spec":{"brokerGroups":1}}')  # fmt: skip
    draining = _cluster(
        plane,
        lambda o: "lag" in ((condition(o, "BrokerGroups") or {}).get("message") or ""),
    )
    found = condition(draining, "BrokerGroups") or {}
    assert (found["status"], found["reason"]) == ("False", "Draining")
    assert f"{CONSUMERS} on {TOPIC}: {sent['broker-1']}" in found["message"]
    row = draining["status"]["brokerGroups"][1]
    assert (row["phase"], row["drainLag"]) == ("Draining", sent["broker-1"])
    # broker-0 sees broker-1's read-only queues at its next poll (2 s).
    route = _route_becomes(zero, {("broker-0", RW), ("broker-1", definition_pb2.READ)})
    assert len(route) == 4
    admin.run("get", "statefulset", f"{CLUSTER}-g1", "-n", NS)  # not deleted while lag > 0

    assert _consume_all(zero, sum(sent.values())) == sum(sent.values())
    done = _cluster(plane, _groups("Reconciled", 1))
    assert [r["brokerName"] for r in done["status"]["brokerGroups"]] == ["broker-0"]
    sets = f"/apis/apps/v1/namespaces/{NS}/statefulsets"
    assert harness.watch_for(plane, sets, f"{CLUSTER}-g1", lambda o: o is None) is None
    assert admin.run("get", "configmap", f"{CLUSTER}-g1-members", "-n", NS, check=False).returncode
    route = _route_becomes(zero, {("broker-0", RW)})
    assert len(route) == 2
