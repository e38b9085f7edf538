"""The admin API of a cluster of broker groups, wrapped around one member's
:class:`~gannet.node.api.admin.AdminServicer`.

* ``GetBrokerGroup`` — this member's group as the other groups poll it
  (:mod:`gannet.node.broker_groups.polling`): broker name, the members that serve (leader
  first), the leader, and the route-relevant topic table when the caller's version differs.
* ``GetClusterView`` — every group this member routes to, with the age of its view and why
  the last poll failed (``gannet status``, ``topic describe`` and the operator read it).
* ``SetClusterSeeds`` — replace the seed endpoints at run time (the operator, when it adds or
  drains a group).
* Fan-out of the metadata writes (create/update/delete of topics and consumer groups, a
  consumer group's offset reset — answered with every group's queues, each naming its group —
  and the revive-queue count): applied
  here first, then at each other group (its leader first, then its other members), the calls
  carrying the caller's signature headers and ``gannet-scope: group`` so that they stop there,
  over the poller's channels (TLS with this member's client settings when its port is TLS).
  Each attempt gets a fresh ``x-mq-request-id`` (not covered by the signature): a member asked
  twice while its group elects would otherwise refuse the second as a replay.
  If this group refuses the write (bad name, not the leader), nothing is sent elsewhere. A
  create that finds the topic already there, or a delete that finds it gone, counts as done
  in that group, so running a command again after a partial failure completes it. If some
  groups applied it and others did not, the answer is an error whose message names both
  (``applied on broker-0; NOT applied on broker-1 (UNAVAILABLE: …)``); nothing is rolled back.
  ``CreateTopic.broker_groups`` limits a create to the groups it names. A seed that has never
  answered (its group unknown) is asked first; if it still does not answer, the write is
  reported as not applied in "the group of seed h:p".
* Misdirected requests: a receive naming another group's queue, or a receipt handle of another
  group, is refused with an error naming that group and its endpoints.

Created by :mod:`gannet.node.broker.serving` for every broker (a single group answers
``GetBrokerGroup`` too, so it can be a seed of others).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from rocketmq.grpc_protocol import Code, definition_pb2

from gannet.node.api import broker_groups, routes
from gannet.node.broker_groups import polling as group_polling
from gannet.node.broker_groups import views as group_views
from gannet.node.broker_groups.polling import GroupPoller
from gannet.node.broker_groups.views import GroupView
from gannet.node.pop import receipts
from gannet.node.protocol import statuses
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.protocol.statuses import ApiError
from gannet.node.replication.driver import ReplicationNode
from gannet.node.store.message_store import MessageStore

FANOUT_TIMEOUT_S = 10.0
"""One group's answer to a fanned-out admin write (it waits for its Raft commit)."""
SEEDS_ROUND_WAIT_CALLS = 2
"""SetClusterSeeds waits for one poll round at most this many call timeouts past the interval."""
_ALREADY_DONE: dict[str, grpc.StatusCode | None] = {
    "CreateTopic": grpc.StatusCode.ALREADY_EXISTS,
    "CreateGroup": grpc.StatusCode.ALREADY_EXISTS,
    "DeleteTopic": grpc.StatusCode.NOT_FOUND,
    "DeleteGroup": grpc.StatusCode.NOT_FOUND,
    "UpdateTopic": None,
    "UpdateGroup": None,
    "ResetOffset": None,
    "SetReviveQueueCount": None,
}
"""The admin writes applied to every group, and the code meaning "already so there"."""
_REQUEST_ID_HEADER = "x-mq-request-id"
_FORWARDED_HEADERS = ("authorization", "x-mq-date-time", _REQUEST_ID_HEADER)
_TRY_NEXT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_RETRY_PAUSE_S = 0.2
_LOOPBACK_OR_ANY = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::")


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class _LocalContext:
    """The caller's context, except that ``abort`` is captured (the wrapper answers later)."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: object) -> NoReturn:
        raise _Aborted(code, details)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One group's answer to a fanned-out write."""

    group: str
    code: grpc.StatusCode
    details: str = ""
    reply: Any = None


