"""The storage engine: a store directory byte-compatible with Apache RocketMQ 5.

Entry point for callers is :class:`gannet.node.store.message_store.MessageStore`; the other
modules each own one on-disk structure or one activity (see ``docs/architecture.md``).
"""
