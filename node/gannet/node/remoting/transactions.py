"""Transactions over remoting: half messages, END_TRANSACTION and the broker's check-back.

A ``TransactionMQProducer`` sends its half message with SEND_MESSAGE_V2, sysFlag
``TRANSACTION_PREPARED_TYPE`` (0x4) and ``TRAN_MSG=true``; :mod:`broker_requests` sends it as
a v2 TRANSACTION message through the gRPC servicer (same half-message records, same book:
:mod:`gannet.node.api.transactions`), naming the producer group in call metadata
(:data:`~gannet.node.api.sending.PRODUCER_GROUP_HEADER`) so that the half message keeps
``PGROUP`` as RocketMQ's does. The answer carries ``transactionId`` (the half message's
commit-log offset in 16 hex digits, as gRPC producers get it) and, as ``msgId``, the half
message's offset message id, from which the client takes ``commitLogOffset``.

END_TRANSACTION (37, oneway from the client; answered when sent as a request) becomes a v2
``EndTransactionRequest`` (followers forward it to the leader): ``commitOrRollback`` 8 commits,
12 rolls back, 0 (``TRANSACTION_NOT_TYPE``, the listener said UNKNOW) leaves the transaction to
the check-back. ``transactionId`` names the half message; a client that sends none (or another
form) is served by ``commitLogOffset``. ``topic`` (4.x clients send none) is read from the half
message when absent.

Check-back: when a check record of a half message is dispatched, the transaction handler asks
:meth:`RemotingTransactions.offer` first; when the half message names a producer group with a
connected remoting producer (HEART_BEAT ``producerDataSet``), that producer gets a oneway
CHECK_TRANSACTION_STATE (39) with the half message in the store's layout (topic and queue the
real ones, as RocketMQ's ``sendCheckMessage`` restores them) and answers with END_TRANSACTION
``fromTransactionCheck=true``. Otherwise gRPC producers of the topic are asked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Callable
from typing import Any

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.api import sending
from gannet.node.protocol import statuses
from gannet.node.remoting import codec, codes, messages
from gannet.node.remoting.codec import FLAG_ONEWAY, Command
from gannet.node.remoting.context import RemotingContext
from gannet.node.remoting.server import Connection
from gannet.node.store import properties as props
from gannet.node.store.log import records
from gannet.node.transactions import records as tr
from gannet.node.transactions.service import OrphanCheck

log = logging.getLogger(__name__)

COMMIT_TYPE = records.SYSFLAG_TRANSACTION_COMMIT_TYPE  # 8
ROLLBACK_TYPE = records.SYSFLAG_TRANSACTION_ROLLBACK_TYPE  # 12
NOT_TYPE = records.SYSFLAG_TRANSACTION_NOT_TYPE  # 0: unknown, left to the check-back
PRODUCER_GROUPS_MAX = 4096
CONNECTIONS_PER_GROUP_MAX = 1024
CHECK_BODY_BYTES_MAX = 64 * 1024 * 1024
_opaques = itertools.count(1)


class BadEnd(Exception):
    """An END_TRANSACTION header that names no transaction (answered SYSTEM_ERROR)."""


class ProducerRegistry:
    """Producer groups → the connections whose heartbeats named them (bounded both ways)."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[Connection, None]] = {}

    def heartbeat(self, conn: Connection, groups: list[str]) -> None:
        for group in groups:
            members = self._groups.get(group)
            if members is None:
                if len(self._groups) >= PRODUCER_GROUPS_MAX:
                    log.warning(
                        "remoting: %d producer groups known; %r not kept", len(self._groups), group
                    )
                    continue
                members = self._groups[group] = {}
            if conn not in members and len(members) < CONNECTIONS_PER_GROUP_MAX:
                members[conn] = None

    def unregister(self, conn: Connection, group: str) -> None:
        members = self._groups.get(group)
        if members is not None:
            members.pop(conn, None)
            if not members:
                del self._groups[group]

    def closed(self, conn: Connection) -> None:
        for group in [g for g, members in self._groups.items() if conn in members]:
            self.unregister(conn, group)

    def connection_of(self, group: str) -> Connection | None:
        """An open connection of ``group`` (the most recent first), None when none is."""
        for conn in reversed(list(self._groups.get(group, {}))):
            if not conn.closed.is_set():
                return conn
        return None


