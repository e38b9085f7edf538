"""Committed consumer offsets and ``<root>/config/consumerOffset.json``.

RocketMQ's ``ConsumerOffsetManager``. The stored value of a queue is the **next offset to
consume**; a queue without one answers -1. On disk (strict JSON from :mod:`fastjson`)::

    {
        "dataVersion":{"counter":2,"stateVersion":0,"timestamp":1700000000000},
        "groupTopicMap":{"my-group":["TopicTest"]},
        "offsetTable":{
            "TopicTest@my-group":{"0":5280,"1":5312}
        }
    }

RocketMQ itself writes the queue ids bare (``{0:5280,1:5312}``); both forms are read, and
RocketMQ reads Gannet's quoted form back into its ``Integer`` keys. ``groupTopicMap`` (group →
its topics) is derived on write, as RocketMQ 5 emits it through a public getter, and ignored on
read; other top-level fields are not state and are dropped.

``dataVersion`` advances once per 500 commits (``consumerOffsetUpdateVersionStep``) and at once
on a reset or a removal. :meth:`ConsumerOffsetManager.persist` writes only when something changed;
the broker calls it every ``flushConsumerOffsetInterval`` (5 s) and at shutdown. Writes go
through :func:`durable.write_file_atomically` (temp file, fsync, ``.bak`` rotation, rename);
loading falls back to ``.bak``.

Called by the v2 service (Ack, offset updates), the Pop revive service (its progress is the
offset of ``CID_RMQ_SYS_REVIVE_GROUP``), the admin service and the replication apply path.
Thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gannet.node.store.configs.fastjson import JsonObject, JsonValue
from gannet.node.store.configs.tables import ConfigTable, now_ms
from gannet.node.store.errors import CorruptionError

CONSUMER_OFFSETS_FILE_NAME = "consumerOffset.json"
TOPIC_GROUP_SEPARATOR = "@"
VERSION_STEP_COMMITS = 500  # consumerOffsetUpdateVersionStep
OFFSET_MISSING = -1


def table_key(group: str, topic: str) -> str:
    """The ``offsetTable`` key of a (group, topic): ``"<topic>@<group>"``."""
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def split_table_key(key: str) -> tuple[str, str] | None:
    """``(group, topic)`` of an ``offsetTable`` key, or None when it is not ``topic@group``."""
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    if len(parts) != 2:
        return None
    topic, group = parts
    return group, topic


def _check_name(kind: str, name: str) -> None:
    if not name or TOPIC_GROUP_SEPARATOR in name:
        raise ValueError(f"{kind} {name!r} must be non-empty and without {TOPIC_GROUP_SEPARATOR!r}")


def _check_position(queue_id: int, offset: int) -> None:
    if queue_id < 0 or offset < 0:
        raise ValueError(f"queue id {queue_id} and offset {offset} must not be negative")


def _queue_offsets(path: Path, key: str, value: JsonValue) -> dict[int, int]:
    """Decode ``{queueId: offset}``; the keys come as strings (quoted or bare in the file)."""
    if not isinstance(value, dict):
        raise CorruptionError(f"{path}: offsetTable[{key!r}] is not an object")
    offsets: dict[int, int] = {}
    for queue_id, offset in value.items():
        try:
            queue = int(queue_id)
        except ValueError:
            raise CorruptionError(
                f"{path}: offsetTable[{key!r}] has the queue id {queue_id!r}, not an integer"
            ) from None
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise CorruptionError(
                f"{path}: offsetTable[{key!r}][{queue_id}] is {offset!r}, not an integer"
            )
        offsets[queue] = offset
    return offsets


def _offset_change(op: str, group: str, topic: str, queue_id: int, offset: int) -> JsonObject:
    return {"op": op, "group": group, "topic": topic, "queue": queue_id, "offset": offset}


class ConsumerOffsetManager(ConfigTable):
    """Committed offsets of every (group, topic, queue) and their file.

    Invariants: ``_table`` maps ``"<topic>@<group>"`` to a non-empty ``{queue id: offset}``;
    ``_dirty`` is true while the file does not hold ``_table``; ``_commits_unversioned`` counts
    commits since ``_data_version`` last advanced and stays below the version step.
    """

    def __init__(
        self,
        config_dir: Path,
        *,
        clock_ms: Callable[[], int] = now_ms,
        version_step_commits: int = VERSION_STEP_COMMITS,
    ) -> None:
        super().__init__(config_dir / CONSUMER_OFFSETS_FILE_NAME, clock_ms)
        self._version_step_commits = version_step_commits
        self._table: dict[str, dict[int, int]] = {}
        self._commits_unversioned = 0

    def _parse(self, document: JsonObject, source: Path) -> Callable[[], None]:
        raw = document.get("offsetTable")
        table: dict[str, dict[int, int]] = {}
        if isinstance(raw, dict):
            for key, value in raw.items():
                offsets = _queue_offsets(source, key, value)
                if offsets:
                    table[key] = offsets

        def install() -> None:
            self._table = table
            self._commits_unversioned = 0

        return install

    # --- updates ---

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record the next offset to consume (``commitOffset``); it may move backwards."""
        _check_name("group", group)
        _check_name("topic", topic)
        _check_position(queue_id, offset)
        with self._lock:
            offsets = self._table.setdefault(table_key(group, topic), {})
            if offsets.get(queue_id) == offset:
                return
            offsets[queue_id] = offset
            self._dirty = True
            self._commits_unversioned += 1
            if self._commits_unversioned >= self._version_step_commits:
                self._bump_version()
            self._journal(_offset_change("offset.commit", group, topic, queue_id, offset))

    def reset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set an offset by operator decision (reset to a time or an offset); bumps the version."""
        _check_name("group", group)
        _check_name("topic", topic)
        _check_position(queue_id, offset)
        with self._lock:
            self._table.setdefault(table_key(group, topic), {})[queue_id] = offset
            self._bump_version()
            self._journal(_offset_change("offset.reset", group, topic, queue_id, offset))

    def remove(self, group: str, topic: str) -> bool:
        """Forget the offsets of one (group, topic); False when there were none."""
        with self._lock:
            if self._table.pop(table_key(group, topic), None) is None:
                return False
            self._bump_version()
            self._journal({"op": "offset.remove", "keys": [table_key(group, topic)]})
            return True

    def remove_group(self, group: str) -> int:
        """Forget every offset of ``group``; returns how many topics it had."""
        return self._remove_where(lambda g, _t: g == group)

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets of ``topic``; returns how many groups had some."""
        return self._remove_where(lambda _g, t: t == topic)

    def _remove_where(self, matches: Callable[[str, str], bool]) -> int:
        with self._lock:
            doomed = []
            for key in self._table:
                names = split_table_key(key)
                if names is not None and matches(*names):
                    doomed.append(key)
            for key in doomed:
                del self._table[key]
            if doomed:
                self._bump_version()
                self._journal({"op": "offset.remove", "keys": list[JsonValue](doomed)})
            return len(doomed)

    def remove_keys(self, keys: list[str]) -> None:
        """Forget the offsets of these ``offsetTable`` keys (the replicated form of removals)."""
        with self._lock:
            doomed = [key for key in keys if key in self._table]
            for key in doomed:
                del self._table[key]
            if doomed:
                self._bump_version()
                self._journal({"op": "offset.remove", "keys": list[JsonValue](doomed)})

    def table(self) -> dict[str, dict[int, int]]:
        """A copy of the whole ``offsetTable`` (``"<topic>@<group>"`` → ``{queue: offset}``)."""
        with self._lock:
            return {key: dict(offsets) for key, offsets in self._table.items() if offsets}

    def replace_table(self, table: dict[str, dict[int, int]]) -> None:
        """Install ``table`` as the whole ``offsetTable`` (a replicated snapshot)."""
        with self._lock:
            self._table = {key: dict(offsets) for key, offsets in table.items() if offsets}
            self._bump_version()

    def _bump_version(self) -> None:
        self._changed()
        self._commits_unversioned = 0

    # --- queries ---

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset of one queue, or -1 when there is none (``queryOffset``)."""
        with self._lock:
            return self._table.get(table_key(group, topic), {}).get(queue_id, OFFSET_MISSING)

    def query_all(self, group: str, topic: str) -> dict[int, int]:
        """``{queue id: offset}`` of one (group, topic); empty when there is none."""
        with self._lock:
            return dict(self._table.get(table_key(group, topic), {}))

    def groups(self) -> list[str]:
        """Every group with a committed offset, sorted."""
        return sorted({names[0] for names in self._names()})

    def topics_of(self, group: str) -> list[str]:
        """The topics ``group`` has committed offsets for, sorted."""
        return sorted({t for g, t in self._names() if g == group})

    def groups_of(self, topic: str) -> list[str]:
        """The groups with committed offsets for ``topic``, sorted (``whichGroupByTopic``)."""
        return sorted({g for g, t in self._names() if t == topic})

    def _names(self) -> list[tuple[str, str]]:
        with self._lock:
            keys = list(self._table)
        return [names for names in map(split_table_key, keys) if names is not None]

    # --- file ---

    def _document(self) -> JsonObject:
        offset_table: JsonObject = {}
        group_topics: dict[str, list[str]] = {}
        for key, offsets in self._table.items():
            if not offsets:
                continue
            offset_table[key] = {str(q): o for q, o in offsets.items()}
            names = split_table_key(key)
            if names is not None:
                group_topics.setdefault(names[0], []).append(names[1])
        group_topic_map: JsonObject = {
            group: list[JsonValue](sorted(topics)) for group, topics in group_topics.items()
        }
        return {
            "dataVersion": self._data_version.to_json(),
            "groupTopicMap": group_topic_map,
            "offsetTable": offset_table,
        }
