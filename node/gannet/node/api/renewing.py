"""Server-side renewal of ``auto_renew`` receipts (the proxy's ``DefaultReceiptHandleManager``).

A push consumer receives with ``auto_renew = true`` and never renews by itself
(``docs/protocol.md`` §7: the server owns the invisible time). So the broker keeps, per
delivered message, the receipt handle the client holds (the *original*) and the newest handle
it renewed to (*current*). Shortly before *current* becomes visible again (``renew_ahead_ms``)
it changes the invisible time again (:meth:`RenewalTable.due` → ChangeInvisibleDuration with the
auto-renew invisible time). When the client acks, nacks (ChangeInvisibleDuration) or forwards
the message to the DLQ with its *original* handle, :meth:`RenewalTable.take` ends the renewal
and hands back *current*, which is what the Pop layer now knows.

Renewal stops (the message then reappears at its invisible time, as without renewal) when:

* the client is gone: it sent NotifyClientTermination or has not been seen (heartbeat,
  settings) for ``client_silence_ms_max``;
* the message has been renewed for ``renew_duration_ms_max`` in total;
* a renewal fails (the handle is no longer valid).

The table is bounded by ``entries_max``; beyond it new deliveries are not renewed (they keep the
60 s auto-renew invisible time). Pure bookkeeping with an explicit ``now_ms``; the driver is
:class:`gannet.node.api.receiving.PopHandler` (a task on the server's event loop).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gannet.node.pop.receipts import ReceiptHandle


@dataclass(frozen=True, slots=True)
class RenewalLimits:
    renew_ahead_ms: int = 10_000  # ProxyConfig.renewAheadTimeMillis
    renew_duration_ms_max: int = 3 * 3_600_000  # renewMaxTimeMillis
    client_silence_ms_max: int = 120_000  # Python clients heartbeat every 10 s
    entries_max: int = 100_000
    check_interval_ms: int = 1_000


@dataclass(slots=True)
class Renewal:
    """One delivered message whose invisible time the broker renews."""

    group: str
    topic: str
    original: str
    current: ReceiptHandle
    client_id: str
    started_ms: int
    renewing: bool = field(default=False)
    """True while a renewal of ``current`` runs; :meth:`RenewalTable.take` must wait."""


ClientSeen = Callable[[str], int | None]
"""Last-seen time (epoch ms) of a client id; None when it is unknown or terminated."""


class RenewalTable:
    def __init__(self, limits: RenewalLimits | None = None) -> None:
        self.limits = limits or RenewalLimits()
        self._entries: dict[tuple[str, str], Renewal] = {}
        self._lock = threading.Lock()
        self.renewed_total = 0
        self.dropped_total = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def add(
        self,
        group: str,
        topic: str,
        original: str,
        handle: ReceiptHandle,
        client_id: str,
        now_ms: int,
    ) -> bool:
        """Start renewing a delivered message; False when the table is full."""
        with self._lock:
            if len(self._entries) >= self.limits.entries_max:
                return False
            self._entries[(group, original)] = Renewal(
                group, topic, original, handle, client_id, now_ms
            )
            return True

    def get(self, group: str, original: str) -> Renewal | None:
        with self._lock:
            return self._entries.get((group, original))

    def take(self, group: str, original: str) -> Renewal | None:
        """End the renewal of ``original`` (ack, nack, DLQ); None when it is not renewed. The
        caller must not use the result while ``renewing`` is set (wait, then take again)."""
        with self._lock:
            entry = self._entries.get((group, original))
            if entry is None or entry.renewing:
                return entry
            del self._entries[(group, original)]
            return entry

    def due(self, now_ms: int, client_seen: ClientSeen) -> list[Renewal]:
        """Entries to renew now (marked ``renewing``); drops those whose client is gone or that
        were renewed long enough."""
        lim = self.limits
        due: list[Renewal] = []
        with self._lock:
            for key, entry in list(self._entries.items()):
                if entry.renewing:
                    continue
                seen = client_seen(entry.client_id)
                gone = seen is None or now_ms - seen > lim.client_silence_ms_max
                if gone or now_ms - entry.started_ms >= lim.renew_duration_ms_max:
                    del self._entries[key]
                    self.dropped_total += 1
                    continue
                if entry.current.next_visible_time_ms - now_ms <= lim.renew_ahead_ms:
                    entry.renewing = True
                    due.append(entry)
        return due

    def renewed(self, entry: Renewal, handle: ReceiptHandle | None) -> None:
        """A renewal ended: the new handle, or None when it failed (the entry is dropped)."""
        with self._lock:
            entry.renewing = False
            if handle is None:
                if self._entries.get((entry.group, entry.original)) is entry:
                    del self._entries[(entry.group, entry.original)]
                self.dropped_total += 1
                return
            entry.current = handle
            self.renewed_total += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
