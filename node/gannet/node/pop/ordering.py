"""Orderly (FIFO) Pop for groups with ``consume_message_orderly`` (``docs/formats/pop.md`` §7).

No checkpoint is written and retry topics are not read; receipt handles carry revive queue 999.
Per queue of the topic (messages of one message group share a queue, so this is also per
message group) at most one popped batch is in flight: a queue is *blocked* while any un-acked
offset of its last pop is still invisible (a request repeating the same attempt id is not
blocked). A pop records the batch in the store's order infos
(:mod:`gannet.node.store.configs.order_infos`, ``consumerOrderInfo.json``; replicated through
the Raft log as consumer offsets are, so a new leader keeps the leases and acks), carrying
the consumed counts of offsets popped again, and commits the consumer offset = the first
un-acked offset, so the offset never moves past an un-acked message. An ack sets the offset's
bit and commits the next un-acked offset (or last + 1). When a message has been delivered
``retryMaxTimes + 1`` times and comes up again it is written to ``%DLQ%<group>`` and counted as
acked, so one poison message cannot block its queue for ever. Popped again after a message that
was not acked, a batch skips the messages acked in it (they keep their bit, as if acked).

Called by :class:`gannet.node.pop.service.PopBroker` with explicit ``now_ms``.
"""

from __future__ import annotations

from gannet.node.pop import receipts, retrying
from gannet.node.pop.acking import AckService
from gannet.node.pop.context import PopContext
from gannet.node.pop.errors import AlreadyAcked, ReceiptHandleExpired, ReceiptHandleUnknown
from gannet.node.pop.locks import lock_key
from gannet.node.pop.popping import PoppedMessage, PopRequest, PopResult, PopService
from gannet.node.pop.receipts import (
    ORDER_REVIVE_QUEUE,
    InvisibleTimeChange,
    ReceiptHandle,
    TopicFlag,
)
from gannet.node.store import properties as props
from gannet.node.store.configs import offsets as consumer_offsets
from gannet.node.store.configs.order_infos import OrderInfo, OrderInfoManager
from gannet.node.store.log import records
from gannet.node.store.queues.reading import GetResult, GetStatus


