"""Topics, groups and queues named in v2 requests, checked and looked up.

Every v2 handler resolves names through :class:`Resources`, so the answers agree: an illegal
name is ``ILLEGAL_TOPIC`` / ``ILLEGAL_CONSUMER_GROUP`` (system names included), an unknown
topic is ``TOPIC_NOT_FOUND`` and an unknown group ``CONSUMER_GROUP_NOT_FOUND``, each message
telling how to create it. With ``auto_create_topics`` an unknown topic is created as a MIXED
topic (every message type — a route query cannot tell which type a producer will send) of
:data:`AUTO_CREATED_QUEUE_NUMS` queues — a retry (``%RETRY%``) or dead-letter (``%DLQ%``) topic
with 1 queue, as the send-back and revive paths create them (a remoting consumer asks the route
of its group's ``%RETRY%<group>``). With ``auto_create_groups`` (RocketMQ's
``autoCreateSubscriptionGroup``) an unknown consumer group is created with the defaults of
``gannet group create`` (not FIFO, 16 retries) on its first use: a heartbeat, a receive, an
assignment query, an offset query or a pull naming it. System and illegal names are refused
either way.

Used by :mod:`messaging` and :mod:`offsets` (and the Pop handlers when they are plugged in).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rocketmq.grpc_protocol import definition_pb2

from gannet.node.api import sending
from gannet.node.pop import retrying
from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.store import validation
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.topics import MessageType, TopicConfig
from gannet.node.store.message_store import MessageStore

log = logging.getLogger(__name__)

AUTO_CREATED_QUEUE_NUMS = 8


class Resources:
    def __init__(
        self,
        store: MessageStore,
        *,
        auto_create_topics: bool = False,
        auto_create_groups: bool = False,
        config_writes_here: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store = store
        self.auto_create_topics = auto_create_topics
        self.auto_create_groups = auto_create_groups
        self._config_writes_here = config_writes_here
        """Whether a config this broker creates enters the Raft log (the leader; a broker
        without replication). A follower's own change would stay in its store only (the config
        tables journal the leader's changes alone) and make the members disagree: it answers
        an auto-created topic or group as it would be, and stores nothing; the leader creates
        it when a request reaches it (a send, a pull commit, a route asked of it)."""

    def lookup_topic(self, name: str) -> TopicConfig | None:
        """The topic's config, auto-created when enabled; the caller checked the name."""
        config = self.store.topic_configs.get(name)
        if config is None and self.auto_create_topics:
            if validation.is_retry_topic(name) or validation.is_dlq_topic(name):
                # as the send-back and revive paths create them (and RocketMQ: a retry topic
                # has the group's retryQueueNums, 1; a DLQ DLQ_NUMS_PER_GROUP, 1)
                config = retrying.system_topic_config(name)
            else:
                config = TopicConfig(
                    name,
                    read_queue_nums=AUTO_CREATED_QUEUE_NUMS,
                    write_queue_nums=AUTO_CREATED_QUEUE_NUMS,
                ).with_message_type(MessageType.MIXED)
            if not self._config_writes_here():
                return config  # as it will be; the leader creates it (__init__)
            self.store.topic_configs.put(config)
            log.info("auto-created topic %s (%d queues)", name, config.write_queue_nums)
        return config

    def topic(self, name: str) -> TopicConfig:
        """An existing topic clients may use, or ApiError."""
        sending.check_topic_name(name)
        config = self.lookup_topic(name)
        if config is None:
            raise ApiError(statuses.TOPIC_NOT_FOUND, sending.topic_not_found_message(name))
        return config

    def group(self, name: str) -> str:
        """An existing consumer group clients may use, or ApiError."""
        sending.check_group_name(name)
        if name not in self.store.group_configs:
            if not self.auto_create_groups:
                raise ApiError(
                    statuses.CONSUMER_GROUP_NOT_FOUND,
                    f"consumer group {name!r} does not exist; create it with "
                    f"`gannet group create {name}` (or run the broker with "
                    "--auto-create-groups)",
                )
            if self._config_writes_here():  # else answered as it will be (__init__)
                self.store.group_configs.put(SubscriptionGroupConfig(name))
                log.info("auto-created consumer group %s", name)
        return name

    def queue(self, queue: definition_pb2.MessageQueue) -> tuple[TopicConfig, int]:
        """The topic and queue id of a request's ``message_queue``, or ApiError."""
        config = self.topic(str(queue.topic.name))
        queue_count = max(config.read_queue_nums, config.write_queue_nums)
        if not 0 <= queue.id < queue_count:
            raise ApiError(
                statuses.BAD_REQUEST,
                f"message_queue.id {queue.id} is not a queue of topic {config.topic_name!r} "
                f"(0..{queue_count - 1})",
            )
        return config, int(queue.id)
