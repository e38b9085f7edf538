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
while the condition names the consumer group and its lag (raising the count again makes them
read-write again; lowering it drains again); once the official SimpleConsumer has
consumed and acknowledged everything, ``broker-1`` is deleted and its queues leave the route.
Before that last drain each draining group gets a delayed message (due :data:`DELAY_S` later):
once every message in its queues is consumed, the condition still names the delayed messages
in its timer wheel (lag 0, nothing deleted); they come due into the read-only queues, are
consumed, and only then is the group deleted.
With ``GANNET_E2E_GROUPS_FULL=1`` the same with 3 groups (``broker-1`` and ``broker-2`` drain
together). With ``GANNET_E2E_GROUPS_AUTH=1`` the cluster has ``security.auth`` on: the brokers
require the chart's admin key (``--auth-file``), the operator creates the cluster key Secret
``wide-cluster-key`` and the test plays the kubelet with it (writes its
``gannet-cluster-key.json`` next to the admin file, restarts each broker with
``GANNET_CLUSTER_ACCESS_KEY``/``GANNET_CLUSTER_SECRET_KEY`` from it, as the pod template
says), so every route and drain step below runs over signed group polls; the clients sign too.
"""

from __future__ import annotations

import base64
import contextlib
import os
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
from e2e.kube.control_plane import ControlPlane
from e2e.kube.harness import Kubectl, Process, condition
from e2e.kube.test_membership import Kubelet
from e2e.processes import free_port
from gannet.node.protocol.auth import SigningInterceptor

NS = "gannet-groups"
CLUSTER = "wide"
TOPIC = "orders"
CONSUMERS = "billing"
CLIENT_ID = (("x-mq-client-id", "e2e@1@0@groups"),)
GROUPS = 3 if os.environ.get("GANNET_E2E_GROUPS_FULL") == "1" else 2
"""Groups grown to (and drained back from): 2 in ``make e2e-kube``; 3 with
``GANNET_E2E_GROUPS_FULL=1`` (two groups drain at once)."""
ROUTE_WAIT_S = 20.0  # routes follow within a poll (2 s) and a pass (2 s) on a busy machine
DELAY_S = 90.0
"""Delay of the messages sent before the last drain: longer than lowering the count, consuming
the other messages and one operator pass can take. Consuming 8 messages over 4 queues usually
takes about 10 s, but every receive that finds a queue empty is held for the broker's minimum
long poll (5 s, as RocketMQ's proxy), and a CI run needed 40 s: the delayed messages then came
due among the others. This must stay above ``_consume``'s own 60 s limit."""
RW = definition_pb2.READ_WRITE
AUTH = os.environ.get("GANNET_E2E_GROUPS_AUTH") == "1"
"""``security.auth`` on, the operator's cluster key signing the group polls (module docstring)."""
KEY: dict[str, str] = {}
"""The clients' key in :data:`AUTH` mode (the chart's admin key); empty: unsigned clients."""


def _broker(workdir: Path, name: str) -> tuple[Process, str]:
    """One broker group of one member: ``--broker-name name``, Raft node 1 (in :data:`AUTH`
    mode requiring a key from ``auth/``, which holds the chart's admin file)."""
    home = workdir / f"groups-{name}"
    home.mkdir(exist_ok=True)
    auth = ["--auth-file", str(home / "auth")] if AUTH else []
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
        *auth,
    ]
    ready = f"http://127.0.0.1:{metrics}/readyz"
    return Process(command, home / "broker.log", ready), f"127.0.0.1:{client}"


def _route(endpoint: str) -> list[tuple[str, int, int]]:
    """``QueryRoute`` of :data:`TOPIC`: (broker name, queue id, permission)."""
    with grpc.insecure_channel(endpoint) as raw:
        signer = [SigningInterceptor(KEY["accessKey"], KEY["secretKey"])] if KEY else []
        channel = grpc.intercept_channel(raw, *signer)
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
    spec: dict[str, Any] = {"replicas": 1, "brokerGroups": groups, "storage": {"type": "ephemeral"}}
    if AUTH:
        spec["security"] = {"auth": {"enabled": True, "credentialsSecret": "gannet-keys"}}
    return spec


