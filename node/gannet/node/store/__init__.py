"""The storage engine: a store directory byte-compatible with Apache RocketMQ 5.

Entry point for callers is :class:`gannet.node.store.message_store.MessageStore`. The other
modules sit in rooms, one per kind of on-disk artefact (``log``, ``queues``, ``timers``,
``configs``, ``upkeep``), above a few base modules; each room imports only the rooms below it
(``docs/store.md``, "Where the code lives").
"""
