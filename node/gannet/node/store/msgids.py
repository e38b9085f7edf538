"""Message ids: offset message ids and client unique keys (RocketMQ ``MessageDecoder`` /
``MessageClientIDSetter``).

Offset message id (``createMessageId``): store-host address bytes (4 or 16), store port
(int, 4 bytes), commit-log offset (long, 8 bytes), rendered as upper-case hex — 32 characters
for IPv4, 56 for IPv6. Decoding infers the address family from the length.

Unique key (``UNIQ_KEY``): ip (4 or 16 bytes) + pid (short) + class-loader hash (int) + time
(int: milliseconds since the start of the current month, local time, clamped at 0) + counter
(short, wrapping), upper-case hex — 32 characters for IPv4. The first 20 characters are fixed
per process. :class:`UniqKeyGenerator` is pure: the caller passes the clock value.

Callers: the commit log (offset ids of appended records), the broker (a unique key for a
message whose producer sent none), queries by id.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import struct
import threading
from dataclasses import dataclass

from gannet.node.store.errors import MessageIllegal

_OFFSET_ID_TAIL = struct.Struct(">iq")
ADDRESSES_CACHED_MAX = 64
_UNIQ_TAIL = struct.Struct(">iH")


def create_offset_msg_id(store_host: str, store_port: int, commit_offset: int) -> str:
    """The offset message id of the record at ``commit_offset`` on ``store_host:store_port``."""
    addr = _packed_address(store_host)
    return (addr + _OFFSET_ID_TAIL.pack(store_port, commit_offset)).hex().upper()


@functools.lru_cache(maxsize=ADDRESSES_CACHED_MAX)
def _packed_address(host: str) -> bytes:
    """``host``'s address bytes. Cached: a broker names the same few addresses in every send's
    answer, and parsing one with :mod:`ipaddress` cost ~40 µs a send (bench/results/REMOTING.md)."""
    return ipaddress.ip_address(host).packed


@dataclass(frozen=True, slots=True)
class OffsetMsgId:
    """A decoded offset message id."""

    host: str
    port: int
    commit_offset: int


def decode_offset_msg_id(msg_id: str) -> OffsetMsgId:
    """Parse an offset message id (32 hex chars for IPv4, 56 for IPv6)."""
    if len(msg_id) not in (32, 56):
        raise MessageIllegal(
            f"offset message id {msg_id!r} has {len(msg_id)} characters; expected 32 (IPv4) "
            "or 56 (IPv6) hex digits"
        )
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise MessageIllegal(f"offset message id {msg_id!r} is not hexadecimal") from exc
    addr_len = 4 if len(raw) == 16 else 16
    port, offset = _OFFSET_ID_TAIL.unpack(raw[addr_len:])
    return OffsetMsgId(str(ipaddress.ip_address(raw[:addr_len])), port, offset)


def month_start_ms(now_ms: int, tz: dt.tzinfo | None = None) -> int:
    """Epoch milliseconds of the start of the month containing ``now_ms`` in local time."""
    now = dt.datetime.fromtimestamp(now_ms / 1000, tz=tz).astimezone(tz)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


class UniqKeyGenerator:
    """Generates ``UNIQ_KEY`` values in the client id format, thread-safe."""

    def __init__(self, ip: str, pid: int, loader_hash: int) -> None:
        addr = ipaddress.ip_address(ip).packed
        self._prefix = (addr + struct.pack(">Hi", pid & 0xFFFF, loader_hash)).hex().upper()
        self._counter = 0
        self._lock = threading.Lock()
        self._month_start_ms = -1
        self._month_end_ms = -1

    @property
    def prefix(self) -> str:
        """The fixed per-process part (20 hex characters for IPv4)."""
        return self._prefix

    def next_key(self, now_ms: int) -> str:
        return self.next_keys(now_ms, 1)[0]

    def next_keys(self, now_ms: int, count: int) -> list[str]:
        """``count`` successive keys of one instant, under one lock hold (a put's batch)."""
        with self._lock:
            if not self._month_start_ms <= now_ms < self._month_end_ms:
                self._month_start_ms = month_start_ms(now_ms)
                self._month_end_ms = _next_month_start_ms(now_ms)
            elapsed_ms = max(0, now_ms - self._month_start_ms)
            first = self._counter + 1
            self._counter = (self._counter + count) & 0xFFFF
        head = f"{self._prefix}{elapsed_ms & 0xFFFFFFFF:08X}"
        return [f"{head}{counter & 0xFFFF:04X}" for counter in range(first, first + count)]


def _next_month_start_ms(now_ms: int) -> int:
    now = dt.datetime.fromtimestamp(now_ms / 1000).astimezone()
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = (first + dt.timedelta(days=32)).replace(day=1)
    return int(nxt.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class UniqKeyParts:
    """A decoded unique key."""

    ip: str
    pid: int
    loader_hash: int
    month_offset_ms: int
    counter: int


def decode_uniq_key(key: str) -> UniqKeyParts:
    """Split a unique key into its fields (32 hex chars for IPv4, 56 for IPv6)."""
    if len(key) not in (32, 56):
        raise MessageIllegal(f"unique key {key!r} has {len(key)} characters; expected 32 or 56")
    try:
        raw = bytes.fromhex(key)
    except ValueError as exc:
        raise MessageIllegal(f"unique key {key!r} is not hexadecimal") from exc
    addr_len = 4 if len(raw) == 16 else 16
    pid, loader = struct.unpack(">Hi", raw[addr_len : addr_len + 6])
    elapsed, counter = _UNIQ_TAIL.unpack(raw[addr_len + 6 :])
    return UniqKeyParts(str(ipaddress.ip_address(raw[:addr_len])), pid, loader, elapsed, counter)