def _client_config(endpoint: str) -> ClientConfiguration:
    credentials = Credentials(KEY["accessKey"], KEY["secretKey"]) if KEY else Credentials()
    return ClientConfiguration(endpoint, credentials, request_timeout=5)


def _install_cluster_key(admin: Kubectl, processes: list[Process]) -> None:
    """Play the kubelet with the operator's cluster key Secret: its credentials file into
    every broker's auth directory, its key into every broker's environment (a restart)."""
    deadline = time.monotonic() + 60
    while True:
        found = admin.run("get", "secret", f"{CLUSTER}-cluster-key", "-n", NS, check=False)
        if found.returncode == 0:
            break
        assert time.monotonic() < deadline, "the operator never created the cluster key"
        time.sleep(0.5)
    secret = admin.json("get", "secret", f"{CLUSTER}-cluster-key", "-n", NS)
    assert secret["metadata"]["ownerReferences"][0]["name"] == CLUSTER
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    for process in processes:
        auth = Path(process.command[process.command.index("--auth-file") + 1])
        (auth / "gannet-cluster-key.json").write_text(data["gannet-cluster-key.json"])
        process.env = {
            **os.environ,
            "GANNET_CLUSTER_ACCESS_KEY": data["accessKey"],
            "GANNET_CLUSTER_SECRET_KEY": data["secretKey"],
        }
        process.stop()
        process.start()


def _consume_all(endpoint: str, want: int) -> int:
    """Receive and ack with :data:`CONSUMERS` until ``want`` messages came (official client)."""
    return len(_consume(endpoint, want))


