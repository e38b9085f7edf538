"""NATS JetStream R3 as the replicated peer of S6 (bench/peers/natsjs.py): the command lines of
a 3-server cluster, and a real cluster on 127.0.0.1 whose streams have 3 replicas and give back
every message published (skipped, with the reason, where nats-server is not installed)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from bench.peers import natsjs, processes
from bench.peers.base import Layout


def test_each_server_routes_to_the_two_others() -> None:
    if shutil.which("nats-server") is None:
        pytest.skip("nats-server is not installed (make bench-peers installs it)")
    ports = [7001, 7002, 7003]
    argv = natsjs.cluster_argv(1, Path("/s1"), 4222, ports)
    assert argv[argv.index("--routes") + 1] == "nats://127.0.0.1:7001,nats://127.0.0.1:7003"
    assert argv[argv.index("--cluster") + 1] == "nats://127.0.0.1:7002"
    assert argv[argv.index("--server_name") + 1] == "n1"
    assert argv[argv.index("-sd") + 1] == "/s1"
    assert "-js" in argv


def test_sync_flush_r1_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(processes.PeerError, match="no per-message fsync"):
        natsjs.start(tmp_path, "sync", 1, Layout(("t",), 1, "g"))


async def _roundtrip(url: str, topic: str, durable: str, count: int) -> tuple[int, int, int]:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=10)
        info = await js.stream_info(topic)
        replicas = 1 + len(info.cluster.replicas or []) if info.cluster else 1
        for i in range(count):
            await js.publish(topic, f"m{i}".encode())
        sub = await js.pull_subscribe(topic, durable=durable)
        seen: set[bytes] = set()
        while len(seen) < count:
            for message in await sub.fetch(count, timeout=5):
                seen.add(message.data)
                await message.ack()
        return info.config.num_replicas or 0, replicas, len(seen)
    finally:
        await nc.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_r3_cluster_replicates_streams_and_returns_every_message(tmp_path: Path) -> None:
    if shutil.which("nats-server") is None:
        pytest.skip("nats-server is not installed (make bench-peers installs it)")
    pytest.importorskip("nats", reason="nats-py is not installed (make bench-peers: bench extra)")
    running = natsjs.start(tmp_path, "sync", 3, Layout(("t0", "t1"), 16, "g"))
    try:
        assert running.system == "nats-r3"
        assert running.durability.startswith("async flush, R3")
        assert len(running.pids) == 3
        configured, members, got = asyncio.run(_roundtrip(running.endpoint, "t1", "g-1", 100))
        assert (configured, members, got) == (3, 3, 100)
    finally:
        running.stop()
    assert all(child.process.poll() is not None for child in running.children)
