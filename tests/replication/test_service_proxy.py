"""The e2e's stand-ins for a Kubernetes Service in front of the members
(:class:`e2e.replication.clients.ServiceProxy`), on real sockets.

The Node.js client dials one address, so ``make e2e-failover``, ``make e2e-faults`` and
``make e2e-partition-clients`` measure it through this proxy: what it does to a connection when
a member refuses decides what those figures mean. Round robin (the default) tries the next
member; kube-proxy's way (``ready``) draws one member and passes a refusal on.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from e2e.replication.clients import ServiceProxy

TIMEOUT_S = 5.0


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(1024):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield ("127.0.0.1", int(server.server_address[1]))
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def refusing() -> tuple[str, int]:
    """An address whose port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return ("127.0.0.1", int(probe.getsockname()[1]))


def _round_trip(proxy: ServiceProxy) -> bytes:
    """Bytes echoed through one new connection (b"" when the proxy closed or reset it)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT_S) as conn:
        try:
            conn.sendall(b"ping")
            return conn.recv(1024)
        except ConnectionResetError:  # closed with our bytes unread
            return b""


def test_round_robin_skips_a_member_that_refuses(
    echo: tuple[str, int], refusing: tuple[str, int]
) -> None:
    proxy = ServiceProxy([refusing, echo, refusing])
    try:
        for _ in range(4):
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT_S) as conn:
                conn.sendall(b"ping")
                assert conn.recv(1024) == b"ping"
                assert proxy.live_targets() == {echo: 1}
        assert proxy.refused_total == 0
    finally:
        proxy.close()


def test_kube_proxy_way_sends_the_first_connection_to_the_first_member_then_draws(
    echo: tuple[str, int], refusing: tuple[str, int]
) -> None:
    listed = [refusing]
    proxy = ServiceProxy([echo, refusing], ready=lambda: list(listed), seed=1)
    try:
        assert _round_trip(proxy) == b"ping"  # the first: targets[0], whatever is listed
        assert _round_trip(proxy) == b""  # drawn from the listed one, which refuses: no retry
        assert proxy.refused_total == 1
        listed[:] = [echo]
        assert _round_trip(proxy) == b"ping"
        listed.clear()  # nothing ready: kube-proxy rejects
        assert _round_trip(proxy) == b""
        assert proxy.refused_total == 2
    finally:
        proxy.close()
