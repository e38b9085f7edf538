"""Sends deduplicated by the client's message id within a window: a retry gets the original receipt.

A send that timed out at the client during a failover may have committed; the official clients
retry it with the *same* message id (``system_properties.message_id``, stored as the record's
``UNIQ_KEY``). :class:`SendDeduplicator` answers such a retry with the receipt of the message
already accepted (its message id and queue offset) instead of appending it again, for
``window_s`` (default :data:`WINDOW_S`, 2 minutes; 0 turns it off), per topic.

Where the original is found, in order:

1. *in flight* on this node (appended, waiting for its commit): the retry waits for the same
   outcome and gets the same answer;
2. *in the window map*: every replica adds each record's ``UNIQ_KEY`` (topic, queue offset,
   store time) when dispatch reaches it — dispatch follows the Raft commit point, so the map
   is recorded through the replicated log, and a new leader knows what the old one accepted;
   at most ``entries_max`` ids (default :data:`ENTRIES_MAX`), the oldest dropped first, none
   stored longer ago than the window;
3. *in the index files* (``topic#id``, built by the same dispatch and kept on disk), for what
   the map cannot hold: ids dispatched before this process started (a restarted member), or
   dropped for room while still within the window. This lookup costs about a millisecond, so
   it is made only while such ids can exist: until the last record indexed before the start
   (or the last dropped id) leaves the window.

Only requests of one message are deduplicated (the official clients send one message per
request; a batch is appended as it comes). ``duplicates_total`` counts the retries answered
without appending (``gannet_send_duplicates_dropped_total``).

Used by :class:`gannet.node.api.messaging.MessagingServicer` on the node that appends.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from rocketmq.grpc_protocol import service_pb2

from gannet.node.protocol import statuses
from gannet.node.store import querying
from gannet.node.store.log.records import DispatchInfo
from gannet.node.store.message_store import MessageStore

WINDOW_S = 120.0
ENTRIES_MAX = 100_000


_Receipt = tuple[str, int, int]
"""(client message id, queue offset, store time in ms) of a stored send. A plain tuple of str and
ints on purpose: the garbage collector stops tracking those, where a window of 100,000 tracked
receipt objects made collections cost ~7 µs per dispatched record (``PROFILE.md``)."""
_ID: Final = 0
_OFFSET: Final = 1
_STORED_AT_MS: Final = 2


Key = tuple[str, str]
"""(topic, client message id)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class SendDeduplicator:
    """One per broker. The map is filled by the store's dispatch thread (every replica) and
    read on the event loop, under a lock."""

    def __init__(
        self,
        store: MessageStore,
        *,
        window_s: float = WINDOW_S,
        entries_max: int = ENTRIES_MAX,
    ) -> None:
        if window_s < 0 or entries_max <= 0:
            raise ValueError("window_s must be >= 0 and entries_max positive")
        self._store = store
        self.window_s = window_s
        self._window_ms = int(window_s * 1000)
        self._entries_max = entries_max
        self._lock = threading.Lock()
        self._recent: collections.OrderedDict[Key, _Receipt] = collections.OrderedDict()
        self._pending: dict[Key, asyncio.Future[service_pb2.SendMessageResponse]] = {}
        self._log_lookups_until_ms = 0
        self.duplicates_total = 0
        self.log_lookups_total = 0
        if self.enabled:
            self._log_lookups_until_ms = self._unseen_until_ms()
            store.add_arrival_listener(self._on_dispatched)

    @property
    def enabled(self) -> bool:
        return self.window_s > 0

    def remembers(self, topic: str, message_id: str) -> bool:
        """Whether the window map holds this id (tests, tools)."""
        return self._known((topic, message_id)) is not None

    def looks_in_log(self) -> bool:
        """Whether sends of unknown ids are looked up in the index files now."""
        return self._log_lookups_until_ms > _now_ms()

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

    def _on_dispatched(self, infos: Sequence[DispatchInfo]) -> None:
        """Dispatch thread: a committed batch (on any replica) joins the window, under one
        lock hold for the whole batch."""
        fresh = [((info.topic, info.uniq_key), info) for info in infos if info.uniq_key]
        if not fresh:
            return
        recent = self._recent
        with self._lock:
            for key, info in fresh:
                if key not in recent:  # the first receipt stays (the original)
                    recent[key] = (key[1], info.queue_offset, info.store_timestamp_ms)
            self._trim_locked()

    async def send_once(
        self,
        topic: str,
        message_ids: list[str],
        append: Callable[[], Awaitable[service_pb2.SendMessageResponse]],
    ) -> service_pb2.SendMessageResponse:
        """``append()``'s answer, or the original answer when this message was accepted
        within the window (module docstring)."""
        if not self.enabled or len(message_ids) != 1 or not message_ids[0]:
            return await append()
        key = (topic, message_ids[0])
        known = self._known(key)
        if known is not None:
            return self._duplicate(known)
        pending = self._pending.get(key)
        if pending is not None:
            with contextlib.suppress(Exception):
                answer = await asyncio.shield(pending)
                self.duplicates_total += 1
                return answer
            # The original failed (refused, or not known committed): take this one as new.
        if self.looks_in_log():
            found = await asyncio.to_thread(self._in_log, key)
            if found is not None:
                self._remember(key, found)
                return self._duplicate(found)
        future: asyncio.Future[service_pb2.SendMessageResponse] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending[key] = future
        try:
            answer = await append()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a failed original is not an error of the retry
            raise
        finally:
            if self._pending.get(key) is future:
                del self._pending[key]
        future.set_result(answer)
        entries = list(answer.entries)
        if answer.status.code == statuses.ok().code and len(entries) == 1:
            # Dispatch adds it too, maybe a moment later: no gap for a quick retry.
            self._remember(key, (entries[0].message_id, entries[0].offset, _now_ms()))
        return answer

    def _duplicate(self, receipt: _Receipt) -> service_pb2.SendMessageResponse:
        self.duplicates_total += 1
        entry = service_pb2.SendResultEntry(
            status=statuses.ok(), message_id=receipt[_ID], offset=receipt[_OFFSET]
        )
        return service_pb2.SendMessageResponse(status=statuses.ok(), entries=[entry])

    def _known(self, key: Key) -> _Receipt | None:
        horizon = _now_ms() - self._window_ms
        with self._lock:
            while self._recent:
                oldest_key, oldest = next(iter(self._recent.items()))
                if oldest[_STORED_AT_MS] >= horizon:
                    break
                del self._recent[oldest_key]
            found = self._recent.get(key)
        return found if found is not None and found[_STORED_AT_MS] >= horizon else None

    def _remember(self, key: Key, receipt: _Receipt) -> None:
        with self._lock:
            if key in self._recent:
                return  # the first receipt stays (the original)
            self._recent[key] = receipt
            self._trim_locked()

    def _trim_locked(self) -> None:
        """Drop the oldest receipts past ``entries_max`` (``_lock`` held)."""
        while len(self._recent) > self._entries_max:
            _, dropped = self._recent.popitem(last=False)
            # The map no longer holds the whole window: ask the log until it does again.
            self._log_lookups_until_ms = max(
                self._log_lookups_until_ms, dropped[_STORED_AT_MS] + self._window_ms
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
        return (message_id, first.queue_offset, first.store_timestamp_ms)
