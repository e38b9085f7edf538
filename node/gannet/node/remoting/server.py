"""The remoting TCP server: frames in, one task per request, responses out.

One :class:`RemotingServer` serves any number of listening ports (the broker's remoting port
and its name-server port share one dispatcher). Per connection, a reader loop decodes frames
(:mod:`codec`: lengths and serialize type checked before anything is read for them; a bad frame
closes the connection) and starts a task per request, so a slow request — a long-polling pull,
a send waiting for its Raft commit — never holds the requests behind it. Bounded queues: at most
``inflight_per_connection_max`` requests run per connection (more are answered ``SYSTEM_BUSY``
at once, oneway ones dropped), at most ``connections_max`` connections are open (more are
closed on accept), and a connection whose peer does not read its responses stops being read
once its write buffer passes ``write_buffer_bytes_max`` (the transport's high-water mark).

Responses go back in the order their requests finish; each carries its request's ``opaque``.
A response frame from the client (flag bit 0) answers a request the broker sent
(``NOTIFY_CONSUMER_IDS_CHANGED`` is oneway, so none is expected) and is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable

from gannet.node.remoting import codec, codes
from gannet.node.remoting.codec import Command
from gannet.node.store.tier.errors import TierUnavailable

log = logging.getLogger(__name__)

INFLIGHT_PER_CONNECTION_MAX = 256
CONNECTIONS_MAX = 4096
WRITE_BUFFER_BYTES_MAX = 8 * 1024 * 1024
TLS_HANDSHAKE_TIMEOUT_S = 10.0
"""A connection that has not finished its TLS handshake by then is closed."""


class Connection:
    """One client connection: where responses and broker-initiated requests are written."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("", 0)
        self.peer_host = str(peer[0])
        self.peer_port = int(peer[1]) if len(peer) > 1 else 0
        local = writer.get_extra_info("sockname") or ("", 0)
        self.local_host = str(local[0])
        """The broker's address the client connected to (offset message ids: :mod:`nameserver`)."""
        self.local_port = int(local[1]) if len(local) > 1 else 0
        """The broker's port the client connected to (which listener: :mod:`nameserver`)."""
        self.closed = asyncio.Event()
        self.inflight = 0
        self.client_ids: set[str] = set()
        """Client ids that heartbeated on this connection (:mod:`broker_requests`)."""

    @property
    def peer(self) -> str:
        """The peer as gRPC writes it: ``ipv4:h:p`` or ``ipv6:[h]:p``."""
        if ":" in self.peer_host:
            return f"ipv6:[{self.peer_host}]:{self.peer_port}"
        return f"ipv4:{self.peer_host}:{self.peer_port}"

    def send(self, command: Command) -> None:
        if self.closed.is_set() or self.writer.is_closing():
            return
        self.writer.write(codec.encode(command))


_LINGER_RESET = struct.pack("ii", 1, 0)


def _reset_on_close(writer: asyncio.StreamWriter) -> None:
    """Make the kernel end this connection with a reset, not a FIN, when it is closed — also
    when the process dies. The 4.x client fails the requests waiting on a channel at once only
    when it closes the channel itself (``NettyRemotingClient``'s ``failFast``), which a reset
    makes it do; a FIN only marks the channel inactive, and a send in flight to a broker killed
    meanwhile waited its whole timeout (3 s) before the producer retried it elsewhere."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)


UNREAD_BYTES_MAX = 4 * 1024 * 1024
"""What a lost connection's kernel buffer may still give up (:class:`_ServedToTheEnd`)."""


class _ServedToTheEnd(asyncio.StreamReaderProtocol):
    """A connection lost to a reset or a failed write ends like one closed: every frame the
    peer delivered is still read and served. A client that writes requests without waiting for
    their answers and then closes its socket with answers unread (the Go client persisting its
    consumer offsets at shutdown) makes its kernel reset the connection; asyncio would drop the
    frames its reader had buffered and, when an answer's write failed first, the ones still in
    the kernel's receive buffer (Linux keeps them readable after a reset)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        connected: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
        loop: asyncio.AbstractEventLoop,
        *,
        plain: bool,
    ) -> None:
        super().__init__(reader, connected, loop=loop)
        self._kept_reader = reader
        self._plain = plain
        self._kept_transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._kept_transport = transport
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ConnectionError):
            if self._plain and self._kept_transport is not None:
                unread = _unread(self._kept_transport)
                if unread:
                    self._kept_reader.feed_data(unread)
            exc = None
        super().connection_lost(exc)


def _served_to_the_end(writer: asyncio.StreamWriter) -> bool:
    """Whether ``writer``'s connection is lost and its delivered frames are still to be read."""
    transport = writer.transport
    return transport.is_closing() and isinstance(transport.get_protocol(), _ServedToTheEnd)


