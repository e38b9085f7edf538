"""A member that followed a Pop harness's store, built by copying its commit log as replication
would (for tests of what a new leader does with what the old one wrote)."""

from __future__ import annotations

import random
from pathlib import Path
from types import TracebackType

from gannet.node.domain.committing import pop_flush_wait
from gannet.node.pop.config import PopConfig
from gannet.node.pop.service import PopBroker
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.message_store import MessageStore
from tests.pop.pop_harness import GROUP, TOPIC, Harness


def copy_store(old: MessageStore, root: Path) -> MessageStore:
    """A member that followed ``old``: its bytes, its config tables, timers never run."""
    new = MessageStore(
        StoreConfig.for_tests(root, flush_mode=FlushMode.ASYNC_FLUSH), commit_follows_flush=False
    ).open(start_services=False)
    end = old.commitlog.max_offset()
    offset = 0
    while offset < end:
        offset = new.append_replicated(offset, old.read_replicated(offset, end - offset))
    new.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=4, write_queue_nums=4))
    new.group_configs.put(SubscriptionGroupConfig(GROUP))
    settle(new)
    return new


def settle(store: MessageStore) -> None:
    """Everything appended is committed and dispatched."""
    store.dispatch.set_commit_offset(store.commitlog.max_offset())
    store.dispatch.dispatch_available()


class Takeover:
    """The old leader (:attr:`old`, a Pop harness, set up on entry) and, from
    :meth:`take_over`, the member that followed it as the new leader: a store copy and its Pop
    broker. Closes all of them on exit."""

    def __init__(self, tmp_path: Path, config: PopConfig) -> None:
        self.old = Harness(tmp_path / "old", config)
        self._root = tmp_path / "new"
        self._config = config
        self._store: MessageStore | None = None
        self._pop: PopBroker | None = None

    def __enter__(self) -> Takeover:
        self.old.setup()
        return self

    def take_over(self) -> tuple[MessageStore, PopBroker]:
        """The new leader's store (the old one's bytes so far) and Pop broker."""
        assert self._store is None, "one takeover per test"
        self._store = copy_store(self.old.store, self._root)
        self._pop = PopBroker(
            self._store, self._config, wait_durable=pop_flush_wait(self._store),
            rng=random.Random(3),
        )  # fmt: skip
        return self._store, self._pop

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._pop is not None:
            self._pop.close()
        if self._store is not None:
            self._store.close()
        self.old.close()
