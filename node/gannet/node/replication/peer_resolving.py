"""Peer host names to addresses, apart from the connect deadline: what :mod:`transport` dials.

A member named by a host name (a Kubernetes headless-service name such as
``gannet-0.gannet-peers.ns.svc``) is resolved here, not by gRPC inside ``channel_ready()``:
there the lookup counted against the 2 s connect deadline, and a resolver that took longer
(4 s per AAAA lookup without upstream DNS) kept every member from ever connecting.

* The lookup has its own deadline (``timeout_s``, 30 s by default) and runs on threads of its
  own (daemon threads, at most ``threads_max`` at once), so a slow resolver neither times out
  the dial, nor starves the event loop's default executor, nor holds up the process's exit.
* IPv4 and IPv6 are looked up apart and raced: the first family that answers with addresses is
  dialed (the other is not waited for), and the log and ``/metrics`` say which one
  (``gannet_peer_address_family{peer,family}``).
* Answers are cached (:mod:`resolve_cache`: 30 s, bounded); a stale answer is still dialed while
  a new lookup runs in the background, and a failed connection makes its answer stale so a
  member that moved to another address is found again. One lookup per host at a time.
* The dialed target is a gRPC ``ipv4:``/``ipv6:`` address list; the host name stays the
  channel's authority and, with peer TLS, the name its certificate is checked against.
* Literal IP addresses are dialed as written, never looked up.
* A lookup slower than ``slow_s`` (1 s) or failing is logged as a warning, at most once a
  minute per host; ``gannet_peer_resolve_seconds{peer}`` (histogram) and
  ``gannet_peer_resolve_failures_total{peer}`` count them (:class:`ResolveFigures`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gannet.node.replication import resolve_cache
from gannet.node.replication.config import PeerSpec
from gannet.node.replication.resolve_cache import Answer, ResolveCache

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0
SLOW_S = 1.0
LOG_INTERVAL_S = 60.0
THREADS_MAX = 4
ADDRESSES_MAX = 8
RESOLVE_SECONDS_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
FAMILIES: tuple[tuple[str, socket.AddressFamily], ...] = (
    ("ipv6", socket.AF_INET6),
    ("ipv4", socket.AF_INET),
)

Lookup = Callable[[str, int, socket.AddressFamily], Awaitable[list[str]]]
"""``(host, port, family)`` → addresses of that family (empty: none); raises OSError."""


class ResolveError(Exception):
    """A peer's host name did not resolve (in time)."""


@dataclass(frozen=True, slots=True)
class DialTarget:
    """A gRPC target for one member and the names to keep: ``uri`` is what the channel dials;
    ``family`` is ``ipv4``, ``ipv6`` or ``literal`` (an address written in ``--peers``)."""

    uri: str
    family: str
    authority: str
    host_name: str | None
    """The host name the address was resolved from (None: a literal address)."""


@dataclass(slots=True)
class ResolveFigures:
    """Per peer (node id): lookup durations (seconds, successes and failures), failures, and
    the family dialed. Bounded by the group size; written on the event loop only."""

    seconds: dict[int, list[float]] = field(default_factory=dict)
    """Bucket counts (not cumulative, last is +Inf) per :data:`RESOLVE_SECONDS_BUCKETS`."""
    seconds_sum: dict[int, float] = field(default_factory=dict)
    failures_total: dict[int, int] = field(default_factory=dict)
    family: dict[int, str] = field(default_factory=dict)

    def observe(self, node_id: int, seconds: float) -> None:
        counts = self.seconds.setdefault(node_id, [0.0] * (len(RESOLVE_SECONDS_BUCKETS) + 1))
        index = next(
            (i for i, bound in enumerate(RESOLVE_SECONDS_BUCKETS) if seconds <= bound),
            len(RESOLVE_SECONDS_BUCKETS),
        )
        counts[index] += 1
        self.seconds_sum[node_id] = self.seconds_sum.get(node_id, 0.0) + seconds


