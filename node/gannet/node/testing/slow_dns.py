"""A deliberately slow DNS server for tests: answers every query after ``delay_s``.

Used by ``tests/replication/test_slow_resolver.py``: broker processes run in a private mount
namespace whose ``/etc/resolv.conf`` names this server (:func:`resolv_conf`), so glibc's
``getaddrinfo`` in the broker (``hosts: files dns``) really asks it. Names in ``records`` get
their IPv4 addresses (A) after the delay; AAAA queries for them are answered empty (NOERROR, no
records) after the same delay, or never with ``answer_aaaa=False`` (an upstream that drops
them); other names get NXDOMAIN after the delay.

A minimal responder of RFC 1035's wire format over UDP (one question per query, as stub
resolvers send): a header, the question echoed, A records with a 5 s TTL. Queries are answered
from a thread per server; at most ``PENDING_MAX`` answers wait at once (later queries are
dropped, as an overloaded server would). :attr:`SlowDns.queries` counts what arrived, by type.
"""

from __future__ import annotations

import collections
import heapq
import ipaddress
import socket
import struct
import threading
import time
from collections.abc import Mapping

PENDING_MAX = 1024
TYPE_A = 1
TYPE_AAAA = 28
CLASS_IN = 1
TTL_S = 5
NXDOMAIN = 3


def _question(packet: bytes) -> tuple[str, int, int]:
    """The first question's name (lower case, no trailing dot), type, and end offset."""
    labels: list[str] = []
    offset = 12
    while True:
        length = packet[offset]
        offset += 1
        if length == 0:
            break
        labels.append(packet[offset : offset + length].decode("ascii").lower())
        offset += length
    qtype = struct.unpack_from("!H", packet, offset)[0]
    return ".".join(labels), int(qtype), offset + 4


def answer(packet: bytes, records: Mapping[str, tuple[str, ...]]) -> bytes:
    """The reply to one query: A records for a known name, empty for its other types,
    NXDOMAIN for an unknown name."""
    ident, flags = struct.unpack_from("!HH", packet, 0)
    name, qtype, end = _question(packet)
    addresses = records.get(name)
    rcode = 0 if addresses is not None else NXDOMAIN
    found = addresses if addresses is not None and qtype == TYPE_A else ()
    reply_flags = 0x8000 | (flags & 0x0100) | 0x0400 | 0x0080 | rcode  # QR, RD, AA, RA
    header = struct.pack("!HHHHHH", ident, reply_flags, 1, len(found), 0, 0)
    body = b"".join(
        struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL_S, 4)
        + ipaddress.IPv4Address(address).packed
        for address in found
    )
    return header + packet[12:end] + body


class SlowDns:
    """A UDP DNS server on ``host:port`` (port 53 for a resolv.conf nameserver) that answers
    every query ``delay_s`` late. Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(
        self,
        host: str,
        records: Mapping[str, tuple[str, ...]],
        *,
        delay_s: float,
        port: int = 53,
        answer_aaaa: bool = True,
    ) -> None:
        self.records = {name.lower().rstrip("."): tuple(a) for name, a in records.items()}
        self.delay_s = delay_s
        self.answer_aaaa = answer_aaaa
        self.queries: collections.Counter[str] = collections.Counter()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind((host, port))
        self._socket.settimeout(0.05)
        self.address = self._socket.getsockname()
        self._pending: list[tuple[float, int, bytes, tuple[str, int]]] = []
        self._sequence = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="slow-dns", daemon=True)

    def start(self) -> SlowDns:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)
        self._socket.close()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            now_s = time.monotonic()
            while self._pending and self._pending[0][0] <= now_s:
                _, _, reply, client = heapq.heappop(self._pending)
                self._socket.sendto(reply, client)
            try:
                packet, client = self._socket.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self._take(packet, client)

    def _take(self, packet: bytes, client: tuple[str, int]) -> None:
        try:
            _, qtype, _ = _question(packet)
            reply = answer(packet, self.records)
        except (IndexError, struct.error, UnicodeDecodeError):
            self.queries["malformed"] += 1
            return
        kind = {TYPE_A: "A", TYPE_AAAA: "AAAA"}.get(qtype, str(qtype))
        self.queries[kind] += 1
        if (qtype == TYPE_AAAA and not self.answer_aaaa) or len(self._pending) >= PENDING_MAX:
            return
        self._sequence += 1
        due_s = time.monotonic() + self.delay_s
        heapq.heappush(self._pending, (due_s, self._sequence, reply, client))


def resolv_conf(nameserver: str, *, timeout_s: int = 10, attempts: int = 2) -> str:
    """A resolv.conf naming only ``nameserver``, whose per-try timeout outlasts the delay (so
    a lookup takes the server's delay, not glibc's retry schedule)."""
    return f"nameserver {nameserver}\noptions timeout:{timeout_s} attempts:{attempts}\n"
