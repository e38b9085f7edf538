"""Peer host names resolved apart from the connect deadline (``replication/peer_resolving.py``,
``replication/resolve_cache.py``): the cache in virtual time, the IPv4/IPv6 race and the
resolver's single lookup per host with a fake resolver whose answers the test releases, and the
metrics families. No test waits on the clock except the lookup deadline's own (50 ms)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gannet.node.metrics import resolver_collecting
from gannet.node.replication import peer_resolving
from gannet.node.replication.config import PeerSpec
from gannet.node.replication.peer_resolving import PeerResolver, ResolveError
from gannet.node.replication.resolve_cache import Answer, ResolveCache

pytestmark = pytest.mark.timeout(60)

HOST = "gannet-1.gannet-peers.test.svc.cluster.local"
PEER = PeerSpec(1, HOST, 8091, 8081)
V4 = Answer("ipv4", ("10.0.0.1",))


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class FakeResolver:
    """Lookups that wait until the test answers them: ``answer(family, [...])`` or
    ``fail(family, error)``; every call is recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, socket.AddressFamily]] = []
        self._pending: dict[socket.AddressFamily, list[asyncio.Future[list[str]]]] = {}
        self.asked = asyncio.Event()

    async def __call__(self, host: str, port: int, family: socket.AddressFamily) -> list[str]:
        future: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(family, []).append(future)
        self.calls.append((host, family))
        self.asked.set()
        return await future

    def waiting(self, family: socket.AddressFamily) -> int:
        return sum(not f.done() for f in self._pending.get(family, []))

    def answer(self, family: socket.AddressFamily, addresses: list[str]) -> None:
        for future in self._pending.pop(family, []):
            if not future.done():
                future.set_result(addresses)

    def fail(self, family: socket.AddressFamily, error: str) -> None:
        for future in self._pending.pop(family, []):
            if not future.done():
                future.set_exception(socket.gaierror(socket.EAI_NONAME, error))


async def settle() -> None:
    """Let every ready task run (the fake answers complete futures, no time passes)."""
    for _ in range(20):
        await asyncio.sleep(0)


# ---------------------------------------------------------------- cache (virtual time)
def test_cache_plans_lookups_by_age_failure_and_suspicion() -> None:
    cache = ResolveCache(ttl_s=30.0, failure_ttl_s=1.0, refresh_min_age_s=1.0, hosts_max=4)
    assert cache.plan(HOST, 0.0).look_up
    assert cache.plan(HOST, 0.0).answer is None
    cache.fail(HOST, "no such host", 0.0)
    plan = cache.plan(HOST, 0.5)
    assert (plan.answer, plan.look_up, plan.error) == (None, False, "no such host")
    assert cache.plan(HOST, 1.0).look_up  # asked again once the failure is old enough
    cache.store(HOST, V4, 1.0)
    assert cache.plan(HOST, 30.9) == cache.plan(HOST, 2.0)
    assert cache.plan(HOST, 2.0).answer == V4
    assert not cache.plan(HOST, 2.0).look_up
    stale = cache.plan(HOST, 31.0)
    assert (stale.answer, stale.look_up) == (V4, True)  # dialed while looked up again
    cache.fail(HOST, "timed out", 31.0)
    assert cache.plan(HOST, 31.5).answer == V4
    assert not cache.plan(HOST, 31.5).look_up
    cache.store(HOST, V4, 40.0)
    cache.suspect(HOST, 40.2)  # a connection failed just after the answer came
    assert not cache.plan(HOST, 40.5).look_up
    assert cache.plan(HOST, 41.0).look_up
    cache.suspect("unknown", 41.0)  # nothing to suspect
    assert cache.answer("unknown") is None


def test_cache_keeps_at_most_hosts_max_hosts() -> None:
    cache = ResolveCache(hosts_max=3)
    for index in range(10):
        cache.store(f"h{index}", V4, float(index))
    assert len(cache) == 3
    assert [cache.answer(f"h{i}") for i in (6, 7, 8, 9)] == [None, V4, V4, V4]


