"""Gannet as a benchmark subject: ``gannet broker run`` (one node) or ``gannet cluster up
--nodes 3`` (a local Raft group), started as a child process group pinned to CPU 0; topics and
groups are created through the admin API (``gannet.admin.v1.Admin``). :func:`start_remoting`
adds the remoting and name-server ports for remoting clients (``bench/remoting.py``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import grpc

from bench.peers import namesrv as namesrv_probe
from bench.peers import processes
from bench.peers.base import Layout, Running, durability_text

BROKER_CPUS = "0"
START_TIMEOUT_S = 60.0
CLUSTER_START_TIMEOUT_S = 180.0


def version() -> str:
    from importlib.metadata import version as dist_version

    return f"gannet {dist_version('gannet')} (grpcio {dist_version('grpcio')})"


def _gannet() -> str:
    return str(Path(sys.executable).with_name("gannet"))


def _create_on(endpoint: str, topics: list[str], queues: int, group: str) -> None:
    from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        for topic in topics:
            admin.CreateTopic(
                admin_pb2.CreateTopicRequest(
                    name=topic, queue_nums=queues, message_type=admin_pb2.NORMAL
                ),
                timeout=30,
            )
        admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=30)


def start(workdir: Path, flush: str, replicas: int, layout: Layout) -> Running:
    """Start Gannet with ``flush`` ("async" | "sync") and ``replicas`` (1 or 3)."""
    if replicas == 1:
        port = processes.free_port()
        argv = [
            _gannet(), "broker", "run", "--data-dir", str(workdir / "store"),
            "--listen", f"127.0.0.1:{port}", "--metrics-listen", "", "--flush", flush,
            "--file-size-mb", "256",
        ]  # fmt: skip
        child = processes.spawn("gannet", argv, workdir / "gannet.log", cpus=BROKER_CPUS)
        endpoint = f"127.0.0.1:{port}"
        try:
            processes.wait_port(child, "127.0.0.1", port, START_TIMEOUT_S)
            _create_on(endpoint, list(layout.topics), layout.queues, layout.group)
        except BaseException:  # also an interrupt while starting: nothing left running
            processes.stop(child)
            raise
        return Running(
            "gannet", version(), endpoint, [child], durability_text(flush, 1),
            settings={"flush": flush, "file_size_mb": 256, "cpus": BROKER_CPUS},
        )  # fmt: skip
    return _start_cluster(workdir, flush, replicas, layout)


def start_remoting(
    workdir: Path,
    flush: str,
    layout: Layout,
    *,
    source_tree: Path | None = None,
    env: dict[str, str] | None = None,
) -> Running:
    """One ``gannet broker run`` serving the remoting protocol and the name-server requests
    (``--remoting-port``, ``--nameserver-port``) beside gRPC. The endpoint is the name server's
    address, which is what a remoting client (``DefaultMQProducer``) is given. ``source_tree``:
    run the broker of another checkout (its ``node/`` first on PYTHONPATH), to compare two;
    ``env``: more environment (a PYTHONPATH there goes before the source tree's)."""
    port, remoting_port, namesrv_port = (processes.free_port() for _ in range(3))
    argv = [
        _gannet(), "broker", "run", "--data-dir", str(workdir / "store"),
        "--listen", f"127.0.0.1:{port}", "--metrics-listen", "", "--flush", flush,
        "--file-size-mb", "256", "--remoting-port", str(remoting_port),
        "--nameserver-port", str(namesrv_port),
    ]  # fmt: skip
    env = dict(env or {})
    if source_tree is not None:
        paths = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
        env["PYTHONPATH"] = os.pathsep.join([*paths, str(source_tree / "node")])
    child = processes.spawn("gannet", argv, workdir / "gannet.log", env=env, cpus=BROKER_CPUS)
    endpoint = f"127.0.0.1:{namesrv_port}"
    try:
        processes.wait_port(child, "127.0.0.1", namesrv_port, START_TIMEOUT_S)
        _create_on(f"127.0.0.1:{port}", list(layout.topics), layout.queues, layout.group)
        for topic in layout.topics:
            namesrv_probe.wait_route(child, endpoint, topic)
    except BaseException:  # also an interrupt while starting: nothing left running
        processes.stop(child)
        raise
    return Running(
        "gannet", version(), endpoint, [child], durability_text(flush, 1),
        settings={"flush": flush, "file_size_mb": 256, "cpus": BROKER_CPUS},
    )  # fmt: skip


def _start_cluster(workdir: Path, flush: str, replicas: int, layout: Layout) -> Running:
    """``gannet cluster up``: the leader is whichever node accepts the admin calls."""
    base = processes.free_port()
    while base + 10 + replicas > 65000 or not all(
        _is_free(base + i) for i in (*range(replicas), *range(10, 10 + replicas))
    ):
        base = processes.free_port()
    argv = [
        _gannet(), "cluster", "up", "--nodes", str(replicas), "--data-root", str(workdir / "c"),
        "--base-port", str(base), "--metrics-base-port", "0", "--flush", flush,
    ]  # fmt: skip
    # Three nodes pinned to one loaded CPU missed the 5 s commit bound of admin writes: the
    # Raft group runs unpinned (docs/benchmarks.md §1 allows spreading over CPUs 0-1; said so).
    child = processes.spawn("gannet-cluster", argv, workdir / "cluster.log", cpus=None)
    try:
        for i in range(replicas):
            processes.wait_port(child, "127.0.0.1", base + i, START_TIMEOUT_S)
        endpoint = _leader(child, [f"127.0.0.1:{base + i}" for i in range(replicas)])
        _create_on(endpoint, list(layout.topics), layout.queues, layout.group)
    except BaseException:  # also an interrupt while starting: nothing left running
        processes.stop(child)
        raise
    return Running(
        f"gannet-r{replicas}", version(), endpoint, [child], durability_text(flush, replicas),
        settings={"flush": flush, "nodes": replicas, "cpus": "0-1 (unpinned)"},
    )  # fmt: skip


def _is_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _leader(child: processes.Child, endpoints: list[str]) -> str:
    """The node that accepts an admin write (followers refuse, naming the leader once there is
    one), polled until an election has happened."""
    deadline = time.monotonic() + CLUSTER_START_TIMEOUT_S
    last: Exception | None = None
    probe = 0
    while time.monotonic() < deadline:
        for endpoint in endpoints:
            probe += 1
            name = f"bench-leader-probe-{os.getpid()}-{probe}"
            try:
                _create_on(endpoint, [name], 1, name)
                return endpoint
            except grpc.RpcError as exc:
                last = exc
        if child.process.poll() is not None:
            break
        time.sleep(0.5)  # waiting for an election: no event is exposed to a client
    raise processes.PeerError(f"no Gannet leader among {endpoints}: {last}\n{child.log_tail()}")
