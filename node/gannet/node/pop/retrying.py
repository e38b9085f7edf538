"""Retry and dead-letter messages (``PopReviveService.reviveRetry``, send-back to DLQ,
``docs/formats/pop.md`` §6).

Retry: topic = the checkpoint's topic when it already is a ``%RETRY%`` topic, else
``%RETRY%<group>_<topic>``; queue 0; body, flag, sys flag, born time and host and every property
are copied, except the timer properties (the invisible time already elapsed, so the message is
stored at once); ``reconsumeTimes`` = original + 1; ``1ST_POP_TIME`` = the checkpoint's pop time
when the original had ``reconsumeTimes`` 0 or no such property.

Dead letter rule (Gannet does it in the broker's revive path; RocketMQ leaves it to the
consumer or proxy, which send it back with delay level −1): a message is delivered at most
``retryMaxTimes + 1`` times (reconsume times 0…retryMaxTimes, 17 with the default 16). When the
revive of an expired message would give it ``reconsumeTimes > retryMaxTimes``, it goes to
``%DLQ%<group>`` queue 0 instead, with ``DLQ_ORIGIN_TOPIC`` (the original, non-retry topic) and
``DLQ_ORIGIN_MESSAGE_ID`` (its unique key). Retry and DLQ topics are created on first use with 1
queue and perm 6 (read + write), and the group's consumer offset of retry queue 0 is set to 0.

Called by :mod:`reviving` and by :meth:`acking.AckService.forward_to_dlq`.
"""

from __future__ import annotations

from gannet.node.store import properties as props
from gannet.node.store import validation
from gannet.node.store.configs.topics import PERM_READ, PERM_WRITE, TopicConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

_TIMER_PROPERTIES = (
    props.TIMER_DELIVER_MS,
    props.TIMER_DELAY_MS,
    props.TIMER_DELAY_SEC,
    props.TIMER_OUT_MS,
    props.TIMER_ENQUEUE_MS,
    props.TIMER_DEQUEUE_MS,
    props.TIMER_ROLL_TIMES,
    props.DELAY_TIME_LEVEL,
    props.REAL_TOPIC,
    props.REAL_QUEUE_ID,
    props.POP_CK,
)


def retry_topic_for(group: str, ck_topic: str) -> str:
    if validation.is_retry_topic(ck_topic):
        return ck_topic
    return validation.retry_topic_v1(group, ck_topic)


def original_topic_of(group: str, topic: str) -> str:
    return validation.original_topic(topic, group) or topic


def system_topic_config(topic: str) -> TopicConfig:
    """A retry/DLQ topic's config: 1 queue, perm 6."""
    return TopicConfig(topic, read_queue_nums=1, write_queue_nums=1, perm=PERM_READ | PERM_WRITE)


def ensure_system_topic(store: MessageStore, topic: str, group: str | None) -> None:
    """Create a retry/DLQ topic (1 queue, perm 6); initialise the group's offset to 0."""
    if store.topic_configs.get(topic) is None:
        store.topic_configs.put(system_topic_config(topic))
        if group is not None and store.consumer_offsets.query(group, topic, 0) < 0:
            store.consumer_offsets.commit(group, topic, 0, 0)


def _copy(original: Message, topic: str, reconsume_times: int) -> Message:
    properties = {k: v for k, v in original.properties.items() if k not in _TIMER_PROPERTIES}
    return Message(
        topic=topic,
        body=original.body,
        queue_id=0,
        flag=original.flag,
        properties=properties,
        sys_flag=original.sys_flag,
        born_timestamp_ms=original.born_timestamp_ms,
        born_host=original.born_host,
        reconsume_times=reconsume_times,
    )


def retry_message(original: Message, group: str, ck_topic: str, pop_time_ms: int) -> Message:
    msg = _copy(original, retry_topic_for(group, ck_topic), original.reconsume_times + 1)
    if original.reconsume_times == 0 or props.FIRST_POP_TIME not in msg.properties:
        msg.properties[props.FIRST_POP_TIME] = str(pop_time_ms)
    return msg


def classic_retry_topic(group: str) -> str:
    """The retry topic of a remoting push consumer group: ``%RETRY%<group>`` (RocketMQ's
    ``MixAll.getRetryTopic``; the 4.x client subscribes to it by itself)."""
    return f"{validation.RETRY_TOPIC_PREFIX}{group}"


def sent_back_message(original: Message, group: str, deliver_at_ms: int) -> Message:
    """A message a remoting consumer sent back (``CONSUMER_SEND_MSG_BACK``): a copy on the
    group's classic retry topic with ``reconsumeTimes`` + 1, delivered by the timer store at
    ``deliver_at_ms``; ``RETRY_TOPIC`` keeps the topic it was first sent to, and
    ``ORIGIN_MESSAGE_ID`` its first message id, as RocketMQ's broker sets them."""
    msg = _copy(original, classic_retry_topic(group), original.reconsume_times + 1)
    msg.properties.setdefault(props.RETRY_TOPIC, original.topic)
    uniq = original.uniq_key
    if uniq:
        msg.properties.setdefault(props.ORIGIN_MESSAGE_ID, uniq)
    msg.properties[props.TIMER_DELIVER_MS] = str(deliver_at_ms)
    return msg


def dlq_message(original: Message, group: str, origin_topic: str) -> Message:
    msg = _copy(original, validation.dlq_topic(group), original.reconsume_times + 1)
    msg.properties[props.DLQ_ORIGIN_TOPIC] = origin_topic
    uniq = original.uniq_key
    if uniq:
        msg.properties[props.DLQ_ORIGIN_MESSAGE_ID] = uniq
    return msg


def goes_to_dlq(original: Message, retry_max_times: int) -> bool:
    """True when another delivery would exceed ``retry_max_times + 1`` attempts."""
    return original.reconsume_times + 1 > retry_max_times
