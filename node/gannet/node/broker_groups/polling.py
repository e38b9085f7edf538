"""Keeps this member's view of the other broker groups fresh: every :data:`POLL_INTERVAL_S` it
asks one member of each group for ``GetBrokerGroup`` (the leader first, then the others, each
call bounded by :data:`CALL_TIMEOUT_S`), and asks every seed endpoint not yet known to belong
to a group which group it is.

Staleness bound: while any member of a group answers, this member's view of that group (its
members, leader and topic table) is at most ``POLL_INTERVAL_S + R × CALL_TIMEOUT_S`` old
(2 s + 3 s for three replicas, against RocketMQ's 30 s route refresh); an admin write applied
through :mod:`cluster_admin` also wakes the poller at once. The topic table travels only when
its version changed. A group no member of which answers keeps its last view (its queues stay
in routes; ``last_error`` says why it is stale) until the seeds change.

Seeds come from ``--cluster-seeds`` and may be replaced at run time (``SetClusterSeeds``, the
operator's call when it adds or drains a group): groups none of whose known members or seeds
is among the new seeds are forgotten, the rest are kept and the poller runs at once.

A seed list may name this member's own group too (one list of every group's endpoints given to
every group is the natural way to write it): a seed among :attr:`GroupPoller.own_endpoints`
(this member, a configured or serving member of its group) is taken for this group without
being asked, and a seed that answers with this group's broker name and shares a member with
it (its client Service, say) is this group from then on. Either way it is never polled again,
never waited for as a group not heard of yet, and never sent a fanned-out write (this group
applies the write itself). Only what is really wrong is refused from the view, its error
saying so and what to do (:func:`refusal`): a seed that answers as a group of another cluster,
or as another group under this group's broker name.

Security (``docs/security.md``, "Broker groups"): polls go out with the member's own client
settings (:class:`~gannet.node.protocol.auth.ClientSecurity`): TLS when its client port is TLS,
trusting the cluster CA and presenting its certificate under mutual TLS, and signed with the
cluster access key when it has one. The admin fan-out reuses these channels (:meth:`channel_to`).

IO at the edge (gRPC channels, an asyncio task); the view itself is
:mod:`gannet.node.broker_groups.views`.
Started and stopped by :mod:`gannet.node.broker.serving`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable

import grpc

from gannet.node.broker_groups import views as group_views
from gannet.node.broker_groups.views import GroupView
from gannet.node.protocol import auth, signing, tls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 2.0
CALL_TIMEOUT_S = 1.0
SEEDS_MAX = 256
"""Seed endpoints one member accepts (``--cluster-seeds``, ``SetClusterSeeds``)."""
GROUPS_MAX = 128
"""Other groups one member keeps a view of; more are ignored (and logged)."""
_RECEIVE_BYTES_MAX = 64 * 1024 * 1024  # a topic table of many thousand topics


def parse_seeds(text: str | Iterable[str]) -> tuple[str, ...]:
    """``host:port`` endpoints (comma-separated text or a list), deduplicated in order;
    raises ValueError naming a malformed one. Endpoints of this member's own group are welcome
    (module docstring)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    seeds: list[str] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"cluster seed {item!r} is not host:port: give each seed as the client "
                "endpoint of a broker group member, e.g. broker-1.example:8081"
            )
        if item not in seeds:
            seeds.append(item)
    if len(seeds) > SEEDS_MAX:
        raise ValueError(
            f"{len(seeds)} cluster seeds; at most {SEEDS_MAX}: one endpoint per group is enough"
        )
    return tuple(seeds)


def poll_error(exc: grpc.RpcError) -> str:
    """Why a poll failed, in a view's ``last_error`` or a fan-out's answer; a refused
    signature says what to do."""
    code = exc.code()
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return (
            f"{code.name}: it refused this member's poll; give this member the cluster access "
            "key (--cluster-access-key, with admin rights there)"
        )
    return str(code.name)


