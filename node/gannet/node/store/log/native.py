"""Which encoder the put path runs: the native batch encoder or the Python one.

The native encoder, :mod:`gannet.node.store.log._native` (C against the CPython API, source
``_native.c`` beside this file), is built by ``make install`` (setuptools, an optional
extension). It does, one call per batch, what these Python functions do one message at a time,
with the same bytes and the same errors: ``CommitLog.encode_all`` (:func:`packing.record_fields
<gannet.node.store.log.packing.record_fields>`), ``CommitLog._lay_out``
(:func:`packing.pack_record_into <gannet.node.store.log.packing.pack_record_into>`),
``dispatch_infos_of`` (dispatching), the consume-queue loop of
``MessageStore._dispatch_consume_queues``, the hand-off steps of
``DispatchService._dispatch_batch``, and the index batch path (``IndexService._index_items``,
``IndexFile.add_items``); and for the pipeline's bulk segment parser
(:mod:`gannet.pipeline.columns`), the record-boundary walk and the body-CRC loop. The Python
functions stay the reference and the fallback: tests run
the store against both (``tests/store``, ``docs/adr/0006-native-batch-encoder.md``).

``codec`` is the native module in use, or None for the Python path: None when the extension
is not built (the store logs that once when it opens) or when the environment sets
``GANNET_NATIVE=0``. Callers read ``native.codec`` once per batch, so tests can switch it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from gannet.node.store.log.layout import Buffer
from gannet.node.store.log.records import DispatchInfo, Message

log = logging.getLogger(__name__)

ENV_VAR = "GANNET_NATIVE"
VERSION = 2
"""The ``VERSION`` of ``_native.c`` this code calls; a build of another version is not used."""
_R = TypeVar("_R")
_A = TypeVar("_A")

Fields = tuple[int, int, int, int, int, int, int, bytes, bytes, int, int, bytes, bytes]
Encoded = tuple[Fields, str | None]
IndexItems = list[tuple[int, int, int]]


class Codec(Protocol):
    """The functions of the native module (see ``_native.pyi``)."""

    def encode_all(
        self,
        msgs: list[Message],
        body_max: int,
        append_crc: bool,
        limit: int,
        file_size: int,
        encode_host: Callable[[str, int], bytes],
        topic_field: Callable[[str, bool], tuple[bool, bytes]],
        fallback: Callable[[Message], Fields],
        too_large: type[Exception],
        /,
    ) -> list[Encoded]: ...

    def lay_out(
        self,
        batch: list[Encoded],
        offsets: dict[str, int],
        offset: int,
        room: int,
        file_size: int,
        ts: int,
        append_crc: bool,
        host: str,
        port: int,
        result_type: type[_R],
        /,
    ) -> tuple[list[tuple[bool, bytearray, int]], list[_R], dict[str, int]]: ...

    def index_items(
        self, infos: list[DispatchInfo], end_phy_offset: int, key_hash: Callable[[str], int], /
    ) -> IndexItems: ...

    def add_index_items(
        self,
        mm: object,
        items: IndexItems,
        start: int,
        number: int,
        items_max: int,
        slots: int,
        base: int,
        begin_ms: int,
        slot_count: int,
        /,
    ) -> tuple[int, int, int, int | None, int]: ...

    def dispatch_infos(
        self,
        msgs: list[Message],
        results: list[_A],
        info_type: type[DispatchInfo],
        tags_code: Callable[[str | None], int],
        fallback: Callable[[list[Message], list[_A]], list[DispatchInfo]],
        /,
    ) -> list[DispatchInfo]: ...

    def queue_units(
        self, infos: list[DispatchInfo], /
    ) -> list[tuple[str, int, int, int, int, bytes | None, list[DispatchInfo]]]: ...

    def take_handoff(
        self,
        handoff: Sequence[DispatchInfo],
        batch: list[DispatchInfo],
        offset: int,
        end: int,
        count: int,
        records_max: int,
        /,
    ) -> tuple[int, int, bool]: ...

    def record_starts(
        self, buf: Buffer, start: int, size: int, chunk_bytes: int, record_min: int, /
    ) -> tuple[bytes, int, bool]: ...

    def bodies_crc_bad(
        self, buf: Buffer, starts: Buffer, lengths: Buffer, expected: Buffer, count: int, /
    ) -> int: ...


def load() -> tuple[Codec | None, str]:
    """The native module unless switched off or not built, and a sentence saying which."""
    if os.environ.get(ENV_VAR, "1").strip() == "0":
        return None, f"{ENV_VAR}=0: the store's put path runs in Python"
    try:
        from gannet.node.store.log import _native  # noqa: PLC0415 - optional, may be absent
    except ImportError as exc:
        return None, (
            f"the native batch encoder is not built ({exc}); the store's put path runs in "
            "Python, about 2x the CPU per message: `make install` builds it (needs gcc, the "
            "Python headers and zlib's)"
        )
    built = getattr(_native, "VERSION", 0)
    if built != VERSION:
        return None, (
            f"the native batch encoder is out of date (version {built}, this code needs "
            f"{VERSION}); the store's put path runs in Python: `make install` rebuilds it"
        )
    return _native, "the store's put path runs the native batch encoder (_native.c)"


codec, choice = load()
_announced: list[bool] = []  # holds True once the choice has been logged


def announce() -> None:
    """Log once per process which encoder the put path runs (a warning when the native one
    was wanted but is not built)."""
    if _announced:
        return
    _announced.append(True)
    if codec is None and not choice.startswith(ENV_VAR):
        log.warning("%s", choice)
    else:
        log.info("%s", choice)
