"""NATS JetStream as a peer: Debian's ``nats-server -js`` (installed by ``make bench-peers``),
one file-store stream per topic (subject = topic name), a durable pull consumer per group.

Durability: nats-server 2.9 acknowledges a publish once the message is in the stream's file
(written to the OS, not fsynced; data is synced periodically) — the equivalent of async flush.
It has no per-message fsync option (``sync_interval: always`` arrived in 2.10), so the
sync-flush scenarios are not run against NATS. R3 needs a 3-server cluster; not run here.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

from bench.peers import processes
from bench.peers.base import Layout, Running, durability_text

BROKER_CPUS = "0"


def binary() -> str:
    path = shutil.which("nats-server")
    if path is None:
        raise processes.PeerError("nats-server not installed (make bench-peers installs it)")
    return path


def version() -> str:
    out = subprocess.run([binary(), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def start(workdir: Path, flush: str, replicas: int, layout: Layout) -> Running:
    if flush != "async" or replicas != 1:
        raise processes.PeerError(
            "nats-server 2.9 has no per-message fsync and R3 needs a cluster: async R1 only"
        )
    port = processes.free_port()
    store = workdir / "nats"
    argv = [binary(), "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(port)]
    child = processes.spawn("nats", argv, workdir / "nats.log", cpus=BROKER_CPUS)
    url = f"nats://127.0.0.1:{port}"
    try:
        processes.wait_port(child, "127.0.0.1", port, 30)
        asyncio.run(_create(url, list(layout.topics), layout.group))
    except Exception:
        processes.stop(child)
        raise

    return Running(
        "nats", version(), url, [child], durability_text("async", 1) + " (no fsync per publish)",
        settings={"store": "file", "replicas": 1, "cpus": BROKER_CPUS,
                  "queues": "one stream per topic (queues not modelled)"},
    )  # fmt: skip


async def _create(url: str, topics: list[str], group: str) -> None:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

    nc = await nats.connect(url)
    js = nc.jetstream()
    for topic in topics:
        await js.add_stream(StreamConfig(name=topic, subjects=[topic], storage=StorageType.FILE))
    # Consumers are named per topic index: drivers bind with durable=f"{group}-{index}".
    for i, topic in enumerate(topics):
        await js.add_consumer(
            topic, ConsumerConfig(durable_name=f"{group}-{i}", ack_policy=AckPolicy.EXPLICIT)
        )
    await nc.close()
