"""The admin requests ``mqadmin`` (``DefaultMQAdminExt``) sends, translated onto Gannet's admin
API (the ``gannet.admin.v1.Admin`` servicer the CLI and the operator use, with its forwarding of
writes to the Raft leader and its fan-out to every broker group).

Served (request code → admin call):

* ``GET_TOPIC_STATS_INFO`` (202) → ``DescribeTopic``: ``TopicStatsTable``, each queue's min and
  max offset and the store time of its last message;
* ``GET_CONSUME_STATS`` (208) → ``DescribeGroup``: ``ConsumeStats``, each queue's committed and
  max offset (``topic`` / ``topicList`` narrow it) and the store time of the last consumed one;
* ``UPDATE_AND_CREATE_SUBSCRIPTIONGROUP`` (200) → ``CreateGroup`` / ``UpdateGroup``: what the
  admin API carries (``consumeEnable``, ``consumeMessageOrderly``, ``retryMaxTimes``); a field
  Gannet would act on but cannot set this way (``retryQueueNums`` ≠ 1, ``brokerId`` ≠ 0,
  ``notifyConsumerIdsChangedEnable`` false, another retry policy, attributes) is refused,
  naming it; the fields Gannet does not act on (``consumeBroadcastEnable``,
  ``consumeFromMinEnable``, ``consumeTimeoutMinute``, ``whichBrokerWhenConsumeSlowly``,
  ``groupSysFlag``) are ignored (``docs/remoting.md``);
* ``DELETE_SUBSCRIPTIONGROUP`` (207) → ``DeleteGroup`` (which removes the group's offsets: a
  request keeping them, ``cleanOffset`` false, is refused); a group already gone is success;
* ``DELETE_TOPIC_IN_BROKER`` (215), ``DELETE_TOPIC_IN_NAMESRV`` (216) → ``DeleteTopic`` (Gannet's
  routes are its topics); a topic already gone is success;
* ``INVOKE_BROKER_TO_RESET_OFFSET`` (222) → ``ResetOffset`` by time (or to an offset on one
  queue; timestamp -1: to the end, as mqadmin's skipAccumulatedMessage asks), as RocketMQ 5's
  server-side reset; the group's connected remoting consumers are
  then sent ``RESET_CONSUMER_CLIENT_OFFSET`` (220) so they continue from there;
* ``GET_BROKER_RUNTIME_INFO`` (28) → ``GetStatus``: a ``KVTable`` of the figures Gannet has;
* ``DELETE_KV_CONFIG`` (102): the name server's KV config, which Gannet does not keep (mqadmin's
  deleteTopic clears the topic's ``ORDER_TOPIC_CONFIG`` entry): success, nothing to delete;
* reads of the applied configuration: ``GET_ALL_SUBSCRIPTIONGROUP_CONFIG`` (201),
  ``GET_SUBSCRIPTIONGROUP_CONFIG`` (352), ``GET_ALL_TOPIC_CONFIG`` (21),
  ``QUERY_TOPIC_CONSUME_BY_WHO`` (300);
* connection lists from the clients' heartbeats (:mod:`client_book`):
  ``GET_CONSUMER_CONNECTION_LIST`` (203), ``GET_PRODUCER_CONNECTION_LIST`` (204) — the remoting
  clients connected to this broker (gRPC clients are not listed).

Refusals of the admin API come back with the remoting code the tools act on (unknown topic →
``TOPIC_NOT_EXIST``, unknown group → ``SUBSCRIPTION_GROUP_NOT_EXIST``, ...) and its message.
Bodies are written by :mod:`admin_bodies`. The broker assembling its remoting port
(:mod:`gannet.node.broker.serving`) adds these handlers to the broker requests' dispatch table
with :meth:`AdminRequests.install`; ``HEART_BEAT`` and ``UNREGISTER_CLIENT`` keep their
handlers, which this module wraps to fill its client book.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from gannet.node.api.messaging import MessagingServicer
from gannet.node.protocol.gen import admin_pb2
from gannet.node.remoting import admin_bodies, codes
from gannet.node.remoting.admin_bodies import QueueKey
from gannet.node.remoting.client_book import Client, ClientBook
from gannet.node.remoting.codec import FLAG_ONEWAY, Command
from gannet.node.remoting.context import Aborted, RemotingContext
from gannet.node.remoting.server import Connection
from gannet.node.store import querying
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.errors import MessageIllegal

Handler = Callable[[Command, Connection], Awaitable[Command | None]]

OFFSET_END = 2**63 - 1
"""A reset to this offset is clamped to each queue's max offset."""
_FROM_GRPC = {
    grpc.StatusCode.PERMISSION_DENIED: codes.NO_PERMISSION,
    grpc.StatusCode.UNAUTHENTICATED: codes.NO_PERMISSION,
    grpc.StatusCode.UNAVAILABLE: codes.SERVICE_NOT_AVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED: codes.SYSTEM_BUSY,
}