class BrokerGroups:
    """This member's part in a cluster of groups: its own group's answer, the view of the
    others (``poller``), and the checks the messaging servicer asks."""

    def __init__(
        self,
        store: MessageStore,
        identity: routes.BrokerIdentity,
        replication: ReplicationNode | None,
        poller: GroupPoller,
    ) -> None:
        self.store = store
        self.identity = identity
        self.replication = replication
        self.poller = poller
        self._route_topics = group_views.RouteTopicsCache()
        poller.own_endpoints = self.own_endpoints  # seeds of this group: never polled
        poller.cluster_name = store.config.cluster_name

    @property
    def name(self) -> str:
        return self.identity.broker_name

    def others(self) -> list[GroupView]:
        return sorted(
            self.poller.views.values(), key=lambda v: group_views.group_order(v.broker_name)
        )

    # ---------------------------------------------------------------- this group
    def members(self) -> tuple[list[str], str]:
        """Client endpoints of this group's serving members (leader first) and the leader's."""
        own = f"{self.identity.host}:{self.identity.port}"
        node = self.replication
        if node is None:
            return [own], own
        found = routes.member_endpoints(node, definition_pb2.Endpoints())
        members = [f"{a.host}:{a.port}" for a in found.addresses]
        leader = node.leader()
        return members, (f"{leader.host}:{leader.client_port}" if leader is not None else "")

    def own_group(self, known_version: str) -> admin_pb2.BrokerGroup:
        table = self.store.topic_configs
        topics, version = self._route_topics.get(table.data_version, table.list)
        members, leader = self.members()
        reply = broker_groups.group_pb(
            self.name,
            self.store.config.cluster_name,
            members,
            leader,
            topics,
            version,
            include_topics=known_version != version,
        )
        reply.configured_endpoints.extend(self.configured())
        return reply

    def configured(self) -> list[str]:
        """Client endpoints of every configured member of this group (up or not)."""
        node = self.replication
        if node is None:
            return [f"{self.identity.host}:{self.identity.port}"]
        return [f"{p.host}:{p.client_port}" for p in node.config.peers]

    def own_endpoints(self) -> set[str]:
        """Endpoints that reach this group: this member's (with its loopback forms when it
        answers on a loopback or wildcard address), its configured and serving members'. A
        seed among them is this group (:mod:`gannet.node.broker_groups.polling`)."""
        host, port = self.identity.host.strip("[]"), self.identity.port
        hosts = [host, *(_LOOPBACK_OR_ANY if host in _LOOPBACK_OR_ANY else ())]
        found = {*self.configured(), *self.members()[0]}
        found.update(form.format(h, port) for h in hosts for form in ("{}:{}", "[{}]:{}"))
        return found

    # ---------------------------------------------------------------- routes
    def remote_queues(self, topic: str, namespace: str) -> list[definition_pb2.MessageQueue]:
        return broker_groups.remote_message_queues(topic, self.poller.views.values(), namespace)

    def route(
        self, local: list[definition_pb2.MessageQueue], topic: str, namespace: str
    ) -> list[definition_pb2.MessageQueue]:
        """``local`` plus the other groups' queues of ``topic``, in cluster order."""
        if not self.poller.views:
            return local
        return broker_groups.merged_route(self.name, local, self.remote_queues(topic, namespace))

    def misdirected_queue(self, broker_name: str) -> ApiError | None:
        """A request naming a queue of another group this member knows of."""
        view = self._other(broker_name)
        if view is None:
            return None
        return ApiError(
            Code.BAD_REQUEST,
            f"the queue belongs to broker group {broker_name!r} ({', '.join(view.members)}); "
            f"this is {self.name!r}: send it there (query the route again)",
        )

    def misdirected_handles(self, handles: Iterable[str]) -> ApiError | None:
        """A receipt handle of another group this member knows of."""
        if not self.poller.views:
            return None  # one group (every broker by default): no handle to parse twice
        for text in handles:
            owner = _handle_broker_name(text)
            view = self._other(owner)
            if view is not None:
                return ApiError(
                    Code.INVALID_RECEIPT_HANDLE,
                    f"receipt handle belongs to broker group {owner!r} "
                    f"({', '.join(view.members)}); this is {self.name!r}: send it there",
                )
        return None

    def _other(self, broker_name: str) -> GroupView | None:
        if not broker_name or broker_name == self.name:
            return None
        return self.poller.views.get(broker_name)

    # ---------------------------------------------------------------- view
    def cluster_view(self) -> admin_pb2.ClusterView:
        own = self.own_group("")
        states = [
            admin_pb2.ClusterGroupState(
                group=_without_topics(own), local=True, topic_count=len(own.topics)
            )
        ]
        for view in self.others():
            states.append(
                admin_pb2.ClusterGroupState(
                    group=admin_pb2.BrokerGroup(
                        broker_name=view.broker_name,
                        member_endpoints=list(view.members),
                        leader_endpoint=view.leader,
                        topics_version=view.topics_version,
                    ),
                    age_seconds=self.poller.age_s(view),
                    last_error=view.last_error,
                    topic_count=len(view.topics),
                )
            )
        states.sort(key=lambda s: group_views.group_order(s.group.broker_name))
        return admin_pb2.ClusterView(
            groups=states,
            seeds=list(self.poller.seeds),
            poll_interval_seconds=self.poller.interval_s,
        )

    # ---------------------------------------------------------------- fan-out
    async def fan_out(
        self,
        method: str,
        local: Callable[[Any, Any], Any],
        request: Any,
        context: grpc.aio.ServicerContext,
    ) -> Any:
        """Apply an admin write here and at every other group (module docstring)."""
        poller = self.poller
        if _scoped(context) or not poller.seeds:
            return await local(request, context)
        if poller.unowned_seeds():  # a group not heard of yet: ask its seeds first
            poller.wake()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(poller.wait_rounds(1), FANOUT_TIMEOUT_S)
        listed = list(getattr(request, "broker_groups", ()))
        known = {self.name, *self.poller.views}
        if unknown := [g for g in listed if g not in known]:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"broker_groups names unknown groups {unknown}; the cluster has "
                f"{sorted(known, key=group_views.group_order)}",
            )
        done_code = _ALREADY_DONE[method]
        outcomes: list[Outcome] = []
        if not listed or self.name in listed:
            try:
                outcomes.append(
                    Outcome(
                        self.name,
                        grpc.StatusCode.OK,
                        reply=await local(request, _LocalContext(context)),
                    )
                )
            except _Aborted as exc:
                if exc.code != done_code:
                    await context.abort(exc.code, exc.details)  # not applied anywhere
                outcomes.append(Outcome(self.name, exc.code, exc.details))
        metadata = _forwarded(context)
        remote = [v for v in self.others() if not listed or v.broker_name in listed]
        outcomes += await asyncio.gather(
            *(self._call_group(view, method, request, metadata) for view in remote)
        )
        if not listed:  # seeds that never answered: their group cannot be told
            outcomes += [
                Outcome(f"the group of seed {seed}", grpc.StatusCode.UNAVAILABLE, why)
                for seed, why in poller.unowned_seeds().items()
            ]
        self.poller.wake()
        code, details, reply = combine(method, outcomes, done_code)
        if code != grpc.StatusCode.OK:
            await context.abort(code, statuses.bounded(details))
        if method == "ResetOffset":
            return merged_reset(outcomes)
        return reply

    async def _call_group(
        self, view: GroupView, method: str, request: Any, metadata: list[tuple[str, str]]
    ) -> Outcome:
        """``method`` at one member of ``view``'s group: the leader first, then every other
        member and seed of it; passes repeat while a member answers that it does not lead (an
        election), until :data:`FANOUT_TIMEOUT_S`."""
        deadline = time.monotonic() + FANOUT_TIMEOUT_S
        tried: dict[str, str] = {}
        electing = True
        while electing:
            electing = False
            for endpoint in self.poller.candidates(view.broker_name):
                stub = admin_pb2_grpc.AdminStub(self.poller.channel_to(endpoint))  # type: ignore[no-untyped-call]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    reply = await getattr(stub, method)(
                        request, metadata=_fresh_request_id(metadata), timeout=remaining
                    )
                except grpc.RpcError as exc:
                    code, details = exc.code(), str(exc.details() or "")
                    leaderless = code == grpc.StatusCode.FAILED_PRECONDITION and "leader" in details
                    if code in _TRY_NEXT or leaderless:
                        tried[endpoint] = code.name
                        electing = electing or leaderless
                        continue
                    return Outcome(view.broker_name, code, details)
                return Outcome(view.broker_name, grpc.StatusCode.OK, reply=reply)
            if not electing or time.monotonic() + _RETRY_PAUSE_S >= deadline:
                break
            await asyncio.sleep(_RETRY_PAUSE_S)
        answers = "; ".join(f"{e}: {c}" for e, c in tried.items()) or "no member known"
        return Outcome(
            view.broker_name,
            grpc.StatusCode.UNAVAILABLE,
            f"no member took it within {FANOUT_TIMEOUT_S:.0f} s ({answers})",
        )


