"""Long-polling waiters for Pop (RocketMQ ``PopLongPollingService``, ``docs/protocol.md`` §7).

A pop that found nothing registers a :class:`Waiter` under ``topic@group@queueId`` (queue id −1
for "any queue") with an absolute expiry, then waits on it — on a thread with
:meth:`Waiter.wait` or in asyncio with :meth:`Waiter.wait_async`. New messages wake waiters: the
store's arrival listener (:meth:`PollWaiters.attach`) calls :meth:`PollWaiters.notify` for every
dispatched message, which wakes, for every group waiting on that topic, the oldest waiter of the
any-queue key and the oldest of the message's queue key. A message of a group's Pop retry topic
``%RETRY%<group>_<topic>`` wakes that group's waiters of ``<topic>``. A woken waiter leaves the
table; the caller re-runs the pop from the beginning and, if it is still empty and time is left,
registers again (filters are not consulted when waking, so a woken pop may find nothing
and wait again). :meth:`PollWaiters.expire` (the broker thread, which sleeps until
:meth:`PollWaiters.next_expiry_ms`; or a test with virtual time) wakes the expired ones, which
then answer empty.

Bounds: ``poll_waiters_per_key_max`` per key and ``poll_waiters_max`` in total; beyond them
:meth:`register` raises :class:`PopBusy` (v2 ``TOO_MANY_REQUESTS``, RocketMQ POLLING_FULL).

To avoid missing a message that arrives between the empty pop and the registration, callers
register first, pop, and :meth:`PollWaiters.cancel` the waiter if the pop found something.

Thread-safe; used by the v2 ReceiveMessage handler.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gannet.node.pop.config import PopConfig
from gannet.node.pop.errors import PopBusy
from gannet.node.pop.locks import lock_key
from gannet.node.store import validation
from gannet.node.store.log.records import DispatchInfo
from gannet.node.store.message_store import MessageStore

ANY_QUEUE = -1


@dataclass(eq=False)
class Waiter:
    """One waiting pop. ``woken`` is set once: by a new message or by expiry (``expired``)."""

    topic: str
    group: str
    queue_id: int
    expire_at_ms: int
    serial: int
    expired: bool = False
    _event: threading.Event = field(default_factory=threading.Event)
    _futures: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = field(
        default_factory=list
    )
    _guard: threading.Lock = field(default_factory=threading.Lock)

    @property
    def key(self) -> str:
        return lock_key(self.topic, self.group, self.queue_id)

    @property
    def woken(self) -> bool:
        return self._event.is_set()

    def _wake(self, *, expired: bool) -> None:
        with self._guard:
            if self._event.is_set():
                return
            self.expired = expired
            self._event.set()
            futures, self._futures = self._futures, []
        for loop, fut in futures:
            loop.call_soon_threadsafe(_resolve, fut)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block the calling thread until woken; False on timeout."""
        return self._event.wait(timeout_s)

    async def wait_async(self) -> None:
        """Wait in asyncio until woken (by a message or by :meth:`PollWaiters.expire`)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._guard:
            if not self._event.is_set():
                self._futures.append((loop, fut))
            else:
                fut.set_result(None)
        await fut


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class PollWaiters:
    def __init__(self, config: PopConfig) -> None:
        self._per_key_max = config.poll_waiters_per_key_max
        self._total_max = config.poll_waiters_max
        self._lock = threading.Lock()
        self._by_key: dict[str, OrderedDict[int, Waiter]] = {}
        self._groups_of_topic: dict[str, dict[str, int]] = {}
        self._total = 0
        self._serials = itertools.count()
        self.on_register: Callable[[int], None] | None = None
        """Called with each new waiter's ``expire_at_ms`` (the broker thread sleeps until the
        earliest, :meth:`next_expiry_ms`)."""

    def attach(self, store: MessageStore) -> None:
        """Wake waiters on every message the store dispatches."""

        def on_arrivals(infos: Sequence[DispatchInfo]) -> None:
            if not self._total:
                return  # nobody long-polls: no per-record work (see notify)
            for info in infos:
                if not validation.is_system_topic(info.topic):
                    self.notify(info.topic, info.queue_id)

        store.add_arrival_listener(on_arrivals)

    def register(
        self, topic: str, group: str, queue_id: int, expire_at_ms: int, now_ms: int
    ) -> Waiter | None:
        """A new waiter, or None when ``expire_at_ms`` has already passed (POLLING_TIMEOUT)."""
        if expire_at_ms <= now_ms:
            return None
        waiter = Waiter(topic, group, queue_id, expire_at_ms, next(self._serials))
        with self._lock:
            if self._total >= self._total_max:
                raise PopBusy(f"{self._total} pops are waiting; at most {self._total_max}")
            queue = self._by_key.setdefault(waiter.key, OrderedDict())
            if len(queue) >= self._per_key_max:
                raise PopBusy(
                    f"{len(queue)} pops wait on {waiter.key}; at most {self._per_key_max}"
                )
            queue[waiter.serial] = waiter
            groups = self._groups_of_topic.setdefault(topic, {})
            groups[group] = groups.get(group, 0) + 1
            self._total += 1
        if self.on_register is not None:
            self.on_register(expire_at_ms)
        return waiter

    def _remove_locked(self, waiter: Waiter) -> bool:
        queue = self._by_key.get(waiter.key)
        if queue is None or queue.pop(waiter.serial, None) is None:
            return False
        if not queue:
            del self._by_key[waiter.key]
        groups = self._groups_of_topic[waiter.topic]
        groups[waiter.group] -= 1
        if not groups[waiter.group]:
            del groups[waiter.group]
            if not groups:
                del self._groups_of_topic[waiter.topic]
        self._total -= 1
        return True

    def cancel(self, waiter: Waiter) -> None:
        with self._lock:
            self._remove_locked(waiter)

    def notify(self, topic: str, queue_id: int) -> int:
        """Wake, per waiting group, one any-queue and one queue waiter; returns how many."""
        if not self._total:
            # Called for every dispatched record: with nobody waiting, no lock and no lookups
            # (~2.5 µs per record otherwise). Read unlocked, this sees the count as taking the
            # lock at this instant would.
            return 0
        woken: list[Waiter] = []
        with self._lock:
            for name, group in self._targets(topic):
                for q in (ANY_QUEUE, queue_id):
                    queue = self._by_key.get(lock_key(name, group, q))
                    if queue:
                        waiter = next(iter(queue.values()))
                        self._remove_locked(waiter)
                        woken.append(waiter)
        for waiter in woken:
            waiter._wake(expired=False)
        return len(woken)

    def _targets(self, topic: str) -> list[tuple[str, str]]:
        """(topic, group) pairs whose waiters a message of ``topic`` concerns."""
        out = [(topic, g) for g in self._groups_of_topic.get(topic, {})]
        if validation.is_retry_topic(topic):
            for name, groups in self._groups_of_topic.items():
                for g in groups:
                    if validation.original_topic(topic, g) == name:
                        out.append((name, g))
        return out

    def expire(self, now_ms: int) -> int:
        """Wake every waiter whose time is up; returns how many."""
        with self._lock:
            doomed = [
                w
                for queue in self._by_key.values()
                for w in queue.values()
                if w.expire_at_ms <= now_ms
            ]
            for w in doomed:
                self._remove_locked(w)
        for w in doomed:
            w._wake(expired=True)
        return len(doomed)

    def next_expiry_ms(self) -> int | None:
        """The earliest ``expire_at_ms`` of a waiting pop; None when nobody waits."""
        with self._lock:
            return min(
                (w.expire_at_ms for queue in self._by_key.values() for w in queue.values()),
                default=None,
            )

    def waiting(self) -> int:
        with self._lock:
            return self._total