def is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def target_uri(answer: Answer, port: int) -> str:
    """``ipv4:10.0.0.1:8091,10.0.0.2:8091`` / ``ipv6:[fd00::1]:8091`` (gRPC tries them in
    order)."""
    if answer.family == "ipv6":
        return "ipv6:" + ",".join(f"[{a}]:{port}" for a in answer.addresses)
    return "ipv4:" + ",".join(f"{a}:{port}" for a in answer.addresses)


async def race_families(
    lookup: Lookup,
    host: str,
    port: int,
    families: tuple[tuple[str, socket.AddressFamily], ...] = FAMILIES,
) -> tuple[Answer, dict[str, str]]:
    """Look ``host`` up in every family at once; the first to answer with addresses wins (the
    others are cancelled). Returns it and why the families that finished before it did not
    answer; raises :class:`ResolveError` when none does."""
    tasks = {asyncio.ensure_future(lookup(host, port, number)): name for name, number in families}
    errors: dict[str, str] = {}
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: list(tasks).index(t)):
                name = tasks[task]
                try:
                    found = task.result()
                except OSError as exc:
                    errors[name] = str(exc) or type(exc).__name__
                    continue
                addresses = tuple(dict.fromkeys(found))[:ADDRESSES_MAX]
                if addresses:
                    return Answer(name, addresses), errors
                errors[name] = "no address"
        raise ResolveError(
            f"{host} did not resolve: " + "; ".join(f"{k}: {v}" for k, v in errors.items())
        )
    finally:
        for task in pending:
            task.cancel()