def combine(
    method: str, outcomes: Sequence[Outcome], done_code: grpc.StatusCode | None
) -> tuple[grpc.StatusCode, str, Any]:
    """The answer to a fanned-out write from every group's outcome (pure; module docstring)."""
    applied = [o for o in outcomes if o.code == grpc.StatusCode.OK]
    already = [o for o in outcomes if done_code is not None and o.code == done_code]
    failed = [o for o in outcomes if o not in applied and o not in already]
    if not failed:
        if applied:
            return grpc.StatusCode.OK, "", applied[0].reply
        first = already[0]
        return first.code, first.details, None
    if not applied and len({o.code for o in failed}) == 1 and not already:
        return failed[0].code, f"{failed[0].group}: {failed[0].details}", None
    parts = []
    if applied:
        parts.append("applied on " + ", ".join(o.group for o in applied))
    if already:
        parts.append("already so on " + ", ".join(o.group for o in already))
    parts.append(
        "NOT applied on " + "; ".join(f"{o.group} ({o.code.name}: {o.details})" for o in failed)
    )
    hint = "; run it again once those groups answer"
    if done_code is not None:
        hint += f" (groups that have it answer {done_code.name} and count as done)"
    return failed[0].code, f"{method}: " + "; ".join(parts) + hint, None


