"""The thread of a store service (flush, dispatch): started once, told to stop under the
service's condition, joined.

A service's loop waits on ``_cond`` and leaves once ``_stopping`` is set; :class:`ServiceThread`
holds that flag, the thread and the start/stop steps so that each service writes only its loop
and what it does after stopping (a final flush, a catch-up dispatch). Called by
:class:`~gannet.node.store.log.flushing.FlushService` and
:class:`~gannet.node.store.queues.dispatching.DispatchService`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class ServiceThread:
    """Base of a service run by one daemon thread named ``gannet-<what>``."""

    _cond: threading.Condition

    def _init_thread(self, name: str) -> None:
        self._thread_name = name
        self._stopping = False
        self._thread: threading.Thread | None = None

    def _start_thread(self, target: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=target, name=self._thread_name, daemon=True)
        self._thread.start()

    def _stop_thread(self) -> None:
        """Set ``_stopping``, wake the loop and wait until the thread has left it."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
