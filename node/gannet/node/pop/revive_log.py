"""CK and ACK messages of the revive topic ``rmq_sys_REVIVE_LOG_<cluster>``
(``docs/formats/pop.md`` §1–§3).

A CK message goes to revive queue ``reviveQid`` with tag ``ck``, the checkpoint JSON as body, the
CK unique key as ``UNIQ_KEY`` and ``TIMER_DELIVER_MS = reviveTime − 1000``; an ACK message goes to
the revive queue named in the receipt handle with tag ``ack`` (``bAck`` for a batch) and
``TIMER_DELIVER_MS = popTime + invisibleTime``. The store's timer parks both and appends them to
the revive queue when due, so an ACK always appears after its CK and the revive service sees a
checkpoint only once its message could be late.

The revive topic's config holds the queue counts: ``writeQueueNums`` is the number new
checkpoints are spread over, ``readQueueNums`` (≥ write) the number the revive service reads, so
that queues retired by a count change are still revived until drained.

A CK already written is found again by its unique key (:func:`find_ck`, through the store's
index: parked in the timer topic or delivered to the revive queue), so that a change of
invisible time run a second time — a call routed again to a new leader after the stopped one
had replicated its records (fault seed 630) — answers with the checkpoint of the first run.

Called by :mod:`popping`, :mod:`acking` and :mod:`reviving`.
"""

from __future__ import annotations

from gannet.node.pop import acks, checkpoints
from gannet.node.pop.checkpoints import PopCheckPoint
from gannet.node.pop.config import CK_DELIVER_LEAD_MS
from gannet.node.store import properties as props
from gannet.node.store import querying, validation
from gannet.node.store.configs.topics import PERM_READ, PERM_WRITE, TopicConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore


def revive_topic(store: MessageStore) -> str:
    return validation.revive_topic(store.config.cluster_name)


def ensure_revive_topic(store: MessageStore, queue_count: int) -> TopicConfig:
    """Create the revive topic, or grow/shrink its write queues to ``queue_count`` while
    keeping every queue ever written readable."""
    name = revive_topic(store)
    current = store.topic_configs.get(name)
    read = queue_count if current is None else max(current.read_queue_nums, queue_count)
    wanted = TopicConfig(
        name, read_queue_nums=read, write_queue_nums=queue_count, perm=PERM_READ | PERM_WRITE
    )
    if current is None or (current.read_queue_nums, current.write_queue_nums) != (
        read,
        queue_count,
    ):
        store.topic_configs.put(wanted)
        return wanted
    return current


def find_ck(store: MessageStore, ck: PopCheckPoint) -> tuple[PopCheckPoint, int] | None:
    """A CK message already written with ``ck``'s unique key (topic, queue, start offset,
    group, pop time, broker): its checkpoint and revive queue, or None. Looked up in the
    store's index, parked (timer topic) first, then delivered (revive topic); None as well
    when the store keeps no index."""
    key = checkpoints.ck_unique_key(ck)
    for topic in (validation.TIMER_TOPIC, revive_topic(store)):
        for msg in querying.by_key(store, topic, key, unique=True).messages:
            if msg.tags != checkpoints.CK_TAG:
                continue
            found = checkpoints.decode(msg.body)
            if checkpoints.ck_revive_key(found) != checkpoints.ck_revive_key(ck):
                continue
            qid = msg.queue_id
            if msg.topic == validation.TIMER_TOPIC:
                real_qid = msg.properties.get(props.REAL_QUEUE_ID, "")
                if not real_qid.isdigit():
                    continue
                qid = int(real_qid)
            return found, qid
    return None


def _host(store: MessageStore) -> tuple[str, int]:
    return (store.config.store_host, store.config.store_port)


def ck_message(store: MessageStore, ck: PopCheckPoint, revive_qid: int) -> Message:
    return Message(
        topic=revive_topic(store),
        body=checkpoints.encode(ck),
        queue_id=revive_qid,
        properties={
            props.TAGS: checkpoints.CK_TAG,
            props.UNIQ_KEY: checkpoints.ck_unique_key(ck),
            props.TIMER_DELIVER_MS: str(ck.revive_time_ms - CK_DELIVER_LEAD_MS),
        },
        born_host=_host(store),
    )


def ack_message(store: MessageStore, ack: acks.AckMsg, revive_qid: int, deliver_ms: int) -> Message:
    tag = checkpoints.BATCH_ACK_TAG if ack.is_batch else checkpoints.ACK_TAG
    return Message(
        topic=revive_topic(store),
        body=acks.encode(ack),
        queue_id=revive_qid,
        properties={
            props.TAGS: tag,
            props.UNIQ_KEY: acks.ack_unique_key(ack),
            props.TIMER_DELIVER_MS: str(deliver_ms),
        },
        born_host=_host(store),
    )


def write_ck(store: MessageStore, ck: PopCheckPoint, revive_qid: int) -> None:
    """Append a CK message (durable per the flush mode when this returns)."""
    store.put_messages([ck_message(store, ck, revive_qid)])


def write_ack(store: MessageStore, ack: acks.AckMsg, revive_qid: int, deliver_ms: int) -> None:
    store.put_messages([ack_message(store, ack, revive_qid, deliver_ms)])
