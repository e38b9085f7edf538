"""Stub of the native batch encoder (``_native.c``); see :mod:`gannet.node.store.log.native`."""

from collections.abc import Callable, Sequence
from typing import TypeVar

from gannet.node.store.log.layout import Buffer
from gannet.node.store.log.records import DispatchInfo, Message

VERSION: int
_R = TypeVar("_R")
_A = TypeVar("_A")
_Fields = tuple[int, int, int, int, int, int, int, bytes, bytes, int, int, bytes, bytes]
_Encoded = tuple[_Fields, str | None]

def encode_all(
    msgs: list[Message],
    body_max: int,
    append_crc: bool,
    limit: int,
    file_size: int,
    encode_host: Callable[[str, int], bytes],
    topic_field: Callable[[str, bool], tuple[bool, bytes]],
    fallback: Callable[[Message], _Fields],
    too_large: type[Exception],
    /,
) -> list[_Encoded]: ...
def lay_out(
    batch: list[_Encoded],
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
    infos: list[DispatchInfo], end_phy_offset: int, key_hash: Callable[[str], int], /
) -> list[tuple[int, int, int]]: ...
def add_index_items(
    mm: object,
    items: list[tuple[int, int, int]],
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
    msgs: list[Message],
    results: list[_A],
    info_type: type[DispatchInfo],
    tags_code: Callable[[str | None], int],
    fallback: Callable[[list[Message], list[_A]], list[DispatchInfo]],
    /,
) -> list[DispatchInfo]: ...
def queue_units(
    infos: list[DispatchInfo], /
) -> list[tuple[str, int, int, int, int, bytes | None, list[DispatchInfo]]]: ...
def take_handoff(
    handoff: Sequence[DispatchInfo],
    batch: list[DispatchInfo],
    offset: int,
    end: int,
    count: int,
    records_max: int,
    /,
) -> tuple[int, int, bool]: ...
def record_starts(
    buf: Buffer, start: int, size: int, chunk_bytes: int, record_min: int, /
) -> tuple[bytes, int, bool]: ...
def bodies_crc_bad(
    buf: Buffer, starts: Buffer, lengths: Buffer, expected: Buffer, count: int, /
) -> int: ...