# ---------------------------------------------------------------- race
def test_race_takes_the_first_family_that_answers_and_cancels_the_other() -> None:
    async def run() -> None:
        fake = FakeResolver()
        race = asyncio.ensure_future(peer_resolving.race_families(fake, HOST, 8091))
        await settle()
        assert fake.waiting(socket.AF_INET6) == 1
        assert fake.waiting(socket.AF_INET) == 1
        fake.answer(socket.AF_INET, ["10.0.0.1", "10.0.0.1", "10.0.0.2"])  # AAAA still slow
        answer, errors = await race
        assert answer == Answer("ipv4", ("10.0.0.1", "10.0.0.2"))
        assert errors == {}
        assert fake.waiting(socket.AF_INET6) == 0  # cancelled, not awaited

    asyncio.run(run())


def test_race_waits_for_the_other_family_when_the_first_has_no_address() -> None:
    async def run() -> None:
        fake = FakeResolver()
        race = asyncio.ensure_future(peer_resolving.race_families(fake, HOST, 8091))
        await settle()
        fake.answer(socket.AF_INET, [])
        fake.fail(socket.AF_INET6, "no AAAA")
        with pytest.raises(ResolveError, match="ipv4: no address"):
            await race

        race = asyncio.ensure_future(peer_resolving.race_families(fake, HOST, 8091))
        await settle()
        fake.fail(socket.AF_INET, "no A")
        await settle()
        assert not race.done()
        fake.answer(socket.AF_INET6, ["fd00::1"])
        answer, errors = await race
        assert answer == Answer("ipv6", ("fd00::1",))
        assert "ipv4" in errors
        assert peer_resolving.target_uri(answer, 8091) == "ipv6:[fd00::1]:8091"
        assert peer_resolving.target_uri(V4, 8091) == "ipv4:10.0.0.1:8091"

    asyncio.run(run())


# ---------------------------------------------------------------- resolver
@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_resolver_looks_a_host_up_once_and_dials_its_address_with_the_name_kept(
    clock: Clock,
) -> None:
    async def run() -> None:
        fake = FakeResolver()
        resolver = PeerResolver(fake, clock_s=clock)
        assert resolver.cached_target(PEER) is None  # starts the lookup
        first = asyncio.ensure_future(resolver.target(PEER))
        second = asyncio.ensure_future(resolver.target(PEER))
        await settle()
        assert len(fake.calls) == 2  # one per family, shared by the three callers
        clock.now_s += 5.0  # a 5 s resolver
        fake.answer(socket.AF_INET, ["10.0.0.1"])
        target = await first
        assert await second == target
        assert target.uri == "ipv4:10.0.0.1:8091"
        assert (target.family, target.authority, target.host_name) == (
            "ipv4",
            f"{HOST}:8091",
            HOST,
        )
        assert resolver.figures.seconds_sum == {1: 5.0}
        assert resolver.figures.family == {1: "ipv4"}
        # cached: no lookup, no wait
        assert await resolver.target(PEER) == target
        assert len(fake.calls) == 2
        await resolver.close()

    asyncio.run(run())


def test_resolver_dials_the_old_address_while_a_failed_connection_looks_again(
    clock: Clock,
) -> None:
    async def run() -> None:
        fake = FakeResolver()
        resolver = PeerResolver(fake, clock_s=clock)
        lookup = asyncio.ensure_future(resolver.target(PEER))
        await settle()
        fake.answer(socket.AF_INET, ["10.0.0.1"])
        await lookup
        clock.now_s += 2.0
        resolver.connection_failed(PEER)  # the pod moved
        fake.calls.clear()
        target = await resolver.target(PEER)
        assert target.uri == "ipv4:10.0.0.1:8091"  # not held up by the new lookup
        await settle()
        assert len(fake.calls) == 2
        fake.answer(socket.AF_INET6, ["fd00::7"])
        await settle()
        assert (await resolver.target(PEER)).uri == "ipv6:[fd00::7]:8091"
        assert resolver.figures.family == {1: "ipv6"}
        await resolver.close()

    asyncio.run(run())


def test_resolver_failure_is_counted_kept_briefly_and_asked_again(clock: Clock) -> None:
    async def run() -> None:
        fake = FakeResolver()
        resolver = PeerResolver(fake, clock_s=clock)
        lookup = asyncio.ensure_future(resolver.target(PEER))
        await settle()
        fake.fail(socket.AF_INET, "Name or service not known")
        fake.fail(socket.AF_INET6, "Name or service not known")
        with pytest.raises(ResolveError, match="did not resolve"):
            await lookup
        fake.calls.clear()
        with pytest.raises(ResolveError, match="Name or service not known"):
            await resolver.target(PEER)  # at once, without asking again
        assert fake.calls == []
        assert resolver.figures.failures_total == {1: 1}
        clock.now_s += 1.0
        lookup = asyncio.ensure_future(resolver.target(PEER))
        await settle()
        assert len(fake.calls) == 2
        fake.answer(socket.AF_INET, ["10.0.0.3"])
        assert (await lookup).uri == "ipv4:10.0.0.3:8091"
        await resolver.close()

    asyncio.run(run())


def test_resolver_gives_up_after_its_own_deadline() -> None:
    async def run() -> None:
        fake = FakeResolver()
        resolver = PeerResolver(fake, timeout_s=0.05)
        with pytest.raises(ResolveError, match=r"within 0\.05 s"):
            await resolver.target(PEER)
        assert resolver.figures.failures_total == {1: 1}
        await resolver.close()

    asyncio.run(run())


def test_literal_addresses_are_dialed_as_written() -> None:
    async def run() -> None:
        fake = FakeResolver()
        resolver = PeerResolver(fake)
        for host, uri in (("10.1.2.3", "10.1.2.3:8091"), ("fd00::2", "[fd00::2]:8091")):
            target = await resolver.target(PeerSpec(2, host, 8091, 8081))
            assert (target.uri, target.family, target.host_name) == (uri, "literal", None)
        assert fake.calls == []
        await resolver.close()

    asyncio.run(run())


def test_the_system_resolver_answers_localhost() -> None:
    async def run() -> None:
        resolver = PeerResolver()
        target = await resolver.target(PeerSpec(2, "localhost", 8091, 8081))
        assert target.family in ("ipv4", "ipv6")
        assert target.uri.startswith(target.family + ":")
        await resolver.close()

    asyncio.run(run())


# ---------------------------------------------------------------- metrics
def test_metrics_families() -> None:
    figures = peer_resolving.ResolveFigures()
    figures.observe(2, 5.0)
    figures.observe(2, 0.001)
    figures.failures_total[2] = 1
    figures.family[2] = "ipv4"
    figures.family[3] = "literal"
    registry = CollectorRegistry()
    registry.register(resolver_collecting.ResolveCollector(lambda: figures))
    text = generate_latest(registry).decode()
    assert 'gannet_peer_resolve_seconds_bucket{le="5.0",peer="2"} 2.0' in text
    assert 'gannet_peer_resolve_seconds_bucket{le="2.0",peer="2"} 1.0' in text
    assert 'gannet_peer_resolve_seconds_count{peer="2"} 2.0' in text
    assert 'gannet_peer_resolve_failures_total{peer="2"} 1.0' in text
    assert 'gannet_peer_address_family{family="ipv4",peer="2"} 1.0' in text
    assert 'gannet_peer_address_family{family="ipv6",peer="2"} 0.0' in text
    assert 'gannet_peer_address_family{family="literal",peer="3"} 1.0' in text
    assert 'gannet_peer_resolve_failures_total{peer="3"}' not in text  # never looked up
    empty = CollectorRegistry()
    empty.register(resolver_collecting.ResolveCollector(lambda: None))
    assert b"gannet_peer" not in generate_latest(empty)
