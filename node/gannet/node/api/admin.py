"""The ``gannet.admin.v1.Admin`` servicer: topics, groups, offsets, queries, cleanup, status,
revive-queue count (of the running :class:`~gannet.node.pop.service.PopBroker`).

Errors are gRPC status codes with a message naming the problem (see ``admin.proto``): store
validation errors → INVALID_ARGUMENT, unknown names → NOT_FOUND, duplicates → ALREADY_EXISTS,
refused changes (shrinking a topic) → FAILED_PRECONDITION. Each RPC runs in a worker thread
(config files are fsync'ed on change), so the event loop keeps serving producers meanwhile.
The conversions between protobuf and the store's types live in :mod:`admin_converting`.

Writes are served by the Raft leader: a follower forwards them (:mod:`admin_forwarding`, which
lists the writes and the ones kept on the member called: ``Cleanup`` works on this member's
own files).

Created by :mod:`gannet.node.broker.serving`; called by the CLI and the operator.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import grpc

from gannet.node.api import admin_converting as conv
from gannet.node.api import admin_querying, receiving, record_pulling, tier_status
from gannet.node.api.admin_raft import RaftAdmin
from gannet.node.api.client_settings import ClientRegistry
from gannet.node.api.routes import BrokerIdentity
from gannet.node.pop import revive_log
from gannet.node.pop.service import PopBroker
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.protocol.statuses import abort as _abort
from gannet.node.protocol.versions import gannet_version
from gannet.node.store import errors, querying, validation
from gannet.node.store.configs import topics
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.consume_queues import Boundary
from gannet.node.store.tier import deferring
from gannet.node.store.tier.errors import TierUnavailable

if TYPE_CHECKING:
    from gannet.node.api.messaging import MessagingServicer

log = logging.getLogger(__name__)
T = TypeVar("T")

TOPIC_QUEUE_NUMS_DEFAULT = 8
TOPIC_QUEUE_NUMS_MAX = 1024
REVIVE_QUEUE_COUNT_MAX = 64


class AdminError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _not_found(kind: str, name: str) -> AdminError:
    return AdminError(grpc.StatusCode.NOT_FOUND, f"{kind} {name!r} does not exist")


class AdminServicer(admin_pb2_grpc.AdminServicer):
    raft: RaftAdmin | None = None
    """Set by the broker; None answers the Raft RPCs as a group of one."""
    messaging: MessagingServicer | None = None
    """Set by the broker: the v2 servicer whose pull handler serves PullRecords."""
    tier: tier_status.TierSide | None = None
    """Set by a broker with a tier (``--tier-*``); None answers GetTierStatus ``enabled=False``."""

    def __init__(
        self, store: MessageStore, identity: BrokerIdentity, clients: ClientRegistry
    ) -> None:
        self.store = store
        self.identity = identity
        self.clients = clients

    async def _run(self, context: grpc.aio.ServicerContext, work: Callable[[], T]) -> T:
        try:
            return await deferring.call(work)
        except AdminError as exc:
            await _abort(context, exc.code, exc.message)
        except errors.MessageIllegal as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except TierUnavailable as exc:  # an offloaded offset while the bucket is down: retry
            await _abort(context, grpc.StatusCode.UNAVAILABLE, f"tier not available now: {exc}")
        except errors.StoreError as exc:
            await _abort(context, grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

    async def _write(self, context: grpc.aio.ServicerContext, work: Callable[[], T]) -> T:
        """A config change: answered after commit on the Raft leader; a follower raises
        :class:`~gannet.node.api.forwarding.NotLeading` before doing anything (the write was
        forwarded to the leader by :mod:`admin_forwarding`, so this is only a leader lost
        meanwhile: the forwarder routes it again)."""
        raft = self._raft()
        await raft.before_write(context)
        result = await self._run(context, work)
        await raft.after_write(context)
        return result

    # ------------------------------------------------------------------ raft
    def _raft(self) -> RaftAdmin:
        return self.raft if self.raft is not None else RaftAdmin(self.store, self.identity, None)

    async def GetRaftStatus(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return await self._raft().get_raft_status(request, context)

    async def TransferLeadership(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return await self._raft().transfer_leadership(request, context)

    async def ListMembers(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return await self._raft().list_members(request, context)

    async def AddMember(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return await self._raft().add_member(request, context)

    async def RemoveMember(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return await self._raft().remove_member(request, context)

    # ------------------------------------------------------------------ topics
    def _topic(self, name: str) -> TopicConfig:
        config = self.store.topic_configs.get(name)
        if config is None:
            raise _not_found("topic", name)
        return config

    async def CreateTopic(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.TopicResponse:
            name = request.name
            validation.validate_topic(name, allow_system=False)
            cfg = self.store.config
            validation.refuse_reserved_topic(name, cfg.cluster_name, cfg.broker_name)
            if name in self.store.topic_configs:
                raise AdminError(grpc.StatusCode.ALREADY_EXISTS, f"topic {name!r} already exists")
            queues = _queue_nums(request.queue_nums or TOPIC_QUEUE_NUMS_DEFAULT)
            config = TopicConfig(name, read_queue_nums=queues, write_queue_nums=queues)
            if request.HasField("perm"):
                config = dataclasses.replace(config, perm=request.perm)
            kind = conv.message_type_of(request.message_type) or conv.MessageType.NORMAL
            config = config.with_message_type(kind)
            if request.attributes:
                topics.check_settable(request.attributes)
                config = dataclasses.replace(
                    config, attributes={**config.attributes, **request.attributes}
                )
            self.store.topic_configs.put(config)
            return admin_pb2.TopicResponse(topic=conv.topic_pb(config))

        return await self._write(context, work)

    async def UpdateTopic(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.TopicResponse:
            config = self._topic(request.name)
            if request.HasField("queue_nums"):
                queues = _queue_nums(request.queue_nums)
                if queues < max(config.read_queue_nums, config.write_queue_nums):
                    raise AdminError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"topic {config.topic_name!r} has {config.write_queue_nums} queues; "
                        "shrinking would strand messages, only growing is supported",
                    )
                config = dataclasses.replace(
                    config, read_queue_nums=queues, write_queue_nums=queues
                )
            if request.HasField("perm"):
                config = dataclasses.replace(config, perm=request.perm)
            kind = conv.message_type_of(request.message_type)
            if kind is not None:
                config = config.with_message_type(kind)
            if request.attribute_changes:
                topics.check_settable(request.attribute_changes)
                changed = topics.apply_attribute_changes(
                    config.attributes, request.attribute_changes
                )
                config = dataclasses.replace(config, attributes=changed)
            self.store.topic_configs.put(config)
            return admin_pb2.TopicResponse(topic=conv.topic_pb(config))

        return await self._write(context, work)

    async def DeleteTopic(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.DeleteResponse:
            if not self.store.topic_configs.delete(request.name):
                raise _not_found("topic", request.name)
            self.store.consumer_offsets.remove_topic(request.name)
            return admin_pb2.DeleteResponse(deleted=True)

        return await self._write(context, work)

    async def ListTopics(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.ListTopicsResponse:
            topics = [
                conv.topic_pb(t)
                for t in self.store.topic_configs.list()
                if request.include_system or not conv.is_internal_topic(t.topic_name)
            ]
            return admin_pb2.ListTopicsResponse(topics=topics)

        return await self._run(context, work)

    async def DescribeTopic(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.DescribeTopicResponse:
            config = self._topic(request.name)
            queue_count = max(config.read_queue_nums, config.write_queue_nums)
            queues = [
                conv.queue_offsets_pb(self.store, config.topic_name, q) for q in range(queue_count)
            ]
            # Dispatch first: a message appended before this call (a delivered delayed
            # message, a committed transaction) is in the queue figures or still counted.
            caught_up = self.store.dispatch_caught_up()
            timers = self.store.timers
            delayed = timers.pending_of(config.topic_name)
            return admin_pb2.DescribeTopicResponse(
                topic=conv.topic_pb(config),
                queues=queues,
                groups=self.store.consumer_offsets.groups_of(config.topic_name),
                delayed_messages=delayed.messages,
                delayed_last_due_ms=delayed.last_due_ms,
                delayed_counted=timers.running and caught_up,
                prepared_transactions=self._prepared(config.topic_name),
            )

        return await self._run(context, work)

    def _prepared(self, topic: str) -> int:
        """Open transactions of ``topic`` (every member applies them from the log)."""
        handler = self.messaging.transactions if self.messaging is not None else None
        return handler.service.book.pending_of(topic) if handler is not None else 0

    # ------------------------------------------------------------------ groups
    def _group(self, name: str) -> SubscriptionGroupConfig:
        config = self.store.group_configs.get(name)
        if config is None:
            raise _not_found("group", name)
        return config

    async def CreateGroup(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.GroupResponse:
            validation.validate_group(request.name, allow_system=False)
            if request.name in self.store.group_configs:
                raise AdminError(
                    grpc.StatusCode.ALREADY_EXISTS, f"group {request.name!r} already exists"
                )
            config = SubscriptionGroupConfig(request.name, consume_message_orderly=request.fifo)
            if request.HasField("retry_max_times"):
                config = dataclasses.replace(config, retry_max_times=request.retry_max_times)
            self.store.group_configs.put(config)
            return admin_pb2.GroupResponse(group=conv.group_pb(config))

        return await self._write(context, work)

    async def UpdateGroup(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.GroupResponse:
            config = self._group(request.name)
            if request.HasField("fifo"):
                config = dataclasses.replace(config, consume_message_orderly=request.fifo)
            if request.HasField("retry_max_times"):
                config = dataclasses.replace(config, retry_max_times=request.retry_max_times)
            if request.HasField("consume_enable"):
                config = dataclasses.replace(config, consume_enable=request.consume_enable)
            self.store.group_configs.put(config)
            return admin_pb2.GroupResponse(group=conv.group_pb(config))

        return await self._write(context, work)

    async def DeleteGroup(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.DeleteResponse:
            if not self.store.group_configs.delete(request.name):
                raise _not_found("group", request.name)
            self.store.consumer_offsets.remove_group(request.name)
            return admin_pb2.DeleteResponse(deleted=True)

        return await self._write(context, work)

    async def ListGroups(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.ListGroupsResponse:
            groups = [
                conv.group_pb(g)
                for g in self.store.group_configs.list()
                if not validation.is_system_group(g.group_name)
            ]
            return admin_pb2.ListGroupsResponse(groups=groups)

        return await self._run(context, work)

    async def DescribeGroup(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.DescribeGroupResponse:
            config = self._group(request.name)
            self.store.dispatch_caught_up()  # lag of every message appended before the call
            rows = []
            for topic in self.store.consumer_offsets.topics_of(config.group_name):
                offsets = self.store.consumer_offsets.query_all(config.group_name, topic)
                rows += [
                    conv.group_queue_pb(self.store, config.group_name, topic, q)
                    for q in sorted(offsets)
                ]
            return admin_pb2.DescribeGroupResponse(
                group=conv.group_pb(config), queues=rows, total_lag=sum(r.lag for r in rows)
            )

        return await self._run(context, work)

    async def ResetOffset(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.ResetOffsetResponse:
            group = self._group(request.group).group_name
            topic = self._topic(request.topic)
            queue_count = max(topic.read_queue_nums, topic.write_queue_nums)
            queue_ids = list(range(queue_count))
            if request.HasField("queue_id"):
                if not 0 <= request.queue_id < queue_count:
                    raise AdminError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"queue {request.queue_id} is not a queue of {topic.topic_name!r} "
                        f"(0..{queue_count - 1})",
                    )
                queue_ids = [request.queue_id]
            target = request.WhichOneof("target")
            if target is None:
                raise AdminError(
                    grpc.StatusCode.INVALID_ARGUMENT, "give timestamp_ms or offset to reset to"
                )
            rows, before = [], []
            for queue_id in queue_ids:
                now = conv.group_queue_pb(self.store, group, topic.topic_name, queue_id)
                before.append(now)
                offset = self._reset_target(topic.topic_name, queue_id, request, target)
                if request.dry_run:
                    planned = admin_pb2.GroupQueueOffset()
                    planned.CopyFrom(now)
                    planned.committed_offset = offset
                    planned.lag = max(now.max_offset - offset, 0)
                    rows.append(planned)
                    continue
                self.store.consumer_offsets.reset(group, topic.topic_name, queue_id, offset)
                rows.append(conv.group_queue_pb(self.store, group, topic.topic_name, queue_id))
            return admin_pb2.ResetOffsetResponse(queues=rows, before=before)

        if request.dry_run:  # a plan changes nothing: no Raft write, a follower answers too
            return await self._run(context, work)
        return await self._write(context, work)

    def _reset_target(
        self, topic: str, queue_id: int, request: admin_pb2.ResetOffsetRequest, target: str
    ) -> int:
        low = self.store.min_offset_in_queue(topic, queue_id)
        high = self.store.max_offset_in_queue(topic, queue_id)
        if target == "offset":
            return min(max(request.offset, low), high)
        if high == 0:
            return 0
        found = querying.offset_by_time(
            self.store, topic, queue_id, request.timestamp_ms, Boundary.LOWER
        )
        return min(max(found, low), high)

    # ------------------------------------------------------------------ messages
    async def QueryMessage(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.QueryMessageResponse:
            validation.validate_topic(request.topic)
            found = admin_querying.query(self.store, request)
            return admin_pb2.QueryMessageResponse(
                messages=[conv.stored_message_pb(m) for m in found]
            )

        return await self._run(context, work)

    # ------------------------------------------------------------------ cleanup, status
    async def Cleanup(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.CleanupResponse:
            changes = conv.policy_changes(request.change)
            if changes:
                _set_policy(self.store, changes)
            if request.trigger:
                self.store.clean_now()
            return conv.cleanup_pb(self.store.cleaner.policy, self.store.cleaner.last_result)

        return await self._run(context, work)

    async def GetStatus(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.GetStatusResponse:
            cfg = self.store.config
            return admin_pb2.GetStatusResponse(
                broker_name=cfg.broker_name,
                cluster_name=cfg.cluster_name,
                endpoint=f"{self.identity.host}:{self.identity.port}",
                version=gannet_version(),
                data_dir=str(cfg.root_dir),
                flush_mode=cfg.flush_mode.name,
                topics=len(self.store.topic_configs.list()),
                groups=len(self.store.group_configs.list()),
                clients=self.clients.count(),
                store=conv.statistics_pb(self.store.statistics()),
            )

        return await self._run(context, work)

    async def GetTierStatus(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.TierStatus:
            side = self.tier
            if side is None:
                return tier_status.status_pb(None, None, None, local_start_offset=0, leader=False)
            offloader = side.offloader()
            return tier_status.status_pb(
                side.config,
                side.manifest.current(),
                offloader.figures if offloader is not None else None,
                local_start_offset=self.store.commitlog.min_offset(),
                leader=offloader is not None and offloader.store.is_leader(),
            )

        return await self._run(context, work)

    # --- revive queues (Pop checkpoints) ---
    def _pop(self) -> PopBroker:
        pop = receiving.pop_broker_of(self.store)
        if pop is None:
            raise AdminError(
                grpc.StatusCode.FAILED_PRECONDITION, "this broker does not serve Pop consumption"
            )
        return pop

    async def GetReviveQueues(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.ReviveQueuesResponse:
            pop = self._pop()
            pop.shrink_drained_revive_queues(_wall_ms())
            return _revive_queues_pb(pop)

        return await self._run(context, work)

    # ------------------------------------------------------------------ bulk reads
    async def PullRecords(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        if self.messaging is None:
            await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "PullRecords: no v2 servicer")
        return await record_pulling.pull_records(self.messaging, request, context)

    async def SetReviveQueueCount(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        def work() -> admin_pb2.ReviveQueuesResponse:
            count = int(request.count)
            if not 1 <= count <= REVIVE_QUEUE_COUNT_MAX:
                raise AdminError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"count {count} is outside 1..{REVIVE_QUEUE_COUNT_MAX}",
                )
            pop = self._pop()
            pop.set_revive_queue_count(count)
            pop.shrink_drained_revive_queues(_wall_ms())
            return _revive_queues_pb(pop)

        # A write: the leader's Pop writes the checkpoints, and the revive topic's new queues
        # are a config change every member applies from the log.
        return await self._write(context, work)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _revive_queues_pb(pop: PopBroker) -> admin_pb2.ReviveQueuesResponse:
    """Every revive queue still read; those at or past the active count are draining."""
    active = pop.ctx.revive_write_queues
    topic = revive_log.revive_topic(pop.store)
    caught_up = pop.store.dispatch_caught_up()  # checkpoints written before the call counted
    timers = pop.store.timers
    reply = admin_pb2.ReviveQueuesResponse(
        active_count=active,
        parked_messages=timers.pending_of(topic).messages,
        parked_counted=timers.running and caught_up,
    )
    for queue_id in pop.revive_queue_ids():
        reply.queues.add(
            queue_id=queue_id,
            draining=queue_id >= active,
            revive_offset=pop.reviver(queue_id).progress() + 1,
            max_offset=pop.store.max_offset_in_queue(topic, queue_id),
        )
    return reply


def _set_policy(store: MessageStore, changes: dict[str, object]) -> None:
    """Every rule is :meth:`CleanPolicy.validate`'s (the command line checks with it too)."""
    try:
        store.cleaner.set_policy(**changes)
    except errors.StoreError as exc:
        raise AdminError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None


def _queue_nums(count: int) -> int:
    if not 1 <= count <= TOPIC_QUEUE_NUMS_MAX:
        raise AdminError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"queue_nums is {count}; use 1 to {TOPIC_QUEUE_NUMS_MAX}",
        )
    return count
