"""The TCP fault proxy (gannet.node.testing.fault_proxy) against a real echo server on
127.0.0.1: pass, delay, drop (black hole), partition (cut and refused), heal."""

from __future__ import annotations

import asyncio

import pytest

from gannet.node.testing.fault_proxy import FaultProxy, Mode

pytestmark = pytest.mark.timeout(30)


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _round_trip(port: int, payload: bytes, timeout_s: float) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), timeout_s)
    finally:
        writer.close()


async def _scenario() -> None:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    target = server.sockets[0].getsockname()[1]
    proxy = FaultProxy("127.0.0.1", target)
    await proxy.start()
    loop = asyncio.get_running_loop()
    try:
        assert await _round_trip(proxy.port, b"hello", 5) == b"hello"
        proxy.set_mode(Mode.DELAY, delay_s=0.3)
        started = loop.time()
        assert await _round_trip(proxy.port, b"slow", 5) == b"slow"
        assert loop.time() - started >= 0.55  # delayed both ways
        proxy.set_mode(Mode.DROP)
        with pytest.raises(TimeoutError):
            await _round_trip(proxy.port, b"lost", 0.5)
        assert proxy.counters.dropped_bytes_total >= 4
        proxy.set_mode(Mode.PASS)
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"up")
        assert await asyncio.wait_for(reader.readexactly(2), 5) == b"up"  # the link exists
        proxy.set_mode(Mode.PARTITION)
        assert await asyncio.wait_for(reader.read(10), 5) == b""  # the open link is cut
        writer.close()
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await _round_trip(proxy.port, b"refused", 5)
        assert proxy.counters.refused_total >= 1
        proxy.set_mode(Mode.PASS)
        assert await _round_trip(proxy.port, b"healed", 5) == b"healed"
        with pytest.raises(ValueError, match="positive delay_s"):
            proxy.set_mode(Mode.DELAY)
    finally:
        await proxy.stop()
        server.close()
        await server.wait_closed()


def test_fault_proxy_passes_delays_drops_partitions_and_heals() -> None:
    asyncio.run(_scenario())


def test_fault_proxy_names_a_bad_target_port() -> None:
    with pytest.raises(ValueError, match="target port 0"):
        FaultProxy("127.0.0.1", 0)
