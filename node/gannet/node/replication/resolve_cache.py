"""Peer host names resolved to addresses, kept for a while: the pure core of :mod:`peer_resolving`.

No clock and no IO here: every call is given ``now_s`` (monotonic seconds), so tests step
virtual time. For each host the cache holds its last :class:`Answer` (the address family that
answered first and its addresses) and when it goes stale, or the last failure when no lookup
ever answered. :meth:`ResolveCache.plan` tells the caller what to do for a host:

* a fresh answer: dial it, no lookup;
* a stale answer (older than ``ttl_s``, or its connection failed: :meth:`ResolveCache.suspect`):
  dial it *and* look the host up again in the background; the old address stays in use until a
  new answer replaces it, so a slow resolver never delays a dial that has an address;
* no answer yet: look up and wait for it;
* a recent failure and no answer (within ``failure_ttl_s``): fail at once without another
  lookup, so a host that does not resolve is not asked about in a tight loop.

Limits: at most ``hosts_max`` hosts (the least recently stored goes first); a connection failure
makes an answer stale no sooner than ``refresh_min_age_s`` after it was stored.
"""

from __future__ import annotations

from dataclasses import dataclass

TTL_S = 30.0
FAILURE_TTL_S = 1.0
REFRESH_MIN_AGE_S = 1.0
HOSTS_MAX = 64


@dataclass(frozen=True, slots=True)
class Answer:
    """What a lookup found: the family that answered first (``ipv4`` / ``ipv6``) and its
    addresses in the resolver's order."""

    family: str
    addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do for one host now (see the module docstring)."""

    answer: Answer | None
    """The address to dial, if any (fresh or stale)."""
    look_up: bool
    """Start a lookup (the caller runs at most one per host at a time)."""
    error: str | None = None
    """Why there is no answer: the last failure, still too recent to ask again."""


@dataclass(slots=True)
class _Entry:
    answer: Answer | None
    stored_at_s: float
    stale_at_s: float
    error: str | None = None


class ResolveCache:
    """Answers and failures by host name, bounded to ``hosts_max`` hosts."""

    def __init__(
        self,
        *,
        ttl_s: float = TTL_S,
        failure_ttl_s: float = FAILURE_TTL_S,
        refresh_min_age_s: float = REFRESH_MIN_AGE_S,
        hosts_max: int = HOSTS_MAX,
    ) -> None:
        if hosts_max < 1:
            raise ValueError("hosts_max must be at least 1")
        self._ttl_s = ttl_s
        self._failure_ttl_s = failure_ttl_s
        self._refresh_min_age_s = refresh_min_age_s
        self._hosts_max = hosts_max
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def plan(self, host: str, now_s: float) -> Plan:
        entry = self._entries.get(host)
        if entry is None:
            return Plan(None, look_up=True)
        due = now_s >= entry.stale_at_s
        if entry.answer is None and not due:
            return Plan(None, look_up=False, error=entry.error)
        return Plan(entry.answer, look_up=due)

    def answer(self, host: str) -> Answer | None:
        """The last answer for ``host``, fresh or stale (None: none yet)."""
        entry = self._entries.get(host)
        return entry.answer if entry is not None else None

    def store(self, host: str, answer: Answer, now_s: float) -> None:
        self._put(host, _Entry(answer, now_s, now_s + self._ttl_s))

    def fail(self, host: str, error: str, now_s: float) -> None:
        """A lookup failed: an earlier answer is kept (and dialed) and asked about again after
        ``failure_ttl_s``; without one the host fails at once until then."""
        entry = self._entries.get(host)
        answer = entry.answer if entry is not None else None
        stored_at_s = entry.stored_at_s if entry is not None else now_s
        self._put(host, _Entry(answer, stored_at_s, now_s + self._failure_ttl_s, error))

    def suspect(self, host: str, now_s: float) -> None:
        """A connection to ``host``'s answer failed: it may have moved; make the answer stale
        (no sooner than ``refresh_min_age_s`` after it was stored)."""
        entry = self._entries.get(host)
        if entry is None or entry.answer is None:
            return
        earliest_s = entry.stored_at_s + self._refresh_min_age_s
        entry.stale_at_s = min(entry.stale_at_s, max(now_s, earliest_s))

    def _put(self, host: str, entry: _Entry) -> None:
        self._entries.pop(host, None)
        while len(self._entries) >= self._hosts_max:
            del self._entries[next(iter(self._entries))]
        self._entries[host] = entry
