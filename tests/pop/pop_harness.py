"""A Pop test harness: a store opened without its threads and a PopBroker, both driven with a
virtual clock (``now`` starts a little after the wall clock, so that CK/ACK delivery times are
in the future for the store's timer routing, and only moves when a test says so)."""

from __future__ import annotations

import random
from pathlib import Path

from gannet.node.domain.committing import pop_flush_wait
from gannet.node.pop.config import PopConfig
from gannet.node.pop.filtering import MATCH_ALL, MessageFilter
from gannet.node.pop.popping import InitMode, PopResult
from gannet.node.pop.reviving import RevivePass
from gannet.node.pop.service import PopBroker
from gannet.node.store import properties as props
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.log.commitlog import now_ms
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

TOPIC = "Orders"
GROUP = "GID_pop"
INVISIBLE_MS = 30_000


class Harness:
    def __init__(self, root: Path, config: PopConfig, seed: int = 7) -> None:
        self.root = root
        self.config = config
        self.seed = seed
        self.now = now_ms() + 5_000
        self.store = self._open_store()
        self.broker = PopBroker(
            self.store, config, wait_durable=pop_flush_wait(self.store), rng=random.Random(seed)
        )
        self.sent = 0

    def _open_store(self) -> MessageStore:
        config = StoreConfig.for_tests(self.root, flush_mode=FlushMode.ASYNC_FLUSH)
        return MessageStore(config).open(start_services=False)

    def restart(self, *, crash: bool = False) -> None:
        """Close (or abandon) broker and store, then open both again."""
        if crash:
            self.store.abandon()
        else:
            self.broker.close()
            self.settle()
            self.store.close()
        self.store = self._open_store()
        self.settle()
        # A restart takes time: pop times (part of every revive key) do not repeat across it.
        self.now += 1_000
        self.broker = PopBroker(
            self.store,
            self.config,
            wait_durable=pop_flush_wait(self.store),
            rng=random.Random(self.seed + 1),
        )

    def close(self) -> None:
        self.broker.close()
        self.store.close()

    def setup(
        self, topic: str = TOPIC, queues: int = 4, group: str = GROUP, **group_kw: object
    ) -> None:
        self.store.topic_configs.put(
            TopicConfig(topic, read_queue_nums=queues, write_queue_nums=queues)
        )
        self.store.group_configs.put(SubscriptionGroupConfig(group, **group_kw))  # type: ignore[arg-type]

    def produce(
        self,
        count: int,
        *,
        topic: str = TOPIC,
        queue_id: int | None = None,
        tag: str | None = None,
        queues: int = 4,
    ) -> list[str]:
        bodies = []
        msgs = []
        for _ in range(count):
            body = f"m{self.sent}"
            q = queue_id if queue_id is not None else self.sent % queues
            properties = {props.KEYS: body}
            if tag is not None:
                properties[props.TAGS] = tag
            msgs.append(Message(topic=topic, body=body.encode(), queue_id=q, properties=properties))
            bodies.append(body)
            self.sent += 1
        self.store.put_messages(msgs)
        self.settle()
        return bodies

    def settle(self) -> None:
        self.store.dispatch.set_commit_offset(self.store.commitlog.max_offset())
        self.store.dispatch.dispatch_available()

    def pop(
        self,
        max_msgs: int = 32,
        *,
        group: str = GROUP,
        topic: str = TOPIC,
        invisible_ms: int = INVISIBLE_MS,
        queue_id: int = -1,
        init_mode: InitMode = InitMode.MIN,
        tag_filter: MessageFilter = MATCH_ALL,
        order: bool | None = None,
        attempt_id: str | None = None,
    ) -> PopResult:
        result = self.broker.pop(
            group,
            topic,
            queue_id=queue_id,
            max_msgs=max_msgs,
            invisible_time_ms=invisible_ms,
            now_ms=self.now,
            init_mode=init_mode,
            tag_filter=tag_filter,
            order=order,
            attempt_id=attempt_id,
        )
        self.settle()
        return result

    def advance(self, ms: int) -> list[RevivePass]:
        """Move the clock, run the buffer scan, the timer and revive as the threads would."""
        self.now += ms
        self.broker.ctx.flush_buffer(self.now)
        self.settle()
        self.store.timers.tick(self.now)
        self.settle()
        passes = self.broker.tick(self.now)
        self.settle()
        return passes


def bodies_of(result: PopResult) -> list[str]:
    return [m.message.body.decode() for m in result.messages]
