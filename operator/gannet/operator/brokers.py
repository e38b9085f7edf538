"""The one module that talks to Gannet brokers: the admin gRPC API (``gannet.admin.v1.Admin``).

Used by :mod:`gannet.operator.handlers`. Every call has a deadline (``timeout_s``); gRPC errors
become :class:`BrokerUnavailable` (retry later; condition ``BrokerUnavailable``) or
:class:`BrokerRefused` (the broker said no; condition ``BrokerRefused`` with its message).
``NOT_FOUND`` on describe calls becomes ``None``. Results come back as the planning modules'
plain dataclasses, so nothing protobuf-shaped leaks into planning.

Channels are cached per endpoint and :class:`Security` (at most :data:`CHANNELS_MAX`; the least
recently used one is closed past that) and closed by :meth:`Brokers.close`.

Security: a broker run with ``--auth-file`` wants every call signed by a key with the ``admin``
right, and a broker with ``--tls-cert`` serves TLS only. :class:`Security` holds the operator's
access key and secret (each call carries fresh ``MQv2-HMAC-SHA1`` metadata from
:class:`gannet.node.protocol.auth.SigningInterceptor`) and the CA it trusts for TLS. The default
comes from the operator's options; :meth:`Brokers.use` sets another one for a cluster's endpoints
(:func:`gannet.operator.contexts.secure` reads it from the cluster's Secrets). A refused
signature or a key without the admin right becomes :class:`Unauthorized` (condition reason
``Unauthorized``), naming where the operator's key comes from.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, ClassVar, TypeVar

import grpc
import grpc.aio

from gannet.node.protocol import auth
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.operator import broker_group_planning as bgp
from gannet.operator.cluster_planning import PeerView, RaftView, ReviveView
from gannet.operator.consumer_group_planning import ObservedGroup
from gannet.operator.membership_planning import Group, MemberState
from gannet.operator.specs import CleanupSpec, Permission
from gannet.operator.tier_planning import TierView
from gannet.operator.topic_planning import TIER_RETENTION_ATTRIBUTE, BrokerTopic, tier_retention_of

CHANNELS_MAX = 64
SCOPE_HEADER, SCOPE_GROUP = "gannet-scope", "group"
"""Metadata of an admin write meant for the answering broker group only (the brokers'
``gannet.node.api.broker_groups.SCOPE_HEADER``): it is not fanned out to the other groups."""
T = TypeVar("T")

_UNAVAILABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}


class BrokerError(Exception):
    """A broker call failed; ``str()`` names the endpoint, the call and the cause."""


class BrokerUnavailable(BrokerError):
    """The broker did not answer in time or could not be reached; try again later."""


class BrokerRefused(BrokerError):
    """The broker answered with a refusal (bad value, refused change, unsupported call)."""

    reason: ClassVar[str] = "BrokerRefused"
    """The Ready condition's reason for this refusal."""


class Unauthorized(BrokerRefused):
    """The broker refused the operator's signature (UNAUTHENTICATED) or its key lacks the
    admin right (PERMISSION_DENIED)."""

    reason: ClassVar[str] = "Unauthorized"


_AUTH_HINT = (
    "the broker refused the operator's credentials; check the admin key in "
    "security.auth.operatorCredentialsSecret (or the operator's --access-key) against the "
    "cluster's credentialsSecret"
)


class NotFound(BrokerError):
    """The topic or group does not exist (describe calls turn this into None)."""


class AlreadyExists(BrokerRefused):
    """A create found the topic or group already there."""


@dataclasses.dataclass(frozen=True, slots=True)
class TopicFigures:
    queues: int
    max_offsets: tuple[int, ...]
    messages: int
    undelivered: bgp.Undelivered = dataclasses.field(default_factory=bgp.Undelivered)
    """Messages outside the queues: delayed (timer wheel) and prepared transactional ones."""


@dataclasses.dataclass(frozen=True, slots=True)
class GroupFigures:
    lag: int
    lag_by_topic: tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class CleanupRun:
    files_deleted: int
    bytes_freed: int
    started_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class Security:
    """How the operator reaches a broker: the admin key it signs with (None: unsigned calls)
    and TLS (``ca_pem``: trust this PEM CA; None with ``tls``: the system roots)."""

    access_key: str | None = None
    secret_key: str | None = dataclasses.field(default=None, repr=False)
    tls: bool = False
    ca_pem: bytes | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if bool(self.access_key) != bool(self.secret_key):
            raise ValueError("an admin key needs both its access key and its secret key")
        if self.ca_pem is not None and b"-----BEGIN " not in self.ca_pem:
            raise ValueError("the broker CA is not PEM (no '-----BEGIN' line)")

    @property
    def signs(self) -> bool:
        return bool(self.access_key and self.secret_key)