def producer_groups(heartbeat: Any) -> list[str]:
    """The producer groups of a HEART_BEAT body (already parsed JSON)."""
    found = heartbeat.get("producerDataSet") if isinstance(heartbeat, dict) else None
    groups = []
    for producer in found or []:
        if isinstance(producer, dict) and producer.get("groupName"):
            groups.append(str(producer["groupName"]))
    return groups


def end_resolution(ext: dict[str, str]) -> int | None:
    """The v2 resolution of ``commitOrRollback``; None for TRANSACTION_NOT_TYPE (unknown)."""
    raw = ext.get("commitOrRollback", "")
    try:
        kind = int(raw)
    except ValueError:
        raise BadEnd(f"header field commitOrRollback = {raw[:40]!r} is not a number") from None
    if kind == COMMIT_TYPE:
        return int(definition_pb2.COMMIT)
    if kind == ROLLBACK_TYPE:
        return int(definition_pb2.ROLLBACK)
    if kind == NOT_TYPE:
        return None
    raise BadEnd(f"commitOrRollback {kind} is none of 0 (unknown), 8 (commit), 12 (rollback)")


def transaction_id_of(ext: dict[str, str]) -> str:
    """Gannet's transaction id named by the header: ``transactionId`` in Gannet's form, else
    ``commitLogOffset``."""
    given = ext.get("transactionId") or ""
    if len(given) == tr.TRANSACTION_ID_HEX_DIGITS:
        try:
            int(given, 16)
            return given.upper()
        except ValueError:
            pass
    raw = ext.get("commitLogOffset", "")
    try:
        offset = int(raw)
    except ValueError:
        raise BadEnd(
            f"neither transactionId {given[:40]!r} nor commitLogOffset {raw[:40]!r} names a "
            "half message"
        ) from None
    if offset < 0:
        raise BadEnd(f"commitLogOffset {offset} is negative")
    return tr.transaction_id_of(offset)


def from_check(ext: dict[str, str]) -> bool:
    """Whether an END_TRANSACTION answers the broker's check: ``fromTransactionCheck`` is a
    boolean, written ``true`` by the Java clients and ``1`` by the C++ client."""
    return codec.true_field(ext, "fromTransactionCheck")


def end_message_id(ext: dict[str, str], transaction_id: str) -> str:
    """The unique key an END_TRANSACTION names, for the v2 check that it is the half
    message's; "" when it names none. RocketMQ finds the half message by ``commitLogOffset``
    alone and only logs ``msgId``, and the C++ client's answer to a check names the
    transaction id there: a ``msgId`` equal to the transaction id is not a unique key."""
    given = ext.get("msgId") or ""
    return "" if given.upper() == transaction_id.upper() else given


def check_request(check: OrphanCheck, half: records.Message, host: str, port: int) -> Command:
    """The oneway CHECK_TRANSACTION_STATE a producer gets for ``half`` (module docstring)."""
    offset = tr.parse_transaction_id(check.transaction_id)
    shown = dataclasses.replace(
        half,
        topic=half.properties.get(props.REAL_TOPIC, check.topic),
        queue_id=int(half.properties.get(props.REAL_QUEUE_ID, "0") or 0),
        properties=dict(half.properties),
    )
    body = bytes(records.encode(shown, body_size_max_bytes=CHECK_BODY_BYTES_MAX))
    ext = {
        "topic": shown.topic,
        "tranStateTableOffset": str(half.queue_offset),
        "commitLogOffset": str(offset),
        "msgId": half.properties.get(props.UNIQ_KEY, ""),
        "transactionId": check.transaction_id,
        "offsetMsgId": messages.offset_message_id(host, port, offset),
    }
    return Command(codes.CHECK_TRANSACTION_STATE, opaque=next(_opaques), flag=FLAG_ONEWAY,
                   ext=ext, body=body)  # fmt: skip


