"""Broker requests of the remoting protocol, translated into the v2 servicer's calls.

Nothing here decides what a request does: sends become a v2 ``SendMessageRequest`` served by
:meth:`MessagingServicer.SendMessage` (same validation, deduplication, Raft commit, forwarding
from a follower to the leader; the queue the client chose is passed along as
``x-gannet-queue-id``), offsets go through ``GetOffset`` / ``UpdateOffset`` / ``QueryOffset``
(the same consumer-offset table gRPC consumers of the group use, as RocketMQ shares it), pulls
read through the v2 ``PullMessage`` reader (:func:`gannet.node.api.pulling.handler_of`: the
same long polling, woken by dispatch). What is translated is the answer: pulled records go back
as they are stored — RocketMQ's message layout, which the remoting client decodes itself.

Served: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), PULL_MESSAGE (11) and
LITE_PULL_MESSAGE (361),
QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15), UPDATE_AND_CREATE_TOPIC (17),
GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), SEARCH_OFFSET_BY_TIMESTAMP (29), HEART_BEAT (34),
UNREGISTER_CLIENT (35), CONSUMER_SEND_MSG_BACK (36), GET_CONSUMER_LIST_BY_GROUP (38),
LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42), QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33),
CHECK_CLIENT_CONFIG (46), GET_TOPIC_CONFIG (351), transactions (half messages on the sends,
END_TRANSACTION (37): :mod:`transactions`), Pop for 5.x clients (:mod:`popping`), the
name-server requests (:mod:`nameserver`). mqadmin's admin requests (:mod:`admin_requests`) are
added to :attr:`BrokerRequests.handlers` by the broker that assembles the port
(:mod:`gannet.node.broker.serving`). Any other code answers REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.api import filters, pulling, routes, sending
from gannet.node.api.messaging import MessagingServicer
from gannet.node.domain.committing import PersistenceTimeout
from gannet.node.pop import retrying
from gannet.node.pop.filtering import MessageFilter
from gannet.node.protocol import statuses
from gannet.node.protocol.gen import admin_pb2
from gannet.node.protocol.statuses import ApiError
from gannet.node.remoting import acl, codec, codes, messages, popping, pull_steering, store_hosts
from gannet.node.remoting import transactions as remoting_transactions
from gannet.node.remoting.codec import Command
from gannet.node.remoting.consumers import (
    ConsumerRegistry,
    QueueKey,
    RebalanceLocks,
    Subscription,
)
from gannet.node.remoting.context import Aborted, RemotingContext
from gannet.node.remoting.nameserver import NameServer, PortMap
from gannet.node.remoting.server import Connection
from gannet.node.replication.errors import ReplicationError
from gannet.node.store import properties as props
from gannet.node.store import querying
from gannet.node.store.log import records
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.tier import deferring

log = logging.getLogger(__name__)

Handler = Callable[[Command, Connection], Awaitable[Command | None]]

# SEND_MESSAGE_V2's one-letter header names (RocketMQ's SendMessageRequestHeaderV2)
_V2_NAMES = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
    "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
    "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch",
    "n": "brokerName",
}  # fmt: skip

QUERY_MESSAGES_MAX = 64
TIMESTAMP_MS_MAX = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
PULL_FLAG_CLASS_FILTER = 0x8
LOGGED_REFUSALS_MAX = 256
CATCH_UP_MS_MAX = 3_000
"""How long a follower waits for an offset a consumer is ahead of it by (:mod:`pull_steering`)
before it sends the consumer to the leader."""


class BadRequest(Exception):
    """A header field missing or malformed; answered with ``code`` and the message."""

    def __init__(self, message: str, code: int = codes.SYSTEM_ERROR) -> None:
        super().__init__(message)
        self.code = code


_INT32_FIELDS = frozenset({
    "queueId", "sysFlag", "maxMsgNums", "perm", "readQueueNums", "writeQueueNums",
})  # fmt: skip


def _int(ext: dict[str, str], name: str, default: int | None = None) -> int:
    """A numeric header field: Java's int for :data:`_INT32_FIELDS`, else a long."""
    value = ext.get(name)
    if value is None or value == "":
        if default is None:
            raise BadRequest(f"header field {name} is missing")
        return default
    try:
        number = int(value[:40])
    except ValueError:
        raise BadRequest(f"header field {name} = {value[:40]!r} is not a number") from None
    bits = 32 if name in _INT32_FIELDS else 64
    if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        raise BadRequest(f"header field {name} = {value[:40]!r} is outside int{bits}")
    return number