def merged_reset(outcomes: Sequence[Outcome]) -> admin_pb2.ResetOffsetResponse:
    """One ResetOffset answer of every group that applied it, each queue naming its group
    (queue ids repeat across groups), groups in route order."""
    merged = admin_pb2.ResetOffsetResponse()
    applied = [o for o in outcomes if o.code == grpc.StatusCode.OK and o.reply is not None]
    for outcome in sorted(applied, key=lambda o: group_views.group_order(o.group)):
        for source, target in ((outcome.reply.queues, merged.queues),
                               (outcome.reply.before, merged.before)):  # fmt: skip
            for queue in source:
                added = target.add()
                added.CopyFrom(queue)
                added.broker = outcome.group
    return merged


def _handle_broker_name(text: str) -> str:
    """The broker name field of a receipt handle, without parsing the rest (the Pop layer
    parses and checks the whole handle after this; a full parse here cost one more parse per
    acked message in every cluster of two or more groups). Empty when there is no such field."""
    parts = text.split(receipts.FIELD_SEPARATOR, receipts.BROKER_NAME_FIELD + 1)
    return parts[receipts.BROKER_NAME_FIELD] if len(parts) > receipts.BROKER_NAME_FIELD + 1 else ""


def _scoped(context: grpc.aio.ServicerContext) -> bool:
    return any(
        k == group_views.SCOPE_HEADER and v == group_views.SCOPE_GROUP
        for k, v in context.invocation_metadata() or ()
    )


def _forwarded(context: grpc.aio.ServicerContext) -> list[tuple[str, str]]:
    found = [
        (str(k), str(v)) for k, v in context.invocation_metadata() or () if k in _FORWARDED_HEADERS
    ]
    return [*found, (group_views.SCOPE_HEADER, group_views.SCOPE_GROUP)]


def _fresh_request_id(metadata: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``metadata`` with a new ``x-mq-request-id`` if it carried one (one per attempt)."""
    if not any(k == _REQUEST_ID_HEADER for k, _ in metadata):
        return metadata
    fresh = str(uuid.uuid4())
    return [(k, fresh if k == _REQUEST_ID_HEADER else v) for k, v in metadata]


def _without_topics(group: admin_pb2.BrokerGroup) -> admin_pb2.BrokerGroup:
    copy = admin_pb2.BrokerGroup()
    copy.CopyFrom(group)
    del copy.topics[:]
    copy.topics_included = False
    return copy


class ClusterAdminServicer:
    """The Admin servicer of a member: ``inner`` for every RPC, the metadata writes fanned
    out, and the three broker-group RPCs answered here."""

    def __init__(self, inner: admin_pb2_grpc.AdminServicer, groups: BrokerGroups) -> None:
        self._inner = inner
        self.groups = groups

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        if name not in _ALREADY_DONE:
            return found

        async def fanned(request: Any, context: grpc.aio.ServicerContext) -> Any:
            return await self.groups.fan_out(name, found, request, context)

        return fanned

    async def GetBrokerGroup(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return self.groups.own_group(request.known_topics_version)

    async def GetClusterView(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return self.groups.cluster_view()

    async def SetClusterSeeds(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        poller = self.groups.poller
        try:
            seeds = group_polling.parse_seeds(request.seeds)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, statuses.bounded(str(exc)))
        # Seeds of this member's own group are fine (it knows them for its own); a seed that
        # answers as another cluster's group, or as another group under this group's name, is
        # refused, and the seeds stay as they were.
        if refused := await poller.refused_seeds(seeds):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                statuses.bounded("; ".join(refused) + " (the seeds are unchanged)"),
            )
        poller.set_seeds(seeds)
        if not seeds:  # no seed left: nothing to ask, and no poll round would come to wait for
            return self.groups.cluster_view()
        # One round shows what the new seeds answered; a seed that cannot be resolved or
        # reached must not hold the caller past its deadline: after a bounded wait the view
        # answers as it stands (its groups' last errors say who has not answered yet).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                poller.wait_round_of_current_seeds(),
                poller.interval_s + SEEDS_ROUND_WAIT_CALLS * poller.timeout_s,
            )
        return self.groups.cluster_view()