class PeerResolver:
    """Dial targets of members, their names resolved apart from the connect deadline (see the
    module docstring). Use on one event loop; :meth:`close` when done."""

    def __init__(
        self,
        lookup: Lookup | None = None,
        *,
        cache: ResolveCache | None = None,
        clock_s: Callable[[], float] = time.monotonic,
        timeout_s: float = TIMEOUT_S,
        slow_s: float = SLOW_S,
        threads_max: int = THREADS_MAX,
    ) -> None:
        self._threads_max = threads_max
        self._threads: asyncio.Semaphore | None = None
        self._lookup = lookup if lookup is not None else self._getaddrinfo
        self.cache = cache if cache is not None else ResolveCache()
        self._clock_s = clock_s
        self._timeout_s = timeout_s
        self._slow_s = slow_s
        self._inflight: dict[str, asyncio.Task[Answer]] = {}
        self._logged_at_s: dict[str, float] = {}
        self.figures = ResolveFigures()

    async def target(self, peer: PeerSpec) -> DialTarget:
        """Where to dial ``peer`` now: waits only when its host never resolved yet (at most
        ``timeout_s``); raises :class:`ResolveError` when it does not resolve."""
        host = peer.host
        if is_literal(host):
            self.figures.family[peer.node_id] = "literal"
            return DialTarget(peer.peer_endpoint, "literal", peer.peer_endpoint, None)
        plan = self.cache.plan(host, self._clock_s())
        task = self._start_lookup(peer) if plan.look_up else self._inflight.get(host)
        answer = plan.answer
        if answer is None:
            if task is None:
                raise ResolveError(plan.error or f"{host} did not resolve")
            answer = await asyncio.shield(task)
        return self._dial_target(peer, answer)

    def cached_target(self, peer: PeerSpec) -> DialTarget | None:
        """:meth:`target` without waiting: None while the host has no answer (a lookup is
        started then)."""
        if is_literal(peer.host):
            return DialTarget(peer.peer_endpoint, "literal", peer.peer_endpoint, None)
        plan = self.cache.plan(peer.host, self._clock_s())
        if plan.look_up:
            self._start_lookup(peer)
        return self._dial_target(peer, plan.answer) if plan.answer is not None else None

    def connection_failed(self, peer: PeerSpec) -> None:
        """A dial of ``peer``'s resolved address failed: look its name up again."""
        if not is_literal(peer.host):
            self.cache.suspect(peer.host, self._clock_s())

    async def close(self) -> None:
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._inflight.clear()

    def _dial_target(self, peer: PeerSpec, answer: Answer) -> DialTarget:
        self.figures.family[peer.node_id] = answer.family
        return DialTarget(
            target_uri(answer, peer.peer_port), answer.family, peer.peer_endpoint, peer.host
        )

    def _start_lookup(self, peer: PeerSpec) -> asyncio.Task[Answer]:
        task = self._inflight.get(peer.host)
        if task is None:
            task = asyncio.create_task(self._resolve(peer), name=f"resolve-{peer.host}")
            task.add_done_callback(_retrieve)
            self._inflight[peer.host] = task
        return task

    async def _resolve(self, peer: PeerSpec) -> Answer:
        host = peer.host
        started_s = self._clock_s()
        try:
            answer, errors = await asyncio.wait_for(
                race_families(self._lookup, host, peer.peer_port), self._timeout_s
            )
        except (ResolveError, TimeoutError) as exc:
            now_s = self._clock_s()
            elapsed_s = now_s - started_s
            reason = str(exc) or f"{host} did not resolve within {self._timeout_s:g} s"
            self.cache.fail(host, reason, now_s)
            self.figures.observe(peer.node_id, elapsed_s)
            failures = self.figures.failures_total
            failures[peer.node_id] = failures.get(peer.node_id, 0) + 1
            kept = self.cache.answer(host)
            self._warn(
                host,
                now_s,
                "resolving peer %s (%s) failed after %.1f s: %s; %s",
                peer,
                host,
                elapsed_s,
                reason,
                f"still dialing {kept.family} {', '.join(kept.addresses)}" if kept else "retrying",
            )
            raise ResolveError(reason) from None
        finally:
            self._inflight.pop(host, None)
        now_s = self._clock_s()
        elapsed_s = now_s - started_s
        self.cache.store(host, answer, now_s)
        self.figures.observe(peer.node_id, elapsed_s)
        if elapsed_s >= self._slow_s:
            others = "; ".join(f"{k}: {v}" for k, v in errors.items()) or "not awaited"
            self._warn(
                host,
                now_s,
                "resolving peer %s (%s) took %.1f s: %s answered first (%s), dialing %s; "
                "other families: %s",
                peer,
                host,
                elapsed_s,
                answer.family,
                ", ".join(answer.addresses),
                answer.family,
                others,
            )
        else:
            log.info(
                "peer %s (%s) resolved to %s %s",
                peer,
                host,
                answer.family,
                ", ".join(answer.addresses),
            )
        return answer

    def _warn(self, host: str, now_s: float, message: str, *args: object) -> None:
        last_s = self._logged_at_s.get(host)
        if last_s is not None and now_s - last_s < LOG_INTERVAL_S:
            log.debug(message, *args)
            return
        if len(self._logged_at_s) >= resolve_cache.HOSTS_MAX:
            self._logged_at_s.clear()
        self._logged_at_s[host] = now_s
        log.warning(message, *args)

    async def _getaddrinfo(self, host: str, port: int, family: socket.AddressFamily) -> list[str]:
        """The system resolver (glibc: /etc/hosts, then DNS) for one family, on a daemon thread
        of its own (at most ``threads_max`` at once; one abandoned by the deadline ends with
        glibc's own timeout, and never holds up the process's exit)."""
        if self._threads is None:
            self._threads = asyncio.Semaphore(self._threads_max)
        threads = self._threads
        await threads.acquire()  # released when the thread ends, not when the caller gives up
        loop = asyncio.get_running_loop()
        found: asyncio.Future[list[str]] = loop.create_future()

        def settle(result: list[str], error: OSError | None) -> None:
            threads.release()
            if found.done():
                return
            if error is not None:
                found.set_exception(error)
            else:
                found.set_result(result)

        def run() -> None:
            addresses: list[str] = []
            error: OSError | None = None
            try:
                infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
                addresses = [str(info[4][0]) for info in infos if info[0] == family]
            except OSError as exc:
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, addresses, error)

        try:
            threading.Thread(target=run, name=f"peer-resolve-{host}", daemon=True).start()
        except BaseException:
            threads.release()
            raise
        return await found


def _retrieve(task: asyncio.Task[Answer]) -> None:
    """A background lookup's failure is logged by it; nobody else may await it."""
    if not task.cancelled():
        task.exception()