PLAIN = Security()


_TYPE_NAMES = {
    admin_pb2.NORMAL: "NORMAL",
    admin_pb2.FIFO: "FIFO",
    admin_pb2.DELAY: "DELAY",
    admin_pb2.TRANSACTION: "TRANSACTION",
    admin_pb2.MIXED: "MIXED",
    admin_pb2.LITE: "LITE",
    admin_pb2.PRIORITY: "PRIORITY",
}
_TYPE_VALUES = {name: value for value, name in _TYPE_NAMES.items()}


class Brokers:
    """Admin calls to brokers by endpoint (``host:port``)."""

    def __init__(self, *, timeout_s: float = 5.0, security: Security = PLAIN) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s is {timeout_s}; use a positive number of seconds")
        self.timeout_s = timeout_s
        self.security = security
        self._by_endpoint: collections.OrderedDict[str, Security] = collections.OrderedDict()
        self._channels: collections.OrderedDict[tuple[str, Security], grpc.aio.Channel] = (
            collections.OrderedDict()
        )
        self._closing: set[asyncio.Task[None]] = set()

    def use(self, endpoints: Iterable[str], security: Security | None) -> None:
        """Reach ``endpoints`` with ``security`` from now on (None: the default again)."""
        for endpoint in endpoints:
            if security is None:
                self._by_endpoint.pop(endpoint, None)
                continue
            self._by_endpoint[endpoint] = security
            self._by_endpoint.move_to_end(endpoint)
            while len(self._by_endpoint) > CHANNELS_MAX * 16:
                self._by_endpoint.popitem(last=False)

    def security_of(self, endpoint: str) -> Security:
        return self._by_endpoint.get(endpoint, self.security)

    def _stub(self, endpoint: str, security: Security) -> Any:
        key = (endpoint, security)
        channel = self._channels.get(key)
        if channel is None:
            if security.tls:
                credentials = grpc.ssl_channel_credentials(root_certificates=security.ca_pem)
                channel = grpc.aio.secure_channel(endpoint, credentials)
            else:
                channel = grpc.aio.insecure_channel(endpoint)
            self._channels[key] = channel
            while len(self._channels) > CHANNELS_MAX:
                _, old = self._channels.popitem(last=False)
                task = asyncio.get_running_loop().create_task(old.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        self._channels.move_to_end(key)
        return admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), collections.OrderedDict()
        for channel in channels:
            await channel.close()
        if self._closing:
            await asyncio.gather(*self._closing)

    async def _call(
        self,
        endpoint: str,
        name: str,
        request: Any,
        *,
        timeout_s: float | None = None,
        scoped: bool = False,
    ) -> Any:
        security = self.security_of(endpoint)
        method: Callable[..., Awaitable[Any]] = getattr(self._stub(endpoint, security), name)
        metadata: list[tuple[str, str]] = []
        if security.access_key and security.secret_key:
            signer = auth.SigningInterceptor(security.access_key, security.secret_key)
            metadata = signer.metadata()
        if scoped:  # a metadata write applied by the answering broker group only
            metadata.append((SCOPE_HEADER, SCOPE_GROUP))
        try:
            return await method(request, timeout=timeout_s or self.timeout_s, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            where = f"{name} on {endpoint}"
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                raise Unauthorized(
                    f"{where}: {code.name} {exc.details() or ''}; {_AUTH_HINT}"
                ) from None
            if code == grpc.StatusCode.NOT_FOUND:
                raise NotFound(f"{where}: {exc.details()}") from None
            if code in _UNAVAILABLE:
                raise BrokerUnavailable(
                    f"{where}: {code.name} {exc.details() or ''}".strip()
                ) from None
            if code == grpc.StatusCode.ALREADY_EXISTS:
                raise AlreadyExists(f"{where}: {exc.details()}") from None
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise BrokerRefused(f"{where}: this broker does not implement {name}") from None
            raise BrokerRefused(f"{where}: {code.name} {exc.details() or ''}".strip()) from None

    # ------------------------------------------------------------------ topics
    async def describe_topic(
        self, endpoint: str, name: str
    ) -> tuple[BrokerTopic, TopicFigures] | None:
        try:
            answer = await self._call(
                endpoint, "DescribeTopic", admin_pb2.DescribeTopicRequest(name=name)
            )
        except NotFound:
            return None
        topic = answer.topic
        queues = max(topic.read_queue_nums, topic.write_queue_nums)
        offsets = sorted(answer.queues, key=lambda q: q.queue_id)
        figures = TopicFigures(
            queues=queues,
            max_offsets=tuple(q.max_offset for q in offsets),
            messages=sum(max(0, q.max_offset - q.min_offset) for q in offsets),
            undelivered=bgp.Undelivered(
                delayed=answer.delayed_messages,
                last_due_ms=answer.delayed_last_due_ms,
                prepared=answer.prepared_transactions,
                counted=answer.delayed_counted,
            ),
        )
        observed = BrokerTopic(
            name=topic.name,
            queues=queues,
            permission=Permission.of_perm(topic.perm),
            message_type=_TYPE_NAMES.get(topic.message_type, "NORMAL"),
            tier_remote_retention_s=tier_retention_of(topic.attributes),
        )
        return observed, figures

    async def create_topic(
        self,
        endpoint: str,
        name: str,
        *,
        queues: int,
        permission: Permission,
        message_type: str,
        broker_groups: Iterable[str] = (),
        tier_remote_retention_s: int | None = None,
    ) -> None:
        """CreateTopic in every broker group, or in the ``broker_groups`` named."""
        await self._call(
            endpoint,
            "CreateTopic",
            admin_pb2.CreateTopicRequest(
                name=name,
                queue_nums=queues,
                message_type=_TYPE_VALUES[message_type],
                perm=permission.value,
                broker_groups=list(broker_groups),
                attributes=_retention_attributes(tier_remote_retention_s),
            ),
        )

    async def update_topic(
        self,
        endpoint: str,
        name: str,
        *,
        queues: int | None,
        permission: Permission | None,
        message_type: str | None,
        tier_remote_retention_s: int | None = None,
        tier_remote_retention_removed: bool | None = None,
    ) -> None:
        request = admin_pb2.UpdateTopicRequest(name=name)
        if tier_remote_retention_s is not None:
            request.attribute_changes[f"+{TIER_RETENTION_ATTRIBUTE}"] = str(tier_remote_retention_s)
        elif tier_remote_retention_removed:
            request.attribute_changes[f"-{TIER_RETENTION_ATTRIBUTE}"] = ""
        if queues is not None:
            request.queue_nums = queues
        if permission is not None:
            request.perm = permission.value
        if message_type is not None:
            request.message_type = _TYPE_VALUES[message_type]
        await self._call(endpoint, "UpdateTopic", request)

    async def delete_topic(self, endpoint: str, name: str) -> bool:
        """True when deleted, False when it was already gone."""
        return await self._delete(endpoint, "DeleteTopic", admin_pb2.DeleteTopicRequest(name=name))

    # ------------------------------------------------------------------ groups
    async def describe_group(
        self, endpoint: str, name: str
    ) -> tuple[ObservedGroup, GroupFigures] | None:
        try:
            answer = await self._call(
                endpoint, "DescribeGroup", admin_pb2.DescribeGroupRequest(name=name)
            )
        except NotFound:
            return None
        group = answer.group
        by_topic: dict[str, int] = {}
        for queue in answer.queues:
            by_topic[queue.topic] = by_topic.get(queue.topic, 0) + max(0, queue.lag)
        observed = ObservedGroup(
            name=group.name,
            fifo=group.fifo,
            retry_max_times=group.retry_max_times,
            consume_enabled=group.consume_enable,
            retry_policy=group.retry_policy or "CUSTOMIZED",
        )
        return observed, GroupFigures(answer.total_lag, tuple(sorted(by_topic.items())))

    async def create_group(
        self, endpoint: str, name: str, *, fifo: bool, retry_max_times: int
    ) -> None:
        await self._call(
            endpoint,
            "CreateGroup",
            admin_pb2.CreateGroupRequest(name=name, fifo=fifo, retry_max_times=retry_max_times),
        )

    async def update_group(
        self,
        endpoint: str,
        name: str,
        *,
        fifo: bool | None,
        retry_max_times: int | None,
        consume_enabled: bool | None,
    ) -> None:
        request = admin_pb2.UpdateGroupRequest(name=name)
        if fifo is not None:
            request.fifo = fifo
        if retry_max_times is not None:
            request.retry_max_times = retry_max_times
        if consume_enabled is not None:
            request.consume_enable = consume_enabled
        await self._call(endpoint, "UpdateGroup", request)

    async def delete_group(self, endpoint: str, name: str) -> bool:
        """True when deleted, False when it was already gone."""
        return await self._delete(endpoint, "DeleteGroup", admin_pb2.DeleteGroupRequest(name=name))

    async def _delete(self, endpoint: str, method: str, request: Any) -> bool:
        try:
            await self._call(endpoint, method, request)
        except NotFound:
            return False
        return True

    # ------------------------------------------------------------------ cluster
    async def cleanup(
        self, endpoint: str, policy: CleanupSpec, *, trigger: bool
    ) -> CleanupRun | None:
        """Apply the cleanup policy; with ``trigger`` also clean now and return the figures."""
        change = admin_pb2.CleanupPolicyChange(
            file_reserved_hours=policy.file_reserved_hours,
            disk_max_used_ratio_percent=policy.disk_max_used_ratio_percent,
            disk_warning_ratio=policy.disk_warning_ratio,
            disk_clean_forcibly_ratio=policy.disk_clean_forcibly_ratio,
        )
        answer = await self._call(
            endpoint, "Cleanup", admin_pb2.CleanupRequest(change=change, trigger=trigger)
        )
        if not trigger or not answer.HasField("last_result"):
            return None
        result = answer.last_result
        return CleanupRun(
            files_deleted=(
                result.commitlog_files_deleted
                + result.consume_queue_files_deleted
                + result.index_files_deleted
            ),
            bytes_freed=result.bytes_freed,
            started_ms=result.started_ms,
        )

    async def revive_queues(self, endpoint: str) -> ReviveView:
        answer = await self._call(endpoint, "GetReviveQueues", admin_pb2.GetReviveQueuesRequest())
        return _revive_view(answer)

    async def set_revive_queue_count(self, endpoint: str, count: int) -> ReviveView:
        answer = await self._call(
            endpoint, "SetReviveQueueCount", admin_pb2.SetReviveQueueCountRequest(count=count)
        )
        return _revive_view(answer)

    async def raft_status(self, endpoint: str) -> RaftView:
        answer = await self._call(endpoint, "GetRaftStatus", admin_pb2.GetRaftStatusRequest())
        peers = tuple(
            PeerView(node_id=p.node_id, reachable=p.reachable, lag_bytes=p.lag_bytes)
            for p in answer.peers
        )
        return RaftView(
            leader_id=answer.leader_id,
            term=answer.term,
            peers=peers,
            node_id=answer.node_id,
            leader_client_endpoint=answer.leader_client_endpoint,
        )

    async def tier_status(self, endpoint: str) -> TierView:
        answer = await self._call(endpoint, "GetTierStatus", admin_pb2.GetTierStatusRequest())
        return TierView(
            enabled=answer.enabled,
            passes_total=answer.passes_total,
            failing_reason=answer.failing_reason,
            last_error=answer.last_error,
            objects=answer.objects,
            size_bytes=answer.bytes,
            last_success_ms=answer.last_success_ms,
        )

    async def transfer_leadership(self, endpoint: str, *, target: str = "") -> str:
        answer = await self._call(
            endpoint,
            "TransferLeadership",
            admin_pb2.TransferLeadershipRequest(
                target_node_id=target, timeout_ms=int(self.timeout_s * 1000)
            ),
        )
        return str(answer.leader_id)

    # ------------------------------------------------------------------ membership
    async def list_members(self, endpoint: str) -> Group:
        """The group's members as the answering broker sees them (the leader: lag and
        reachability; a follower forwards or refuses, see the membership contract)."""
        answer = await self._call(endpoint, "ListMembers", admin_pb2.ListMembersRequest())
        members = tuple(
            MemberState(
                node_id=m.node_id,
                voter=m.voter,
                lag_bytes=m.lag_bytes,
                reachable=m.reachable,
                leader=m.leader,
            )
            for m in answer.members
        )
        return Group(members, leader_id=answer.leader_id, change_in_flight=answer.change_in_flight)

    async def add_member(
        self,
        endpoint: str,
        node_id: str,
        *,
        peer_endpoint: str,
        client_endpoint: str,
        learner_only: bool,
        timeout_s: float,
    ) -> None:
        """AddMember: as a learner (``learner_only``), or promote it once caught up. The call
        waits up to ``timeout_s`` on the broker (and a little longer here)."""
        await self._call(
            endpoint,
            "AddMember",
            admin_pb2.AddMemberRequest(
                node_id=node_id,
                peer_endpoint=peer_endpoint,
                client_endpoint=client_endpoint,
                learner_only=learner_only,
                timeout_ms=int(timeout_s * 1000),
            ),
            timeout_s=timeout_s + self.timeout_s,
        )

    async def remove_member(self, endpoint: str, node_id: str, *, timeout_s: float) -> None:
        """RemoveMember; returns once the removal committed (a no-op for a non-member)."""
        await self._call(
            endpoint,
            "RemoveMember",
            admin_pb2.RemoveMemberRequest(node_id=node_id, timeout_ms=int(timeout_s * 1000)),
            timeout_s=timeout_s + self.timeout_s,
        )

    # ------------------------------------------------------------------ broker groups
    async def group_definitions(
        self, endpoint: str
    ) -> tuple[tuple[bgp.TopicDef, ...], tuple[bgp.GroupDef, ...]]:
        """The topics (without system topics) and consumer groups one broker group holds."""
        topics = await self._call(endpoint, "ListTopics", admin_pb2.ListTopicsRequest())
        groups = await self._call(endpoint, "ListGroups", admin_pb2.ListGroupsRequest())
        return (
            tuple(
                bgp.TopicDef(
                    name=t.name,
                    queues=max(t.read_queue_nums, t.write_queue_nums),
                    permission=Permission.of_perm(t.perm),
                    message_type=_TYPE_NAMES.get(t.message_type, "NORMAL"),
                    tier_remote_retention_s=tier_retention_of(t.attributes),
                )
                for t in topics.topics
            ),
            tuple(
                bgp.GroupDef(name=g.name, fifo=g.fifo, retry_max_times=g.retry_max_times)
                for g in groups.groups
            ),
        )

    async def system_topics(self, endpoint: str) -> tuple[str, ...]:
        """The retry (``%RETRY%``) and dead-letter (``%DLQ%``) topics one broker group holds
        (``ListTopics`` leaves them out unless asked)."""
        topics = await self._call(
            endpoint, "ListTopics", admin_pb2.ListTopicsRequest(include_system=True)
        )
        return tuple(t.name for t in topics.topics if t.name.startswith(bgp.SYSTEM_TOPIC_PREFIXES))

    async def group_offsets(
        self, endpoint: str, consumer_groups: Iterable[str], topics: Iterable[str]
    ) -> Consumption:
        """One broker group's consumption of ``topics`` and of its retry and dead-letter
        topics by ``consumer_groups`` (for
        :class:`~gannet.operator.broker_group_planning.GroupState`).

        A message moves through these figures in one direction: outside the queues (delayed,
        prepared) -> a queue (lag) -> popped with its checkpoint in the revive topic (unsettled
        pops) -> the retry topic (lag, or messages stored there) or acked. The broker adds a
        message to the next figure before it leaves the previous one, and each answer includes
        everything appended before it was asked; so reading the figures in that order (the
        retry topics again at the end) never misses a message that moves while they are read:
        a drain cannot see it in none of them."""
        messages: dict[str, int] = {}
        undelivered: dict[str, bgp.Undelivered] = {}
        system = await self.system_topics(endpoint)
        for topic in [*topics, *system]:
            described = await self.describe_topic(endpoint, topic)
            if described is not None:
                messages[topic] = described[1].messages
                undelivered[topic] = described[1].undelivered
        names = list(consumer_groups)
        subscriptions, lag = await self._lag(endpoint, names)
        revive = await self._call(endpoint, "GetReviveQueues", admin_pb2.GetReviveQueuesRequest())
        pops = bgp.UnsettledPops(
            parked=revive.parked_messages,
            backlog=sum(max(0, q.max_offset - q.revive_offset) for q in revive.queues),
            counted=revive.parked_counted,
        )
        later_subscriptions, later_lag = await self._lag(endpoint, names)
        for name, later in later_subscriptions.items():
            subscriptions[name] = subscriptions.get(name, frozenset()) | later
        for key, n in later_lag.items():
            lag[key] = max(lag.get(key, 0), n)
        for topic in await self.system_topics(endpoint):  # revive may have written new ones
            described = await self.describe_topic(endpoint, topic)
            if described is not None:
                messages[topic] = max(messages.get(topic, 0), described[1].messages)
        return Consumption(subscriptions, lag, messages, undelivered, pops)

    async def _lag(
        self, endpoint: str, consumer_groups: Iterable[str]
    ) -> tuple[dict[str, frozenset[str]], dict[tuple[str, str], int]]:
        """Consumer group -> topics it holds offsets for; (consumer group, topic) -> lag."""
        subscriptions: dict[str, frozenset[str]] = {}
        lag: dict[tuple[str, str], int] = {}
        for name in consumer_groups:
            found = await self.describe_group(endpoint, name)
            if found is None:
                continue
            by_topic = dict(found[1].lag_by_topic)
            subscriptions[name] = frozenset(by_topic)
            lag.update({(name, t): n for t, n in by_topic.items()})
        return subscriptions, lag

    async def create_topic_here(self, endpoint: str, topic: bgp.TopicDef) -> None:
        """CreateTopic in the answering broker group only; already there counts as done."""
        request = admin_pb2.CreateTopicRequest(
            name=topic.name,
            queue_nums=topic.queues,
            message_type=_TYPE_VALUES[topic.message_type],
            perm=topic.permission.value,
            attributes=_retention_attributes(topic.tier_remote_retention_s),
        )
        with contextlib.suppress(AlreadyExists):
            await self._call(endpoint, "CreateTopic", request, scoped=True)

    async def create_group_here(self, endpoint: str, group: bgp.GroupDef) -> None:
        """CreateGroup in the answering broker group only; already there counts as done."""
        request = admin_pb2.CreateGroupRequest(
            name=group.name, fifo=group.fifo, retry_max_times=group.retry_max_times
        )
        with contextlib.suppress(AlreadyExists):
            await self._call(endpoint, "CreateGroup", request, scoped=True)

    async def set_permission_here(self, endpoint: str, topic: str, permission: Permission) -> None:
        """UpdateTopic's permission in the answering broker group only (a drain)."""
        request = admin_pb2.UpdateTopicRequest(name=topic, perm=permission.value)
        await self._call(endpoint, "UpdateTopic", request, scoped=True)

    async def set_cluster_seeds(self, endpoint: str, seeds: Iterable[str]) -> list[str]:
        """SetClusterSeeds; returns the broker names the member routes to afterwards."""
        answer = await self._call(
            endpoint,
            "SetClusterSeeds",
            admin_pb2.SetClusterSeedsRequest(seeds=list(seeds)),
            timeout_s=self.timeout_s * 2,
        )
        return [g.group.broker_name for g in answer.groups]

    async def cluster_view(self, endpoint: str) -> tuple[list[tuple[str, float, str]], list[str]]:
        """GetClusterView: (broker name, age of the view in seconds, last poll error) per group
        the member routes to, and its seeds."""
        answer = await self._call(endpoint, "GetClusterView", admin_pb2.GetClusterViewRequest())
        groups = [(g.group.broker_name, g.age_seconds, g.last_error) for g in answer.groups]
        return groups, list(answer.seeds)


@dataclasses.dataclass(frozen=True, slots=True)
class Consumption:
    """One broker group's consumption figures (:meth:`Brokers.group_offsets`)."""

    subscriptions: dict[str, frozenset[str]]  # consumer group -> topics it holds offsets for
    lag: dict[tuple[str, str], int]  # (consumer group, topic) -> lag
    messages: dict[str, int]  # topic -> messages stored
    undelivered: dict[str, bgp.Undelivered]  # topic -> messages held outside its queues
    pops: bgp.UnsettledPops


def _revive_view(answer: Any) -> ReviveView:
    draining = tuple(sorted(q.queue_id for q in answer.queues if q.draining))
    return ReviveView(active_count=answer.active_count, draining=draining)


def _retention_attributes(tier_remote_retention_s: int | None) -> dict[str, str]:
    """The CreateTopic attributes carrying a topic's tier retention (none when unset)."""
    if tier_remote_retention_s is None:
        return {}
    return {TIER_RETENTION_ATTRIBUTE: str(tier_remote_retention_s)}
