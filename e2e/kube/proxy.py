"""An HTTPS proxy in front of kube-apiserver that can make a watch expire (410 Gone) on demand.

Used by ``e2e/kube/test_watch.py``. The operator's kubeconfig points at the proxy (same CA and
serving certificate as the API server, so TLS checks pass) and its token passes through. When
armed for a collection, the proxy closes the watch streams on it that are open (as a dropped
connection would), and holds the next watch request on it until the test has changed objects
and compacted etcd past that request's resourceVersion; then it forwards the request, and the
real server answers it with an ``ERROR`` event of code 410, which the proxy records.

It runs its own asyncio loop in a thread; requests are forwarded one to one and streamed back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
import threading
from collections.abc import Callable, Iterator

import aiohttp
from aiohttp import web

from e2e.kube.control_plane import ControlPlane
from e2e.processes import free_port

HOP_BY_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclasses.dataclass
class Armed:
    collection: str  # path suffix of the watched collection, e.g. "/topics"
    before_forward: Callable[[str], None]  # called (in a worker thread) with the held URL


class ExpiringProxy:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.armed: Armed | None = None
        self.expired: list[str] = []  # watch URLs the server answered with 410
        self.watches: list[str] = []  # every watch URL forwarded, in order
        self.lists: list[str] = []  # every list URL forwarded, in order
        # Open watch streams: id(request) -> (request, collection).
        self._open: dict[int, tuple[web.Request, str]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def arm(self, collection: str, before_forward: Callable[[str], None]) -> None:
        """Cut the open watches of ``collection`` and hold the next one (see module doc)."""
        asyncio.run_coroutine_threadsafe(
            self._arm(Armed(collection, before_forward)), self._loop
        ).result(10)

    async def _arm(self, armed: Armed) -> None:
        self.armed = armed
        for request, collection in list(self._open.values()):
            if collection == armed.collection and request.transport is not None:
                request.transport.close()  # as a dropped connection would

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        url = f"{self.plane.server}{request.path_qs}"
        is_watch = request.query.get("watch") in ("true", "1")
        collection = "/" + request.path.rstrip("/").rsplit("/", 1)[-1]
        if is_watch:
            armed = self.armed
            if armed is not None and armed.collection == collection:
                self.armed = None
                await asyncio.to_thread(armed.before_forward, url)
            self.watches.append(request.path_qs)
        elif request.method == "GET":
            self.lists.append(request.path_qs)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        body = await request.read()
        async with self._session.request(
            request.method,
            url,
            headers=headers,
            data=body or None,
            timeout=aiohttp.ClientTimeout(total=None),
        ) as upstream:
            response = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers[key] = value
            await response.prepare(request)
            if is_watch:
                self._open[id(request)] = (request, collection)
            try:
                async for chunk in upstream.content.iter_any():
                    if is_watch and (
                        upstream.status == 410 or (b'"ERROR"' in chunk and b"410" in chunk)
                    ):
                        self.expired.append(request.path_qs)
                    await response.write(chunk)
            except (ConnectionError, aiohttp.ClientError, asyncio.CancelledError):
                pass
            finally:
                self._open.pop(id(request), None)
            return response

    async def _start(self) -> None:
        upstream = ssl.create_default_context(cafile=str(self.plane.pki.ca))
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=upstream))
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(str(self.plane.pki.server_cert), str(self.plane.pki.server_key))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=serving).start()

    async def _stop(self) -> None:
        # End the streams first: a watch handler otherwise waits for the server's timeout.
        for request, _ in list(self._open.values()):
            if request.transport is not None:
                request.transport.close()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @contextlib.contextmanager
    def running(self) -> Iterator[ExpiringProxy]:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


def resource_version_of(url: str) -> int:
    """The resourceVersion a watch URL resumes from."""
    from urllib.parse import parse_qs, urlsplit  # noqa: PLC0415

    return int(parse_qs(urlsplit(url).query)["resourceVersion"][0])
