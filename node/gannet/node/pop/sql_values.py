"""Java value semantics of the SQL92 filter (:mod:`~gannet.node.pop.sql_filter`): what RocketMQ's
``ComparisonExpression`` and ``EqualExpression`` do with Integer, Long, Double, Boolean and
String operands, including string conversion, range checks and ``Double.compare`` ordering.

An evaluation RocketMQ ends with an exception raises :class:`EvalError`: the message does not
match. Pure.
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


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
    if not _INT_TEXT.fullmatch(text):
        raise EvalError(f"{text!r} is not an integer")
    value = int(text)
    if not low <= value <= high:
        raise EvalError(f"{text!r} is out of range")
    return value


def java_double(text: str) -> float:
    trimmed = text.strip("".join(chr(c) for c in range(33)))
    if not _DOUBLE_TEXT.fullmatch(trimmed):
        raise EvalError(f"{text!r} is not a number")
    body = trimmed.rstrip("fFdD") if trimmed[-1:] in "fFdD" else trimmed
    return float(body.replace("Infinity", "inf"))


def double_bits(x: float) -> int:
    if math.isnan(x):
        return 0x7FF8000000000000
    return int(struct.unpack(">q", struct.pack(">d", x))[0])


def sign(a: Any, b: Any) -> int:
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
        s = sign(lv, rv)
        return s if s else sign(double_bits(lv), double_bits(float(rv)))  # type: ignore[arg-type]
    return sign(lv, rv)


def java_equals(lv: object, rv: object) -> bool:
    """``lv == rv || lv.equals(rv)`` (both non-null)."""
    if type(lv) is not type(rv):
        return False
    if type(lv) is float:
        return double_bits(lv) == double_bits(rv)  # type: ignore[arg-type]
    return lv == rv
