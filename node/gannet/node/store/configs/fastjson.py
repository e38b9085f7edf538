"""JSON as RocketMQ's fastjson 1.x writes it: a tolerant reader, a strict writer, config files.

RocketMQ serializes its config files (``topics.json``, ``subscriptionGroup.json``,
``consumerOffset.json``, ...) with fastjson 1.2.83, which is not quite JSON: a map with integer
keys is written with **bare numeric keys**, e.g. ``{"offsetTable":{"t@g":{0:5280,1:5312}}}``.
Gannet reads both forms and always writes strict JSON, which fastjson reads back unchanged (it
converts the quoted key ``"0"`` to the ``Integer`` key the Java map declares).

What :func:`loads` accepts, exactly:

* everything RFC 8259 allows (objects, arrays, strings, numbers, ``true``/``false``/``null``);
* an object key written bare, right after ``{`` or ``,`` (optional whitespace) and before
  ``:``, when it is an integer ``-?[0-9]+`` or an identifier ``[A-Za-z_$][A-Za-z0-9_$]*``.
  The key becomes the string of its exact text (``{0:5}`` gives ``{"0": 5}``, ``{007:5}``
  gives ``{"007": 5}``);
* raw control characters inside strings (fastjson accepts them; the writer escapes them);
* a UTF-8 byte-order mark at the start of ``bytes`` input.

It refuses ``NaN``/``Infinity``, single-quoted strings, comments, trailing commas, and bare
keys of any other shape (``{1.5:2}``), raising :class:`JsonSyntaxError` with the offset in the
caller's text. Duplicate keys keep the last value, as ``json.loads`` does. Numbers with a
fraction or exponent become ``float``, others ``int``.

How: one regular-expression pass finds every string literal (consumed whole, so its content
is never touched) and every bare key in key position, and quotes the bare keys; the result
goes to the C ``json`` parser. An unterminated string stops the pass with an error, so text
outside string literals is always identified exactly.

What :func:`dumps` writes: strict JSON in fastjson's pretty layout (tab indentation, no space
after ``:``, non-ASCII characters as UTF-8, no trailing newline). Object keys are sorted:
alphabetically, which is fastjson's bean-property order, except that an object whose keys are
all decimal integers (queue ids) is sorted numerically.

The second half of the module is the config-file protocol every manager shares
(``ConfigManager`` in RocketMQ): :class:`DataVersion`, :func:`read_config_file` with its
``.bak`` fallback and :func:`write_config_file`. Called by :mod:`topic_configs`,
:mod:`group_configs`, :mod:`consumer_offsets` and whoever else reads RocketMQ's JSON.
"""

from __future__ import annotations

import bisect
import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypeAlias

from gannet.node.store import durable
from gannet.node.store.errors import CorruptionError

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = dict[str, JsonValue]
JsonInput: TypeAlias = (
    "bool | int | float | str | Sequence[JsonInput] | Mapping[str, JsonInput] | None"
)
"""What :func:`dumps` accepts: any nesting of mappings with ``str`` keys and sequences."""


