"""Requests a client wrote before resetting its connection are still served.

The Go client (rocketmq-client-go v2) persists a push consumer's offsets at shutdown as
UPDATE_CONSUMER_OFFSET requests it does not wait for, then closes its socket with their answers
unread, so its kernel resets the connection. asyncio's stream reader then dropped the frames it
had buffered, and a transport closed by a failed write left the rest unread in the kernel
(``e2e/clients/go``'s ``offset_resume`` lost offsets so). The server's protocol
(:class:`gannet.node.remoting.server._ServedToTheEnd`) treats the loss as the end of the stream,
after what was delivered."""

from __future__ import annotations

import asyncio
import socket
import struct

from gannet.node.remoting import codec, codes, server
from gannet.node.remoting.codec import Command

UPDATES = 16


def _update(queue_id: int) -> dict[str, str]:
    return {"consumerGroup": "G", "topic": "T", "queueId": str(queue_id), "commitOffset": "1"}


def _frames() -> bytes:
    return b"".join(
        codec.encode(Command(codes.UPDATE_CONSUMER_OFFSET, opaque=i + 1, ext=_update(i)))
        for i in range(UPDATES)
    )


async def _read_all(reader: asyncio.StreamReader) -> list[Command]:
    got: list[Command] = []
    while True:
        try:
            prefix = await reader.readexactly(4)
        except asyncio.IncompleteReadError:
            return got
        got.append(codec.decode_frame(await reader.readexactly(codec.frame_length(prefix))))


class _Transport(asyncio.BaseTransport):
    """The transport's part the protocol reads: the socket (a real one)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self._sock if name == "socket" else default

    def is_closing(self) -> bool:
        return True  # lost

    def close(self) -> None:
        pass


def _protocol(sock: socket.socket) -> tuple[server._ServedToTheEnd, asyncio.StreamReader]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(loop=loop)

    async def connected(_r: asyncio.StreamReader, _w: asyncio.StreamWriter) -> None:
        return None

    protocol = server._ServedToTheEnd(reader, connected, loop, plain=True)
    protocol.connection_made(_Transport(sock))
    return protocol, reader


def test_frames_buffered_and_still_in_the_kernel_are_served_after_a_reset() -> None:
    frames = _frames()
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    with listener, accepted:
        # the peer wrote every frame, then reset the connection (unread answers do that)
        client.sendall(frames)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        half = len(frames) // 2

        async def served() -> list[Command]:
            protocol, reader = _protocol(accepted)
            # the reader had taken in the first half, the rest is still in the kernel
            protocol.data_received(accepted.recv(half))
            protocol.connection_lost(ConnectionResetError(104, "Connection reset by peer"))
            return await _read_all(reader)

        got = asyncio.run(served())
    assert [c.ext["queueId"] for c in got] == [str(i) for i in range(UPDATES)]


def test_a_lost_tls_connection_ends_after_what_its_reader_buffered() -> None:
    frames = _frames()

    async def served() -> list[Command]:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)

        async def connected(_r: asyncio.StreamReader, _w: asyncio.StreamWriter) -> None:
            return None

        protocol = server._ServedToTheEnd(reader, connected, loop, plain=False)
        protocol.data_received(frames)
        protocol.connection_lost(BrokenPipeError(32, "Broken pipe"))
        return await _read_all(reader)

    got = asyncio.run(served())
    assert len(got) == UPDATES
