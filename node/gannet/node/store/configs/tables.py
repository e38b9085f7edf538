"""The shared skeleton of the three ``config/*.json`` managers (topics, subscription groups,
consumer offsets): a lock over the in-memory tables, a ``dataVersion``, a dirty flag, and a
:class:`~gannet.node.store.configs.fastjson.ConfigFile` that writes snapshots atomically.

Subclasses (:mod:`topic_configs`, :mod:`group_configs`, :mod:`consumer_offsets`) own their
tables, their ``load`` and their :meth:`ConfigTable._document`; :meth:`ConfigTable.persist`
is written once here. Invariant: ``_dirty`` is true while the file does not hold the tables.

Replication hook: when :attr:`ConfigTable.journal` is set (by
:mod:`gannet.node.replication.config_log`), every change is also handed to it as a small JSON
object (``{"op": "topic.put", ...}``, format documented there), under the table's lock so that
the journal sees changes in the order they were made. Changes made inside
:meth:`ConfigTable.replaying` (the apply path of replicated records) are not journaled again.
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from gannet.node.store.configs import fastjson
from gannet.node.store.configs.fastjson import DataVersion, JsonObject

ConfigJournal = Callable[[JsonObject], None]
"""Receives each change of a table (called with the table's lock held: keep it short)."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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