class JsonSyntaxError(CorruptionError, ValueError):
    """The text is neither JSON nor fastjson's dialect of it; the message gives the offset."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} at offset {offset}")
        self.offset = offset


# A string literal (escapes included), a bare key in key position, or a quote that starts a
# string literal without an end. Tried in this order at every position.
_TOKEN = re.compile(
    r'(?P<string>"[^"\\]*(?:\\.[^"\\]*)*")'
    r"|(?P<lead>[{,][ \t\r\n]*)(?P<key>-?[0-9]+|[A-Za-z_$][A-Za-z0-9_$]*)(?=[ \t\r\n]*:)"
    r'|(?P<open>")',
    re.DOTALL,
)


def _quote_bare_keys(text: str) -> tuple[str, list[int]]:
    """Quote every bare key; return the new text and the new-text offsets of added quotes."""
    pieces: list[str] = []
    added_at: list[int] = []
    copied_to = 0
    shift = 0
    for match in _TOKEN.finditer(text):
        if match.group("open") is not None:
            raise JsonSyntaxError("unterminated string", match.start())
        key = match.group("key")
        if key is None:
            continue
        key_start = match.start("key")
        pieces.append(text[copied_to:key_start])
        new_start = key_start + shift
        added_at.extend((new_start, new_start + len(key) + 1))
        pieces.append(f'"{key}"')
        shift += 2
        copied_to = match.end("key")
    if not added_at:
        return text, added_at
    pieces.append(text[copied_to:])
    return "".join(pieces), added_at


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def loads(text: str | bytes) -> JsonValue:
    """Parse strict JSON or fastjson's dialect of it (see the module docstring)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise JsonSyntaxError(f"not UTF-8 ({exc.reason})", exc.start) from exc
    quoted, added_at = _quote_bare_keys(text)
    try:
        value: JsonValue = json.loads(quoted, strict=False, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        original = exc.pos - bisect.bisect_left(added_at, exc.pos)
        raise JsonSyntaxError(exc.msg, original) from exc
    except ValueError as exc:  # NaN / Infinity, or an integer beyond Python's digit limit
        raise JsonSyntaxError(str(exc), 0) from exc
    return value


def _ordered(value: JsonInput) -> JsonValue:
    """A copy with every object's keys in writing order and every sequence as a list."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        keys = list(value)
        for key in keys:
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be str, not {type(key).__name__}: {key!r}")
        if keys and all(_is_decimal(k) for k in keys):
            keys.sort(key=int)
        else:
            keys.sort()
        return {key: _ordered(value[key]) for key in keys}
    return [_ordered(item) for item in value]


def _is_decimal(key: str) -> bool:
    digits = key[1:] if key.startswith("-") else key
    return digits.isascii() and digits.isdecimal()


def dumps(value: JsonInput) -> str:
    """Strict JSON in fastjson's pretty layout with sorted keys (see the module docstring)."""
    return json.dumps(
        _ordered(value),
        indent="\t",
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def encode(value: JsonInput) -> bytes:
    """:func:`dumps` as UTF-8 bytes, ready to write."""
    return dumps(value).encode("utf-8")


# --- config files (RocketMQ ConfigManager) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataVersion:
    """``DataVersion``: ``{"counter":…,"stateVersion":…,"timestamp":…}``, bumped on change.

    Name servers and peers compare versions to tell whether a table changed. Very old files
    spell the time ``timestatmp``; it is read, never written.
    """

    counter: int = 0
    state_version: int = 0
    timestamp_ms: int = 0

    def next(self, now_ms: int, state_version: int | None = None) -> DataVersion:
        """The version after one change (``nextVersion``)."""
        state = self.state_version if state_version is None else state_version
        return DataVersion(self.counter + 1, state, now_ms)

    def to_json(self) -> JsonObject:
        return {
            "counter": self.counter,
            "stateVersion": self.state_version,
            "timestamp": self.timestamp_ms,
        }

    @classmethod
    def from_json(cls, value: JsonValue) -> DataVersion:
        if not isinstance(value, dict):
            return cls()
        timestamp = value.get("timestamp", value.get("timestatmp", 0))
        return cls(
            counter=_int_or(value.get("counter"), 0),
            state_version=_int_or(value.get("stateVersion"), 0),
            timestamp_ms=_int_or(timestamp, 0),
        )


def _int_or(value: JsonValue, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A config document and where it came from.

    ``main_unusable`` is true when ``<file>`` exists but is empty or does not parse and the
    document came from a fallback: the next write must then keep the good ``.bak`` instead of
    rotating the broken file into its place.
    """

    document: JsonObject
    source: Path
    main_unusable: bool


def _read_document(path: Path) -> JsonObject | None:
    """The object in ``path``; None when the file is missing, empty or not a JSON object."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if not data.strip():
        return None
    try:
        document = loads(data)
    except JsonSyntaxError:
        return None
    return document if isinstance(document, dict) else None


def read_config_file(path: Path) -> LoadedConfig | None:
    """Load a config file with RocketMQ's fallback; None when no version of it exists.

    Order: ``<file>``; if it is missing, ``<file>.tmp`` (a crash between the two renames of
    :func:`durable.write_file_atomically` leaves the newest, already fsynced, content only
    there); then ``<file>.bak``. Raises :class:`CorruptionError` when a file exists but
    neither it nor a fallback is usable, rather than starting with empty tables.
    """
    document = _read_document(path)
    if document is not None:
        return LoadedConfig(document, path, main_unusable=False)
    main_exists = path.exists()
    fallbacks = [path.with_name(path.name + ".bak")]
    if not main_exists:
        fallbacks.insert(0, path.with_name(path.name + ".tmp"))
    for candidate in fallbacks:
        document = _read_document(candidate)
        if document is not None:
            return LoadedConfig(document, candidate, main_unusable=main_exists)
    if main_exists or fallbacks[-1].exists():
        raise CorruptionError(
            f"{path} is empty or not valid JSON and {fallbacks[-1].name} is missing or broken; "
            "restore the file from a replica or a backup, or move it aside to start empty"
        )
    return None


def write_config_file(path: Path, document: JsonInput, *, keep_backup: bool = True) -> None:
    """Write ``document`` as strict JSON, atomically, keeping the previous file as ``.bak``."""
    durable.write_file_atomically(path, encode(document), keep_backup=keep_backup)


class ConfigFile:
    """One config file as a manager uses it: fallback reads and serialized, rotating writes.

    A manager holds :attr:`write_lock` while it takes a snapshot of its tables and writes it,
    so that two concurrent writers can neither share the temp file nor put an older snapshot
    on disk after a newer one. After a load that had to skip a broken main file, the first
    write replaces it without rotating it over the good ``.bak``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.write_lock = threading.Lock()
        self._keep_backup = True

    def read(self) -> LoadedConfig | None:
        loaded = read_config_file(self.path)
        if loaded is not None:
            self._keep_backup = not loaded.main_unusable
        return loaded

    def write(self, document: JsonInput) -> None:
        """Write a snapshot; the caller holds :attr:`write_lock`."""
        write_config_file(self.path, document, keep_backup=self._keep_backup)
        self._keep_backup = True
