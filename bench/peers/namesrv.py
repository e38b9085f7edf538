"""Waiting until a name server routes a topic, for peers run for remoting clients
(:func:`bench.peers.rocketmq.start_remoting`, :func:`bench.peers.gannet.start_remoting`): a
broker registers its topics with RocketMQ's name server on its own schedule after its port
opens, so an open port does not yet mean a client can send.

One ``GET_ROUTEINFO_BY_TOPIC`` (105) request a poll, framed by Gannet's remoting codec
(``docs/formats/remoting.md``) over a plain socket; the answer's code 0 with a body is a route.
"""

from __future__ import annotations

import contextlib
import socket
import time

from bench.peers import processes
from gannet.node.remoting import codec, codes

ROUTE_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.5


def route_code(namesrv: str, topic: str) -> int:
    """The name server's answer code to a route request for ``topic`` (0: routed)."""
    host, _, port = namesrv.rpartition(":")
    request = codec.Command(codes.GET_ROUTEINFO_BY_TOPIC, opaque=1, ext={"topic": topic})
    with socket.create_connection((host, int(port)), timeout=REQUEST_TIMEOUT_S) as sock:
        sock.sendall(codec.encode(request))
        reply = codec.decode_frame(_exactly(sock, codec.frame_length(_exactly(sock, 4))))
    if reply.code == codes.SUCCESS and not reply.body:
        return -1  # answered without a route: not routed yet
    return reply.code


def wait_route(child: processes.Child, namesrv: str, topic: str) -> None:
    """Return once ``namesrv`` routes ``topic``; raise (with ``child``'s log tail) if ``child``
    exits or :data:`ROUTE_TIMEOUT_S` passes."""
    deadline = time.monotonic() + ROUTE_TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, codec.FrameError):
            code = route_code(namesrv, topic)
            if code == codes.SUCCESS:
                return
            last = f"code {code}"
        if child.process.poll() is not None:
            break
        time.sleep(POLL_INTERVAL_S)  # registration is the broker's own timer: nothing to await
    raise processes.PeerError(f"{namesrv} never routed {topic}: {last}\n{child.log_tail()}")


def _exactly(sock: socket.socket, size_bytes: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size_bytes:
        got = sock.recv(size_bytes - len(chunks))
        if not got:
            raise ConnectionError("the name server closed the connection")
        chunks += got
    return bytes(chunks)
