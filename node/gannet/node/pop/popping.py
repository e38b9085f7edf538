"""Pop: take up to 32 messages from the queues of a topic and make them invisible
(RocketMQ ``PopMessageProcessor``, ``docs/formats/pop.md`` §6).

Order of queues: with probability ``pop_from_retry_probability_percent`` the group's retry topic
``%RETRY%<group>_<topic>`` is read first; then the topic's read queues from a random start
``(randomQ + i) mod n`` (or only the requested queue); then, if the batch is not full and the
retry topic was not read first, the retry topic. Each queue is read under a non-blocking lock
``topic@group@queueId``; a busy queue is skipped.

Offset of a queue: the committed consumer offset (initialised on first use: MIN → the queue's
min offset, also for retry topics; MAX → ``maxOffset − 1`` clamped at 0, and committed), raised
to the ``nextBeginOffset`` of the latest pop still in the in-flight buffer. Every pop that found
messages creates a checkpoint (kept in memory or written, see :mod:`merging`); a pop that
only skipped filtered messages records an empty one that just advances the offset.

The checkpoints one request writes (one per queue it took messages from) are appended together
when the request has read every queue: one append and one durability wait (one Raft proposal)
per request, not one per queue. Until then each such queue stays locked and its checkpoint is
tracked as *storing* (its offset is not committed, :mod:`merging`); if the append or the wait
fails, or reading a later queue does, they are withdrawn from the buffer, so the queues are read
again from the same offsets — unless a CK of theirs reaches the committed log after all (a Raft
leader that lost its leadership mid-write): no pop starts behind a CK there (:mod:`ck_floors`).

Messages popped from a retry topic are returned under the original topic; every returned
message carries its ``POP_CK`` extra info and a receipt handle (:mod:`receipts`).

Called by :class:`gannet.node.pop.service.PopBroker`; orderly pops delegate to :mod:`ordering`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gannet.node.pop import receipts
from gannet.node.pop.checkpoints import PopCheckPoint
from gannet.node.pop.context import PopContext
from gannet.node.pop.errors import BatchSizeIllegal, UnknownTopicOrGroup
from gannet.node.pop.filtering import MATCH_ALL, MessageFilter
from gannet.node.pop.locks import lock_key
from gannet.node.pop.merging import Inflight
from gannet.node.pop.receipts import ReceiptHandle, TopicFlag
from gannet.node.store import properties as props
from gannet.node.store import validation
from gannet.node.store.configs.topics import MessageType
from gannet.node.store.log import records
from gannet.node.store.queues.reading import GetResult, GetStatus

_RESTART_STATUSES = (
    GetStatus.OFFSET_TOO_SMALL,
    GetStatus.OFFSET_OVERFLOW_BADLY,
    GetStatus.OFFSET_FOUND_NULL,
)
_ADVANCE_STATUSES = (
    GetStatus.NO_MATCHED_MESSAGE,
    GetStatus.OFFSET_FOUND_NULL,
    GetStatus.MESSAGE_WAS_REMOVING,
    GetStatus.NO_MATCHED_LOGIC_QUEUE,
)


class InitMode(enum.IntEnum):
    """``ConsumeInitMode``."""

    MIN = 0
    MAX = 1


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    """One popped message; ``message.topic`` is the original topic even for retries."""

    message: records.Message
    handle: ReceiptHandle
    encoded: str | None = None
    """``handle.encode()`` when the pop made it already (None: encoded when asked)."""

    @property
    def receipt_handle(self) -> str:
        return self.handle.encode() if self.encoded is None else self.encoded

    @property
    def delivery_attempt(self) -> int:
        return self.message.reconsume_times + 1


@dataclass(slots=True)
class PopResult:
    messages: list[PoppedMessage] = field(default_factory=list)
    pop_time_ms: int = 0
    invisible_time_ms: int = 0
    revive_qid: int = 0
    rest_num: int = 0
    start_offset_info: list[str] = field(default_factory=list)
    msg_offset_info: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.messages)


@dataclass(frozen=True, slots=True)
class PopRequest:
    group: str
    topic: str
    queue_id: int
    max_msgs: int
    invisible_time_ms: int
    now_ms: int
    init_mode: InitMode = InitMode.MIN
    tag_filter: MessageFilter = MATCH_ALL
    order: bool = False
    attempt_id: str | None = None


@dataclass(slots=True)
class _CkBatch:
    """Checkpoints of one request that wait for its single append, with their queue locks."""

    entries: list[Inflight] = field(default_factory=list)
    locked: list[str] = field(default_factory=list)


class PopService:
    def __init__(self, ctx: PopContext) -> None:
        self.ctx = ctx

    # --- validation ---
    def check(self, req: PopRequest) -> int:
        """Validate; returns the topic's read queue count."""
        if not 1 <= req.max_msgs <= self.ctx.config.pop_batch_messages_max:
            raise BatchSizeIllegal(
                f"max messages {req.max_msgs} is outside [1, "
                f"{self.ctx.config.pop_batch_messages_max}]"
            )
        self.ctx.check_invisible_time(req.invisible_time_ms)
        validation.validate_group(req.group)
        topic = self.ctx.store.topic_configs.get(req.topic)
        if topic is None or not topic.readable:
            raise UnknownTopicOrGroup(f"topic {req.topic!r} does not exist or is not readable")
        if req.queue_id >= topic.read_queue_nums:
            raise UnknownTopicOrGroup(
                f"queue {req.queue_id} of {req.topic!r} does not exist "
                f"({topic.read_queue_nums} read queues)"
            )
        group = self.ctx.store.group_configs.get_or_create(req.group)
        if not group.consume_enable:
            raise UnknownTopicOrGroup(f"group {req.group!r} has consumption disabled")
        return topic.read_queue_nums

    # --- pop ---
    def pop(self, req: PopRequest) -> PopResult:
        self.ctx.buffer.start_tracking(req.now_ms)
        queues = self.check(req)
        random_q = self.ctx.rng.randrange(100)
        need_retry = random_q < self.ctx.config.pop_from_retry_probability_percent
        revive_qid = self.ctx.next_revive_qid()
        result = PopResult(
            pop_time_ms=req.now_ms, invisible_time_ms=req.invisible_time_ms, revive_qid=revive_qid
        )
        retry = validation.retry_topic_v1(req.group, req.topic)
        batch = _CkBatch()
        try:
            if need_retry:
                self._pop_topic(req, retry, result, batch)
            if req.queue_id < 0:
                for queue_id in self._queue_order(req.topic, queues, random_q):
                    self._pop_queue(req, req.topic, queue_id, result, batch)
            else:
                self._pop_queue(req, req.topic, req.queue_id, result, batch)
            if not need_retry and len(result.messages) < req.max_msgs:
                self._pop_topic(req, retry, result, batch)
        except BaseException:  # e.g. a read failed: none of the messages is handed out
            for entry in batch.entries:
                self.ctx.buffer.withdraw(entry)
            raise
        else:
            self._store_batch(batch)
        finally:
            for key in batch.locked:
                self.ctx.locks.unlock(key)
        if batch.entries:
            self.ctx.commit_offsets()
        return result

    def _store_batch(self, batch: _CkBatch) -> None:
        """Append the request's checkpoints in one write and wait until it is durable; on a
        failure withdraw them (their queues are still locked: each is its queue's newest pop)."""
        if not batch.entries:
            return
        buffer = self.ctx.buffer
        try:
            self.ctx.wait_durable(
                self.ctx.write_cks_nowait(
                    [(e.ck, e.revive_qid) for e in batch.entries if e.ck is not None]
                )
            )
        except BaseException:
            for entry in batch.entries:
                buffer.withdraw(entry)
            raise
        for entry in batch.entries:
            buffer.mark_stored(entry)

    def _queue_order(self, topic: str, queues: int, start: int) -> range | list[int]:
        """From a random start; a PRIORITY topic from its highest queue (the most urgent
        priority, :mod:`gannet.node.api.priorities`) down."""
        config = self.ctx.store.topic_configs.get(topic)
        if config is not None and config.message_type is MessageType.PRIORITY:
            return range(queues - 1, -1, -1)
        return [(start + i) % queues for i in range(queues)]

    def _pop_topic(self, req: PopRequest, topic: str, result: PopResult, batch: _CkBatch) -> None:
        config = self.ctx.store.topic_configs.get(topic)
        if config is None:
            return
        for queue_id in range(config.read_queue_nums):
            self._pop_queue(req, topic, queue_id, result, batch)

    def _pop_queue(
        self, req: PopRequest, topic: str, queue_id: int, result: PopResult, batch: _CkBatch
    ) -> None:
        wanted = req.max_msgs - len(result.messages)
        store = self.ctx.store
        key = lock_key(topic, req.group, queue_id)
        if wanted <= 0:
            return
        locks = self.ctx.locks
        if not locks.try_lock(key, req.now_ms):
            backlog = store.max_offset_in_queue(topic, queue_id) - self.pop_offset(
                req, topic, queue_id, key, init=False
            )
            result.rest_num += max(0, backlog)
            return
        waiting = len(batch.entries)
        try:
            offset = self.pop_offset(req, topic, queue_id, key, init=True)
            got_msgs = self.read(req, topic, queue_id, offset, wanted)
            self._register(req, topic, queue_id, key, offset, got_msgs, result, batch)
            result.rest_num += max(0, got_msgs.max_offset - got_msgs.next_begin_offset)
        finally:
            if len(batch.entries) > waiting:  # its checkpoint waits for the batch's append
                batch.locked.append(key)
            else:
                locks.unlock(key)
        self.ctx.commit_offsets()

    def pop_offset(
        self, req: PopRequest, topic: str, queue_id: int, key: str, *, init: bool
    ) -> int:
        """``getPopOffset``: committed (or initial) offset, raised by the CKs in the log and
        by in-flight pops."""
        offsets = self.ctx.store.consumer_offsets
        with self.ctx.buffer.lock:
            offset = offsets.query(req.group, topic, queue_id)
            if offset < 0:
                offset = self._init_offset(req, topic, queue_id)
                if init:
                    offsets.commit(req.group, topic, queue_id, offset)
            latest = self.ctx.buffer.latest_next_begin(key)
        # Never behind a CK in the log, even one whose pop was withdrawn (:mod:`ck_floors`).
        offset = max(offset, self.ctx.ck_floors.floor(key))
        return offset if latest is None else max(offset, latest)

    def _init_offset(self, req: PopRequest, topic: str, queue_id: int) -> int:
        store = self.ctx.store
        if req.init_mode is InitMode.MIN or validation.is_retry_topic(topic):
            return store.min_offset_in_queue(topic, queue_id)
        return max(0, store.max_offset_in_queue(topic, queue_id) - 1)

    def read(
        self, req: PopRequest, topic: str, queue_id: int, offset: int, wanted: int
    ) -> GetResult:
        store = self.ctx.store
        unit_test = record_test = None
        if not validation.is_retry_topic(topic):
            unit_test, record_test = req.tag_filter.unit_test, req.tag_filter.record_test
        got = store.get_messages(topic, queue_id, offset, wanted, unit_test, record_test)
        if got.status in _RESTART_STATUSES and got.next_begin_offset != offset:
            store.consumer_offsets.commit(req.group, topic, queue_id, got.next_begin_offset)
            self.ctx.buffer.clear_offsets(lock_key(topic, req.group, queue_id))
            got = store.get_messages(
                topic, queue_id, got.next_begin_offset, wanted, unit_test, record_test
            )
        return got

    def _register(
        self,
        req: PopRequest,
        topic: str,
        queue_id: int,
        key: str,
        offset: int,
        got: GetResult,
        result: PopResult,
        batch: _CkBatch,
    ) -> None:
        buffer = self.ctx.buffer
        advanced = got.next_begin_offset > offset
        if got.status is not GetStatus.FOUND:
            if advanced and got.status in _ADVANCE_STATUSES and buffer.has_room(key):
                buffer.add(key, Inflight(None, result.revive_qid, got.next_begin_offset, True))
            return
        start = got.messages[0].queue_offset
        ck = PopCheckPoint(
            start_offset=start,
            pop_time_ms=req.now_ms,
            invisible_time_ms=req.invisible_time_ms,
            num=len(got.messages),
            queue_id=queue_id,
            topic=topic,
            cid=req.group,
            broker_name=self.ctx.broker_name,
            offset_diffs=tuple(m.queue_offset - start for m in got.messages),
        )
        if not buffer.has_room(key):
            return
        if buffer.may_buffer(ck, req.now_ms):
            buffer.add(key, Inflight(ck, result.revive_qid, got.next_begin_offset, False))
        else:  # written with the request's other checkpoints (:meth:`_store_batch`)
            entry = Inflight(ck, result.revive_qid, got.next_begin_offset, False, storing=True)
            buffer.add(key, entry)
            batch.entries.append(entry)
        self._emit(req, topic, ck, got, result)

    def _emit(
        self, req: PopRequest, topic: str, ck: PopCheckPoint, got: GetResult, result: PopResult
    ) -> None:
        flag = receipts.topic_flag(topic)
        original = req.topic
        # The fields every handle of this checkpoint shares, as text once (the same text
        # ReceiptHandle.extra_info writes field by field).
        prefix = receipts.FIELD_SEPARATOR.join(
            (
                str(ck.start_offset),
                str(ck.pop_time_ms),
                str(ck.invisible_time_ms),
                str(result.revive_qid),
                str(int(flag)),
                ck.broker_name,
                str(ck.queue_id),
                "",
            )
        )
        for stored_msg in got.messages:
            msg = records.decode(stored_msg.data)
            queue_offset, commit_offset = stored_msg.queue_offset, stored_msg.commit_offset
            handle = ReceiptHandle(
                ck.start_offset, ck.pop_time_ms, ck.invisible_time_ms, result.revive_qid, flag,
                ck.broker_name, ck.queue_id, queue_offset, commit_offset,
            )  # fmt: skip
            if flag is not TopicFlag.NORMAL:
                msg.topic = original
            extra_info = f"{prefix}{queue_offset}"
            msg.properties.setdefault(props.POP_CK, extra_info)
            encoded = f"{extra_info}{receipts.FIELD_SEPARATOR}{commit_offset}"
            result.messages.append(PoppedMessage(msg, handle, encoded))
        result.start_offset_info.append(
            receipts.start_offset_info(flag, ck.queue_id, ck.start_offset)
        )
        result.msg_offset_info.append(
            receipts.msg_offset_info(flag, ck.queue_id, [m.queue_offset for m in got.messages])
        )