class RemotingTransactions:
    """END_TRANSACTION and the check-back for one broker's remoting port."""

    def __init__(
        self, servicer: Any, store_address: Callable[[Connection], tuple[str, int]]
    ) -> None:
        self.servicer = servicer
        self._store_address = store_address
        """The address a connection's client is given in offset message ids
        (:meth:`~gannet.node.remoting.nameserver.NameServer.store_address`)."""
        self._v2: Any = servicer
        self.producers = ProducerRegistry()
        self.checks_sent_total = 0
        handler = servicer.transactions
        if handler is not None:
            handler.check_listeners.append(self.offer)

    # --- sending ---
    @staticmethod
    def send_metadata(ext: dict[str, str]) -> tuple[tuple[str, str], ...]:
        """Call metadata of a half message's send: its producer group (when named)."""
        group = ext.get("producerGroup")
        return ((sending.PRODUCER_GROUP_HEADER, group),) if group else ()

    def sent_half(self, conn: Connection, ext: dict[str, str], properties: dict[str, str]) -> None:
        """A half message was sent on ``conn``: its producer group's checks may go there.
        RocketMQ learns a producer's connection from its heartbeats only, but the C++ client
        heartbeats a producer first 30 s after its start (its heartbeat at start knows no
        broker yet), so a check due sooner would find no producer."""
        group = properties.get(props.PRODUCER_GROUP) or ext.get("producerGroup")
        if group:
            self.producers.heartbeat(conn, [group])

    # --- END_TRANSACTION ---
    async def end(self, request: Command, conn: Connection) -> Command | None:
        ext = request.ext
        try:
            resolution = end_resolution(ext)
            transaction_id = transaction_id_of(ext)
        except BadEnd as exc:
            return request.response(codes.SYSTEM_ERROR, str(exc))
        if resolution is None:
            log.debug(
                "remoting: transaction %s unknown to its producer; checked later", transaction_id
            )
            return request.response(codes.SUCCESS)
        topic = ext.get("topic") or await self._real_topic(transaction_id)
        if not topic:
            return request.response(
                codes.SYSTEM_ERROR, f"transaction {transaction_id} names no half message"
            )
        end = service_pb2.EndTransactionRequest(
            topic=definition_pb2.Resource(name=topic),
            message_id=end_message_id(ext, transaction_id),
            transaction_id=transaction_id,
            resolution=resolution,
            source=(
                definition_pb2.SOURCE_SERVER_CHECK
                if from_check(ext)
                else definition_pb2.SOURCE_CLIENT
            ),
        )
        reply = await self._v2.EndTransaction(end, RemotingContext(conn))
        if reply.status.code != statuses.OK:
            if request.is_oneway:
                log.info(
                    "remoting: END_TRANSACTION of %s refused: %s",
                    transaction_id,
                    reply.status.message,
                )
            return request.response(
                codes.from_v2(int(reply.status.code)), str(reply.status.message)
            )
        return request.response(codes.SUCCESS)

    async def _real_topic(self, transaction_id: str) -> str:
        offset = tr.parse_transaction_id(transaction_id)
        try:
            half = await asyncio.to_thread(self.servicer.store.read_message, offset)
        except Exception:
            return ""
        if half is None or half.topic != tr.HALF_TOPIC:
            return ""
        return str(half.properties.get(props.REAL_TOPIC, ""))

    # --- check-back ---
    def offer(self, check: OrphanCheck) -> bool:
        """Event loop: send ``check`` to a remoting producer of its half message's group."""
        half = check.half
        group = half.properties.get(props.PRODUCER_GROUP) if half is not None else None
        if half is None or not group:
            return False
        conn = self.producers.connection_of(group)
        if conn is None:
            return False
        try:
            command = check_request(check, half, *self._store_address(conn))
        except Exception:  # a record that cannot be re-encoded: offered to gRPC producers
            log.exception("remoting: check of transaction %s not sent", check.transaction_id)
            return False
        conn.send(command)
        self.checks_sent_total += 1
        return True