class OrderService:
    def __init__(self, ctx: PopContext, popper: PopService) -> None:
        self.ctx = ctx
        self.popper = popper
        self.acker = AckService(ctx)
        self.infos: OrderInfoManager = ctx.store.order_infos

    # --- pop ---
    def pop(self, req: PopRequest) -> PopResult:
        queues = self.popper.check(req)
        start = self.ctx.rng.randrange(100)
        result = PopResult(
            pop_time_ms=req.now_ms,
            invisible_time_ms=req.invisible_time_ms,
            revive_qid=ORDER_REVIVE_QUEUE,
        )
        ids = [req.queue_id] if req.queue_id >= 0 else [(start + i) % queues for i in range(queues)]
        for queue_id in ids:
            if len(result.messages) >= req.max_msgs:
                break
            self._pop_queue(req, queue_id, result)
        return result

    def _pop_queue(self, req: PopRequest, queue_id: int, result: PopResult) -> None:
        key = lock_key(req.topic, req.group, queue_id)
        table_key = consumer_offsets.table_key(req.group, req.topic)
        with self.ctx.locks.holding(key, req.now_ms) as got, self.infos.lock:
            if not got:
                return
            info = self.infos.get(table_key, queue_id)
            if info is not None and info.is_blocked(req.now_ms, req.attempt_id):
                return
            offset = self.popper.pop_offset(req, req.topic, queue_id, key, init=True)
            wanted = req.max_msgs - len(result.messages)
            got_msgs = self.popper.read(req, req.topic, queue_id, offset, wanted)
            offsets = self.ctx.store.consumer_offsets
            if got_msgs.status is not GetStatus.FOUND:
                if got_msgs.next_begin_offset > offset:
                    offsets.commit(req.group, req.topic, queue_id, got_msgs.next_begin_offset)
                return
            new = self._record(req, queue_id, info, got_msgs, result)
            self.infos.put(table_key, queue_id, new)
            offsets.commit(req.group, req.topic, queue_id, new.next_offset())

    def _record(
        self,
        req: PopRequest,
        queue_id: int,
        old: OrderInfo | None,
        got: GetResult,
        result: PopResult,
    ) -> OrderInfo:
        group = self.ctx.store.group_configs.get_or_create(req.group)
        offsets = tuple(m.queue_offset for m in got.messages)
        counts: dict[int, int] = {}
        bits = 0
        returned = []
        for i, stored in enumerate(got.messages):
            o = stored.queue_offset
            if old is not None and o in old.offsets and old.commit_bits >> old.offsets.index(o) & 1:
                # Acked in the batch popped before, behind a message that was not: the ack was
                # answered, so the message is not handed out again (fault seeds 601, 606: a
                # lost ack of one message brought back the acked rest of its batch).
                bits |= 1 << i
                continue
            before = old.count_of(o) + 1 if old is not None and o in old.offsets else 0
            if before:
                counts[o] = before
            msg = records.decode(stored.data)
            msg.reconsume_times = max(msg.reconsume_times, before)
            if msg.reconsume_times > group.retry_max_times:
                dlq = retrying.dlq_message(msg, req.group, req.topic)
                retrying.ensure_system_topic(self.ctx.store, dlq.topic, None)
                self.ctx.store.put_messages([dlq])
                bits |= 1 << i
                continue
            returned.append((stored, msg))
        start = offsets[0]
        for stored, msg in returned:
            handle = ReceiptHandle(
                ck_queue_offset=start,
                pop_time_ms=req.now_ms,
                invisible_time_ms=req.invisible_time_ms,
                revive_qid=ORDER_REVIVE_QUEUE,
                flag=TopicFlag.NORMAL,
                broker_name=self.ctx.broker_name,
                queue_id=queue_id,
                queue_offset=stored.queue_offset,
                commit_offset=stored.commit_offset,
            )
            msg.properties.setdefault(props.POP_CK, handle.extra_info())
            result.messages.append(PoppedMessage(msg, handle))
        if returned:
            result.start_offset_info.append(
                receipts.start_offset_info(TopicFlag.NORMAL, queue_id, start)
            )
        return OrderInfo(
            pop_time_ms=req.now_ms,
            invisible_time_ms=req.invisible_time_ms,
            offsets=offsets,
            consumed_counts=counts,
            last_consume_ms=req.now_ms,
            commit_bits=bits,
            attempt_id=req.attempt_id,
        )

    # --- ack / change invisible ---
    def _locate(
        self, group: str, topic: str, handle: str | ReceiptHandle, now_ms: int
    ) -> tuple[ReceiptHandle, str, OrderInfo, int]:
        target = self.acker.resolve(group, topic, handle, now_ms)
        h = target.handle
        if not h.is_order:
            raise ReceiptHandleUnknown("not an orderly receipt handle")
        table_key = consumer_offsets.table_key(group, target.topic)
        committed = self.ctx.store.consumer_offsets.query(group, target.topic, h.queue_id)
        info = self.infos.get(table_key, h.queue_id)
        if info is None or info.pop_time_ms != h.pop_time_ms:
            if 0 <= h.queue_offset < committed:
                raise AlreadyAcked(f"offset {h.queue_offset} is below the committed {committed}")
            raise ReceiptHandleExpired("the queue was popped again since this handle was issued")
        if h.queue_offset not in info.offsets:
            raise ReceiptHandleUnknown(f"offset {h.queue_offset} is not part of this pop")
        index = info.offsets.index(h.queue_offset)
        if info.commit_bits >> index & 1:
            raise AlreadyAcked(f"the message at offset {h.queue_offset} was already acked")
        return h, table_key, info, index

    def ack(self, group: str, topic: str, handle: str | ReceiptHandle, now_ms: int) -> None:
        with self.infos.lock:
            h, table_key, info, index = self._locate(group, topic, handle, now_ms)
            info = info.acked(index)
            self.infos.put(table_key, h.queue_id, info)
            self.ctx.store.consumer_offsets.commit(group, topic, h.queue_id, info.next_offset())

    def change_invisible_time(self, change: InvisibleTimeChange) -> ReceiptHandle:
        group, topic, now_ms = change.group, change.topic, change.now_ms
        invisible_time_ms = change.invisible_time_ms
        self.ctx.check_invisible_time(invisible_time_ms)
        with self.infos.lock:
            h, table_key, info, _ = self._locate(group, topic, change.handle, now_ms)
            visible = dict(info.next_visible_ms)
            visible[h.queue_offset] = now_ms + invisible_time_ms
            new = OrderInfo(
                info.pop_time_ms,
                info.invisible_time_ms,
                info.offsets,
                visible,
                info.consumed_counts,
                info.last_consume_ms,
                info.commit_bits,
                info.attempt_id,
            )
            self.infos.put(table_key, h.queue_id, new)
        return ReceiptHandle(
            ck_queue_offset=h.ck_queue_offset,
            pop_time_ms=h.pop_time_ms,
            invisible_time_ms=now_ms + invisible_time_ms - h.pop_time_ms,
            revive_qid=ORDER_REVIVE_QUEUE,
            flag=h.flag,
            broker_name=h.broker_name,
            queue_id=h.queue_id,
            queue_offset=h.queue_offset,
            commit_offset=h.commit_offset,
        )

    # --- housekeeping ---
    def sweep(self, now_ms: int) -> None:
        self.infos.sweep(now_ms, self.ctx.config.order_info_idle_ms_max)
        self.infos.persist()

    def persist(self) -> None:
        self.infos.persist()
