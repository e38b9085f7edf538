"""Redis Streams as a peer: Debian's ``redis-server`` (installed by ``make bench-peers``),
one stream per topic, consumer groups via ``XGROUP CREATE``. Durability equivalent to a broker's
flush mode: async flush = ``appendonly yes`` + ``appendfsync everysec``; sync flush =
``appendfsync always`` (Redis fsyncs the AOF before answering, with group commit across
clients). Single node only (R1): Redis replication is asynchronous, so it has no R3 equivalent.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bench.peers import processes
from bench.peers.base import Layout, Running, durability_text

BROKER_CPUS = "0"


def binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise processes.PeerError("redis-server not installed (make bench-peers installs it)")
    return path


def version() -> str:
    out = subprocess.run([binary(), "--version"], capture_output=True, text=True, check=True)
    return "redis " + next((p[2:] for p in out.stdout.split() if p.startswith("v=")), "?")


def start(workdir: Path, flush: str, replicas: int, layout: Layout) -> Running:
    if replicas != 1:
        raise processes.PeerError("Redis Streams has no synchronous replication (R1 only)")
    port = processes.free_port()
    fsync = "always" if flush == "sync" else "everysec"
    (workdir / "redis").mkdir(parents=True, exist_ok=True)
    argv = [
        binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir / "redis"),
        "--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--daemonize", "no",
        "--protected-mode", "no",
    ]  # fmt: skip
    child = processes.spawn("redis", argv, workdir / "redis.log", cpus=BROKER_CPUS)
    try:
        processes.wait_port(child, "127.0.0.1", port, 30)
        _create(port, layout)
    except BaseException:  # also an interrupt while starting: nothing left running
        processes.stop(child)
        raise

    return Running(
        "redis", version(), f"127.0.0.1:{port}", [child], durability_text(flush, 1),
        settings={"appendonly": "yes", "appendfsync": fsync, "cpus": BROKER_CPUS,
                  "queues": "one stream per topic (queues not modelled)"},
    )  # fmt: skip


def _create(port: int, layout: Layout) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    for topic in layout.topics:
        client.xgroup_create(topic, layout.group, id="0", mkstream=True)
    client.close()
