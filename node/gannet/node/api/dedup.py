"""Sends deduplicated by the client's message id within a window: a retry gets the original receipt.

A send that timed out at the client during a failover may have committed; the official clients
retry it with the *same* message id (``system_properties.message_id``, stored as the record's
``UNIQ_KEY``). :class:`SendDeduplicator` answers such a retry with the receipt of the message
already accepted (its message id and queue offset) instead of appending it again, for
``window_s`` (default :data:`WINDOW_S`, 2 minutes; 0 turns it off), per topic.

Where the original is found, in order:

1. *in flight* on this node (appended, waiting for its commit): the retry waits for the same
   outcome and gets the same answer — also when the original's own caller went away (its
   client's deadline cancelled the call): the original's append runs on to its outcome.
   An original that ended *uncertain* (``MASTER_PERSISTENCE_TIMEOUT``: its commit or flush was
   not confirmed in time, its bytes are in the log and may still commit) is *held* for
   :data:`UNCERTAIN_HOLD_S`: a retry meanwhile gets the same uncertain answer instead of a
   second append, and once the original commits, dispatch puts it in the map (2.) and the next
   retry gets its receipt (:class:`UncertainHolds`, which transactional half messages and
   EndTransactions share).
   Fault seed 1210: the leader's commit stalled, the original's 5 s commit wait ran out, and
   the retry that waited for it was appended as new; both committed;
2. *in the window map*: every replica adds each record's ``UNIQ_KEY`` (topic, queue offset,
   store time) when dispatch reaches it — dispatch follows the Raft commit point, so the map
   is recorded through the replicated log, and a new leader knows what the old one accepted;
   at most ``entries_max`` ids (default :data:`ENTRIES_MAX`), the oldest dropped first, none
   stored longer ago than the window;
3. *in the index files* (``topic#id``, built by the same dispatch and kept on disk), for what
   the map cannot hold: ids dispatched before this process started (a restarted member), or
   dropped for room while still within the window.

The index lookup costs ~100 µs of CPU and a worker-thread hop per send (the rest of a
one-message send without gRPC is ~175 µs: ``bench/results/BROKER.md``, session 9), so it is
made only for a send whose original can be outside the map. The map is *complete since* a
horizon: it holds every id recorded after the newest dropped id's store time, and after this
process started (ids indexed before the start were never added). A retry's original was
stored no earlier than the retry's ``system_properties.born_timestamp`` minus
:data:`BORN_MARGIN_S`. The official Python client (5.1.2) stamps the born time anew for every
attempt (``int(time.time())``, whole seconds), so a retry's born time is at most the client's retry
span after its original's store time (attempts - 1 request timeouts: 6 s with the stock 3
attempts of 3 s) plus the clock skew between the client and the brokers; the margin (20 s)
covers both with room. A client that keeps the first attempt's born time, or truncates it,
only makes it earlier: more lookups, never fewer. A send born more than the margin after the
horizon therefore cannot have an original outside the map: it is not looked up. Only a send
born before that (a genuinely old retry, a send right after a restart or a drop of a recent
id, or one without a born time) is looked up, and no send at all once the horizon is a
window old.

Under sustained load the horizon trails the clock by how long the map holds ids
(``entries_max`` / unique ids per second), so new messages skip the lookup while that
exceeds the margin (plus the born time's truncation to a second): at the defaults up to
about 400,000 / 21 s ≈ 19,000 unique ids/s. A map entry costs 250–280 bytes (a
``(topic, id)`` key, the id string and one packed int; a broker's resident memory grew by
72 MB for 300,000 more ids), ~100–110 MB when full.

Only requests of one message are deduplicated (the official clients send one message per
request; a batch is appended as it comes). ``duplicates_total`` counts the retries answered
without appending (``gannet_send_duplicates_dropped_total``), ``log_lookups_total`` the index
lookups made (``gannet_send_dedup_log_lookups_total``).

Used by :class:`gannet.node.api.messaging.MessagingServicer` on the node that appends.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from sys import intern
from typing import Final, TypeVar

from rocketmq.grpc_protocol import service_pb2

from gannet.node.protocol import statuses
from gannet.node.store import querying
from gannet.node.store.log.records import DispatchInfo
from gannet.node.store.message_store import MessageStore

T = TypeVar("T")

WINDOW_S = 120.0
ENTRIES_MAX = 400_000
UNCERTAIN_HOLD_S = WINDOW_S
"""How long an uncertain original holds its id against a new append (module docstring): its
bytes commit or are cut at a leader change well within the window; a new leader serves only
once it applied the earlier terms, so what committed is in its map."""
UNCERTAIN_MAX = 65_536
BORN_MARGIN_S = 20.0
"""How much earlier than a send's born time its original may have been stored: the client's
retry span plus clock skew (module docstring)."""


_Receipt = int
"""``queue offset << 44 | store time in ms`` of a stored send (the message id is the key's). One
int, not a tuple: ~100 bytes less per entry, and never tracked by the garbage collector, where a
window of tracked receipt objects made collections cost ~7 µs per dispatched record
(``PROFILE.md``). 44 bits of milliseconds last until the year 2527."""
_STORED_AT_BITS: Final = 44
_STORED_AT_MASK: Final = (1 << _STORED_AT_BITS) - 1


def _receipt(queue_offset: int, stored_at_ms: int) -> _Receipt:
    return queue_offset << _STORED_AT_BITS | stored_at_ms


Key = tuple[str, str]
"""(topic, client message id)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


InFlight = dict[Key, "asyncio.Future[service_pb2.SendMessageResponse]"]
"""Originals appending on this node, by key: a retry awaits the future for the same outcome."""


def start_original(
    in_flight: InFlight,
    key: Key,
    append: Callable[[], Awaitable[service_pb2.SendMessageResponse]],
) -> asyncio.Task[service_pb2.SendMessageResponse]:
    """Start ``append()`` as the in-flight original of ``key`` (also for
    :mod:`gannet.node.api.transactions`). It runs to its outcome even when its caller is
    cancelled (its client's deadline passed): its bytes may be proposed already and commit
    later, and until then a retry must wait for it, not append the message again (fault seed
    104 replay: an id stored twice in one term after the original's deadline). The outcome goes
    to the key's future; the key leaves ``in_flight`` then."""
    future: asyncio.Future[service_pb2.SendMessageResponse] = (
        asyncio.get_running_loop().create_future()
    )
    in_flight[key] = future
    task = asyncio.ensure_future(_run_original(in_flight, key, future, append))
    task.add_done_callback(_retrieve)
    return task


async def _run_original(
    in_flight: InFlight,
    key: Key,
    future: asyncio.Future[service_pb2.SendMessageResponse],
    append: Callable[[], Awaitable[service_pb2.SendMessageResponse]],
) -> service_pb2.SendMessageResponse:
    try:
        answer = await append()
    except BaseException as exc:
        future.set_exception(exc)
        future.exception()  # retrieved: a failed original is not an error of a retry
        raise
    finally:
        if in_flight.get(key) is future:
            del in_flight[key]
    future.set_result(answer)
    return answer


def _retrieve(task: asyncio.Task[service_pb2.SendMessageResponse]) -> None:
    """Mark an original's outcome retrieved: its caller may have gone (no "never retrieved")."""
    if not task.cancelled():
        task.exception()


class UncertainHolds:
    """Ids whose original ended uncertain, held against a new append (module docstring, 1.):
    the one rule for :class:`SendDeduplicator` and the transactional sends and
    EndTransactions of :mod:`gannet.node.api.transactions`. ``request`` names the held
    request in the answer to a retry. Event loop only."""

    def __init__(self, request: str = "send") -> None:
        self._request = request
        self._held: collections.OrderedDict[Key, tuple[float, str]] = collections.OrderedDict()
        """(hold end on the monotonic clock, the original's error), oldest first."""

    async def noting(self, key: Key, append: Callable[[], Awaitable[T]]) -> T:
        """``append()``; an uncertain outcome holds ``key`` (before a retry waiting for this
        original wakes) and goes on to the caller."""
        try:
            return await append()
        except statuses.ApiError as exc:
            if exc.code == statuses.MASTER_PERSISTENCE_TIMEOUT:
                self._held[key] = (time.monotonic() + UNCERTAIN_HOLD_S, exc.message)
                self._held.move_to_end(key)
                while len(self._held) > UNCERTAIN_MAX:
                    self._held.popitem(last=False)
            raise

    def refuse_held(self, key: Key) -> None:
        """Raise the uncertain answer while ``key`` is held (a retry must not append)."""
        held = self._held.get(key)
        if held is None:
            return
        until, why = held
        if time.monotonic() >= until:
            del self._held[key]
            return
        raise statuses.ApiError(
            statuses.MASTER_PERSISTENCE_TIMEOUT,
            f"an earlier {self._request} of message id {key[1]} to {key[0]} may still commit "
            f"({why}); retry: once it commits, a retry gets its answer",
        )


class SendDeduplicator:
    """One per broker. The map is filled by the store's dispatch thread (every replica) and
    read on the event loop, under a lock."""

    def __init__(
        self,
        store: MessageStore,
        *,
        window_s: float = WINDOW_S,
        entries_max: int = ENTRIES_MAX,
        born_margin_s: float = BORN_MARGIN_S,
    ) -> None:
        if window_s < 0 or entries_max <= 0 or born_margin_s < 0:
            raise ValueError("window_s and born_margin_s must be >= 0 and entries_max positive")
        self._store = store
        self.window_s = window_s
        self._window_ms = int(window_s * 1000)
        self._entries_max = entries_max
        self._born_margin_ms = int(born_margin_s * 1000)
        self._lock = threading.Lock()
        self._recent: collections.OrderedDict[Key, _Receipt] = collections.OrderedDict()
        self._pending: InFlight = {}
        self._holds = UncertainHolds()
        self._complete_since_ms = 0
        """The map holds every id recorded after this store time (module docstring)."""
        self._log_lookups_until_ms = 0
        self.duplicates_total = 0
        self.log_lookups_total = 0
        if self.enabled:
            self._complete_since_ms = self._unseen_before_ms()
            self._log_lookups_until_ms = self._unseen_until_ms()
            store.add_arrival_listener(self._on_dispatched)

    @property
    def enabled(self) -> bool:
        return self.window_s > 0

    def remembers(self, topic: str, message_id: str) -> bool:
        """Whether the window map holds this id (tests, tools)."""
        return self._known((topic, message_id)) is not None

    def looks_in_log(self) -> bool:
        """Whether sends of unknown ids born before :meth:`complete_since_ms` plus the margin
        are looked up in the index files now."""
        return self._log_lookups_until_ms > _now_ms()

    def complete_since_ms(self) -> int:
        """The map holds every id recorded after this store time (epoch ms; 0: since ever)."""
        return self._complete_since_ms

    def _needs_lookup(self, born_ms: int) -> bool:
        """Whether the original of a send born at ``born_ms`` (0: unknown) can be outside the
        map: born no later than the margin after the horizon, while ids outside the map can
        still be within the window."""
        return born_ms - self._born_margin_ms <= self._complete_since_ms and self.looks_in_log()

    def held(self) -> int:
        with self._lock:
            return len(self._recent)

    def _unseen_until_ms(self) -> int:
        """Until when the index may hold ids the map never saw: records indexed before this
        process started stay within the window until the last one's store time + window."""
        index = self._store.index
        if index is None or not index.files:
            return 0
        return index.files[-1].end_timestamp_ms + self._window_ms

    def _unseen_before_ms(self) -> int:
        """The first horizon: ids indexed before this process started were never added, and
        were stored no later than now (another member's clock: within the margin)."""
        index = self._store.index
        if index is None or not index.files:
            return 0
        return max(_now_ms(), index.files[-1].end_timestamp_ms)

    def _on_dispatched(self, infos: Sequence[DispatchInfo]) -> None:
        """Dispatch thread: a committed batch (on any replica) joins the window, under one
        lock hold for the whole batch."""
        # Interned: records a follower decodes carry a topic string each (~60 bytes per entry).
        fresh = [((intern(info.topic), info.uniq_key), info) for info in infos if info.uniq_key]
        if not fresh:
            return
        recent = self._recent
        with self._lock:
            for key, info in fresh:
                if key not in recent:  # the first receipt stays (the original)
                    recent[key] = info.queue_offset << _STORED_AT_BITS | info.store_timestamp_ms
            self._trim_locked()

    async def send_once(
        self,
        topic: str,
        message_ids: list[str],
        append: Callable[[], Awaitable[service_pb2.SendMessageResponse]],
        *,
        born_ms: int = 0,
    ) -> service_pb2.SendMessageResponse:
        """``append()``'s answer, or the original answer when this message was accepted
        within the window (module docstring). ``born_ms``: the message's born time (epoch ms,
        0 when the request has none), which decides whether the index files are asked."""
        if not self.enabled or len(message_ids) != 1 or not message_ids[0]:
            return await append()
        key = (topic, message_ids[0])
        known = self._known(key)
        if known is not None:
            return self._duplicate(key, known)
        pending = self._pending.get(key)
        if pending is not None:
            with contextlib.suppress(Exception):
                answer = await asyncio.shield(pending)
                self.duplicates_total += 1
                return answer
            known = self._known(key)  # committed meanwhile after all
            if known is not None:
                return self._duplicate(key, known)
        self._holds.refuse_held(key)
        # The original was refused (or there was none): take this one as new.
        task = start_original(
            self._pending, key, lambda: self._found_or_appended(key, append, born_ms)
        )
        return await asyncio.shield(task)

    async def _found_or_appended(
        self,
        key: Key,
        append: Callable[[], Awaitable[service_pb2.SendMessageResponse]],
        born_ms: int,
    ) -> service_pb2.SendMessageResponse:
        """The original's receipt when the index files hold ``key`` (asked only when the map
        may miss it), else ``append()`` noted. Runs as the in-flight original: a copy that
        arrives during the lookup (a hedged forward's, :mod:`gannet.node.api.forwarding`, can
        come within the same millisecond) waits for it instead of looking up and appending too."""
        if self._needs_lookup(born_ms):
            found = await asyncio.to_thread(self._in_log, key)
            if found is not None:
                self._remember(key, found)
                return self._duplicate(key, found)
        return await self._append_noted(key, append)

    async def _append_noted(
        self, key: Key, append: Callable[[], Awaitable[service_pb2.SendMessageResponse]]
    ) -> service_pb2.SendMessageResponse:
        """``append()``, its outcome noted for ``key``: an uncertain one holds the id (before a
        waiting retry wakes), an accepted one joins the map at once."""
        answer = await self._holds.noting(key, append)
        entries = list(answer.entries)
        if answer.status.code == statuses.ok().code and len(entries) == 1:
            # Dispatch adds it too, maybe a moment later: no gap for a quick retry.
            self._remember(key, _receipt(entries[0].offset, _now_ms()))
        return answer

    def _duplicate(self, key: Key, receipt: _Receipt) -> service_pb2.SendMessageResponse:
        self.duplicates_total += 1
        entry = service_pb2.SendResultEntry(
            status=statuses.ok(), message_id=key[1], offset=receipt >> _STORED_AT_BITS
        )
        return service_pb2.SendMessageResponse(status=statuses.ok(), entries=[entry])

    def _known(self, key: Key) -> _Receipt | None:
        horizon = _now_ms() - self._window_ms
        with self._lock:
            while self._recent:
                oldest_key, oldest = next(iter(self._recent.items()))
                if oldest & _STORED_AT_MASK >= horizon:
                    break
                del self._recent[oldest_key]
            found = self._recent.get(key)
        return found if found is not None and found & _STORED_AT_MASK >= horizon else None

    def _remember(self, key: Key, receipt: _Receipt) -> None:
        with self._lock:
            if key in self._recent:
                return  # the first receipt stays (the original)
            self._recent[key] = receipt
            self._trim_locked()

    def _trim_locked(self) -> None:
        """Drop the oldest receipts past ``entries_max`` (``_lock`` held)."""
        recent = self._recent
        if len(recent) <= self._entries_max:
            return
        newest_dropped_ms = 0
        while len(recent) > self._entries_max:
            _, dropped = recent.popitem(last=False)
            newest_dropped_ms = max(newest_dropped_ms, dropped & _STORED_AT_MASK)
        # The map no longer holds every id since then: sends born before (+ the margin) ask
        # the log, until the dropped ids leave the window.
        self._complete_since_ms = max(self._complete_since_ms, newest_dropped_ms)
        self._log_lookups_until_ms = max(
            self._log_lookups_until_ms, newest_dropped_ms + self._window_ms
        )

    def _in_log(self, key: Key) -> _Receipt | None:
        """Worker thread: the message of ``key`` stored within the window, from the index."""
        topic, message_id = key
        self.log_lookups_total += 1
        begin_ms = _now_ms() - self._window_ms
        found = querying.by_key(self._store, topic, message_id, begin_ms=begin_ms, unique=True)
        if not found.messages:
            return None
        first = min(found.messages, key=lambda m: m.physical_offset)
        return _receipt(first.queue_offset, first.store_timestamp_ms)
