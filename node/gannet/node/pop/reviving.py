"""Revive: bring back messages whose invisible time elapsed without an ack
(RocketMQ ``PopReviveService``, ``docs/formats/pop.md`` §5). One service per revive queue.

A pass reads the revive queue from the stored progress + 1, at most
``revive_pass_messages_max`` messages (``revive_batch_messages_max`` per read):

1. **Consume.** CK messages are parsed and kept in offset order under their revive key
   ``topic + cid + queueId + startOffset + popTime + brokerName`` (an exact duplicate, as the
   at-least-once timer may deliver after a crash, is ignored; distinct CKs sharing a key are
   all kept); ACK and batch-ACK messages set bits in the CKs with the same key (unmatched acks
   are ignored: their CK was handled already).
   ``endTime`` = the largest ``TIMER_DELIVER_MS`` seen, raised, when the queue was read to its
   end, to the time by which the timer has delivered everything due (``now``, or the slot its
   wheel's cursor lags behind by between ticks: ``TimerService.delivered_through_ms``).
2. **Revive.** In revive-queue order, a CK is expired when ``endTime − reviveTime > 2000 ms``;
   the first one that is not ends the pass. For an expired CK every message without its bit is
   read back and written to the retry topic (reconsume times + 1) or, past the group's
   ``retryMaxTimes``, to ``%DLQ%<group>`` (:mod:`retrying`). CKs of deleted topics or groups are
   skipped. If writing fails, each message left is re-put as a one-message CK with ``rp`` + 1
   (and a back-off added to its invisible time when its revive time is already past); if even
   that fails the pass stops there.
3. **Commit.** The progress — consumer offset of group ``CID_RMQ_SYS_REVIVE_GROUP`` on the
   revive topic and queue — moves to the last message before the first unhandled CK. So a
   restart re-reads at most the unfinished tail: revives are at least once, never lost.

Driven with an explicit ``now_ms`` by :class:`gannet.node.pop.service.PopBroker` (its thread
every ``revive_interval_ms``, or tests with virtual time).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from gannet.node.pop import acks, checkpoints, retrying, revive_log
from gannet.node.pop.checkpoints import PopCheckPoint
from gannet.node.pop.config import RE_PUT_BACKOFF_S, REVIVE_EXPIRE_MARGIN_MS
from gannet.node.pop.context import PopContext
from gannet.node.pop.errors import PopRequestIllegal
from gannet.node.store import properties as props
from gannet.node.store import validation
from gannet.node.store.errors import StoreError
from gannet.node.store.log import records
from gannet.node.store.queues.reading import GetStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RevivePass:
    """What one pass did."""

    revive_qid: int
    messages_read: int
    cks_seen: int
    cks_handled: int
    revived: int
    dead_lettered: int
    re_put: int
    progress: int


@dataclass(slots=True)
class _Scan:
    cks: dict[int, PopCheckPoint] = field(default_factory=dict)  # by revive-queue offset
    by_key: dict[str, list[int]] = field(default_factory=dict)  # revive key -> offsets
    order: list[tuple[int, bool]] = field(default_factory=list)  # (offset, is a CK to handle)
    bodies: set[PopCheckPoint] = field(default_factory=set)  # CKs as read, to spot duplicates
    end_time_ms: int = 0
    next_offset: int = 0
    read: int = 0


@dataclass(slots=True)
class _Counts:
    revived: int = 0
    dead_lettered: int = 0
    re_put: int = 0


class ReviveService:
    def __init__(self, ctx: PopContext, revive_qid: int) -> None:
        self.ctx = ctx
        self.revive_qid = revive_qid
        self.topic = revive_log.revive_topic(ctx.store)
        self.revived_total = 0
        self.dead_lettered_total = 0
        self.re_put_total = 0

    def progress(self) -> int:
        """Offset of the last handled revive-queue message, -1 when none."""
        return self.ctx.store.consumer_offsets.query(
            validation.REVIVE_GROUP, self.topic, self.revive_qid
        )

    def drained(self, now_ms: int) -> bool:
        """True when nothing written to this revive queue is still parked in the timer and
        every message in it has been handled."""
        parked_until = self.ctx.last_delivery_ms(self.revive_qid) + REVIVE_EXPIRE_MARGIN_MS
        top = self.ctx.store.max_offset_in_queue(self.topic, self.revive_qid)
        return now_ms > parked_until and self.progress() + 1 >= top

    def revive_once(self, now_ms: int) -> RevivePass:
        store = self.ctx.store
        start = max(self.progress() + 1, store.min_offset_in_queue(self.topic, self.revive_qid))
        scan = self._consume(start, now_ms)
        counts = _Counts()
        handled_to = start - 1
        handled = 0
        for offset, is_ck in scan.order:
            ck = scan.cks.get(offset) if is_ck else None
            if ck is not None:
                if scan.end_time_ms - ck.revive_time_ms <= REVIVE_EXPIRE_MARGIN_MS:
                    break
                if not self._revive(ck, counts):
                    break
                handled += 1
            handled_to = offset
        self.revived_total += counts.revived
        self.dead_lettered_total += counts.dead_lettered
        self.re_put_total += counts.re_put
        if handled_to >= start:
            store.consumer_offsets.commit(
                validation.REVIVE_GROUP, self.topic, self.revive_qid, handled_to
            )
        return RevivePass(
            self.revive_qid,
            scan.read,
            len(scan.cks),
            handled,
            counts.revived,
            counts.dead_lettered,
            counts.re_put,
            self.progress(),
        )

    # --- consume phase ---
    def _consume(self, start: int, now_ms: int) -> _Scan:
        store = self.ctx.store
        config = self.ctx.config
        scan = _Scan(next_offset=start)
        while scan.read < config.revive_pass_messages_max:
            if len(scan.cks) >= config.revive_pass_cks_max:
                return scan
            got = store.get_messages(
                self.topic, self.revive_qid, scan.next_offset, config.revive_batch_messages_max
            )
            if got.status is not GetStatus.FOUND:
                if got.next_begin_offset > scan.next_offset:
                    scan.next_offset = got.next_begin_offset
                    continue
                break
            for stored in got.messages:
                self._take(scan, stored.queue_offset, records.decode(stored.data))
            scan.read += len(got.messages)
            scan.next_offset = got.next_begin_offset
        at_end = scan.next_offset >= store.max_offset_in_queue(self.topic, self.revive_qid)
        through_ms = store.timers.delivered_through_ms() if at_end else None
        if through_ms is not None:
            scan.end_time_ms = max(scan.end_time_ms, min(now_ms, through_ms))
        return scan

    def _take(self, scan: _Scan, offset: int, msg: records.Message) -> None:
        deliver = msg.properties.get(props.TIMER_DELIVER_MS, "")
        if deliver.lstrip("-").isdigit():
            scan.end_time_ms = max(scan.end_time_ms, int(deliver))
        tag = msg.tags
        try:
            if tag == checkpoints.CK_TAG:
                ck = checkpoints.decode(msg.body)
                key = checkpoints.ck_revive_key(ck)
                if not ck.topic or not ck.cid or ck in scan.bodies:
                    scan.order.append((offset, False))  # an exact duplicate (timer redelivery)
                    return
                scan.bodies.add(ck)
                scan.cks[offset] = replace(ck, revive_offset=offset)
                scan.by_key.setdefault(key, []).append(offset)
                scan.order.append((offset, True))
                return
            if tag in (checkpoints.ACK_TAG, checkpoints.BATCH_ACK_TAG):
                self._apply_ack(scan, acks.decode(msg.body))
        except PopRequestIllegal as exc:
            log.warning("revive queue %d offset %d: %s; skipped", self.revive_qid, offset, exc)
        scan.order.append((offset, False))

    def _apply_ack(self, scan: _Scan, ack: acks.AckMsg) -> None:
        """Set the acked bits in every CK with the ack's key (normally one; several only when
        pop times repeated, e.g. after a clock step — then the ack counts for each)."""
        for ck_offset in scan.by_key.get(ack.revive_key(self.ctx.broker_name), ()):
            ck = scan.cks[ck_offset]
            bits = 0
            for offset in ack.offsets():
                index = ck.index_of(offset)
                if index >= 0:
                    bits |= 1 << index
            scan.cks[ck_offset] = ck.with_bits(bits)

    # --- revive phase ---
    def _revive(self, ck: PopCheckPoint, counts: _Counts) -> bool:
        """Write retries/DLQ for the un-acked messages of ``ck``; False to stop the pass."""
        store = self.ctx.store
        normal = retrying.original_topic_of(ck.cid, ck.topic)
        group = store.group_configs.get(ck.cid)
        if store.topic_configs.get(normal) is None or group is None:
            return True
        pending = [j for j in range(ck.num) if not ck.is_acked(j)]
        for j in pending:
            offset = ck.queue_offset(j)
            got = store.get_messages(ck.topic, ck.queue_id, offset, 1)
            if not got.messages or got.messages[0].queue_offset != offset:
                log.warning("revive: %s queue %d offset %d is gone", ck.topic, ck.queue_id, offset)
                continue
            original = records.decode(got.messages[0].data)
            try:
                self._send(original, ck, normal, group.retry_max_times, counts)
            except StoreError as exc:
                log.warning("revive of %s offset %d failed (%s); re-put", ck.topic, offset, exc)
                return self._re_put(ck, pending[pending.index(j) :], counts)
        return True

    def _send(
        self,
        original: records.Message,
        ck: PopCheckPoint,
        normal: str,
        retry_max: int,
        counts: _Counts,
    ) -> None:
        store = self.ctx.store
        if retrying.goes_to_dlq(original, retry_max):
            msg = retrying.dlq_message(original, ck.cid, normal)
            retrying.ensure_system_topic(store, msg.topic, None)
            counts.dead_lettered += 1
        else:
            msg = retrying.retry_message(original, ck.cid, ck.topic, ck.pop_time_ms)
            retrying.ensure_system_topic(store, msg.topic, ck.cid)
            counts.revived += 1
        store.put_messages([msg])

    def _re_put(self, ck: PopCheckPoint, indexes: list[int], counts: _Counts) -> bool:
        times = ck.parse_re_put_times()
        qid = self.revive_qid
        if qid >= self.ctx.revive_write_queues:  # retired: re-put into a current queue
            qid = self.ctx.next_revive_qid()
        backoff_ms = RE_PUT_BACKOFF_S[min(times, len(RE_PUT_BACKOFF_S) - 1)] * 1000
        try:
            for j in indexes:
                new = PopCheckPoint(
                    start_offset=ck.queue_offset(j),
                    pop_time_ms=ck.pop_time_ms,
                    invisible_time_ms=ck.invisible_time_ms + backoff_ms,
                    num=1,
                    queue_id=ck.queue_id,
                    topic=ck.topic,
                    cid=ck.cid,
                    broker_name=ck.broker_name,
                    offset_diffs=(0,),
                    re_put_times=str(times + 1),
                )
                self.ctx.write_ck(new, qid)
                counts.re_put += 1
        except StoreError as exc:
            log.error("revive queue %d: re-put failed (%s); will retry", self.revive_qid, exc)
            return False
        return True
