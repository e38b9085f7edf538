"""Run a :class:`~gannet.node.broker.serving.Broker` on its own event-loop thread.

The official Python client is synchronous from the caller's side and runs its own loop, so the
tests (and anyone embedding a broker) start the broker here: :func:`start` returns once the
server listens, :meth:`BrokerThread.stop` shuts it down gracefully and joins the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from gannet.node.api.plugs import PopFactory
from gannet.node.broker.serving import Broker, BrokerConfig

START_TIMEOUT_S = 60.0


def _quiet_poller_wakeups(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """The loop's exception handler: drops grpcio's spurious poller wake-ups, passes the rest.

    grpcio's asyncio stack has one completion-queue poller per process and wakes *every* event
    loop that uses gRPC through one socket; one loop reads the wake-up byte and the others'
    ``PollerCompletionQueue._handle_events`` raise ``BlockingIOError`` (grpc/grpc#25364). Nothing
    is lost (the loop that read the byte handles every event), but with a broker thread beside
    other loops (a second broker, the official client) the default handler logged a traceback
    per wake-up: 1,905 of them in one test, CPU taken from the brokers under load.
    """
    error = context.get("exception")
    if isinstance(error, BlockingIOError) and "_handle_events" in repr(context.get("handle")):
        return
    loop.default_exception_handler(context)


class BrokerThread:
    """A running broker and the thread that owns its loop."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(_quiet_poller_wakeups)
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="gannet-broker", daemon=True)

    @property
    def endpoint(self) -> str:
        return self.broker.endpoint

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self.broker.start()
        except BaseException as exc:
            self._started.set_exception(exc)
            return
        self._started.set_result(None)
        await self._stop.wait()
        await self.broker.stop()

    def begin(self) -> None:
        """Start the thread and wait until the broker serves (or raise why it cannot)."""
        self._thread.start()
        self._started.result(timeout=START_TIMEOUT_S)

    def stop(self) -> None:
        """Graceful stop (drain, close the store); returns when the thread has ended."""
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()


def start(config: BrokerConfig, *, pop: PopFactory | None = None) -> BrokerThread:
    """Start a broker thread; raises what the broker's start raised."""
    running = BrokerThread(Broker(config, pop=pop))
    running.begin()
    return running