def refusal(
    local_name: str,
    cluster_name: str,
    own: Iterable[str],
    endpoint: str,
    reply: admin_pb2.BrokerGroup,
) -> str:
    """Why ``endpoint``'s answer cannot be taken (empty: it can): it answers with another
    cluster name (not checked when either side names none), or with this group's broker name
    ``local_name`` while none of its members is among ``own`` (this group's endpoints; not
    checked when empty): another group under the same name."""
    if cluster_name and reply.cluster_name and reply.cluster_name != cluster_name:
        return (
            f"{endpoint} answers as {reply.broker_name!r} of cluster {reply.cluster_name!r}, "
            f"not of this member's cluster {cluster_name!r}: remove it from the seeds, or start "
            "every group with the same --cluster"
        )
    own = set(own)
    theirs = {*reply.configured_endpoints, *reply.member_endpoints}
    if reply.broker_name == local_name and own and theirs and not own & theirs:
        return (
            f"{endpoint} answers as {local_name!r}, this member's own group, but none of its "
            f"members ({', '.join(sorted(theirs))}) is a member here: two groups share the "
            "broker name; give each group its own --broker-name, or remove the seed"
        )
    return ""


class GroupPoller:
    """The other groups of the cluster, as seen from the group named ``local_name``."""

    def __init__(
        self,
        local_name: str,
        seeds: Iterable[str],
        *,
        interval_s: float = POLL_INTERVAL_S,
        timeout_s: float = CALL_TIMEOUT_S,
        clock_s: Callable[[], float] = time.monotonic,
        security: auth.ClientSecurity | None = None,
        wall_clock_s: Callable[[], float] = time.time,
    ) -> None:
        self.local_name = local_name
        self.security = security if security is not None else auth.ClientSecurity()
        """How this member reaches the others (TLS, client certificate, signing key)."""
        self._wall_clock_s = wall_clock_s
        self.seeds = parse_seeds(seeds)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._clock_s = clock_s
        self.views: dict[str, GroupView] = {}
        self._seeds_generation = 0
        """Counts :meth:`set_seeds` calls: an answer asked for under older seeds is not taken."""
        self._round_generation = -1
        """The seeds generation the last finished round started under."""
        self._seed_errors: dict[str, str] = {}
        self._seed_owner: dict[str, str] = {}
        """Seed → the broker name it answered with (the local name for our own members)."""
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.own_endpoints: Callable[[], Iterable[str]] = lambda: ()
        """Endpoints of this member's own group (``cluster_admin.BrokerGroups`` sets it);
        seeds among them are this group, never polled."""
        self.cluster_name = ""
        """This member's cluster name; a seed answering with another one is refused (empty:
        not checked)."""
        self.polls_total = 0
        self.rounds_total = 0
        self._round_done = asyncio.Condition()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._task is None and self.seeds:
            self._task = asyncio.create_task(self._run(), name="group-poller")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()

    def wake(self) -> None:
        """Poll now (after a metadata write, or new seeds)."""
        self._wake.set()

    async def wait_rounds(self, count: int = 1) -> None:
        """Until ``count`` more poll rounds finished (tests; ``SetClusterSeeds``)."""
        target = self.rounds_total + count
        async with self._round_done:
            await self._round_done.wait_for(lambda: self.rounds_total >= target)

    async def wait_round_of_current_seeds(self) -> None:
        """Until a round that started under the current seeds finished (``SetClusterSeeds``:
        a round already under way when the seeds changed does not count)."""
        generation = self._seeds_generation
        async with self._round_done:
            await self._round_done.wait_for(lambda: self._round_generation >= generation)

    def set_seeds(self, seeds: Iterable[str]) -> None:
        """Replace the seeds (module docstring); raises ValueError on a malformed one."""
        new = parse_seeds(seeds)
        kept = set(new)
        self.views = {
            name: view
            for name, view in self.views.items()
            if kept & set(view.members) or any(self._seed_owner.get(s) == name for s in new)
        }
        self._seed_owner = {s: n for s, n in self._seed_owner.items() if s in kept}
        self._seed_errors = {s: e for s, e in self._seed_errors.items() if s in kept}
        self.seeds = new
        self._seeds_generation += 1
        if self._task is None:
            self.start()
        self.wake()

    async def refused_seeds(self, seeds: Iterable[str]) -> list[str]:
        """Why each of ``seeds`` whose answer cannot be taken (:func:`refusal`) is wrong (asked
        once each, together, each call bounded by the call timeout; ``SetClusterSeeds`` refuses
        them). A seed of this member's own group or already known is not asked; one that does
        not answer is not refused (its group may be starting: the poller keeps asking)."""
        own = set(self.own_endpoints())
        asked = [s for s in seeds if s not in own and s not in self._seed_owner]

        async def check(seed: str) -> str:
            try:
                reply = await self._ask(seed, "")
            except grpc.RpcError:
                return ""
            return self._refusal(seed, reply)

        refused = [why for why in await asyncio.gather(*(check(s) for s in asked)) if why]
        if refused:  # the seeds stay as they were: close what was opened to ask the new ones
            self._drop_idle_channels()
        return refused

    # ---------------------------------------------------------------- polling
    async def _run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception:  # a bug here must not stop the routes from refreshing
                log.exception("polling the broker groups failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()

    async def poll_once(self) -> None:
        """One round: every known group, and every seed not known to belong to one."""
        generation = self._seeds_generation
        self._claim_own_seeds()
        work = [self._poll_group(name) for name in list(self.views)]
        work += [self._poll_seed(s) for s in self.seeds if s not in self._seed_owner]
        await asyncio.gather(*work)
        self._drop_idle_channels()
        async with self._round_done:
            self.rounds_total += 1
            self._round_generation = generation
            self._round_done.notify_all()

    def candidates(self, name: str) -> list[str]:
        """Every endpoint known of group ``name``: its leader, members, then seeds of it."""
        view = self.views.get(name)
        if view is None:
            return []
        ordered = [view.leader] if view.leader else []
        ordered += list(view.members)
        ordered += [s for s, owner in self._seed_owner.items() if owner == name]
        return list(dict.fromkeys(e for e in ordered if e))

    async def _poll_group(self, name: str) -> None:
        errors = []
        for endpoint in self.candidates(name):
            view = self.views.get(name)
            if view is None:
                return  # forgotten meanwhile (new seeds)
            generation = self._seeds_generation
            try:
                reply = await self._ask(endpoint, view.topics_version)
            except grpc.RpcError as exc:
                errors.append(f"{endpoint}: {poll_error(exc)}")
                continue
            if generation != self._seeds_generation:
                return  # the seeds changed while it was asked: the woken round asks again
            if refused := self._refusal(endpoint, reply):
                errors.append(refused)
                continue
            if reply.broker_name != name:
                errors.append(f"{endpoint}: now answers as group {reply.broker_name!r}")
                self._learn(endpoint, reply)
                continue
            self._learn(endpoint, reply)
            return
        view = self.views.get(name)
        if view is not None:
            view.last_error = "; ".join(errors) or "no member known"

    def _refusal(self, endpoint: str, reply: admin_pb2.BrokerGroup) -> str:
        own = self.own_endpoints()
        return refusal(self.local_name, self.cluster_name, own, endpoint, reply)

    def _claim_own_seeds(self) -> None:
        """Seeds that are this member's own group (module docstring) need no answer."""
        own = set(self.own_endpoints())
        for seed in self.seeds:
            if seed in own:
                self._seed_owner[seed] = self.local_name
                self._seed_errors.pop(seed, None)

    async def _poll_seed(self, seed: str) -> None:
        generation = self._seeds_generation
        try:
            reply = await self._ask(seed, "")
        except grpc.RpcError as exc:
            if generation == self._seeds_generation:
                self._seed_errors[seed] = poll_error(exc)
            return
        if generation != self._seeds_generation:
            return  # the seeds changed while it was asked: the woken round asks again
        if refused := self._refusal(seed, reply):
            self._seed_errors[seed] = refused
            return
        self._seed_errors.pop(seed, None)
        self._learn(seed, reply)

    def _learn(self, endpoint: str, reply: admin_pb2.BrokerGroup) -> None:
        """An answer that can be taken (the callers checked :meth:`_refusal`)."""
        name = reply.broker_name
        for member in {endpoint, *reply.configured_endpoints} & set(self.seeds):
            self._seed_owner[member] = name  # a member down now still belongs to its group
        if name == self.local_name or not name:
            return
        if name not in self.views and len(self.views) >= GROUPS_MAX:
            log.warning("ignoring broker group %r: %d groups known already", name, GROUPS_MAX)
            return
        self.views[name] = group_views.apply_answer(self.views.get(name), reply, self._clock_s())

    async def _ask(self, endpoint: str, known_version: str) -> admin_pb2.BrokerGroup:
        self.polls_total += 1
        stub = admin_pb2_grpc.AdminStub(self._channel(endpoint))  # type: ignore[no-untyped-call]
        request = admin_pb2.GetBrokerGroupRequest(known_topics_version=known_version)
        reply: admin_pb2.BrokerGroup = await stub.GetBrokerGroup(
            request, timeout=self.timeout_s, metadata=self.poll_metadata()
        )
        return reply

    def poll_metadata(self) -> list[tuple[str, str]]:
        """A poll's signature headers as the official clients send them (fresh date-time and
        request id per call); empty without a cluster access key."""
        key, secret = self.security.access_key, self.security.secret_key
        if not key or not secret:
            return []
        return [
            *signing.signed_metadata(key, secret, self._wall_clock_s()),
            (signing.REQUEST_ID_HEADER, str(uuid.uuid4())),
        ]

    def _channel(self, endpoint: str) -> grpc.aio.Channel:
        channel = self._channels.get(endpoint)
        if channel is None:
            options = [("grpc.max_receive_message_length", _RECEIVE_BYTES_MAX)]
            security = self.security
            if security.uses_tls:  # PEM files read at each new channel: rotation applies
                credentials = tls.channel_credentials(
                    security.tls_ca, security.tls_cert, security.tls_key
                )
                channel = grpc.aio.secure_channel(endpoint, credentials, options=options)
            else:
                channel = grpc.aio.insecure_channel(endpoint, options=options)
            self._channels[endpoint] = channel
        return channel

    def _drop_idle_channels(self) -> None:
        used = set(self.seeds)
        for view in self.views.values():
            used.update(view.members)
            used.add(view.leader)
        for endpoint in [e for e in self._channels if e not in used]:
            channel = self._channels.pop(endpoint)
            asyncio.get_running_loop().create_task(channel.close())

    # ---------------------------------------------------------------- reading
    def age_s(self, view: GroupView) -> float:
        return max(0.0, self._clock_s() - view.heard_at_s)

    def unowned_seeds(self) -> dict[str, str]:
        """Seeds that never answered (their group is unknown) and why (empty: not asked yet);
        seeds of this member's own group are not among them."""
        self._claim_own_seeds()
        return {s: self._seed_errors.get(s, "") for s in self.seeds if s not in self._seed_owner}

    def own_seeds(self) -> list[str]:
        """Seeds known to be this member's own group (listed, never polled as another)."""
        return [s for s in self.seeds if self._seed_owner.get(s) == self.local_name]

    def channel_endpoints(self) -> list[str]:
        """Endpoints this member has a poll channel to (it asked them at least once)."""
        return list(self._channels)

    def channel_to(self, endpoint: str) -> grpc.aio.Channel:
        """A channel to a member of another group (admin fan-out reuses the poll channels)."""
        return self._channel(endpoint)
