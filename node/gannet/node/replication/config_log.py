"""Replicated configuration: topic and group configs, consumer offsets and orderly Pop's order
infos as records of the log.

Created by :class:`~gannet.node.replication.driver.ReplicationNode` (only when the broker is
replicated; a group of one keeps changing its ``config/*.json`` directly). The three config
tables of the store (:mod:`gannet.node.store.configs.tables`) hand every change to
:meth:`ConfigLog.journal`; on the leader it becomes one record of the internal system topic
``rmq_sys_GANNET_CONFIG`` (queue 0) appended to the commit log, proposed like any other bytes,
and applied by every replica when dispatch reaches it — dispatch stops at the commit offset, so
replicas only ever apply committed changes.

Record body (UTF-8 JSON, one object)::

    {"v": 1, "origin": "<node id>:<incarnation>", "op": "<op>", ...fields}

    op "topic.put"      name, config (the topics.json entry of the topic)
    op "topic.delete"   name
    op "group.put"      name, config (the subscriptionGroup.json entry of the group)
    op "group.delete"   name
    op "offset.commit"  group, topic, queue, offset (next offset to consume)
    op "offset.reset"   group, topic, queue, offset (an operator's reset)
    op "offset.remove"  keys (offsetTable keys "<topic>@<group>")
    op "tier.change"    prefix (the tier's object prefix), change (the change bytes of
                        ``store.tier.manifests.encode_change`` as a string: one ``record``
                        or ``expire`` of the tier manifest, docs/tiered-storage.md §3)
    op "order.put"      key ("<topic>@<group>"), queue, info (a consumerOrderInfo.json entry:
                        a FIFO batch's lease and ack bits)
    op "order.remove"   key, queue
    op "snapshot"       topics {name: config}, groups {name: config},
                        offsets {"<topic>@<group>": {"<queue>": offset}},
                        orders {"<topic>@<group>": {"<queue>": info}} (absent in records of
                        older brokers: the order infos are then kept as they are),
                        tier (optional: the manifest bytes of ``manifests.encode`` as a
                        string, present once the group applied a tier change)

``incarnation`` is random per process start. The node that wrote a record applied the change
to its own tables when it made it (Pop commits an offset and pops again at once), so a record
whose origin is this very process is skipped; everything else is applied in log order. A new
leader appends a ``snapshot`` once everything before its election is committed and applied:
replicas replace their tables with it, which also removes a change a deposed leader applied
locally but whose record was cut as a divergent suffix.

The tier manifest (:mod:`gannet.node.store.tier.applied`) is state of the same log: a
``tier.change`` is applied by every member to its :class:`AppliedManifest` (persisted in
``<store>/tier/manifest.json``), a ``snapshot`` carries the whole manifest and installing it
replaces the member's. The leader applies a change when it appends it (under the lock that also
builds snapshots, so a snapshot never misses a change appended before it) and
:class:`~gannet.node.replication.tier_log.RaftManifestLog` returns once the record is committed
and applied everywhere the commit reached.

Restart: how far the config queue was applied is kept as the consumer offset of the system
group ``CID_RMQ_SYS_GANNET_CONFIG`` on ``rmq_sys_GANNET_CONFIG``/0 (persisted with the offsets
file); on start the records from there to the queue's end are applied again (idempotent: puts,
deletes and offset sets in log order). Admin writes on the leader wait for
:meth:`ReplicationNode.commit_pending` (committed and applied) before answering; admin writes
on a follower are refused by the admin servicer with a message naming the leader.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Callable, Sequence

from gannet.node.invariants import invariant
from gannet.node.store.configs.fastjson import JsonObject, JsonValue
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.order_infos import OrderInfo
from gannet.node.store.configs.tables import ConfigTable
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.log import records
from gannet.node.store.log.records import DispatchInfo
from gannet.node.store.message_store import MessageStore
from gannet.node.store.tier import applied, manifests
from gannet.node.store.tier import errors as tier_errors
from gannet.node.store.validation import SYSTEM_GROUP_PREFIX, SYSTEM_TOPIC_PREFIX

log = logging.getLogger(__name__)

CONFIG_TOPIC = SYSTEM_TOPIC_PREFIX + "GANNET_CONFIG"
APPLIER_GROUP = SYSTEM_GROUP_PREFIX + "GANNET_CONFIG"
RECORD_VERSION = 1
REPLAY_BATCH_MAX = 256


class ConfigRecordError(ValueError):
    """A config record that cannot be read or applied (the message names the problem)."""


# ---------------------------------------------------------------------------- pure format
def encode_record(change: JsonObject, origin: str) -> bytes:
    """The body of the record carrying ``change`` (see the module docstring)."""
    if not isinstance(change.get("op"), str):
        raise ConfigRecordError(f"a config change needs an 'op': {change!r}")
    body: JsonObject = {"v": RECORD_VERSION, "origin": origin, **change}
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def decode_record(body: bytes) -> tuple[str, JsonObject]:
    """``(origin, change)`` of a record body; :class:`ConfigRecordError` when malformed."""
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigRecordError(f"config record is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigRecordError("config record is not a JSON object")
    if value.get("v") != RECORD_VERSION:
        raise ConfigRecordError(
            f"config record version {value.get('v')!r} is not {RECORD_VERSION} (newer broker?)"
        )
    origin = value.get("origin")
    if not isinstance(origin, str) or not isinstance(value.get("op"), str):
        raise ConfigRecordError("config record lacks 'origin' or 'op'")
    return origin, value


def _str(change: JsonObject, key: str) -> str:
    value = change.get(key)
    if not isinstance(value, str):
        raise ConfigRecordError(f"config record {change.get('op')}: {key!r} is not a string")
    return value


def _int(change: JsonObject, key: str) -> int:
    value = change.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigRecordError(f"config record {change.get('op')}: {key!r} is not an integer")
    return value


def _obj(change: JsonObject, key: str) -> JsonObject:
    value = change.get(key)
    if not isinstance(value, dict):
        raise ConfigRecordError(f"config record {change.get('op')}: {key!r} is not an object")
    return value


def snapshot_of(store: MessageStore, tier: applied.AppliedManifest | None = None) -> JsonObject:
    """The ``snapshot`` change describing the store's config tables (and the applied tier
    manifest, if any) now."""
    offsets: JsonObject = {
        key: {str(q): o for q, o in table.items()}
        for key, table in store.consumer_offsets.table().items()
    }
    topics: JsonObject = {t.topic_name: t.to_json() for t in store.topic_configs.list()}
    groups: JsonObject = {g.group_name: g.to_json() for g in store.group_configs.list()}
    orders = store.order_infos.table_json()
    snapshot: JsonObject = {
        "op": "snapshot",
        "topics": topics,
        "groups": groups,
        "offsets": offsets,
        "orders": orders,
    }
    manifest = tier.current() if tier is not None else None
    if manifest is not None:
        snapshot["tier"] = manifests.encode(manifest).decode()
    return snapshot


def tier_change_of(prefix: str, change: manifests.Change) -> JsonObject:
    """The ``tier.change`` config change carrying ``change`` for the tier under ``prefix``."""
    return {
        "op": "tier.change",
        "prefix": prefix,
        "change": manifests.encode_change(change).decode(),
    }


def _apply_tier_change(tier: applied.AppliedManifest | None, change: JsonObject) -> None:
    if tier is None:
        raise ConfigRecordError("config record tier.change: this member keeps no tier manifest")
    try:
        decoded = manifests.decode_change(_str(change, "change").encode())
        tier.apply(_str(change, "prefix"), decoded)
    except (tier_errors.ManifestCorrupt, tier_errors.ManifestConflict) as exc:
        raise ConfigRecordError(f"config record tier.change: {exc}") from None


def apply_change(
    store: MessageStore, change: JsonObject, tier: applied.AppliedManifest | None = None
) -> None:
    """Apply one decoded change to the store's tables or to the applied tier manifest
    (without journaling it again)."""
    op = change.get("op")
    if op == "tier.change":
        _apply_tier_change(tier, change)
        return
    orders = store.order_infos
    tables = store.topic_configs, store.group_configs, store.consumer_offsets
    with tables[0].replaying(), tables[1].replaying(), tables[2].replaying(), orders.replaying():
        if op == "topic.put":
            name = _str(change, "name")
            store.topic_configs.put(TopicConfig.from_json(_obj(change, "config"), name))
        elif op == "topic.delete":
            store.topic_configs.delete(_str(change, "name"))
        elif op == "group.put":
            name = _str(change, "name")
            store.group_configs.put(SubscriptionGroupConfig.from_json(_obj(change, "config"), name))
        elif op == "group.delete":
            store.group_configs.delete(_str(change, "name"))
        elif op in ("offset.commit", "offset.reset"):
            args = (_str(change, "group"), _str(change, "topic"))
            position = (_int(change, "queue"), _int(change, "offset"))
            if op == "offset.commit":
                store.consumer_offsets.commit(*args, *position)
            else:
                store.consumer_offsets.reset(*args, *position)
        elif op == "offset.remove":
            keys = change.get("keys")
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise ConfigRecordError("config record offset.remove: 'keys' is not a list")
            store.consumer_offsets.remove_keys([str(k) for k in keys])
        elif op == "order.put":
            info = OrderInfo.from_json(_obj(change, "info"))
            if info is None:
                raise ConfigRecordError("config record order.put: 'info' is not an order info")
            orders.put(_str(change, "key"), _int(change, "queue"), info)
        elif op == "order.remove":
            orders.remove(_str(change, "key"), _int(change, "queue"))
        elif op == "snapshot":
            _apply_snapshot(store, change)
            _apply_tier_snapshot(tier, change)
        else:
            raise ConfigRecordError(f"config record has the unknown op {op!r}")


def _apply_snapshot(store: MessageStore, change: JsonObject) -> None:
    topics = {n: TopicConfig.from_json(v, n) for n, v in _obj(change, "topics").items()}
    groups = {n: SubscriptionGroupConfig.from_json(v, n) for n, v in _obj(change, "groups").items()}
    offsets: dict[str, dict[int, int]] = {}
    for key, value in _obj(change, "offsets").items():
        if not isinstance(value, dict):
            raise ConfigRecordError(f"snapshot: offsets of {key!r} are not an object")
        offsets[key] = {int(q): _as_int(o, key) for q, o in value.items()}
    for topic in store.topic_configs.list():
        if topic.topic_name not in topics:
            store.topic_configs.delete(topic.topic_name)
    for config in topics.values():
        store.topic_configs.put(config)
    for group in store.group_configs.list():
        if group.group_name not in groups:
            store.group_configs.delete(group.group_name)
    for group_config in groups.values():
        store.group_configs.put(group_config)
    installed_topics = {t.topic_name for t in store.topic_configs.list()}
    installed_groups = {g.group_name for g in store.group_configs.list()}
    invariant(
        installed_topics == topics.keys() and installed_groups == groups.keys(),
        f"a config snapshot of {len(topics)} topics and {len(groups)} groups installed "
        f"{len(installed_topics)} and {len(installed_groups)}: differ in topics "
        f"{sorted(installed_topics ^ topics.keys())[:5]}, groups "
        f"{sorted(installed_groups ^ groups.keys())[:5]}",
    )
    applied = store.consumer_offsets.query(APPLIER_GROUP, CONFIG_TOPIC, 0)
    store.consumer_offsets.replace_table(offsets)
    if applied >= 0:  # our own progress is not the leader's to set
        store.consumer_offsets.commit(APPLIER_GROUP, CONFIG_TOPIC, 0, applied)
    if "orders" in change:
        store.order_infos.replace_table(_obj(change, "orders"))


def _apply_tier_snapshot(tier: applied.AppliedManifest | None, change: JsonObject) -> None:
    """Install the snapshot's tier manifest; a snapshot without one leaves the member's (the
    group never applied a tier change when it was taken)."""
    encoded = change.get("tier")
    if encoded is None or tier is None:
        return
    if not isinstance(encoded, str):
        raise ConfigRecordError("snapshot: 'tier' is not a string")
    try:
        tier.replace(manifests.decode(encoded.encode()))
    except tier_errors.ManifestCorrupt as exc:
        raise ConfigRecordError(f"snapshot: {exc}") from None


def _as_int(value: JsonValue, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigRecordError(f"snapshot: an offset of {key!r} is not an integer")
    return value


# ---------------------------------------------------------------------------- the node's side
class ConfigLog:
    """Journals this node's config changes while it leads; applies committed records.

    ``is_leader`` is read from any thread (a change may come from a Pop or admin thread).
    """

    def __init__(self, store: MessageStore, node_id: int, is_leader: Callable[[], bool]) -> None:
        self.store = store
        self.origin = f"{node_id}:{secrets.token_hex(8)}"
        self._is_leader = is_leader
        self._apply_lock = threading.Lock()
        self._append_lock = threading.Lock()
        """Held while a snapshot is built and appended, and while a tier change is applied
        and appended: a snapshot holds every tier change appended before it."""
        self.tier = applied.AppliedManifest(applied.manifest_path(store.config.root_dir))
        """This member's applied tier manifest (state of the log, like the tables)."""
        self.applied_total = 0
        self.errors_total = 0

    def install(self) -> None:
        """Apply what the config queue holds past the saved progress, then hook the tables
        and the dispatch path. Call before the commit offset first moves."""
        self.catch_up(self.store.max_offset_in_queue(CONFIG_TOPIC, 0))
        for table in self._tables():
            table.journal = self.journal
        self.store.add_arrival_listener(self._on_dispatched)

    def uninstall(self) -> None:
        for table in self._tables():
            if table.journal == self.journal:
                table.journal = None
        if self._on_dispatched in self.store.listeners:
            self.store.listeners.remove(self._on_dispatched)

    def _tables(self) -> tuple[ConfigTable, ...]:
        store = self.store
        return store.topic_configs, store.group_configs, store.consumer_offsets, store.order_infos

    def journal(self, change: JsonObject) -> None:
        """A table changed (its lock is held): append the record when this node leads."""
        if not self._is_leader():
            return
        self.append(change)

    def append(self, change: JsonObject) -> int:
        """Append ``change`` as a record now; returns the commit-log offset after it."""
        message = records.Message(topic=CONFIG_TOPIC, body=encode_record(change, self.origin))
        results, _ = self.store.put_messages_nowait([message])
        return results[-1].end_offset

    def append_snapshot(self) -> int:
        """Append a snapshot of the config tables and the tier manifest (a new leader, once
        caught up)."""
        with self._append_lock:
            return self.append(snapshot_of(self.store, self.tier))

    def append_tier_change(self, prefix: str, change: manifests.Change) -> int:
        """Leader: apply ``change`` to this member's manifest, then append its record; returns
        the commit-log offset after it. A change the manifest refuses is raised
        (:class:`~gannet.node.store.tier.errors.ManifestConflict`) and nothing is appended."""
        with self._append_lock:
            self.tier.apply(prefix, change)
            return self.append(tier_change_of(prefix, change))

    def applied_offset(self) -> int:
        """Next config-queue offset to apply (0 when none was applied yet)."""
        return max(0, self.store.consumer_offsets.query(APPLIER_GROUP, CONFIG_TOPIC, 0))

    def catch_up(self, end_queue_offset: int) -> None:
        """Apply the config queue's records from the saved progress up to ``end_queue_offset``."""
        with self._apply_lock:
            position = self.applied_offset()
            while position < end_queue_offset:
                got = self.store.get_messages(
                    CONFIG_TOPIC, 0, position, min(REPLAY_BATCH_MAX, end_queue_offset - position)
                )
                if not got.messages:
                    if got.next_begin_offset <= position:
                        break
                    position = got.next_begin_offset
                    self._set_applied(position)
                    continue
                for stored in got.messages:
                    if stored.queue_offset >= end_queue_offset:
                        break
                    self._apply_body(records.decode(stored.data).body, stored.commit_offset)
                    position = stored.queue_offset + 1
                    self._set_applied(position)

    def after_truncate(self) -> None:
        """A divergent suffix was cut: config records past the queue's new end will be
        replaced by the leader's, so the saved progress must not skip them on a restart."""
        with self._apply_lock:
            end = self.store.max_offset_in_queue(CONFIG_TOPIC, 0)
            if self.applied_offset() > end:
                self._set_applied(end)

    def _on_dispatched(self, infos: Sequence[DispatchInfo]) -> None:
        """Dispatch thread: a committed batch reached the consume queues; config records
        are applied one by one (an error on one is logged, the rest still applied)."""
        for info in infos:
            if info.topic == CONFIG_TOPIC:
                try:
                    self._apply_dispatched(info)
                except Exception:
                    log.exception(
                        "config record at commit-log offset %d not applied", info.commit_offset
                    )

    def _apply_dispatched(self, info: DispatchInfo) -> None:
        if info.queue_offset > self.applied_offset():
            self.catch_up(info.queue_offset)
        message = self.store.read_message(info.commit_offset)
        with self._apply_lock:
            if message is not None:
                self._apply_body(message.body, info.commit_offset)
            self._set_applied(info.queue_offset + 1)

    def _apply_body(self, body: bytes, commit_offset: int) -> None:
        try:
            origin, change = decode_record(body)
            if origin == self.origin:
                return
            apply_change(self.store, change, self.tier)
            self.applied_total += 1
        except (ConfigRecordError, ValueError) as exc:
            self.errors_total += 1
            log.error("config record at commit-log offset %d not applied: %s", commit_offset, exc)

    def _set_applied(self, queue_offset: int) -> None:
        offsets = self.store.consumer_offsets
        with offsets.replaying():
            offsets.commit(APPLIER_GROUP, CONFIG_TOPIC, 0, queue_offset)
