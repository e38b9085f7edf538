"""Pop over remoting for 5.x remoting clients, translated onto the v2 Pop calls.

* **POP_MESSAGE** (200050) becomes a v2 ``ReceiveMessage`` (same long polling, filters,
  checkpoints, orderly groups, forwarding to the leader): ``pollTime`` → long-polling time
  (clamped as for gRPC), ``invisibleTime`` (at least 10 s, as for gRPC; else
  ``ILLEGAL_INVISIBLE_TIME`` → MESSAGE_ILLEGAL), ``maxMsgNums`` (at most 32), ``expType`` /
  ``exp``, ``queueId``: -1 pops every queue of the topic, another id that queue only (passed
  to the v2 call as :data:`gannet.node.api.sending.QUEUE_ID_HEADER`, which a follower's
  forwarding carries to the leader; a queue the topic lacks is refused); the retry topic is
  popped too either way. The
  answer's body is each popped record as stored (read at the commit-log offset its receipt
  handle names), naming this member's remoting address as its store host
  (:mod:`gannet.node.remoting.store_hosts`), with ``POP_CK`` set to the receipt handle — the
  5.x client keeps a ``POP_CK`` it finds instead of building one from the header lists, and
  acks with it, so its extraInfo
  *is* the gRPC receipt handle (``docs/formats/pop.md`` §4: ExtraInfoUtil's eight fields plus
  the commit-log offset) — and ``1ST_POP_TIME``. The header carries ``popTime``,
  ``invisibleTime``, ``reviveQid``, ``restNum`` (0) and ``startOffsetInfo`` /
  ``msgOffsetInfo`` built from the handles, and for a pop with ``order=true`` (an orderly
  consumer) ``orderCountInfo``: how often each message was consumed before
  (:func:`order_count_info`); each record's ``reconsumeTimes`` says the same (what the client
  shows: it reads ``orderCountInfo`` only for records without ``POP_CK``). Nothing found:
  PULL_NOT_FOUND; too many waiting pops: POLLING_FULL.
* **BATCH_ACK_MESSAGE** (200151) becomes one ``AckMessage`` per entry of its body
  (:mod:`batch_acks`: the 8-field extra infos its bit sets name).
* **ACK_MESSAGE** (200051) becomes ``AckMessage`` of ``extraInfo``; the topic is the original
  one (the header names the retry topic for a message popped from it; the handle's flag says
  so). **CHANGE_MESSAGE_INVISIBLETIME** (200053) becomes ``ChangeInvisibleDuration``; the
  answer's header carries the new handle's ``popTime``, ``invisibleTime`` and ``reviveQid``
  and its ``extraInfo`` (which the client does not read: it acks with the old one, which
  Gannet accepts as the v2 path does).
* **QUERY_ASSIGNMENT** (400): what a consumer with broker-side rebalance
  (``setClientRebalance(false)``) consumes. In POP mode (Gannet's default, and what
  ``SET_MESSAGE_REQUEST_MODE`` may set) one queue per broker group, queue id -1 (pop every
  queue); in PULL mode the topic's queues shared out among the group's online consumers, in
  order (as ``AllocateMessageQueueAveragely``). **SET_MESSAGE_REQUEST_MODE** (401) keeps a
  mode per topic and group in memory (at most ``MODES_MAX``; lost on restart).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.api import sending
from gannet.node.pop import receipts
from gannet.node.pop.errors import ReceiptHandleIllegal
from gannet.node.protocol import statuses
from gannet.node.remoting import batch_acks, codes
from gannet.node.remoting.codec import Command
from gannet.node.remoting.consumers import ConsumerRegistry
from gannet.node.remoting.context import RemotingContext
from gannet.node.remoting.server import Connection
from gannet.node.store import properties as props
from gannet.node.store import validation
from gannet.node.store.log import records
from gannet.node.store.tier import deferring

log = logging.getLogger(__name__)

POLLING_FULL = 209  # ResponseCode.POLLING_FULL
POP_BATCH_MAX = 32
RECORD_BYTES_MAX = 64 * 1024 * 1024
MODES_MAX = 65_536
APPLY_WAIT_S = 2.0
MODE_POP = "POP"
MODE_PULL = "PULL"
_EXPRESSION_TYPES = {"TAG": definition_pb2.TAG, "SQL92": definition_pb2.SQL}


class BadPop(Exception):
    """A header field missing or malformed (answered SYSTEM_ERROR naming it)."""


def _text(ext: dict[str, str], name: str) -> str:
    value = ext.get(name)
    if not value:
        raise BadPop(f"header field {name} is missing")
    return value


def _long(ext: dict[str, str], name: str, default: int | None = None) -> int:
    raw = ext.get(name)
    if raw is None or raw == "":
        if default is None:
            raise BadPop(f"header field {name} is missing")
        return default
    try:
        value = int(raw[:40])
    except ValueError:
        raise BadPop(f"header field {name} = {raw[:40]!r} is not a number") from None
    if not -(2**63) <= value < 2**63:
        raise BadPop(f"header field {name} = {raw[:40]!r} is outside int64")
    return value


def _duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _resource(name: str) -> definition_pb2.Resource:
    return definition_pb2.Resource(name=name)


def original_topic(topic: str, group: str, handle: receipts.ReceiptHandle) -> str:
    """The topic a message was popped *for*: the ack header names the retry topic of a message
    popped from it (``ExtraInfoUtil.getRealTopic``); the v2 calls take the original."""
    for retry in (validation.retry_topic_v1(group, ""), validation.retry_topic_v2(group, "")):
        if handle.flag is not receipts.TopicFlag.NORMAL and topic.startswith(retry):
            return topic[len(retry) :]
    return topic


def offset_infos(handles: Sequence[receipts.ReceiptHandle]) -> tuple[str, str]:
    """``startOffsetInfo`` and ``msgOffsetInfo`` of popped messages (``docs/formats/pop.md``)."""
    starts: dict[tuple[int, int], int] = {}
    offsets: dict[tuple[int, int], list[int]] = {}
    for h in handles:
        key = (int(h.flag), h.queue_id)
        starts.setdefault(key, h.ck_queue_offset)
        offsets.setdefault(key, []).append(h.queue_offset)
    start_info = ";".join(f"{f} {q} {o}" for (f, q), o in starts.items())
    msg_info = ";".join(f"{f} {q} {','.join(map(str, o))}" for (f, q), o in offsets.items())
    return start_info, msg_info


def order_count_info(popped: Sequence[tuple[receipts.ReceiptHandle, int]]) -> str:
    """``orderCountInfo`` of an orderly pop (RocketMQ 5.3.3's
    ``ExtraInfoUtil.buildQueueOffsetOrderCountInfo``): per message ``<flag> qo<queueId>%<queue
    offset> <times consumed before>``, joined by ``;``. The 5.x client sets a message's
    ``reconsumeTimes`` from it when it popped with ``order=true``: an orderly message is popped
    again from its queue (no retry copy), so the stored record still says 0. ``popped``: each
    message's handle and its v2 ``delivery_attempt`` (times consumed before + 1)."""
    seen: dict[tuple[int, int, int], int] = {}
    for handle, attempt in popped:
        seen.setdefault(
            (int(handle.flag), handle.queue_id, handle.queue_offset), max(attempt - 1, 0)
        )
    return ";".join(f"{f} qo{q}%{o} {count}" for (f, q, o), count in seen.items())


