"""A TCP fault proxy for tests: forwards one listening port to one target and injects faults.

Used by the replication e2e scenarios (``e2e/replication``) between Raft peers: one proxy per
ordered pair of nodes (node i dials node j's peer port through proxy ``i→j``), so a partition
can cut exactly the links wanted. Modes (:class:`Mode`), switchable at any time:

* ``PASS`` — bytes flow both ways unchanged;
* ``DELAY`` — every chunk is held ``delay_s`` before it is forwarded (order kept per direction);
* ``DROP`` — connections stay open but every byte is discarded (a black hole: the sender sees
  no error, only silence, like lost packets);
* ``PARTITION`` — existing connections are closed and new ones are closed as soon as accepted
  (the peer sees connection errors and reconnects with back-off).

asyncio inside (:class:`FaultProxy`, one per port); :class:`ProxyThread` runs any number of them
on one background event loop for synchronous tests. Each relay direction reads at most
``CHUNK_BYTES`` at a time and holds at most ``DELAY_QUEUE_CHUNKS_MAX`` delayed chunks (beyond
that the reader waits: bounded memory). Counters: connections accepted and refused, bytes
forwarded and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

CHUNK_BYTES = 64 * 1024
DELAY_QUEUE_CHUNKS_MAX = 1024
T = TypeVar("T")


class Mode(enum.Enum):
    PASS = "pass"
    DELAY = "delay"
    DROP = "drop"
    PARTITION = "partition"


@dataclass(slots=True)
class ProxyCounters:
    accepted_total: int = 0
    refused_total: int = 0
    forwarded_bytes_total: int = 0
    dropped_bytes_total: int = 0


class FaultProxy:
    """``listen_host:listen_port`` → ``target_host:target_port`` with injectable faults."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        if not 0 < target_port < 65536:
            raise ValueError(f"target port {target_port} is not a TCP port")
        self.target = (target_host, target_port)
        self.listen = (listen_host, listen_port)
        self.mode = Mode.PASS
        self.delay_s = 0.0
        self.counters = ProxyCounters()
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, *self.listen)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self._close_all()
        for task in list(self._links):
            task.cancel()
        await asyncio.gather(*self._links, return_exceptions=True)

    def set_mode(self, mode: Mode, *, delay_s: float = 0.0) -> None:
        """Switch the fault; ``PARTITION`` also cuts the connections that exist now."""
        if delay_s < 0:
            raise ValueError(f"delay_s must not be negative, got {delay_s}")
        if mode is Mode.DELAY and delay_s == 0:
            raise ValueError("Mode.DELAY needs a positive delay_s")
        self.mode = mode
        self.delay_s = delay_s
        if mode is Mode.PARTITION:
            self._close_all()

    def _partitioned(self) -> bool:
        return self.mode is Mode.PARTITION

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode is Mode.PARTITION:
            self.counters.refused_total += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self.counters.refused_total += 1
            writer.close()
            return
        if self._partitioned():  # partitioned while we dialled the target
            self.counters.refused_total += 1
            for w in (writer, up_writer):
                w.close()
            return
        self.counters.accepted_total += 1
        self._writers.update((writer, up_writer))
        tasks = (
            asyncio.create_task(self._relay(reader, up_writer)),
            asyncio.create_task(self._relay(up_reader, writer)),
        )
        self._links.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._links.difference_update(tasks)
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy one direction, applying the mode chunk by chunk."""
        delayed: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(DELAY_QUEUE_CHUNKS_MAX)
        loop = asyncio.get_running_loop()

        async def send_delayed() -> None:
            while True:
                due, data = await delayed.get()
                wait_s = due - loop.time()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send_delayed())
        try:
            while True:
                data = await reader.read(CHUNK_BYTES)
                if not data:
                    return
                if self.mode is Mode.PARTITION:
                    self.counters.dropped_bytes_total += len(data)
                    return  # the link ends: both sides closed by _accept
                if self.mode is Mode.DROP:
                    self.counters.dropped_bytes_total += len(data)
                    continue
                self.counters.forwarded_bytes_total += len(data)
                if self.mode is Mode.DELAY or not delayed.empty():
                    await delayed.put((loop.time() + self.delay_s, data))
                else:
                    writer.write(data)
                    await writer.drain()
        except (ConnectionError, OSError):
            return
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await sender


class ProxyThread:
    """Fault proxies on one background event loop, driven from synchronous code."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fault-proxy", daemon=True
        )
        self._thread.start()
        self.proxies: list[FaultProxy] = []

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def add(self, target_host: str, target_port: int, *, listen_port: int = 0) -> FaultProxy:
        """Start a proxy to the target; its ``port`` is where to connect."""
        proxy = FaultProxy(target_host, target_port, listen_port=listen_port)
        self._run(proxy.start())
        self.proxies.append(proxy)
        return proxy

    def set_mode(self, proxy: FaultProxy, mode: Mode, *, delay_s: float = 0.0) -> None:
        async def switch() -> None:
            proxy.set_mode(mode, delay_s=delay_s)

        self._run(switch())

    def heal(self) -> None:
        """Every proxy back to ``PASS``."""
        for proxy in self.proxies:
            self.set_mode(proxy, Mode.PASS)

    def close(self) -> None:
        for proxy in self.proxies:
            with contextlib.suppress(Exception):
                self._run(proxy.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
