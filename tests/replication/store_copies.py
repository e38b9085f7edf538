"""A member that followed a Pop harness's store, built by copying its commit log as replication
would (for tests of what a new leader does with what the old one wrote)."""

from __future__ import annotations

from pathlib import Path

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.message_store import MessageStore
from tests.pop.pop_harness import GROUP, TOPIC


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
