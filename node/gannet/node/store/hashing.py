"""Hash and checksum functions whose exact values are part of RocketMQ's formats.

* :func:`java_string_hash` — Java ``String.hashCode`` (UTF-16 code units, 32-bit wrap-around).
  Used for tag codes in consume queues and for index-file key hashes.
* :func:`body_crc32` — IEEE CRC-32 masked with ``0x7FFFFFFF`` (``UtilAll.crc32``), stored in the
  BODYCRC field of every commit-log record.

Both are pure. ``java_string_hash`` sits on the dispatch hot path (every tag and key), so ASCII
strings take a fast path in C: the hash is the polynomial ``sum(c[i] * 31**(n-1-i))`` mod
2**32, and writing each byte as ``c = 31*q + r`` (``q`` ≤ 8, ``r`` < 31) turns the sums over
``q`` and ``r`` into two base-31 numerals that ``bytes.translate`` spells and ``int(_, 31)``
reads: ``hash = 31 * int(q digits, 31) + int(r digits, 31)``. About 3× cheaper than a
``sum(map(mul, ...))`` over the bytes for a 40-character index key.
"""

from __future__ import annotations

import zlib

_MASK32 = 0xFFFFFFFF
_FAST_LENGTH_MAX = 4000  # int() refuses numerals of more than 4,300 digits (sys.int_info)
_BASE31_DIGITS = b"0123456789abcdefghijklmnopqrstu"
_QUOTIENT_DIGIT = bytes(_BASE31_DIGITS[code // 31] for code in range(256))
_REMAINDER_DIGIT = bytes(_BASE31_DIGITS[code % 31] for code in range(256))


def to_java_int(value: int) -> int:
    """Wrap an integer to a signed 32-bit Java ``int``."""
    value &= _MASK32
    return value - 0x1_0000_0000 if value & 0x8000_0000 else value


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()`` of ``text`` as a signed 32-bit int (empty string → 0)."""
    h = 0
    if text.isascii():
        # hashCode is the polynomial sum(c[i] * 31**(n-1-i)) mod 2**32: one C-level pass.
        data = text.encode("ascii")
        if 0 < len(data) <= _FAST_LENGTH_MAX:
            quotients = int(data.translate(_QUOTIENT_DIGIT), 31)
            h = (quotients * 31 + int(data.translate(_REMAINDER_DIGIT), 31)) & _MASK32
        else:
            for code in data:
                h = (31 * h + code) & _MASK32
    else:
        units = text.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + ((units[i] << 8) | units[i + 1])) & _MASK32
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def tags_code(tags: str | None) -> int:
    """Consume-queue tag code: the Java hash of ``TAGS`` sign-extended to a long; none → 0."""
    if not tags:
        return 0
    return java_string_hash(tags)


def index_key_hash(key: str) -> int:
    """Index-file key hash: ``abs(hashCode)``; ``Integer.MIN_VALUE`` (whose abs overflows) → 0."""
    if key.isascii() and 0 < len(key) <= _FAST_LENGTH_MAX:  # java_string_hash inlined
        data = key.encode("ascii")
        u = (
            int(data.translate(_QUOTIENT_DIGIT), 31) * 31
            + int(data.translate(_REMAINDER_DIGIT), 31)
        ) & _MASK32
        if u & 0x8000_0000:
            return 0 if u == 0x8000_0000 else 0x1_0000_0000 - u
        return u
    h = java_string_hash(key)
    if h == -0x8000_0000:
        return 0
    return abs(h)


def body_crc32(body: bytes | bytearray | memoryview) -> int:
    """RocketMQ body CRC: ``zlib.crc32`` with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF
