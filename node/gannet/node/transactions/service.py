"""Transactional messages, the store side: :class:`TransactionService`.

The book of one store (:class:`~gannet.node.transactions.book.TransactionBook`), fed by
dispatch on every replica and read back from the op, check and half topics on start; and what
the leader appends: EndTransaction's commit copy and op record (:meth:`prepare_end`; only the
op record when the message id is committed through another half message already), the
orphan checks and discards that are due (:meth:`due_writes`). Runs in worker and dispatch
threads; knows no protocol beyond the v2 ``Message`` an orphan check carries to a producer.

Used by :mod:`gannet.node.api.transactions` (the v2 side: EndTransaction, Telemetry outboxes,
the check task), :mod:`gannet.node.remoting.transactions` (remoting producers' checks) and
:mod:`gannet.node.metrics.transaction_collecting`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rocketmq.grpc_protocol import Code, definition_pb2

from gannet.node.protocol.statuses import ApiError
from gannet.node.store import properties as props
from gannet.node.store import querying
from gannet.node.store.configs.topics import PERM_READ, PERM_WRITE, TopicConfig
from gannet.node.store.log import records
from gannet.node.store.log.commitlog import AppendResult
from gannet.node.store.log.records import DispatchInfo
from gannet.node.store.message_store import MessageStore
from gannet.node.transactions import records as tr
from gannet.node.transactions.book import (
    CheckLimits,
    EndRefused,
    Pending,
    Resolution,
    TransactionBook,
)

log = logging.getLogger(__name__)

TransactionLimits = CheckLimits
parse_transaction_id = tr.parse_transaction_id
transaction_id_of = tr.transaction_id_of
READ_BATCH_MESSAGES = 256
DISPATCH_WAIT_S = 2.0
"""How long EndTransaction waits for its half message to be dispatched (just committed)."""
OFFER_SPACING_SHARE = 0.5
"""A member offers one open transaction to its producers at most once per this share of
``check_interval_ms`` (its own monotonic clock): a backlog of check records applied at once
(after a cut or a restart) makes one offer per transaction, not one per record."""
OFFERED_REMEMBERED_MAX = 100_000
"""Open transactions whose last offer time a member keeps (the oldest forgotten first)."""


@dataclass(frozen=True, slots=True)
class OrphanCheck:
    """A half message to offer to a producer of ``topic``."""

    topic: str
    transaction_id: str
    message: definition_pb2.Message
    half: records.Message | None = None
    """The half message as stored (remoting producers get it in the store's layout)."""


def ensure_topics(store: MessageStore) -> None:
    for name in tr.TOPICS:
        if store.topic_configs.get(name) is None:
            store.topic_configs.put(
                TopicConfig(
                    name, read_queue_nums=1, write_queue_nums=1, perm=PERM_READ | PERM_WRITE
                )
            )


def wall_ms() -> int:
    """Wall-clock milliseconds (check records carry wall times, as RocketMQ's)."""
    return time.time_ns() // 1_000_000


class TransactionService:
    """The book of one store, fed by dispatch; builds what the leader appends.

    ``on_check`` is called (dispatch thread) with the half message of each check record this
    member applies, at most once per half check interval per transaction (:meth:`_offer_due`).
    Every member applies the leader's check records, so a check reaches a producer whose
    Telemetry stream is on any member that is in step, not only on the leader."""

    def __init__(
        self,
        store: MessageStore,
        limits: CheckLimits | None = None,
        *,
        on_check: Callable[[OrphanCheck], None] | None = None,
        listen: bool = True,
    ) -> None:
        self.store = store
        self.book = TransactionBook(limits)
        self.on_check = on_check
        self.checks_proposed_total = 0
        self._offered_at: OrderedDict[int, float] = OrderedDict()
        self._offered_lock = threading.Lock()
        self._listening = listen
        if listen:
            store.add_arrival_listener(self._on_dispatched)
        self._replay()

    @property
    def limits(self) -> CheckLimits:
        return self.book.limits

    @limits.setter
    def limits(self, value: CheckLimits) -> None:
        self.book.limits = value

    def close(self) -> None:
        if self._listening and self._on_dispatched in self.store.listeners:
            self.store.listeners.remove(self._on_dispatched)

    def pending(self) -> int:
        return self.book.pending_count()

    @property
    def committed_total(self) -> int:
        return self.book.ended_total[Resolution.COMMIT]

    @property
    def rolled_back_total(self) -> int:
        return self.book.ended_total[Resolution.ROLLBACK]

    @property
    def abandoned_total(self) -> int:
        return self.book.ended_total[Resolution.DISCARD]

    # ------------------------------------------------------------------ applying the log
    def _on_dispatched(self, infos: Sequence[DispatchInfo]) -> None:
        """Dispatch thread (or the sender's, inline): a committed batch. Only transaction
        records cost more than one filtering pass; an error on one is logged and the
        rest of the batch still applied."""
        for info in tr.watched_of(infos):
            try:
                self._apply(info)
            except Exception:
                log.exception(
                    "transaction record at commit-log offset %d not applied", info.commit_offset
                )

    def _apply(self, info: DispatchInfo) -> None:
        body = None
        if info.topic in (tr.OP_TOPIC, tr.CHECK_TOPIC):
            message = self.store.read_message(info.commit_offset)
            body = message.body if message is not None else None
        seen = tr.seen(info, body)
        if seen is None:
            return
        if seen.kind == "half":
            self.book.half(
                seen.half_offset,
                seen.topic,
                info.store_timestamp_ms,
                message_id=info.uniq_key or "",
                queue_offset=info.queue_offset,
            )
        elif seen.kind == "commit":
            self.book.resolve(seen.half_offset, Resolution.COMMIT)
        elif seen.kind == "op":
            self.book.resolve(seen.half_offset, Resolution.ROLLBACK)
        elif seen.kind == "check":
            pending = self.book.checked(seen.half_offset, seen.checks, info.store_timestamp_ms)
            if pending is not None and self._offer_due(seen.half_offset, time.monotonic()):
                self._tell_check(pending)

    def _offer_due(self, half_offset: int, now_s: float) -> bool:
        """Whether a check of this transaction goes to this member's producers now: not if one
        went less than half a check interval ago (by this member's monotonic clock). The
        record's store time is the leader's wall clock: compared with this member's, a member
        whose clock is ahead (or the leader's behind) took every check for an old one and
        never passed it on, nor did a member applying the log a few seconds late."""
        spacing_s = self.limits.check_interval_ms / 1000 * OFFER_SPACING_SHARE
        with self._offered_lock:
            last_s = self._offered_at.get(half_offset)
            if last_s is not None and now_s - last_s < spacing_s:
                return False
            self._offered_at[half_offset] = now_s
            self._offered_at.move_to_end(half_offset)
            while len(self._offered_at) > OFFERED_REMEMBERED_MAX:
                self._offered_at.popitem(last=False)
            return True

    def _tell_check(self, pending: Pending) -> None:
        if self.on_check is None:
            return
        half = self.store.read_message(pending.half_offset)
        if half is None or half.topic != tr.HALF_TOPIC:
            return
        offset = pending.half_offset
        self.on_check(
            OrphanCheck(pending.topic, tr.transaction_id_of(offset), tr.message_pb(half), half)
        )

    def _read_all(self, topic: str, each: Callable[[records.Message, int], None]) -> None:
        if self.store.topic_configs.get(topic) is None:
            return
        offset = self.store.min_offset_in_queue(topic, 0)
        while True:
            got = self.store.get_messages(topic, 0, offset, READ_BATCH_MESSAGES)
            if not got.messages:
                return
            for stored in got.messages:
                each(records.decode(stored.data), stored.commit_offset)
            offset = got.next_begin_offset

    def _replay(self) -> None:
        """Open transactions from the op, check and half topics (start)."""
        resolved: set[int] = set()
        checks: dict[int, tuple[int, int]] = {}
        halves: list[tuple[records.Message, int]] = []
        queue_offsets: dict[int, int] = {}

        def op(message: records.Message, _: int) -> None:
            if message.body.isdigit() and message.tags == tr.OP_TAG:
                resolved.add(int(message.body))

        def check(message: records.Message, _: int) -> None:
            if message.body.isdigit():
                number = message.properties.get(tr.CHECK_TIMES, "0")
                seen = (int(number) if number.isdigit() else 0, message.store_timestamp_ms)
                checks[int(message.body)] = max(checks.get(int(message.body), (0, 0)), seen)

        def half(message: records.Message, offset: int) -> None:
            if offset not in resolved:
                halves.append((message, offset))
                queue_offsets[offset] = message.queue_offset

        self._read_all(tr.OP_TOPIC, op)
        self._read_all(tr.CHECK_TOPIC, check)
        self._read_all(tr.HALF_TOPIC, half)
        for message, offset in halves:
            if self._commit_copy_exists(message, offset):
                continue
            topic = message.properties.get(props.REAL_TOPIC, "")
            count, last_ms = checks.get(offset, (0, 0))
            self.book.half(
                offset,
                topic,
                message.store_timestamp_ms,
                count,
                message_id=message.properties.get(props.UNIQ_KEY, ""),
                queue_offset=queue_offsets[offset],
            )
            if last_ms:
                self.book.checked(offset, count, last_ms)

    def _commit_copy_exists(self, half: records.Message, half_offset: int) -> bool:
        """The commit copy is written before the op record: one may be cut by a crash or a
        failover while the other committed; the index finds the copy by unique key."""
        return half_offset in self._commit_copies_of(half)

    def _commit_copies_of(self, half: records.Message) -> set[int]:
        """The half offsets of the commit copies of ``half``'s message id in the index."""
        uniq = half.properties.get(props.UNIQ_KEY)
        topic = half.properties.get(props.REAL_TOPIC)
        if not uniq or not topic or self.store.index is None:
            return set()
        found = querying.by_key(self.store, topic, uniq, unique=True)
        return {
            m.prepared_transaction_offset
            for m in found.messages
            if records.transaction_type(m.sys_flag) == records.SYSFLAG_TRANSACTION_COMMIT_TYPE
        }

    def _stored_by_another(self, half: records.Message, half_offset: int) -> bool:
        """Whether the message of ``half`` is committed through another half message of its
        id (a producer's resend stored twice): the book knows recent ones, the index the rest
        (ids committed before a restart, or forgotten for room)."""
        if self.book.stored_by_another(half_offset):
            return True
        return bool(self._commit_copies_of(half) - {half_offset})

    # ------------------------------------------------------------------ the leader's writes
    def prepare_end(
        self, topic: str, message_id: str, transaction_id: str, resolution: Resolution
    ) -> tuple[int, list[records.Message]] | None:
        """Check an EndTransaction and reserve it; the records to append, or None when the
        same resolution is already in the log. Raises ApiError naming the problem."""
        offset = tr.parse_transaction_id(transaction_id)
        half = self._half_at(offset, transaction_id)
        real_topic = half.properties.get(props.REAL_TOPIC, "")
        if real_topic != topic:
            raise ApiError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction_id {transaction_id} belongs to topic {real_topic!r}, not {topic!r}",
            )
        if message_id and half.properties.get(props.UNIQ_KEY) != message_id:
            raise ApiError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction_id {transaction_id} is not the one of message_id {message_id!r}",
            )
        self.store.wait_dispatched(offset + 1, DISPATCH_WAIT_S)
        try:
            if not self.book.begin_end(offset, resolution):
                return None
        except EndRefused as exc:
            raise ApiError(
                Code.INVALID_TRANSACTION_ID, f"transaction_id {transaction_id} {exc}"
            ) from None
        try:
            by_another = resolution is Resolution.COMMIT and self._stored_by_another(half, offset)
        except BaseException:
            self.book.end_failed(offset)
            raise
        if by_another:
            # Its message is in the topic already: a second copy would store it twice.
            log.info(
                "transaction %s of topic %r committed without a copy: message id %r is "
                "committed through another half message",
                transaction_id, topic, half.properties.get(props.UNIQ_KEY),
            )  # fmt: skip
            return offset, [tr.op_record(offset)]
        return offset, tr.resolution_records(half, offset, resolution)

    def _half_at(self, offset: int, transaction_id: str) -> records.Message:
        try:
            half = self.store.read_message(offset)
        except Exception:
            half = None
        if half is None or half.topic != tr.HALF_TOPIC:
            raise ApiError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction_id {transaction_id} names no half message",
            )
        return half

    def due_writes(self, now_ms: int) -> tuple[list[records.Message], list[int]]:
        """Leader: the check records and discards due now, and the discarded offsets
        (reserved in the book: :meth:`TransactionBook.end_done` / ``end_failed`` them)."""
        check, discard = self.book.due(now_ms)
        writes = [tr.check_record(p.half_offset, p.checks + 1) for p in check]
        discarded = []
        for p in discard:
            half = self.store.read_message(p.half_offset)
            if half is None or half.topic != tr.HALF_TOPIC:
                self.book.end_failed(p.half_offset)
                self.book.resolve(p.half_offset, Resolution.DISCARD)  # its file was cleaned
                continue
            log.warning(
                "transaction %s of topic %r unresolved after %d checks: discarded to %s",
                tr.transaction_id_of(p.half_offset), p.topic, p.checks, tr.DISCARD_TOPIC,
            )  # fmt: skip
            writes += tr.resolution_records(half, p.half_offset, Resolution.DISCARD)
            discarded.append(p.half_offset)
        if writes:
            ensure_topics(self.store)
        self.checks_proposed_total += len(check)
        return writes, discarded

    def append(self, writes: list[records.Message]) -> tuple[list[AppendResult], int | None]:
        return self.store.put_messages_nowait(writes)