def _unread(transport: asyncio.BaseTransport) -> bytes:
    """The bytes still in the kernel's receive buffer of a lost connection (its socket is still
    open while the protocol hears of the loss), at most :data:`UNREAD_BYTES_MAX`."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return b""
    chunks: list[bytes] = []
    size_bytes = 0
    try:
        with socket.socket(fileno=os.dup(sock.fileno())) as raw:
            raw.setblocking(False)
            while size_bytes < UNREAD_BYTES_MAX:
                chunk = raw.recv(min(65536, UNREAD_BYTES_MAX - size_bytes))
                if not chunk:
                    break
                chunks.append(chunk)
                size_bytes += len(chunk)
    except OSError:
        pass  # nothing more to read (EAGAIN), or the reset itself
    return b"".join(chunks)


Dispatch = Callable[[Command, Connection], Awaitable[Command | None]]
"""Serve one request: its response, or None (oneway requests' responses are dropped anyway)."""
ClosedListener = Callable[[Connection], None]


class RemotingServer:
    def __init__(
        self,
        dispatch: Dispatch,
        *,
        limits: codec.Limits = codec.DEFAULT_LIMITS,
        inflight_per_connection_max: int = INFLIGHT_PER_CONNECTION_MAX,
        connections_max: int = CONNECTIONS_MAX,
        write_buffer_bytes_max: int = WRITE_BUFFER_BYTES_MAX,
        on_closed: ClosedListener | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context``: every port speaks TLS only (:mod:`tls_context`)."""
        self._dispatch = dispatch
        self._ssl = ssl_context
        self.limits = limits
        self.inflight_per_connection_max = inflight_per_connection_max
        self.connections_max = connections_max
        self.write_buffer_bytes_max = write_buffer_bytes_max
        self._on_closed = on_closed
        self._servers: list[asyncio.Server] = []
        self._addresses: list[tuple[str, int]] = []
        """``(host, port)`` of every port :meth:`listen` bound, for :meth:`reopen`."""
        self.connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.bad_frames_total = 0
        self.busy_total = 0

    async def listen(self, host: str, port: int) -> int:
        """Start listening on ``host:port`` (0: any free port); returns the bound port."""
        try:
            server = await self._start(host, port)
        except OSError as exc:
            raise OSError(
                f"cannot listen on {host}:{port} for the remoting protocol: {exc.strerror}; "
                "choose another port or stop the other process"
            ) from exc
        self._servers.append(server)
        bound = int(server.sockets[0].getsockname()[1])
        self._addresses.append((host, bound))
        return bound

    @property
    def listening(self) -> bool:
        """Whether every port :meth:`listen` bound accepts connections (:meth:`close_ports` /
        :meth:`reopen`)."""
        return bool(self._addresses) and len(self._servers) == len(self._addresses)

    async def stop(self) -> None:
        """Stop accepting, close every connection, cancel the requests still running."""
        await self.close_ports()
        self._addresses.clear()

    async def close_ports(self) -> None:
        """Stop accepting, close every connection and cancel its requests (what a stopped
        process does to its clients: they move to another address); :meth:`reopen` listens on
        the same ports again. The broker's port gate calls both
        (:mod:`gannet.node.broker.port_gate`)."""
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for conn in list(self.connections):
            conn.writer.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5.0)

    async def reopen(self) -> None:
        """Listen again on every port :meth:`listen` bound (after :meth:`close_ports`);
        OSError when one cannot be bound yet (the ones bound stay open: call again)."""
        bound = {int(s.sockets[0].getsockname()[1]) for s in self._servers if s.sockets}
        for host, port in self._addresses:
            if port in bound:
                continue
            server = await self._start(host, port)
            self._servers.append(server)

    async def _start(self, host: str, port: int) -> asyncio.Server:
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.StreamReaderProtocol:
            reader = asyncio.StreamReader(limit=64 * 1024, loop=loop)
            return _ServedToTheEnd(reader, self._connected, loop, plain=True)

        if self._ssl is None:
            return await loop.create_server(protocol, host, port)
        return await asyncio.start_server(
            self._connected,
            host,
            port,
            limit=64 * 1024,
            ssl=self._ssl,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S,
        )

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.connections) >= self.connections_max:
            log.warning("remoting: %d connections open; closing a new one", len(self.connections))
            writer.close()
            return
        writer.transport.set_write_buffer_limits(high=self.write_buffer_bytes_max)
        _reset_on_close(writer)
        conn = Connection(reader, writer)
        self.connections.add(conn)
        try:
            await self._read_loop(conn)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        except codec.FrameError as exc:
            self.bad_frames_total += 1
            log.info("remoting: closing %s after a bad frame: %s", conn.peer, exc)
        finally:
            conn.closed.set()
            self.connections.discard(conn)
            writer.close()
            if self._on_closed is not None:
                self._on_closed(conn)

    async def _read_loop(self, conn: Connection) -> None:
        reader = conn.reader
        while True:
            prefix = await reader.readexactly(4)
            length = codec.frame_length(prefix, self.limits)
            frame = await reader.readexactly(length)
            command = codec.decode_frame(frame, self.limits)
            if command.is_response:
                continue
            if conn.inflight >= self.inflight_per_connection_max:
                self.busy_total += 1
                if not command.is_oneway:
                    conn.send(
                        command.response(
                            codes.SYSTEM_BUSY,
                            f"{conn.inflight} requests of this connection are in flight; "
                            "retry later",
                        )
                    )
                continue
            conn.inflight += 1
            task = asyncio.create_task(self._serve(command, conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            # backpressure: a peer that does not read its responses is not read either (a plain
            # connection already lost is not: what it delivered is still served)
            if not _served_to_the_end(conn.writer):
                await conn.writer.drain()

    async def _serve(self, command: Command, conn: Connection) -> None:
        try:
            response = await self._dispatch(command, conn)
        except asyncio.CancelledError:
            raise
        except TierUnavailable as exc:  # an offloaded offset while the bucket is down: retry
            response = command.response(codes.SYSTEM_BUSY, f"tier not available now: {exc}")
        except Exception as exc:
            log.exception("remoting: request code %d failed", command.code)
            response = command.response(codes.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            conn.inflight -= 1
        if response is not None and not command.is_oneway:
            conn.send(response)
