"""NATS JetStream as a peer: Debian's ``nats-server -js`` (installed by ``make bench-peers``),
one file-store stream per topic (subject = topic name), a durable pull consumer per group.

R1 is one server. R3 is three ``nats-server -js`` processes clustered on 127.0.0.1 (cluster
routes between them, one store directory each, all pinned to CPU 0 like the other brokers),
with every stream created with ``num_replicas=3``; clients connect to the first server, which
routes publishes to each stream's leader.

Durability: nats-server 2.9 acknowledges a publish once the message is in the stream's file
(written to the OS, not fsynced; data is synced periodically) — the equivalent of async flush.
It has no per-message fsync option (``sync_interval: always`` arrived in 2.10), so the
sync-flush R1 scenario (S5) is not run against NATS. With R3 a publish is acknowledged once the
stream's Raft group has the message on a quorum (2 of 3 servers), still without an fsync per
message, so the replicated scenario (S6, which Gannet runs with sync flush) runs NATS R3 and
labels it ``async flush, R3``: the same replication factor, weaker local durability.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

from bench.peers import processes
from bench.peers.base import Layout, Running, durability_text

BROKER_CPUS = "0"
START_TIMEOUT_S = 30.0
CLUSTER_READY_TIMEOUT_S = 60.0
CLUSTER_NAME = "bench"


def binary() -> str:
    path = shutil.which("nats-server")
    if path is None:
        raise processes.PeerError("nats-server not installed (make bench-peers installs it)")
    return path


def version() -> str:
    out = subprocess.run([binary(), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def start(workdir: Path, flush: str, replicas: int, layout: Layout) -> Running:
    if replicas == 3:
        return _start_cluster(workdir, layout)
    if flush != "async" or replicas != 1:
        raise processes.PeerError(
            "nats-server 2.9 has no per-message fsync: async R1 and R3 (quorum ack) only"
        )
    port = processes.free_port()
    store = workdir / "nats"
    argv = [binary(), "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(port)]
    child = processes.spawn("nats", argv, workdir / "nats.log", cpus=BROKER_CPUS)
    url = f"nats://127.0.0.1:{port}"
    try:
        processes.wait_port(child, "127.0.0.1", port, START_TIMEOUT_S)
        asyncio.run(_create(url, list(layout.topics), layout.group, replicas=1))
    except BaseException:  # also an interrupt while starting: nothing left running
        processes.stop(child)
        raise

    return Running(
        "nats", version(), url, [child], durability_text("async", 1) + " (no fsync per publish)",
        settings={"store": "file", "replicas": 1, "cpus": BROKER_CPUS,
                  "queues": "one stream per topic (queues not modelled)"},
    )  # fmt: skip


def cluster_argv(index: int, store: Path, client_port: int, cluster_ports: list[int]) -> list[str]:
    """The command line of server ``index`` of a 3-server JetStream cluster on 127.0.0.1:
    unique server name, its own store directory, routes to every other server."""
    routes = ",".join(f"nats://127.0.0.1:{p}" for i, p in enumerate(cluster_ports) if i != index)
    return [
        binary(), "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(client_port),
        "--server_name", f"n{index}", "--cluster_name", CLUSTER_NAME,
        "--cluster", f"nats://127.0.0.1:{cluster_ports[index]}", "--routes", routes,
    ]  # fmt: skip


def _start_cluster(workdir: Path, layout: Layout) -> Running:
    client_ports = [processes.free_port() for _ in range(3)]
    cluster_ports = [processes.free_port() for _ in range(3)]
    children: list[processes.Child] = []
    try:
        for i in range(3):
            argv = cluster_argv(i, workdir / f"nats-{i}", client_ports[i], cluster_ports)
            children.append(
                processes.spawn(f"nats-{i}", argv, workdir / f"nats-{i}.log", cpus=BROKER_CPUS)
            )
        for child, port in zip(children, client_ports, strict=True):
            processes.wait_port(child, "127.0.0.1", port, START_TIMEOUT_S)
        url = f"nats://127.0.0.1:{client_ports[0]}"
        asyncio.run(_create(url, list(layout.topics), layout.group, replicas=3))
    except BaseException:  # also an interrupt while starting: nothing left running
        for child in reversed(children):
            processes.stop(child)
        raise
    return Running(
        "nats-r3", version(), url, children,
        durability_text("async", 3) + " (acknowledged on a quorum; no fsync per publish)",
        settings={"store": "file", "replicas": 3, "servers": 3, "cpus": BROKER_CPUS,
                  "queues": "one stream per topic (queues not modelled)",
                  "clients connect to": "server n0 (routes to stream leaders)"},
    )  # fmt: skip


async def _create(url: str, topics: list[str], group: str, *, replicas: int) -> None:
    """One stream per topic with ``replicas`` replicas and one durable pull consumer per
    stream. A fresh cluster answers "JetStream system temporarily unavailable" (or has too few
    servers) until its meta group has a leader, so stream creation is retried until then."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig
    from nats.js.errors import APIError, ServiceUnavailableError

    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    loop = asyncio.get_running_loop()
    try:
        for topic in topics:
            config = StreamConfig(
                name=topic, subjects=[topic], storage=StorageType.FILE, num_replicas=replicas
            )
            deadline = loop.time() + CLUSTER_READY_TIMEOUT_S
            while True:
                try:
                    await js.add_stream(config)
                    break
                except (TimeoutError, APIError, ServiceUnavailableError) as exc:
                    if loop.time() > deadline:
                        raise processes.PeerError(
                            f"NATS never created stream {topic} (R{replicas}): {exc}"
                        ) from exc
                    await asyncio.sleep(0.5)  # the cluster elects its meta leader on its own
        # Consumers are named per topic index: drivers bind with durable=f"{group}-{index}".
        for i, topic in enumerate(topics):
            await js.add_consumer(
                topic, ConsumerConfig(durable_name=f"{group}-{i}", ack_policy=AckPolicy.EXPLICIT)
            )
    finally:
        await nc.close()
