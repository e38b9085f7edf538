"""Java value semantics of SQL92 message filters: the Integer/Long/Double/String/Boolean values of
RocketMQ's ``ComparisonExpression`` and how it converts and compares them.

A plain ``int`` is a Java Integer, :class:`Long` a Java Long, ``float`` a Double, ``str`` a String
and ``bool`` a Boolean. :func:`compare` is ``ComparisonExpression.__compare`` with string
conversion on: a string against an Integer parses as ``Integer.valueOf`` (a Long:
``Long.valueOf``, a Double: ``Double.valueOf``, a Boolean: ``Boolean.valueOf``); numbers widen
Integer → Long → Double; other mixes compare as "less than"; doubles compare as
``Double.compareTo`` (``-0.0 < 0.0``, ``NaN`` above everything). A string that does not parse
raises :class:`EvalError`, which makes the whole expression not match. Java's hexadecimal
floating-point strings are not accepted.

Pure; called by :mod:`sql_parsing` (the ``BETWEEN`` bounds check, literal ranges) and
:mod:`sql_filter` (evaluation).
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
DOUBLE_MIN = 5e-324  # Double.MIN_VALUE, the smallest positive double


class EvalError(Exception):
    """An evaluation that RocketMQ ends with an exception: the message does not match."""


class Long(int):
    """A Java Long value (a plain int is a Java Integer)."""

    __slots__ = ()


_INT_TEXT = re.compile(r"[+-]?\d+")
_DOUBLE_TEXT = re.compile(
    r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)"
)


def java_integer(text: str, low: int, high: int) -> int:
    """``Integer.valueOf``/``Long.valueOf`` of ``text`` within ``low``..``high``."""
    if not _INT_TEXT.fullmatch(text):
        raise EvalError(f"{text!r} is not an integer")
    value = int(text)
    if not low <= value <= high:
        raise EvalError(f"{text!r} is out of range")
    return value


def java_double(text: str) -> float:
    """``Double.valueOf`` of ``text`` (decimal forms only)."""
    trimmed = text.strip("".join(chr(c) for c in range(33)))
    if not _DOUBLE_TEXT.fullmatch(trimmed):
        raise EvalError(f"{text!r} is not a number")
    body = trimmed.rstrip("fFdD") if trimmed[-1:] in "fFdD" else trimmed
    return float(body.replace("Infinity", "inf"))


def _double_bits(x: float) -> int:
    if math.isnan(x):
        return 0x7FF8000000000000
    return int(struct.unpack(">q", struct.pack(">d", x))[0])


def _sign(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def compare(lv: object, rv: object) -> int:
    """``ComparisonExpression.__compare`` with string conversion on: the sign of lv ? rv."""
    lt, rt = type(lv), type(rv)
    if lt is not rt and not (lt in (int, Long) and rt in (int, Long)):
        if lt is bool:
            if rt is str:
                raise EvalError("a boolean cannot be converted to a string")
            return -1
        if lt in (int, Long):
            if rt is float:
                lv = float(lv)  # type: ignore[arg-type]
            elif rt is str:
                rv = (
                    java_integer(rv, INT_MIN, INT_MAX)  # type: ignore[arg-type]
                    if lt is int
                    else java_integer(rv, LONG_MIN, LONG_MAX)  # type: ignore[arg-type]
                )
            else:
                return -1
        elif lt is float:
            if rt in (int, Long):
                rv = float(rv)  # type: ignore[arg-type]
            elif rt is str:
                rv = java_double(rv)  # type: ignore[arg-type]
            else:
                return -1
        elif lt is str:
            if rt is bool:
                lv = lv.lower() == "true"  # type: ignore[attr-defined]
            elif rt is int:
                lv = java_integer(lv, INT_MIN, INT_MAX)  # type: ignore[arg-type]
            elif rt is Long:
                lv = java_integer(lv, LONG_MIN, LONG_MAX)  # type: ignore[arg-type]
            elif rt is float:
                lv = java_double(lv)  # type: ignore[arg-type]
            else:
                return -1
        else:
            return -1
    if type(lv) is float:
        s = _sign(lv, rv)
        return s if s else _sign(_double_bits(lv), _double_bits(float(rv)))  # type: ignore[arg-type]
    return _sign(lv, rv)


def java_equals(lv: object, rv: object) -> bool:
    """``lv == rv || lv.equals(rv)`` (both non-null)."""
    if type(lv) is not type(rv):
        return False
    if type(lv) is float:
        return _double_bits(lv) == _double_bits(rv)  # type: ignore[arg-type]
    return lv == rv