class Refused(Exception):
    """Answered with ``code`` and the message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _text(ext: dict[str, str], name: str) -> str:
    value = ext.get(name)
    if not value:
        raise Refused(codes.SYSTEM_ERROR, f"header field {name} is missing")
    return value


def _long(ext: dict[str, str], name: str, default: int) -> int:
    value = ext.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value[:40])
    except ValueError:
        raise Refused(
            codes.SYSTEM_ERROR, f"header field {name} = {value[:40]!r} is not a number"
        ) from None
    if not -(2**63) <= number < 2**63:
        raise Refused(codes.SYSTEM_ERROR, f"header field {name} = {value[:40]!r} is outside int64")
    return number


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class AdminRequests:
    """The admin requests of one broker's remoting port (module docstring)."""

    def __init__(self, servicer: MessagingServicer, admin: Any) -> None:
        self.servicer = servicer
        self.admin = admin
        """The admin servicer (``gannet.admin.v1.Admin``): every admin request is its call."""
        self.clients = ClientBook()

    @property
    def broker_name(self) -> str:
        return str(self.servicer.identity.broker_name)

    def install(self, handlers: dict[int, Handler]) -> None:
        """Add this module's handlers; wrap the heartbeat and unregister handlers."""
        heartbeat, unregister = handlers[codes.HEART_BEAT], handlers[codes.UNREGISTER_CLIENT]

        async def recorded_heartbeat(request: Command, conn: Connection) -> Command | None:
            answer = await heartbeat(request, conn)
            if answer is not None and answer.code == codes.SUCCESS:
                data = json.loads(request.body)  # the heartbeat handler parsed it already
                self.clients.heartbeat(data, conn, request.language, request.version)
            return answer

        async def recorded_unregister(request: Command, conn: Connection) -> Command | None:
            ext = request.ext
            self.clients.unregister(
                ext.get("clientID", ""), ext.get("producerGroup", ""), ext.get("consumerGroup", "")
            )
            return await unregister(request, conn)

        served: dict[int, Handler] = {
            codes.HEART_BEAT: recorded_heartbeat,
            codes.UNREGISTER_CLIENT: recorded_unregister,
            codes.GET_TOPIC_STATS_INFO: self.topic_stats,
            codes.GET_CONSUME_STATS: self.consume_stats,
            codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.create_group,
            codes.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_groups,
            codes.GET_SUBSCRIPTIONGROUP_CONFIG: self.group_config,
            codes.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            codes.GET_ALL_TOPIC_CONFIG: self.all_topics,
            codes.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            codes.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            codes.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            codes.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            codes.QUERY_TOPIC_CONSUME_BY_WHO: self.topic_consumers,
            codes.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            codes.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            codes.DELETE_KV_CONFIG: self.delete_kv_config,
        }
        for code, handler in served.items():
            handlers[code] = self._answering(handler)

    def _answering(self, handler: Handler) -> Handler:
        async def answer(request: Command, conn: Connection) -> Command | None:
            try:
                return await handler(request, conn)
            except Refused as exc:
                return request.response(exc.code, str(exc))

        return answer

    async def _admin(
        self, method: str, message: Any, conn: Connection, not_found: int = codes.SYSTEM_ERROR
    ) -> Any:
        """Call the admin servicer; its refusal raises :class:`Refused` with the remoting code
        (``not_found`` for NOT_FOUND)."""
        try:
            return await getattr(self.admin, method)(message, RemotingContext(conn))
        except Aborted as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                raise Refused(not_found, exc.details) from None
            raise Refused(_FROM_GRPC.get(exc.code, codes.SYSTEM_ERROR), exc.details) from None

    def _store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at a queue offset, 0 when there is none."""
        store = self.servicer.store
        found = querying.by_queue_offset(store, topic, queue_id, offset) if offset >= 0 else None
        return found.store_timestamp_ms if found is not None else 0

    # ------------------------------------------------------------------ topics
    async def topic_stats(self, request: Command, conn: Connection) -> Command:
        topic = _text(request.ext, "topic")
        described = await self._admin(
            "DescribeTopic", admin_pb2.DescribeTopicRequest(name=topic), conn, codes.TOPIC_NOT_EXIST
        )

        def figures() -> dict[QueueKey, admin_bodies.QueueFigures]:
            return {
                QueueKey(topic, self.broker_name, q.queue_id): admin_bodies.QueueFigures(
                    q.min_offset,
                    q.max_offset,
                    self._store_time(topic, q.queue_id, q.max_offset - 1),
                )
                for q in described.queues
            }

        table = await asyncio.to_thread(figures)
        return request.response(
            codes.SUCCESS, body=admin_bodies.encode(admin_bodies.topic_stats_table(table))
        )

    async def all_topics(self, request: Command, conn: Connection) -> Command:
        configs = self.servicer.store.topic_configs.list()
        topics = {c.topic_name: _body(c.to_json()) for c in configs}
        body = admin_bodies.topic_config_wrapper(topics, _now_ms())
        return request.response(codes.SUCCESS, body=admin_bodies.encode(body))

    async def delete_topic(self, request: Command, conn: Connection) -> Command:
        topic = _text(request.ext, "topic")
        try:
            await self._admin(
                "DeleteTopic", admin_pb2.DeleteTopicRequest(name=topic), conn, codes.TOPIC_NOT_EXIST
            )
        except Refused as exc:
            if exc.code != codes.TOPIC_NOT_EXIST:
                raise
            # already gone (mqadmin deletes at every member, then at the name server): done
        return request.response(codes.SUCCESS)

    async def topic_consumers(self, request: Command, conn: Connection) -> Command:
        """Groups with offsets on the topic, and groups whose online consumers subscribe to
        it (a topic not created yet has only the latter, as in RocketMQ)."""
        topic = _text(request.ext, "topic")
        groups: set[str] = set()
        try:
            described = await self._admin(
                "DescribeTopic",
                admin_pb2.DescribeTopicRequest(name=topic),
                conn,
                codes.TOPIC_NOT_EXIST,
            )
            groups.update(described.groups)
        except Refused as exc:
            if exc.code != codes.TOPIC_NOT_EXIST:
                raise
        for group in list(self.clients.consumers):
            if any(topic in c.subscriptions for c in self.clients.consumers_of(group)):
                groups.add(group)
        body = admin_bodies.group_list(sorted(groups))
        return request.response(codes.SUCCESS, body=admin_bodies.encode(body))

    # ------------------------------------------------------------------ groups
    async def consume_stats(self, request: Command, conn: Connection) -> Command:
        ext = request.ext
        group = _text(ext, "consumerGroup")
        wanted = {t for t in ext.get("topicList", "").replace(",", ";").split(";") if t}
        if ext.get("topic"):
            wanted.add(ext["topic"])
        described = await self._admin(
            "DescribeGroup",
            admin_pb2.DescribeGroupRequest(name=group),
            conn,
            codes.SUBSCRIPTION_GROUP_NOT_EXIST,
        )
        rows = [r for r in described.queues if not wanted or r.topic in wanted]

        def figures() -> dict[QueueKey, admin_bodies.GroupQueue]:
            broker = self.broker_name
            return {
                QueueKey(r.topic, r.broker or broker, r.queue_id): admin_bodies.GroupQueue(
                    r.max_offset,
                    max(r.committed_offset, 0),
                    self._store_time(r.topic, r.queue_id, r.committed_offset - 1),
                )
                for r in rows
            }

        table = await asyncio.to_thread(figures)
        return request.response(
            codes.SUCCESS, body=admin_bodies.encode(admin_bodies.consume_stats(table))
        )

    async def all_groups(self, request: Command, conn: Connection) -> Command:
        configs = self.servicer.store.group_configs.list()
        groups = {c.group_name: _body(c.to_json()) for c in configs}
        body = admin_bodies.subscription_group_wrapper(groups, _now_ms())
        return request.response(codes.SUCCESS, body=admin_bodies.encode(body))

    async def group_config(self, request: Command, conn: Connection) -> Command:
        group = _text(request.ext, "group")
        config = self.servicer.store.group_configs.get(group)
        if config is None:
            raise Refused(codes.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {group!r} does not exist")
        return request.response(codes.SUCCESS, body=admin_bodies.encode(_body(config.to_json())))

    async def create_group(self, request: Command, conn: Connection) -> Command:
        try:
            raw = json.loads(request.body.decode("utf-8"))
            wanted = SubscriptionGroupConfig.from_json(raw, "")
        except (UnicodeDecodeError, ValueError, RecursionError, MessageIllegal) as exc:
            raise Refused(
                codes.SYSTEM_ERROR, f"the body is not a SubscriptionGroupConfig: {exc}"
            ) from None
        name = wanted.group_name
        if not name:
            raise Refused(codes.SYSTEM_ERROR, "the SubscriptionGroupConfig has no groupName")
        if not 0 <= wanted.retry_max_times < 2**31:
            raise Refused(
                codes.SYSTEM_ERROR,
                f"retryMaxTimes {wanted.retry_max_times} is outside 0..{2**31 - 1}",
            )
        existing = self.servicer.store.group_configs.get(name)
        _refuse_unmapped(wanted, existing or SubscriptionGroupConfig(name))
        if existing is None:
            await self._admin(
                "CreateGroup",
                admin_pb2.CreateGroupRequest(
                    name=name,
                    fifo=wanted.consume_message_orderly,
                    retry_max_times=wanted.retry_max_times,
                ),
                conn,
            )
        await self._admin(
            "UpdateGroup",
            admin_pb2.UpdateGroupRequest(
                name=name,
                fifo=wanted.consume_message_orderly,
                retry_max_times=wanted.retry_max_times,
                consume_enable=wanted.consume_enable,
            ),
            conn,
            codes.SUBSCRIPTION_GROUP_NOT_EXIST,
        )
        return request.response(codes.SUCCESS)

    async def delete_group(self, request: Command, conn: Connection) -> Command:
        ext = request.ext
        group = _text(ext, "groupName")
        if ext.get("cleanOffset", "false").lower() != "true":
            raise Refused(
                codes.SYSTEM_ERROR,
                f"deleting group {group!r} removes its consumer offsets in Gannet; ask for that "
                "with cleanOffset true (mqadmin deleteSubGroup -r true)",
            )
        try:
            await self._admin(
                "DeleteGroup",
                admin_pb2.DeleteGroupRequest(name=group),
                conn,
                codes.SUBSCRIPTION_GROUP_NOT_EXIST,
            )
        except Refused as exc:
            if exc.code != codes.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise
        return request.response(codes.SUCCESS)

    async def reset_offset(self, request: Command, conn: Connection) -> Command:
        ext = request.ext
        group, topic = _text(ext, "group"), _text(ext, "topic")
        queue_id = _long(ext, "queueId", -1)
        offset = _long(ext, "offset", -1)
        reset = admin_pb2.ResetOffsetRequest(group=group, topic=topic)
        if queue_id >= 0:
            reset.queue_id = queue_id
        timestamp_ms = _long(ext, "timestamp", 0)
        if queue_id >= 0 and offset >= 0:
            reset.offset = offset
        elif timestamp_ms == -1:  # RocketMQ's "the end" (mqadmin skipAccumulatedMessage)
            reset.offset = OFFSET_END
        else:
            reset.timestamp_ms = max(timestamp_ms, 0)
        if not self.servicer.store.group_configs.get(group):
            raise Refused(codes.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {group!r} does not exist")
        done = await self._admin("ResetOffset", reset, conn, codes.TOPIC_NOT_EXIST)
        offsets = {
            QueueKey(topic, row.broker or self.broker_name, row.queue_id): int(row.committed_offset)
            for row in done.queues
        }
        body = admin_bodies.encode(admin_bodies.reset_offset_body(offsets))
        notice = Command(
            codes.RESET_CONSUMER_CLIENT_OFFSET,
            flag=FLAG_ONEWAY,
            ext={"topic": topic, "group": group, "timestamp": ext.get("timestamp", "0")},
            body=body,
        )
        for client in self.clients.consumers_of(group):
            client.conn.send(notice)
        return request.response(codes.SUCCESS, body=body)

    # ------------------------------------------------------------------ clients
    async def consumer_connections(self, request: Command, conn: Connection) -> Command:
        group = _text(request.ext, "consumerGroup")
        clients = self.clients.consumers_of(group)
        if not clients:
            raise Refused(codes.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        subscriptions: dict[str, admin_bodies.Body] = {}
        for client in clients:
            subscriptions.update({t: _body(s) for t, s in client.subscriptions.items()})
        first = clients[0]
        body = admin_bodies.consumer_connection(
            [_connection(c) for c in clients],
            subscriptions,
            consume_type=first.consume_type,
            message_model=first.message_model,
            consume_from_where=first.consume_from_where,
        )
        return request.response(codes.SUCCESS, body=admin_bodies.encode(body))

    async def producer_connections(self, request: Command, conn: Connection) -> Command:
        group = _text(request.ext, "producerGroup")
        clients = self.clients.producers_of(group)
        if not clients:
            raise Refused(codes.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = admin_bodies.producer_connection([_connection(c) for c in clients])
        return request.response(codes.SUCCESS, body=admin_bodies.encode(body))

    # ------------------------------------------------------------------ broker
    async def delete_kv_config(self, request: Command, conn: Connection) -> Command:
        """The name server's KV config (``ORDER_TOPIC_CONFIG``, which mqadmin's deleteTopic
        clears): Gannet keeps none, so there is nothing to delete."""
        _text(request.ext, "namespace")
        _text(request.ext, "key")
        return request.response(codes.SUCCESS)

    async def runtime_info(self, request: Command, conn: Connection) -> Command:
        status = await self._admin("GetStatus", admin_pb2.GetStatusRequest(), conn)
        table = await asyncio.to_thread(self._runtime_table, status)
        return request.response(
            codes.SUCCESS, body=admin_bodies.encode(admin_bodies.kv_table(table))
        )

    def _runtime_table(self, status: admin_pb2.GetStatusResponse) -> dict[str, str]:
        """The ``KVTable`` of ``GET_BROKER_RUNTIME_INFO``: RocketMQ's names for the figures
        Gannet has (no thread-pool or TPS figures: Gannet keeps none), plus its own."""
        store = self.servicer.store
        stats = status.store
        table = {
            "brokerVersionDesc": f"Gannet {status.version}",
            "brokerActive": "true",
            "commitLogMinOffset": str(stats.min_offset),
            "commitLogMaxOffset": str(stats.max_offset),
            "dispatchBehindBytes": str(max(stats.commit_offset - stats.dispatched_offset, 0)),
            "timerCongestNum": str(stats.timer_backlog),
            "gannetClusterName": status.cluster_name,
            "gannetBrokerName": status.broker_name,
            "gannetFlushMode": status.flush_mode,
            "gannetTopics": str(status.topics),
            "gannetGroups": str(status.groups),
            "gannetClients": str(status.clients),
        }
        usage = shutil.disk_usage(store.config.root_dir)
        table["commitLogDiskRatio"] = f"{usage.used / usage.total:.4f}" if usage.total else "0"
        stored = stats.max_offset > stats.min_offset
        first = store.read_message(stats.min_offset) if stored else None
        if first is not None:
            table["earliestMessageTimeStamp"] = str(first.store_timestamp_ms)
        return table


def _connection(client: Client) -> admin_bodies.ClientConnection:
    return admin_bodies.ClientConnection(
        client.client_id, client.address, client.language, client.version
    )


def _body(value: Any) -> admin_bodies.Body:
    """A JSON value (``str`` keys) as a body value."""
    if isinstance(value, dict):
        return {str(k): _body(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_body(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _refuse_unmapped(wanted: SubscriptionGroupConfig, current: SubscriptionGroupConfig) -> None:
    """Refuse a group config whose fields Gannet acts on but its admin API cannot set."""
    differing = []
    if wanted.retry_queue_nums != 1:
        differing.append(f"retryQueueNums {wanted.retry_queue_nums} (Gannet's retry topics have 1)")
    if wanted.broker_id != 0:
        differing.append(f"brokerId {wanted.broker_id} (consumers read from the leader)")
    if not wanted.notify_consumer_ids_changed_enable:
        differing.append("notifyConsumerIdsChangedEnable false (Gannet always notifies)")
    policy = wanted.group_retry_policy.policy_type
    if policy != current.group_retry_policy.policy_type:
        differing.append(f"groupRetryPolicy {policy}")
    if dict(wanted.attributes) != dict(current.attributes):
        differing.append(f"attributes {dict(wanted.attributes)}")
    if wanted.subscription_data_set:
        differing.append("subscriptionDataSet")
    if differing:
        raise Refused(
            codes.SYSTEM_ERROR,
            f"group {wanted.group_name!r}: Gannet cannot set " + "; ".join(differing),
        )