def popped_record(
    message: records.Message, handle: str, pop_time_ms: int, delivery_attempt: int
) -> bytes:
    """A popped record as stored, with ``POP_CK`` = its receipt handle (module docstring) and
    ``reconsumeTimes`` = the times it was consumed before (``delivery_attempt`` - 1), as the v2
    answer counts them: an orderly message popped again keeps 0 in its record, and the 5.3.3
    client reads ``orderCountInfo`` only for a record without ``POP_CK``."""
    message.reconsume_times = max(message.reconsume_times, delivery_attempt - 1)
    message.properties[props.POP_CK] = handle
    message.properties.setdefault(props.FIRST_POP_TIME, str(pop_time_ms))
    return bytes(records.encode(message, body_size_max_bytes=RECORD_BYTES_MAX))


def allocate(queues: list[tuple[str, int]], consumers: list[str], me: str) -> list[tuple[str, int]]:
    """``me``'s share of ``queues`` among ``consumers`` (AllocateMessageQueueAveragely)."""
    if me not in consumers or not queues:
        return []
    index, n = consumers.index(me), len(consumers)
    size = len(queues) // n + (1 if index < len(queues) % n else 0)
    start = index * (len(queues) // n) + min(index, len(queues) % n)
    return queues[start : start + size]


class RemotingPop:
    """POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, QUERY_ASSIGNMENT and
    SET_MESSAGE_REQUEST_MODE for one broker's remoting port."""

    def __init__(
        self,
        servicer: Any,
        consumers: ConsumerRegistry,
        store_address: Callable[[Connection], tuple[str, int]] | None = None,
    ) -> None:
        self.servicer = servicer
        self._store_address = store_address
        """The store host popped records name to a connection (:mod:`store_hosts`); None:
        as stored."""
        self._v2: Any = servicer
        self.consumers = consumers
        self.modes: dict[tuple[str, str], str] = {}
        """(topic, group) → POP or PULL, as SET_MESSAGE_REQUEST_MODE set it."""
        self.popped_total = 0
        self.acked_total = 0
        self.changed_total = 0
        self.requests_total: dict[str, int] = {}
        """Requests served, by :data:`REQUEST_NAMES` (the remoting Pop metrics)."""
        """Messages handed out, acks and invisible-time changes served (tests, metrics)."""

    # --- POP_MESSAGE ---
    def _count(self, name: str) -> None:
        self.requests_total[name] = self.requests_total.get(name, 0) + 1

    async def pop(self, request: Command, conn: Connection) -> Command:
        self._count("pop")
        ext = request.ext
        try:
            group, topic = _text(ext, "consumerGroup"), _text(ext, "topic")
            invisible_ms = _long(ext, "invisibleTime")
            poll_ms = max(_long(ext, "pollTime", 0), 0)
            wanted = max(1, min(_long(ext, "maxMsgNums", POP_BATCH_MAX), POP_BATCH_MAX))
            expression = self._expression(ext)
            queue_id = _long(ext, "queueId", -1)
            if not -1 <= queue_id < 2**31:
                raise BadPop(f"queueId {queue_id} is neither -1 (every queue) nor a queue id")
        except BadPop as exc:
            return request.response(codes.SYSTEM_ERROR, str(exc))
        receive = service_pb2.ReceiveMessageRequest(
            group=_resource(group),
            message_queue=definition_pb2.MessageQueue(topic=_resource(topic), id=-1),
            filter_expression=expression,
            batch_size=wanted,
            invisible_duration=_duration(max(invisible_ms, 0)),
            long_polling_timeout=_duration(poll_ms),
        )
        attempt = ext.get("attemptId")
        if attempt:
            receive.attempt_id = attempt
        metadata: tuple[tuple[str, str], ...] = ()
        if queue_id >= 0:  # one queue (and the retry topic), as RocketMQ pops it
            metadata = ((sending.QUEUE_ID_HEADER, str(queue_id)),)
        status: definition_pb2.Status | None = None
        popped: list[definition_pb2.Message] = []
        async for frame in self._v2.ReceiveMessage(receive, RemotingContext(conn, metadata)):
            if frame.HasField("status"):
                status = frame.status
            elif frame.HasField("message"):
                popped.append(frame.message)
        if status is not None and status.code == Code.TOO_MANY_REQUESTS:
            return request.response(POLLING_FULL, str(status.message))
        if status is not None and status.code not in (statuses.OK, Code.MESSAGE_NOT_FOUND):
            return request.response(codes.from_v2(int(status.code)), str(status.message))
        if not popped:
            return request.response(codes.PULL_NOT_FOUND, "no new message")
        self.popped_total += len(popped)
        host = self._store_address(conn) if self._store_address is not None else None
        return await self._answer(request, popped, ext.get("order") == "true", host)

    def _expression(self, ext: dict[str, str]) -> definition_pb2.FilterExpression:
        kind = (ext.get("expType") or "TAG").upper()
        if kind not in _EXPRESSION_TYPES:
            raise BadPop(f"expType {kind!r} is neither TAG nor SQL92")
        return definition_pb2.FilterExpression(
            type=_EXPRESSION_TYPES[kind], expression=ext.get("exp") or "*"
        )

    async def _answer(
        self,
        request: Command,
        popped: list[definition_pb2.Message],
        orderly: bool,
        store_host: tuple[str, int] | None,
    ) -> Command:
        handles = [receipts.parse(str(m.system_properties.receipt_handle)) for m in popped]
        bodies = []
        for message, handle in zip(popped, handles, strict=True):
            stored = await deferring.call(functools.partial(self._read, handle.commit_offset))
            if stored is None:
                log.warning("remoting pop: no record at commit-log offset %d", handle.commit_offset)
                continue
            text = str(message.system_properties.receipt_handle)
            attempt = int(message.system_properties.delivery_attempt)
            if store_host is not None:  # as every record served over remoting (store_hosts)
                stored.store_host = store_host
            bodies.append(popped_record(stored, text, handle.pop_time_ms, attempt))
        first = handles[0]
        start_info, msg_info = offset_infos(handles)
        header = {
            "popTime": str(first.pop_time_ms),
            "invisibleTime": str(first.invisible_time_ms),
            "reviveQid": str(first.revive_qid),
            "restNum": "0",
            "startOffsetInfo": start_info,
            "msgOffsetInfo": msg_info,
        }
        if orderly:
            attempts = [int(m.system_properties.delivery_attempt) for m in popped]
            header["orderCountInfo"] = order_count_info(list(zip(handles, attempts, strict=True)))
        return request.response(codes.SUCCESS, ext=header, body=b"".join(bodies))

    def _read(self, commit_offset: int) -> records.Message | None:
        """The record at ``commit_offset``; on a follower that forwarded the pop to the leader,
        once this member applied it (at most ``APPLY_WAIT_S``)."""
        store = self.servicer.store
        stored = store.read_message(commit_offset)
        if stored is None and store.wait_dispatched(commit_offset + 1, APPLY_WAIT_S):
            stored = store.read_message(commit_offset)
        return stored  # type: ignore[no-any-return]

    # --- ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME ---
    def _handle(self, ext: dict[str, str]) -> tuple[str, str, str, receipts.ReceiptHandle]:
        group, topic, text = (
            _text(ext, "consumerGroup"),
            _text(ext, "topic"),
            _text(ext, "extraInfo"),
        )
        try:
            handle = receipts.parse(text)
        except ReceiptHandleIllegal as exc:
            raise BadPop(str(exc)) from None
        return group, original_topic(topic, group, handle), text, handle

    async def ack(self, request: Command, conn: Connection) -> Command:
        self._count("ack")
        try:
            group, topic, text, _ = self._handle(request.ext)
        except BadPop as exc:
            return request.response(codes.SYSTEM_ERROR, str(exc))
        ack = service_pb2.AckMessageRequest(
            group=_resource(group),
            topic=_resource(topic),
            entries=[service_pb2.AckMessageEntry(receipt_handle=text)],
        )
        reply = await self._v2.AckMessage(ack, RemotingContext(conn))
        if reply.status.code != statuses.OK:
            return request.response(
                codes.from_v2(int(reply.status.code)), str(reply.status.message)
            )
        self.acked_total += 1
        return request.response(codes.SUCCESS)

    async def batch_ack(self, request: Command, conn: Connection) -> Command:
        """BATCH_ACK_MESSAGE: each entry of the body (:mod:`batch_acks`) one v2 AckMessage of
        its extra infos. SUCCESS when every message was acked; else the first refusal's code,
        naming how many were refused (the client reports any other code as ``NO_EXIST``)."""
        self._count("batch_ack")
        try:
            batches = batch_acks.parse(request.body)
            parsed = [[receipts.parse(text) for text in b.extra_infos] for b in batches]
        except (batch_acks.BadBatchAck, ReceiptHandleIllegal) as exc:
            return request.response(codes.SYSTEM_ERROR, str(exc))
        refused: list[tuple[int, str]] = []
        for batch, handles in zip(batches, parsed, strict=True):
            if not handles:
                continue
            ack = service_pb2.AckMessageRequest(
                group=_resource(batch.group),
                topic=_resource(original_topic(batch.topic, batch.group, handles[0])),
                entries=[service_pb2.AckMessageEntry(receipt_handle=t) for t in batch.extra_infos],
            )
            reply = await self._v2.AckMessage(ack, RemotingContext(conn))
            if reply.status.code != statuses.OK and not reply.entries:
                refused.extend((int(reply.status.code), str(reply.status.message)) for _ in handles)
                continue
            for entry in reply.entries:
                if entry.status.code == statuses.OK:
                    self.acked_total += 1
                else:
                    refused.append((int(entry.status.code), str(entry.status.message)))
        if refused:
            total = sum(len(h) for h in parsed)
            code, message = refused[0]
            return request.response(
                codes.from_v2(code), f"{len(refused)} of {total} acks refused; the first: {message}"
            )
        return request.response(codes.SUCCESS)

    async def change_invisible_time(self, request: Command, conn: Connection) -> Command:
        self._count("change_invisible_time")
        try:
            group, topic, text, _ = self._handle(request.ext)
            invisible_ms = _long(request.ext, "invisibleTime")
        except BadPop as exc:
            return request.response(codes.SYSTEM_ERROR, str(exc))
        change = service_pb2.ChangeInvisibleDurationRequest(
            group=_resource(group),
            topic=_resource(topic),
            receipt_handle=text,
            invisible_duration=_duration(max(invisible_ms, 0)),
        )
        if invisible_ms < 0:
            return request.response(codes.SYSTEM_ERROR, f"invisibleTime {invisible_ms} is negative")
        reply = await self._v2.ChangeInvisibleDuration(change, RemotingContext(conn))
        if reply.status.code != statuses.OK:
            return request.response(
                codes.from_v2(int(reply.status.code)), str(reply.status.message)
            )
        self.changed_total += 1
        new = receipts.parse(str(reply.receipt_handle))
        return request.response(
            codes.SUCCESS,
            ext={
                "popTime": str(new.pop_time_ms),
                "invisibleTime": str(new.invisible_time_ms),
                "reviveQid": str(new.revive_qid),
                "extraInfo": str(reply.receipt_handle),
            },
        )

    # --- QUERY_ASSIGNMENT / SET_MESSAGE_REQUEST_MODE ---
    def _body(self, request: Command) -> dict[str, Any]:
        try:
            data = json.loads(request.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise BadPop(f"the body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BadPop("the body is not a JSON object")
        return data

    async def set_mode(self, request: Command, conn: Connection) -> Command:
        try:
            data = self._body(request)
            topic, group = str(data.get("topic") or ""), str(data.get("consumerGroup") or "")
            mode = str(data.get("mode") or "").upper()
            if not topic or not group:
                raise BadPop("the body needs topic and consumerGroup")
            if mode not in (MODE_POP, MODE_PULL):
                raise BadPop(f"mode {mode!r} is neither PULL nor POP")
        except BadPop as exc:
            return request.response(codes.SYSTEM_ERROR, str(exc))
        if (topic, group) not in self.modes and len(self.modes) >= MODES_MAX:
            return request.response(codes.SYSTEM_BUSY, f"{MODES_MAX} request modes are set")
        self.modes[(topic, group)] = mode
        return request.response(codes.SUCCESS)

    async def query_assignment(self, request: Command, conn: Connection) -> Command:
        try:
            data = self._body(request)
            topic, group = str(data.get("topic") or ""), str(data.get("consumerGroup") or "")
            if not topic or not group:
                raise BadPop("the body needs topic and consumerGroup")
        except BadPop as exc:
            return request.response(codes.SYSTEM_ERROR, str(exc))
        identity = self.servicer.identity
        query = service_pb2.QueryRouteRequest(
            topic=_resource(topic),
            endpoints=definition_pb2.Endpoints(
                scheme=definition_pb2.IPv4,
                addresses=[definition_pb2.Address(host=identity.host, port=identity.port)],
            ),
        )
        reply = await self._v2.QueryRoute(query, RemotingContext(conn))
        if reply.status.code != statuses.OK:
            return request.response(
                codes.from_v2(int(reply.status.code)), str(reply.status.message)
            )
        readable = (definition_pb2.READ, definition_pb2.READ_WRITE)
        queues = [
            (str(q.broker.name), int(q.id))
            for q in reply.message_queues
            if q.permission in readable
        ]
        mode = self.modes.get((topic, group), MODE_POP)
        if mode == MODE_POP:
            chosen = [(name, -1) for name in dict.fromkeys(name for name, _ in queues)]
        else:
            members = sorted(self.consumers.consumer_ids(group))
            chosen = allocate(sorted(queues), members, str(data.get("clientId") or ""))
        assignments = [
            {
                "messageQueue": {"brokerName": name, "queueId": queue_id, "topic": topic},
                "mode": mode,
                "attachments": {},
            }
            for name, queue_id in chosen
        ]
        body = json.dumps({"messageQueueAssignments": assignments})
        return request.response(codes.SUCCESS, body=body.encode("utf-8"))