def _consume(endpoint: str, want: int, wait_s: float = 60) -> list[bytes]:
    """The bodies of ``want`` messages received and acked with :data:`CONSUMERS`."""
    config = _client_config(endpoint)
    consumer = SimpleConsumer(config, CONSUMERS, {TOPIC: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + wait_s
        while len(got) < want and time.monotonic() < deadline:
            for message in consumer.receive(16, 30):
                consumer.ack(message)  # at the group the message came from
                got.append(bytes(message.body))
    finally:
        consumer.shutdown()
    return got


def _send_delayed(endpoint: str, brokers: list[str]) -> tuple[dict[str, int], float]:
    """Delayed messages (due :data:`DELAY_S` from now) until each of ``brokers`` got one;
    returns how many each group got and when they come due (``time.time()``)."""
    due_s = time.time() + DELAY_S
    producer = Producer(_client_config(endpoint), (TOPIC,))
    producer.startup()
    delayed: dict[str, int] = {}
    try:
        for i in range(8 * GROUPS):
            if set(brokers) <= set(delayed):
                break
            message = Message()
            message.topic, message.body = TOPIC, f"late{i}".encode()
            message.delivery_timestamp = int(due_s * 1000)
            receipt = producer.send(message)
            broker = receipt.message_queue.message_queue0().broker.name
            delayed[broker] = delayed.get(broker, 0) + 1
    finally:
        producer.shutdown()
    assert set(brokers) <= set(delayed), delayed
    return delayed, due_s


@pytest.fixture
def groups(workdir: Path, admin_secret: dict[str, str]) -> Iterator[list[tuple[Process, str]]]:
    """One broker process per group, ``broker-0`` … ``broker-<GROUPS-1>``, and its endpoint."""
    KEY.clear()
    if AUTH:
        KEY.update(accessKey=admin_secret["accessKey"], secretKey=admin_secret["secretKey"])
    with contextlib.ExitStack() as stack:
        found = []
        for g in range(GROUPS):
            process, endpoint = _broker(workdir, f"broker-{g}")
            if AUTH:
                auth = workdir / f"groups-broker-{g}" / "auth"
                auth.mkdir(exist_ok=True)
                (auth / "admin.json").write_text(admin_secret["admin.json"])
            stack.enter_context(harness.started(process))
            found.append((process, endpoint))
        yield found
    KEY.clear()


def _base(g: int) -> str:
    return CLUSTER if g == 0 else f"{CLUSTER}-g{g}"


def test_grow_from_1_group_and_drain_back_on_the_real_server(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    release: dict[str, Any],
    operator_kubeconfig: Path,
    credentials: dict[str, str],
    workdir: Path,
    groups: list[tuple[Process, str]],
) -> None:
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
            ]
            for g, (_, endpoint) in enumerate(groups):
                args += ["--group-endpoint", f"{_base(g)}={endpoint}"]
            process = harness.operator_process(
                workdir,
                args,
                kubeconfig=operator_kubeconfig,
                broker=groups[0][1],
                credentials=credentials,
                log_name="operator-groups.log",
            )
            with harness.started(process):
                _run(plane, admin, groups)
    finally:
        running_operator.start()
        admin.run("delete", "namespace", NS, "--wait=false", check=False)


def _scale_groups(admin: Kubectl, count: int) -> None:
    patch = f'{{"spec":{{"brokerGroups":{count}}}}}'
    admin.run("patch", "gannetcluster", CLUSTER, "-n", NS, "--type=merge", "-p", patch)


def _run(plane: ControlPlane, admin: Kubectl, groups: list[tuple[Process, str]]) -> None:
    endpoints = [endpoint for _, endpoint in groups]
    zero = endpoints[0]
    names = [f"broker-{g}" for g in range(GROUPS)]
    meta = {"namespace": NS}
    if AUTH:  # the brokers' credentials Secret (the pods would mount it; no kubelet here)
        data = {"admin.json": base64.b64encode(b"{}").decode()}
        admin.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "gannet-keys", **meta},
                "data": data,
            }
        )
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
            "spec": {"cluster": CLUSTER, "queues": 2, "messageType": "MIXED"},
        },
        {
            "apiVersion": harness.GROUP_VERSION,
            "kind": "ConsumerGroup",
            "metadata": {"name": CONSUMERS, **meta},
            "spec": {"cluster": CLUSTER},
        },
    )
    if AUTH:
        _install_cluster_key(admin, [process for process, _ in groups])
    topics = harness.path_of("Topic", namespace=NS)
    assert harness.watch_for(plane, topics, TOPIC, harness.ready, timeout_s=120)
    groups_path = harness.path_of("ConsumerGroup", namespace=NS)
    assert harness.watch_for(plane, groups_path, CONSUMERS, harness.ready, timeout_s=120)
    made = _cluster(plane, lambda o: len((o or {}).get("status", {}).get("brokerGroups") or ()))
    assert [r["brokerName"] for r in made["status"]["brokerGroups"]] == ["broker-0"]
    assert _route(zero) == [("broker-0", 0, RW), ("broker-0", 1, RW)]
    # billing consumes once on broker-0: from now on it subscribes the topic.
    config = _client_config(zero)
    producer = Producer(config, (TOPIC,))
    producer.startup()
    try:
        message = Message()
        message.topic, message.body = TOPIC, b"first"
        producer.send(message)
    finally:
        producer.shutdown()
    assert _consume_all(zero, 1) == 1

    # Grow: each new group's objects, roster and definitions, and its queues in every route.
    _scale_groups(admin, GROUPS)
    grown = _cluster(plane, _groups("Reconciled", GROUPS))
    rows = grown["status"]["brokerGroups"]
    assert [(r["brokerName"], r["statefulSet"], r["phase"]) for r in rows] == [
        (names[g], _base(g), "Serving") for g in range(GROUPS)
    ]
    for g in range(1, GROUPS):
        base = _base(g)
        sts = admin.json("get", "statefulset", base, "-n", NS)
        assert sts["metadata"]["ownerReferences"][0]["name"] == CLUSTER
        container = sts["spec"]["template"]["spec"]["containers"][0]
        assert {"name": "GANNET_BROKER_NAME", "value": names[g]} in container["env"]
        for name in (f"{base}-client", f"{base}-peers"):
            admin.run("get", "service", name, "-n", NS)
        admin.run("get", "pdb", base, "-n", NS)
        roster = admin.json("get", "configmap", f"{base}-members", "-n", NS)
        assert f"{base}-0.{base}-peers.{NS}.svc" in roster["data"][f"{base}-0"]
    route = _route_becomes(zero, {(n, RW) for n in names})
    assert len(route) == 2 * GROUPS
    seen = _cluster(
        plane,
        lambda o: all(
            r.get("viewError") == "" and 0 <= r.get("viewAgeSeconds", -1) < 30
            for r in ((o or {}).get("status") or {}).get("brokerGroups", [])[1:]
        ),
    )
    assert len(seen["status"]["brokerGroups"]) == GROUPS
    for endpoint in endpoints[1:]:
        assert _route(endpoint) == route  # every group answers the same route

    producer = Producer(config, (TOPIC,))
    producer.startup()
    sent: dict[str, int] = {}
    try:
        for i in range(4 * GROUPS):
            message = Message()
            message.topic, message.body = TOPIC, f"m{i}".encode()
            receipt = producer.send(message)
            broker = receipt.message_queue.message_queue0().broker.name
            sent[broker] = sent.get(broker, 0) + 1
    finally:
        producer.shutdown()
    assert set(sent) == set(names), sent  # round robin over every group's queues

    # Drain: the other groups' queues turn read-only and stay routed while billing has lag.
    _scale_groups(admin, 1)
    draining = _cluster(
        plane,
        lambda o: "lag" in ((condition(o, "BrokerGroups") or {}).get("message") or ""),
    )
    found = condition(draining, "BrokerGroups") or {}
    assert (found["status"], found["reason"]) == ("False", "Draining")
    for g in range(1, GROUPS):
        assert f"draining {names[g]}" in found["message"]
        assert f"{CONSUMERS} on {TOPIC}: {sent[names[g]]}" in found["message"]
        row = draining["status"]["brokerGroups"][g]
        assert (row["phase"], row["drainLag"]) == ("Draining", sent[names[g]])
        assert row["drainUnconsumed"] == 0  # billing consumes orders: none unread
        admin.run("get", "statefulset", _base(g), "-n", NS)  # not deleted while lag > 0
    # broker-0 sees the read-only queues at its next poll (2 s).
    read_only = {(n, definition_pb2.READ) for n in names[1:]}
    route = _route_becomes(zero, {("broker-0", RW), *read_only})
    assert len(route) == 2 * GROUPS

    # Undone: raised again, the groups serve read-write again; then lowered for good.
    _scale_groups(admin, GROUPS)
    _route_becomes(zero, {(n, RW) for n in names})
    _cluster(plane, _groups("Reconciled", GROUPS))
    delayed, due_s = _send_delayed(zero, names[1:])
    _scale_groups(admin, 1)
    _route_becomes(zero, {("broker-0", RW), *read_only})

    # Every message in the queues consumed: the delayed ones still hold the drain.
    bodies = _consume(zero, sum(sent.values()))
    assert sorted(bodies) == sorted(f"m{i}".encode() for i in range(4 * GROUPS))
    assert time.time() < due_s, "the delayed messages came due before the check; raise DELAY_S"

    def holds_delayed(o: Any) -> bool:
        message = (condition(o, "BrokerGroups") or {}).get("message") or ""
        return "lag" not in message and all(
            f"draining {names[g]}: waiting for messages not in its queues yet "
            f"({delayed[names[g]]} delayed messages in topic {TOPIC}, last due" in message
            for g in range(1, GROUPS)
        )

    held = _cluster(plane, holds_delayed, timeout_s=max(1.0, due_s - time.time()))
    assert held is not None
    for g in range(1, GROUPS):
        assert held["status"]["brokerGroups"][g]["phase"] == "Draining"
        admin.run("get", "statefulset", _base(g), "-n", NS)  # not deleted: they would be lost
    # They come due into the read-only queues; consumed, the drain finishes.
    late = _consume(zero, sum(delayed.values()), wait_s=DELAY_S + 60)
    assert len(late) == sum(delayed.values()), late
    assert all(body.startswith(b"late") for body in late)
    done = _cluster(plane, _groups("Reconciled", 1))
    assert [r["brokerName"] for r in done["status"]["brokerGroups"]] == ["broker-0"]
    sets = f"/apis/apps/v1/namespaces/{NS}/statefulsets"
    for g in range(1, GROUPS):
        assert harness.watch_for(plane, sets, _base(g), lambda o: o is None) is None
        missing = admin.run("get", "configmap", f"{_base(g)}-members", "-n", NS, check=False)
        assert missing.returncode != 0
    route = _route_becomes(zero, {("broker-0", RW)})
    assert len(route) == 2
