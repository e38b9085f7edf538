"""The store host of the records a remoting pull answers: this member's remoting address.

A record's STOREHOST field (``docs/formats/commitlog.md``) holds the storing member's gRPC client
address, the store format's field that gRPC shares. A remoting client reads it as RocketMQ's
broker address: the C++ client (rocketmq-client-cpp) sends ``CONSUMER_SEND_MSG_BACK`` for a
failed message to the store host of that message, and the Java and Go clients decode a
received message's offset message id from it (``viewMessage`` dials it). So the records a pull
answers name, as their store host, the address this member's offset message ids name to that
connection (:meth:`~gannet.node.remoting.nameserver.NameServer.store_address`): every member
holds a record at the same commit-log offset, so that address serves it.

Only the bytes of the host are replaced, in a copy; a record whose store host has the other
address family than the replacement (IPv4 against IPv6: the record's length would change) is
served as stored. Pure: no IO."""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable

from gannet.node.store.log.layout import (
    HOST_V4_LENGTH,
    HOST_V6_LENGTH,
    SYSFLAG_POSITION,
    SYSFLAG_STOREHOST_V6,
    store_timestamp_position,
)

_INT = struct.Struct(">i")
_TIMESTAMP_LENGTH = 8


def encoded_host(host: str, port: int) -> bytes:
    """``host`` (an IP address) and ``port`` as a record holds a host: address bytes, then
    the port as a 4-byte big-endian int. Raises ValueError for a name or a bad port."""
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"port {port} is outside 0..65535")
    return ipaddress.ip_address(host).packed + _INT.pack(port)


def with_store_host(record: bytes | memoryview, host: bytes) -> bytes:
    """``record`` with its STOREHOST replaced by ``host`` (from :func:`encoded_host`), or
    ``record`` itself when the two are not the same address family or the record is cut
    short."""
    record = bytes(record)
    if len(record) < SYSFLAG_POSITION + 4:
        return record
    (sys_flag,) = _INT.unpack_from(record, SYSFLAG_POSITION)
    length = HOST_V6_LENGTH if sys_flag & SYSFLAG_STOREHOST_V6 else HOST_V4_LENGTH
    if len(host) != length:
        return record
    start = store_timestamp_position(sys_flag) + _TIMESTAMP_LENGTH
    if len(record) < start + length:
        return record
    return record[:start] + host + record[start + length :]


def served(records: Iterable[bytes | memoryview], host: bytes) -> bytes:
    """A pull answer's body: ``records`` back to back, each naming ``host`` as its store
    host."""
    return b"".join(with_store_host(r, host) for r in records)