def _text(ext: dict[str, str], name: str) -> str:
    value = ext.get(name)
    if not value:
        raise BadRequest(f"header field {name} is missing")
    return value


def _json_body(request: Command) -> Any:
    try:
        return json.loads(request.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None


def _refusal(request: Command, status: definition_pb2.Status) -> Command:
    return request.response(codes.from_v2(int(status.code)), str(status.message))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class BrokerRequests:
    """The dispatcher of one broker's remoting and name-server ports."""

    def __init__(self, servicer: MessagingServicer, admin: Any) -> None:
        self.servicer = servicer
        self._v2: Any = servicer  # its RPC methods are untyped (grpc servicer signatures)
        identity = servicer.identity
        self.nameserver = nameserver = NameServer(servicer, PortMap(identity.port, identity.port))
        """Its port map is set once the remoting port is bound."""
        self.admin = admin
        """The admin servicer (topic creation goes through it, forwarded to the leader)."""
        self.gate: acl.RemotingGate | None = None
        """Signature and rights checks of every request (``--auth-file``; :mod:`acl`)."""
        self.consumers = ConsumerRegistry()
        self.locks = RebalanceLocks()
        self._unsupported_seen: set[int] = set()
        self._refusals_logged: set[str] = set()
        self.transactions = remoting_transactions.RemotingTransactions(
            servicer, nameserver.store_address
        )
        self.popping = popping.RemotingPop(servicer, self.consumers, nameserver.store_address)
        self.handlers: dict[int, Handler] = {
            codes.SEND_MESSAGE: self.send,
            codes.SEND_MESSAGE_V2: self.send,
            codes.SEND_BATCH_MESSAGE: self.send,
            codes.PULL_MESSAGE: self.pull,
            codes.LITE_PULL_MESSAGE: self.pull,  # RocketMQ serves it with the same processor
            codes.CONSUMER_SEND_MSG_BACK: self.send_back,
            codes.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            codes.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            codes.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            codes.GET_MAX_OFFSET: self.max_offset,
            codes.GET_MIN_OFFSET: self.min_offset,
            codes.SEARCH_OFFSET_BY_TIMESTAMP: self.offset_by_time,
            codes.HEART_BEAT: self.heartbeat,
            codes.UNREGISTER_CLIENT: self.unregister,
            codes.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            codes.LOCK_BATCH_MQ: self.lock_queues,
            codes.QUERY_MESSAGE: self.query_message,
            codes.VIEW_MESSAGE_BY_ID: self.view_message,
            codes.UNLOCK_BATCH_MQ: self.unlock_queues,
            codes.CHECK_CLIENT_CONFIG: self.check_client_config,
            codes.GET_TOPIC_CONFIG: self.topic_config,
            codes.END_TRANSACTION: self.transactions.end,
            codes.POP_MESSAGE: self.popping.pop,
            codes.ACK_MESSAGE: self.popping.ack,
            codes.BATCH_ACK_MESSAGE: self.popping.batch_ack,
            codes.CHANGE_MESSAGE_INVISIBLETIME: self.popping.change_invisible_time,
            codes.QUERY_ASSIGNMENT: self.popping.query_assignment,
            codes.SET_MESSAGE_REQUEST_MODE: self.popping.set_mode,
            codes.GET_ROUTEINFO_BY_TOPIC: nameserver.route,
            codes.GET_BROKER_CLUSTER_INFO: nameserver.cluster_info,
            codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: nameserver.topic_list,
        }

    async def dispatch(self, request: Command, conn: Connection) -> Command | None:
        handler = self.handlers.get(request.code)
        if handler is None:
            if request.code not in self._unsupported_seen and len(self._unsupported_seen) < 256:
                self._unsupported_seen.add(request.code)  # logged once per code
                log.info(
                    "remoting: request code %d from a %s client is not supported",
                    request.code,
                    request.language,
                )
            return request.response(
                codes.REQUEST_CODE_NOT_SUPPORTED,
                f"request code {request.code} is not supported by Gannet's remoting port "
                "(docs/remoting.md lists the supported codes)",
            )
        if self.gate is not None:
            refused = self.gate.refusal(request)
            if refused is not None:
                return refused
        try:
            return await handler(request, conn)
        except BadRequest as exc:
            return request.response(exc.code, str(exc))
        except messages.BadMessage as exc:
            return request.response(codes.MESSAGE_ILLEGAL, str(exc))
        except ApiError as exc:
            return request.response(codes.from_v2(exc.code), exc.message)
        except Aborted as exc:
            return request.response(codes.SYSTEM_ERROR, str(exc))

    def connection_closed(self, conn: Connection) -> None:
        self.consumers.closed(conn)
        self.transactions.producers.closed(conn)

    # ------------------------------------------------------------------ sending
    async def send(self, request: Command, conn: Connection) -> Command | None:
        ext = request.ext
        if request.code != codes.SEND_MESSAGE:  # 310, and 320 as the 4.x client sends it
            ext = {_V2_NAMES.get(k, k): v for k, v in ext.items()}
        topic = _text(ext, "topic")
        queue_id = _int(ext, "queueId")
        sys_flag = _int(ext, "sysFlag", 0)
        born_ms = _int(ext, "bornTimestamp", 0)
        now_ms = _now_ms()
        batch = request.code == codes.SEND_BATCH_MESSAGE or codec.true_field(ext, "batch")
        if batch:
            entries = messages.decode_batch(request.body)
        else:
            props = messages.parse_properties(ext.get("properties", ""))
            entries = [(sys_flag, request.body, props)]
        v2 = [
            messages.v2_message(
                topic,
                body,
                props,
                sys_flag=flag if batch else sys_flag,
                born_ms=born_ms,
                now_ms=now_ms,
            )
            for flag, body, props in entries
        ]
        metadata: tuple[tuple[str, str], ...] = (
            (sending.QUEUE_ID_HEADER, str(queue_id)),
            (sending.COMMIT_OFFSETS_HEADER, "1"),
        )
        half = not batch and messages.is_transactional(sys_flag, entries[0][2])
        if half:
            metadata += self.transactions.send_metadata(ext)
        context = RemotingContext(conn, metadata)
        reply = await self._v2.SendMessage(service_pb2.SendMessageRequest(messages=v2), context)
        if reply.status.code != statuses.OK:
            return _refusal(request, reply.status)
        if half:
            self.transactions.sent_half(conn, ext, entries[0][2])
        first = reply.entries[0]
        answer = {
            "msgId": await self._offset_message_ids(conn, topic, queue_id, reply.entries),
            "queueId": str(queue_id),
            "queueOffset": str(first.offset),
            "transactionId": str(first.transaction_id) if half else "",
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        }
        return request.response(codes.SUCCESS, ext=answer)

    async def _offset_message_ids(
        self,
        conn: Connection,
        topic: str,
        queue_id: int,
        entries: Iterable[service_pb2.SendResultEntry],
    ) -> str:
        """The answer's ``msgId``, as RocketMQ's: each message's *offset message id* (this
        member's remoting address as the client reaches it + the commit-log offset,
        :func:`messages.offset_message_id`), joined by commas for a batch. The client keeps it
        as ``SendResult.offsetMsgId`` (its ``msgId`` is the unique key it set itself) and
        ``viewMessage`` dials that address with the offset (VIEW_MESSAGE_BY_ID).

        The offset comes with the v2 answer (:data:`sending.COMMIT_OFFSETS_HEADER`); a
        duplicate send answered from the deduplication window has none, and is looked up in
        its queue at the answered queue offset; not found there (not dispatched here yet), the
        unique key stands in."""
        host, port = self.nameserver.store_address(conn)
        ids = []
        for entry in entries:
            offset = messages.commit_offset_of(str(entry.transaction_id))
            if offset is None:
                offset = await asyncio.to_thread(
                    self._commit_offset_at, topic, queue_id, int(entry.offset)
                )
            if offset is None:
                ids.append(str(entry.message_id))
            else:
                ids.append(messages.offset_message_id(host, port, offset))
        return ",".join(ids)

    def _commit_offset_at(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        store = self.servicer.store
        store.dispatch_caught_up()
        found = store.get_messages(topic, queue_id, queue_offset, 1).messages
        return found[0].commit_offset if found else None

    # ------------------------------------------------------------------ pulling
    async def pull(self, request: Command, conn: Connection) -> Command:
        ext = request.ext
        servicer = self.servicer
        group = servicer.resources.group(_text(ext, "consumerGroup"))
        config = servicer.resources.topic(_text(ext, "topic"))
        topic = config.topic_name
        queue_id = _int(ext, "queueId")
        if not 0 <= queue_id < max(config.read_queue_nums, config.write_queue_nums):
            raise BadRequest(f"queueId {queue_id} is not a queue of topic {topic!r}")
        if not config.readable:
            return request.response(codes.NO_PERMISSION, f"topic {topic!r} is not readable")
        offset = _int(ext, "queueOffset")
        wanted = max(1, min(_int(ext, "maxMsgNums", 32), pulling.PullLimits().batch_messages_max))
        flags = _int(ext, "sysFlag", 0)
        tag_filter = filters.filter_of(self._expression(ext, flags, group, topic))
        if flags & PULL_FLAG_COMMIT_OFFSET:
            commit = _int(ext, "commitOffset", -1)
            if commit >= 0 and servicer.store.consumer_offsets.query(group, topic, queue_id) != (
                commit
            ):
                await self._update_offset(conn, group, topic, queue_id, commit)
        store = servicer.store
        low = store.min_offset_in_queue(topic, queue_id)
        high = store.max_offset_in_queue(topic, queue_id)
        if offset > high:
            # A message whose send was just answered may not be in its consume queue yet
            # (dispatch follows the append, and the commit point on a group): judge the offset
            # again once everything appended before now is dispatched.
            await asyncio.to_thread(store.dispatch_caught_up)
            low = store.min_offset_in_queue(topic, queue_id)
            high = store.max_offset_in_queue(topic, queue_id)
        handler = pulling.handler_of(servicer)
        wait_ms = 0
        if flags & PULL_FLAG_SUSPEND:
            wait_ms = min(
                max(_int(ext, "suspendTimeoutMillis", 0), 0), handler.limits.polling_ms_max
            )
        deadline = time.monotonic() + wait_ms / 1000
        if offset > high and self._follower():
            # a consumer steered here from the leader may be ahead of this member's commits:
            # wait for them (pull_steering), then send it back to the leader if still behind
            high = await self._catch_up(handler, topic, queue_id, offset, high, tag_filter, wait_ms)
            if offset > high:
                return request.response(
                    codes.PULL_NOT_FOUND,
                    f"offset {offset} is not replicated to this member yet (it has {high})",
                    ext=self._pull_ext(offset, low, high, pull_steering.LEADER_ID),
                )
        if offset < low or offset > high:
            moved = low if offset < low else high
            return request.response(
                codes.PULL_OFFSET_MOVED,
                f"offset {offset} is outside {low}..{high}",
                ext=self._pull_ext(moved, low, high),
            )
        wait_ms = max(0, int((deadline - time.monotonic()) * 1000)) if wait_ms else 0
        got = await handler.get(topic, queue_id, offset, wanted, tag_filter, wait_ms)
        low = store.min_offset_in_queue(topic, queue_id)
        high = store.max_offset_in_queue(topic, queue_id)
        pull_ext = self._pull_ext(got.next_begin_offset, low, high, self._suggestion(queue_id))
        if got.messages:
            # the records name this member's remoting address as their store host
            body = store_hosts.served((m.data for m in got.messages), self._host(conn))
            return request.response(codes.SUCCESS, ext=pull_ext, body=body)
        if got.status is GetStatus.OFFSET_OVERFLOW_ONE:
            return request.response(codes.PULL_NOT_FOUND, "no new message", ext=pull_ext)
        return request.response(codes.PULL_RETRY_IMMEDIATELY, "no matched message", ext=pull_ext)

    def _pull_ext(
        self, next_offset: int, low: int, high: int, broker_id: int = pull_steering.LEADER_ID
    ) -> dict[str, str]:
        return {
            "nextBeginOffset": str(next_offset),
            "minOffset": str(low),
            "maxOffset": str(high),
            "suggestWhichBrokerId": str(broker_id),
        }

    def _follower(self) -> bool:
        replication = self.servicer.replication
        return replication is not None and not replication.is_leader()

    def _suggestion(self, queue_id: int) -> int:
        """The member this queue's consumer should pull from next (:mod:`pull_steering`)."""
        replication = self.servicer.replication
        if replication is None:
            return pull_steering.suggested_broker_id(None, None, (), queue_id)
        leader = replication.leader()
        core = replication.core
        heard = core.responsive_followers() if core is not None else frozenset()
        return pull_steering.suggested_broker_id(
            replication.config.node_id,
            leader.node_id if leader is not None else None,
            (int(n) for n in heard),
            queue_id,
        )

    async def _catch_up(
        self,
        handler: pulling.PullHandler,
        topic: str,
        queue_id: int,
        offset: int,
        high: int,
        tag_filter: MessageFilter,
        wait_ms: int,
    ) -> int:
        """Wait up to ``wait_ms`` (at most :data:`CATCH_UP_MS_MAX`) until this member's queue
        reaches ``offset``, woken by each message dispatched to it; its max offset then."""
        store = self.servicer.store
        deadline = time.monotonic() + min(wait_ms, CATCH_UP_MS_MAX) / 1000
        while offset > high:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                break
            await handler.get(topic, queue_id, high, 1, tag_filter, left_ms)
            high = store.max_offset_in_queue(topic, queue_id)
        return high

    def _expression(
        self, ext: dict[str, str], flags: int, group: str, topic: str
    ) -> definition_pb2.FilterExpression:
        if flags & PULL_FLAG_CLASS_FILTER:
            raise BadRequest("class filters are not supported", codes.SUBSCRIPTION_PARSE_FAILED)
        if flags & PULL_FLAG_SUBSCRIPTION:
            kind, text = ext.get("expressionType") or "TAG", ext.get("subscription") or "*"
        else:
            found = self.consumers.subscription(group, topic)
            kind, text = (found.expression_type, found.expression) if found else ("TAG", "*")
        return _filter(kind, text)

    # ------------------------------------------------------------------ send back
    async def send_back(self, request: Command, conn: Connection) -> Command:
        """A message the consumer failed to consume: to ``%RETRY%<group>`` after its delay
        level (0: 3 + reconsume times, as RocketMQ), or to ``%DLQ%<group>`` when the level is
        negative or the message used up its reconsume times. Only the leader writes it; a
        follower answers SERVICE_NOT_AVAILABLE and the client consumes the message again
        itself."""
        ext = request.ext
        servicer = self.servicer
        group = servicer.resources.group(_text(ext, "group"))
        offset = _int(ext, "offset")
        replication = servicer.replication
        if replication is not None and not replication.is_serving_leader():
            return request.response(
                codes.SERVICE_NOT_AVAILABLE, "send-back is served by the Raft leader only"
            )
        store = servicer.store
        original = await asyncio.to_thread(store.read_message, offset)
        if original is None:
            return request.response(codes.SYSTEM_ERROR, f"no message at commit-log offset {offset}")
        config = store.group_configs.get(group)
        default_max = config.retry_max_times if config is not None else 16
        max_times = _int(ext, "maxReconsumeTimes", default_max)
        level = _int(ext, "delayLevel", 0)
        origin_topic = original.properties.get(props.RETRY_TOPIC) or original.topic
        if level < 0 or original.reconsume_times >= max_times:
            message = retrying.dlq_message(original, group, origin_topic)
            retrying.ensure_system_topic(store, message.topic, None)
        else:
            level = level or 3 + original.reconsume_times
            delay_s = messages.DELAY_LEVELS_S[min(level, len(messages.DELAY_LEVELS_S)) - 1]
            message = retrying.sent_back_message(original, group, _now_ms() + delay_s * 1000)
            retrying.ensure_system_topic(store, message.topic, group)
        origin_id = ext.get("originMsgId")
        if origin_id:
            message.properties[props.ORIGIN_MESSAGE_ID] = origin_id
        try:
            await servicer.sender.append_own([message])
        except (ReplicationError, PersistenceTimeout) as exc:
            raise routes.commit_refusal(exc) from None
        return request.response(codes.SUCCESS)

    # ------------------------------------------------------------------ offsets
    def _queue(self, ext: dict[str, str]) -> definition_pb2.MessageQueue:
        return definition_pb2.MessageQueue(
            topic=definition_pb2.Resource(name=_text(ext, "topic")), id=_int(ext, "queueId")
        )

    async def _update_offset(
        self, conn: Connection, group: str, topic: str, queue_id: int, offset: int
    ) -> definition_pb2.Status:
        update = service_pb2.UpdateOffsetRequest(
            group=definition_pb2.Resource(name=group),
            message_queue=definition_pb2.MessageQueue(
                topic=definition_pb2.Resource(name=topic), id=queue_id
            ),
            offset=offset,
        )
        reply = await self._v2.UpdateOffset(update, RemotingContext(conn))
        return reply.status

    async def update_consumer_offset(self, request: Command, conn: Connection) -> Command:
        ext = request.ext
        status = await self._update_offset(
            conn, _text(ext, "consumerGroup"), _text(ext, "topic"), _int(ext, "queueId"),
            _int(ext, "commitOffset"),
        )  # fmt: skip
        if status.code != statuses.OK:
            return _refusal(request, status)
        return request.response(codes.SUCCESS)

    async def query_consumer_offset(self, request: Command, conn: Connection) -> Command:
        ext = request.ext
        query = service_pb2.GetOffsetRequest(
            group=definition_pb2.Resource(name=_text(ext, "consumerGroup")),
            message_queue=self._queue(ext),
        )
        reply = await self._v2.GetOffset(query, RemotingContext(conn))
        if reply.status.code == statuses.OK:
            return request.response(codes.SUCCESS, ext={"offset": str(reply.offset)})
        if reply.status.code == statuses.OFFSET_NOT_FOUND:
            # RocketMQ: a group new to a queue whose first message is still there starts at 0
            low = await self._query_offset(request, conn, definition_pb2.BEGINNING)
            if isinstance(low, int) and low == 0:
                return request.response(codes.SUCCESS, ext={"offset": "0"})
            return request.response(codes.QUERY_NOT_FOUND, "the group has no offset here")
        return _refusal(request, reply.status)

    async def _query_offset(
        self, request: Command, conn: Connection, policy: int, at_ms: int = 0
    ) -> int | definition_pb2.Status:
        query = service_pb2.QueryOffsetRequest(
            message_queue=self._queue(request.ext), query_offset_policy=policy
        )
        if policy == definition_pb2.TIMESTAMP:
            query.timestamp.FromMilliseconds(at_ms)
        reply = await self._v2.QueryOffset(query, RemotingContext(conn))
        if reply.status.code != statuses.OK:
            return reply.status
        return int(reply.offset)

    async def max_offset(self, request: Command, conn: Connection) -> Command:
        return await self._offset_answer(request, conn, definition_pb2.END)

    async def min_offset(self, request: Command, conn: Connection) -> Command:
        return await self._offset_answer(request, conn, definition_pb2.BEGINNING)

    async def offset_by_time(self, request: Command, conn: Connection) -> Command:
        # into protobuf's Timestamp range: before 1970 finds the first offset, after 9999 the end
        at_ms = min(max(_int(request.ext, "timestamp"), 0), TIMESTAMP_MS_MAX)
        return await self._offset_answer(request, conn, definition_pb2.TIMESTAMP, at_ms)

    async def _offset_answer(
        self, request: Command, conn: Connection, policy: int, at_ms: int = 0
    ) -> Command:
        found = await self._query_offset(request, conn, policy, at_ms)
        if isinstance(found, int):
            return request.response(codes.SUCCESS, ext={"offset": str(found)})
        return _refusal(request, found)

    # ------------------------------------------------------------------ clients
    async def heartbeat(self, request: Command, conn: Connection) -> Command:
        data = _json_body(request)
        if not isinstance(data, dict):
            raise BadRequest("the heartbeat body is not a JSON object")
        client_id = str(data.get("clientID") or "")
        if not client_id:
            raise BadRequest("the heartbeat has no clientID")
        refusals = []
        for consumer in data.get("consumerDataSet") or []:
            if not isinstance(consumer, dict):
                continue
            group = str(consumer.get("groupName") or "")
            sending.check_group_name(group)
            try:
                subscriptions = _subscriptions(consumer)
            except BadRequest as exc:
                # A subscription every pull would refuse: the client leaves the group, so that
                # its rebalance gives it no queue (the group's other consumers take them)
                # rather than pulls that could deliver nothing; the rest of the heartbeat
                # (other groups, producers) still counts.
                self.consumers.unregister(group, client_id)
                refusals.append(f"consumer group {group!r}: {exc}")
                continue
            self.consumers.heartbeat(group, client_id, conn, subscriptions)
        self.transactions.producers.heartbeat(conn, remoting_transactions.producer_groups(data))
        if refusals:
            self._log_refused_subscriptions(client_id, refusals)
            return request.response(codes.SUBSCRIPTION_PARSE_FAILED, "; ".join(refusals))
        return request.response(codes.SUCCESS)

    def _log_refused_subscriptions(self, client_id: str, refusals: list[str]) -> None:
        """Once per refusal text (at most :data:`LOGGED_REFUSALS_MAX`): some clients (the Go
        client) only log a refused heartbeat in their own log and consume nothing."""
        for refusal in refusals:
            if refusal not in self._refusals_logged and (
                len(self._refusals_logged) < LOGGED_REFUSALS_MAX
            ):
                self._refusals_logged.add(refusal)
                log.warning("remoting: client %s refused: %s", client_id, refusal)

    async def unregister(self, request: Command, conn: Connection) -> Command:
        group = request.ext.get("consumerGroup")
        client_id = request.ext.get("clientID", "")
        if group:
            self.consumers.unregister(group, client_id)
        producer_group = request.ext.get("producerGroup")
        if producer_group:
            self.transactions.producers.unregister(conn, producer_group)
        return request.response(codes.SUCCESS)

    async def consumer_list(self, request: Command, conn: Connection) -> Command:
        group = _text(request.ext, "consumerGroup")
        ids = self.consumers.consumer_ids(group)
        if not ids:
            return request.response(codes.SYSTEM_ERROR, f"no consumer of group {group!r} is online")
        body = json.dumps({"consumerIdList": ids}).encode("utf-8")
        return request.response(codes.SUCCESS, body=body)

    async def check_client_config(self, request: Command, conn: Connection) -> Command:
        data = _json_body(request)
        sub = data.get("subscriptionData") if isinstance(data, dict) else None
        if isinstance(sub, dict):
            _filter(str(sub.get("expressionType") or "TAG"), str(sub.get("subString") or "*"))
        return request.response(codes.SUCCESS)

    # ------------------------------------------------------------------ queries
    def _raw(self, offset: int, size: int) -> bytes | None:
        return self.servicer.store.read_stored(offset, size)

    async def view_message(self, request: Command, conn: Connection) -> Command:
        """The record at a commit-log offset (an offset message id's), as stored but for its
        store host (:mod:`store_hosts`, as every record served here). A follower
        that has not applied that offset yet (the id came with a send answered as soon as a
        majority held it) waits for it up to :data:`CATCH_UP_MS_MAX`."""
        offset = _int(request.ext, "offset")
        message = await deferring.call(functools.partial(self._read_applied, offset))
        data = None if message is None else await deferring.call(
            functools.partial(self._raw, offset, message.store_size)
        )  # fmt: skip
        if data is None:
            return request.response(codes.SYSTEM_ERROR, f"no message at commit-log offset {offset}")
        return request.response(codes.SUCCESS, body=store_hosts.served((data,), self._host(conn)))

    def _host(self, conn: Connection) -> bytes:
        """The store host the records served to ``conn`` name (:mod:`store_hosts`)."""
        return store_hosts.encoded_host(*self.nameserver.store_address(conn))

    def _read_applied(self, offset: int) -> records.Message | None:
        store = self.servicer.store
        message = store.read_message(offset)
        wait_s = CATCH_UP_MS_MAX / 1000
        if message is None and self._follower() and store.wait_dispatched(offset + 1, wait_s):
            message = store.read_message(offset)
        return message

    async def query_message(self, request: Command, conn: Connection) -> Command:
        """Messages of a topic by key (or by unique key, ``_UNIQUE_KEY_QUERY``) from the index
        (:func:`gannet.node.store.querying.by_key`), the records as a pull serves them."""
        ext = request.ext
        topic, key = _text(ext, "topic"), _text(ext, "key")
        unique = codec.true_field(ext, "_UNIQUE_KEY_QUERY")
        found = await deferring.call(functools.partial(
            querying.by_key,
            self.servicer.store,
            topic,
            key,
            max_num=max(1, min(_int(ext, "maxNum", 32), QUERY_MESSAGES_MAX)),
            begin_ms=max(_int(ext, "beginTimestamp", 0), 0),
            end_ms=_int(ext, "endTimestamp", 2**63 - 1),
            unique=unique,
        ))  # fmt: skip
        stored = []
        for message in found.messages:
            data = await deferring.call(
                functools.partial(self._raw, message.physical_offset, message.store_size)
            )
            if data is not None:
                stored.append(data)
        header = {
            "indexLastUpdateTimestamp": str(found.index_last_update_timestamp_ms),
            "indexLastUpdatePhyoffset": str(found.index_last_update_phy_offset),
        }
        if not stored:
            return request.response(
                codes.QUERY_NOT_FOUND, f"no message of {topic!r} with key {key!r}", ext=header
            )
        body = store_hosts.served(stored, self._host(conn))
        return request.response(codes.SUCCESS, ext=header, body=body)

    # ------------------------------------------------------------------ orderly locks
    def _lock_body(self, request: Command) -> tuple[str, str, list[QueueKey]]:
        data = _json_body(request)
        if not isinstance(data, dict):
            raise BadRequest("the body is not a JSON object")
        group = str(data.get("consumerGroup") or "")
        client_id = str(data.get("clientId") or "")
        if not group or not client_id:
            raise BadRequest("the body needs consumerGroup and clientId")
        queues: list[QueueKey] = []
        for mq in data.get("mqSet") or []:
            if not isinstance(mq, dict):
                raise BadRequest("mqSet holds a non-object")
            queue_id = mq.get("queueId")
            if not isinstance(queue_id, int) or isinstance(queue_id, bool):
                raise BadRequest("a queue of mqSet has no integer queueId")
            queues.append((str(mq.get("topic") or ""), str(mq.get("brokerName") or ""), queue_id))
        return group, client_id, queues

    async def lock_queues(self, request: Command, conn: Connection) -> Command:
        group, client_id, queues = self._lock_body(request)
        granted = self.locks.lock(group, client_id, queues)
        body = json.dumps({
            "lockOKMQSet": [{"brokerName": b, "queueId": q, "topic": t} for t, b, q in granted]
        })  # fmt: skip
        return request.response(codes.SUCCESS, body=body.encode("utf-8"))

    async def unlock_queues(self, request: Command, conn: Connection) -> Command:
        group, client_id, queues = self._lock_body(request)
        self.locks.unlock(group, client_id, queues)
        return request.response(codes.SUCCESS)

    # ------------------------------------------------------------------ topics
    async def topic_config(self, request: Command, conn: Connection) -> Command:
        name = _text(request.ext, "topic")
        config = self.servicer.store.topic_configs.get(name)
        if config is None:
            return request.response(codes.TOPIC_NOT_EXIST, sending.topic_not_found_message(name))
        body = json.dumps({"topicConfig": config.to_json(), **config.to_json()})
        return request.response(codes.SUCCESS, body=body.encode("utf-8"))

    async def create_topic(self, request: Command, conn: Connection) -> Command:
        ext = request.ext
        name = _text(ext, "topic")
        queues = max(_int(ext, "readQueueNums", 8), _int(ext, "writeQueueNums", 8))
        perm = _int(ext, "perm", 6)
        context = RemotingContext(conn)
        try:
            if self.servicer.store.topic_configs.get(name) is None:
                await self.admin.CreateTopic(
                    admin_pb2.CreateTopicRequest(
                        name=name, queue_nums=queues, perm=perm, message_type=admin_pb2.MIXED
                    ),
                    context,
                )
            else:
                await self.admin.UpdateTopic(
                    admin_pb2.UpdateTopicRequest(name=name, queue_nums=queues, perm=perm),
                    context,
                )
        except Aborted as exc:
            code = codes.SYSTEM_ERROR
            if exc.code == grpc.StatusCode.PERMISSION_DENIED:
                code = codes.NO_PERMISSION
            return request.response(code, exc.details)
        return request.response(codes.SUCCESS)


def _subscriptions(consumer: dict[str, Any]) -> dict[str, Subscription]:
    """Topic → subscription of a heartbeat's consumer entry; BadRequest
    (SUBSCRIPTION_PARSE_FAILED) naming the first that does not parse."""
    subscriptions: dict[str, Subscription] = {}
    for sub in consumer.get("subscriptionDataSet") or []:
        if isinstance(sub, dict) and sub.get("topic"):
            topic = str(sub["topic"])
            kind = str(sub.get("expressionType") or "TAG")
            text = str(sub.get("subString") or "*")
            try:
                _filter(kind, text)
            except BadRequest as exc:
                raise BadRequest(f"topic {topic!r}: {exc}", exc.code) from None
            subscriptions[topic] = Subscription(kind, text)
    return subscriptions


def _filter(kind: str, text: str) -> definition_pb2.FilterExpression:
    """The v2 filter of a remoting subscription, checked (SUBSCRIPTION_PARSE_FAILED)."""
    kinds = {"TAG": definition_pb2.TAG, "SQL92": definition_pb2.SQL}
    if kind.upper() not in kinds:
        raise BadRequest(f"expression type {kind!r} is neither TAG nor SQL92",
                         codes.SUBSCRIPTION_PARSE_FAILED)  # fmt: skip
    expression = definition_pb2.FilterExpression(type=kinds[kind.upper()], expression=text)
    try:
        filters.filter_of(expression)
    except ApiError as exc:
        raise BadRequest(exc.message, codes.SUBSCRIPTION_PARSE_FAILED) from None
    return expression
