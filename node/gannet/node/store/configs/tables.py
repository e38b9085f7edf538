"""The shared skeleton of the three ``config/*.json`` managers (topics, subscription groups,
consumer offsets): a lock over the in-memory tables, a ``dataVersion``, a dirty flag, and a
:class:`~gannet.node.store.configs.fastjson.ConfigFile` that writes snapshots atomically.

Subclasses (:mod:`~gannet.node.store.configs.topics`, :mod:`~gannet.node.store.configs.groups`,
:mod:`~gannet.node.store.configs.offsets`) own their tables and their
:meth:`ConfigTable._document`; :meth:`ConfigTable.persist` is written once here. Invariant:
``_dirty`` is true while the file does not hold the tables, and ``dataVersion`` changes with
every change of them (:meth:`ConfigTable._changed`).

Topics and groups are both a table of configurations by name: :class:`NamedConfigTable` holds
get / list / put / delete and their journal records once, ``{"op": "<kind>.put", "name": ...,
"config": {...}}`` and ``{"op": "<kind>.delete", "name": ...}``.

Replication hook: when :attr:`ConfigTable.journal` is set (by
:mod:`gannet.node.replication.config_log`), every change is also handed to it as a small JSON
object (``{"op": "topic.put", ...}``, format documented there), under the table's lock so that
the journal sees changes in the order they were made. Changes made inside
:meth:`ConfigTable.replaying` (the apply path of replicated records) are not journaled again.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar, Generic, Protocol, TypeVar

from gannet.node.store.configs import fastjson
from gannet.node.store.configs.fastjson import DataVersion, JsonObject, JsonValue

ConfigJournal = Callable[[JsonObject], None]
"""Receives each change of a table (called with the table's lock held: keep it short)."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def json_int(value: JsonValue, default: int) -> int:
    """``value`` when it is an integer (not a bool), else ``default``: the tolerant field read
    of the config files (RocketMQ ignores a field of the wrong type)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def json_str(value: JsonValue, default: str) -> str:
    return value if isinstance(value, str) else default


def json_str_map(value: JsonValue) -> dict[str, str]:
    """The string entries of a JSON object (``attributes``); others and non-objects dropped."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(v, str)}


class ConfigTable(abc.ABC):
    """Tables persisted as one JSON document in one file."""

    def __init__(self, path: Path, clock_ms: Callable[[], int]) -> None:
        self._file = fastjson.ConfigFile(path)
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._data_version = DataVersion(timestamp_ms=clock_ms())
        self._dirty = False
        self.journal: ConfigJournal | None = None
        self._replaying = threading.local()

    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        """Changes made by this thread inside the block are not handed to :attr:`journal`."""
        self._replaying.active = True
        try:
            yield
        finally:
            self._replaying.active = False

    def _journal(self, change: JsonObject) -> None:
        """Hand ``change`` to the journal (call with ``_lock`` held, after the change)."""
        journal = self.journal
        if journal is not None and not getattr(self._replaying, "active", False):
            journal(change)

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            return self._data_version

    @property
    def dirty(self) -> bool:
        with self._lock:
            return self._dirty

    def to_json(self) -> JsonObject:
        """The file's document for the current tables."""
        with self._lock:
            return self._document()

    def load(self) -> bool:
        """Replace the tables with the file's (or its backup's); False when there is none."""
        with self._file.write_lock:
            loaded = self._file.read()
        if loaded is None:
            return False
        install = self._parse(loaded.document, loaded.source)
        with self._lock:
            install()
            self._data_version = DataVersion.from_json(loaded.document.get("dataVersion"))
            self._dirty = loaded.main_unusable
        return True

    @abc.abstractmethod
    def _parse(self, document: JsonObject, source: Path) -> Callable[[], None]:
        """Build the tables from a loaded document (no lock held); return the step that puts
        them in place, which :meth:`load` runs under ``_lock``."""

    @abc.abstractmethod
    def _document(self) -> JsonObject:
        """The document to write; called with ``_lock`` held."""

    def _changed(self) -> None:
        """Mark a change of the tables (call with ``_lock`` held): new data version, dirty."""
        version = self._data_version.next(self._clock_ms())
        assert version.counter > self._data_version.counter, "dataVersion must grow"
        self._data_version = version
        self._dirty = True

    def persist(self) -> bool:
        """Write the tables if they changed since the last write; True when written."""
        with self._file.write_lock:
            with self._lock:
                if not self._dirty:
                    return False
                document = self._document()
                self._dirty = False
            try:
                self._file.write(document)
            except BaseException:
                with self._lock:
                    self._dirty = True
                raise
            return True


class NamedConfig(Protocol):
    """A configuration kept by name (a topic's, a group's)."""

    def to_json(self) -> JsonObject: ...


C = TypeVar("C", bound=NamedConfig)


class NamedConfigTable(ConfigTable, Generic[C]):
    """A table of configurations by name, written as ``{"dataVersion": ..., <table_key>: {name:
    config}}`` plus whatever else the file held (kept as read) and the subclass's side tables.

    Subclasses name their :attr:`kind` (the journal's op prefix) and :attr:`table_key`, read one
    entry (:meth:`_entry_from_json`), check a config before :meth:`_put`, and may keep side
    tables (:meth:`_parse_side`, :meth:`_side_tables`, :meth:`_forget`).
    """

    kind: ClassVar[str]
    table_key: ClassVar[str]
    side_keys: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, path: Path, clock_ms: Callable[[], int]) -> None:
        super().__init__(path, clock_ms)
        self._entries: dict[str, C] = {}
        self._extra: JsonObject = {}

    @abc.abstractmethod
    def _entry_from_json(self, value: JsonValue, name: str) -> C:
        """One entry of the table as read from the file."""

    def _parse_side(self, document: JsonObject) -> Callable[[], None]:
        """Read the side tables; return the step that installs them (under ``_lock``)."""
        return lambda: None

    def _side_tables(self) -> JsonObject:
        """The side tables to write, in file order before the main table (``_lock`` held)."""
        return {}

    def _forget(self, name: str) -> None:
        """Drop what the side tables keep for a deleted entry (``_lock`` held)."""

    def _parse(self, document: JsonObject, source: Path) -> Callable[[], None]:
        table = document.get(self.table_key)
        entries: dict[str, C] = {}
        if isinstance(table, dict):
            entries = {name: self._entry_from_json(v, name) for name, v in table.items()}
        wrapper_keys = self.side_keys | {"dataVersion", self.table_key}
        extra = {k: v for k, v in document.items() if k not in wrapper_keys}
        install_side = self._parse_side(document)

        def install() -> None:
            self._entries = entries
            self._extra = extra
            install_side()

        return install

    def get(self, name: str) -> C | None:
        with self._lock:
            return self._entries.get(name)

    def list(self) -> builtins.list[C]:
        """All entries, sorted by name."""
        with self._lock:
            return [self._entries[name] for name in sorted(self._entries)]

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._entries

    def _put(self, name: str, config: C, *, persist: bool) -> None:
        """Create or replace an entry the caller has checked; bumps the data version when it
        changes; with ``persist`` the file is written before this returns."""
        with self._lock:
            if self._entries.get(name) != config:
                self._entries[name] = config
                self._changed()
                self._journal({"op": f"{self.kind}.put", "name": name, "config": config.to_json()})
        if persist:
            self.persist()

    def delete(self, name: str, *, persist: bool = True) -> bool:
        """Remove an entry (and what the side tables keep for it); False when it did not exist."""
        with self._lock:
            if self._entries.pop(name, None) is None:
                return False
            self._forget(name)
            self._changed()
            self._journal({"op": f"{self.kind}.delete", "name": name})
        if persist:
            self.persist()
        return True

    def _document(self) -> JsonObject:
        document: JsonObject = dict(self._extra)
        document["dataVersion"] = self._data_version.to_json()
        document.update(self._side_tables())
        document[self.table_key] = {n: c.to_json() for n, c in self._entries.items()}
        return document
