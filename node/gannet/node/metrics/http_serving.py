"""The broker's HTTP endpoint (port 5557 by default): ``/metrics``, ``/healthz``, ``/readyz``.

* ``GET /metrics`` — the registry in the Prometheus text format (or OpenMetrics when the
  scraper asks for it in ``Accept``).
* ``GET /healthz`` — 200 ``ok`` whenever the process answers at all (liveness).
* ``GET /readyz`` — 200 ``ready`` when the broker's ``not_ready_reason()`` is None, else 503
  with the reason (``store recovering``, ``gRPC server not serving``, ``stopping``, and on a
  replicating node ``no Raft leader known``).

A ``ThreadingHTTPServer`` on its own thread, kept off the broker's event loop so that a busy
loop cannot make probes time out. Bounded: at most ``requests_inflight_max`` requests are
served at once (more get a bare 503 from the accepting thread), each socket read or write times
out after ``socket_timeout_s``, and only ``GET``/``HEAD`` of the three paths are served.

Started and stopped by :class:`gannet.node.broker.serving.Broker`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

log = logging.getLogger(__name__)

REQUESTS_INFLIGHT_MAX = 16
SOCKET_TIMEOUT_S = 10.0
_BUSY_REPLY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

NotReadyReason = Callable[[], str | None]


def parse_listen(listen: str) -> tuple[str, int]:
    """``("127.0.0.1", 5557)`` of ``127.0.0.1:5557``; ``[::1]:5557`` for IPv6."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--metrics-listen {listen!r} is not host:port")
    return host.strip("[]"), int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        not_ready_reason: NotReadyReason,
        requests_inflight_max: int,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.registry = registry
        self.not_ready_reason = not_ready_reason
        self._slots = threading.BoundedSemaphore(requests_inflight_max)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(_BUSY_REPLY)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = SOCKET_TIMEOUT_S
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            encode, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._reply(200, encode(self.server.registry), content_type, send_body)
        elif path == "/healthz":
            self._reply(200, b"ok\n", "text/plain; charset=utf-8", send_body)
        elif path == "/readyz":
            reason = self.server.not_ready_reason()
            status, text = (200, "ready") if reason is None else (503, f"not ready: {reason}")
            self._reply(status, f"{text}\n".encode(), "text/plain; charset=utf-8", send_body)
        else:
            body = b"not found; try /metrics, /healthz or /readyz\n"
            self._reply(404, body, "text/plain; charset=utf-8", send_body)

    def _reply(self, status: int, body: bytes, content_type: str, send_body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics http: " + format, *args)


class MetricsServer:
    """The running endpoint; :attr:`port` is the bound port (useful with port 0)."""

    def __init__(
        self,
        listen: str,
        registry: CollectorRegistry,
        not_ready_reason: NotReadyReason,
        *,
        requests_inflight_max: int = REQUESTS_INFLIGHT_MAX,
    ) -> None:
        host, port = parse_listen(listen)
        try:
            self._server = _Server((host, port), registry, not_ready_reason, requests_inflight_max)
        except OSError as exc:
            raise OSError(
                f"cannot serve metrics on {listen}: {exc.strerror or exc}; stop the other "
                "process, choose another --metrics-listen, or pass --metrics-listen '' to disable"
            ) from exc
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.5},
            name="gannet-metrics-http",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop accepting, close the socket and join the accepting thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
