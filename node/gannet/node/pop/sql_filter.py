"""SQL92 message filters (``FilterExpression`` of type SQL92): parse once, evaluate per message.

The grammar, the parse-time checks and the tree are in :mod:`sql_parsing`; Java's value
conversions and comparison in :mod:`sql_values`. This module compiles the tree into closures and
decides from the tag hash.

Evaluation (``ComparisonExpression`` and friends with ``convertStringExpressions`` on, which
``SelectorParser.parse`` always sets): every message property (user properties, ``TAGS``,
``KEYS``...) is a string, a missing one is NULL. Three-valued logic: a comparison with a NULL
operand is unknown (NULL), ``AND``/``OR``/``NOT`` follow SQL (``FALSE AND x`` is FALSE, ``TRUE
OR x`` is TRUE, else unknown spreads), and only TRUE selects a message. Quirks kept on purpose:
``x = y`` is TRUE when both are NULL and FALSE (not NULL) when only the right side is; ``IN`` /
``NOT IN`` on a missing property is NULL. Mixed types convert as RocketMQ converts them: a
string property against an Integer literal parses as ``Integer.valueOf`` (a Long literal:
``Long.valueOf``, a decimal: ``Double.valueOf``, TRUE/FALSE: ``Boolean.valueOf``), two strings
under ``>``/``<`` both parse as doubles; a string that does not parse (``'abc' > 5``, ``'1.5' =
1``) is an evaluation error, and an error anywhere not short-circuited away makes the whole
expression not match. Numbers widen Integer → Long → Double; other mixes (a boolean against a
number) compare as "less than". Doubles compare as ``Double.compareTo`` (``-0.0 < 0.0``,
``NaN`` above everything). Java's hexadecimal floating-point strings are not accepted.

Cheaper than a record read: :meth:`SqlFilter.accepts_tags_code` decides from the consume-queue
unit's tag hash alone whenever the expression's ``TAGS`` tests (``TAGS = 'x'``, ``TAGS IN (...)``,
``TAGS IS [NOT] NULL``, combined with ``AND``/``OR``/``NOT`` and any other test) cannot be TRUE
for a message with that hash. It evaluates the expression over the set of outcomes each part
could have ({TRUE, FALSE, NULL, error}) given only the hash, so it never rejects a message the
full evaluation would select (a hash collision only costs a record read). Expressions without
such a test (``price > 10``) read every record, but decode only its properties
(:func:`gannet.node.store.log.records.decode_properties`), never the body. RocketMQ's bloom filter
of per-group filter results in the consume-queue extension is not kept: it needs every
subscription registered before the message is dispatched; see bench/sqlfilter.py for the cost.

:func:`compile_expression` caches compiled filters by text (LRU, :data:`CACHE_SIZE`). Pure;
called by :mod:`filtering`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from gannet.node.pop.sql_parsing import DEPTH_MAX, Node, SqlFilterError, parse_tree
from gannet.node.pop.sql_values import (
    INT_MIN,
    LONG_MIN,
    EvalError,
    Long,
    compare,
    java_double,
    java_equals,
)
from gannet.node.store.hashing import tags_code

__all__ = ["CACHE_SIZE", "DEPTH_MAX", "SqlFilter", "SqlFilterError", "compile_expression", "parse"]

CACHE_SIZE = 256
TAGS_CODE_CACHE_MAX = 4096
TAGS = "TAGS"

Props = Mapping[str, str]
Eval = Callable[[Props], object]

_SIGN_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda s: s > 0,
    ">=": lambda s: s >= 0,
    "<": lambda s: s < 0,
    "<=": lambda s: s <= 0,
}


def _compile(node: Node) -> Eval:
    kind = node.kind
    if kind == "const":
        value = node.value
        return lambda p: value
    if kind == "prop":
        name = str(node.value)
        return lambda p: p.get(name)
    assert node.left is not None
    left = _compile(node.left)
    if kind == "neg":

        def negate(p: Props) -> object:
            v = left(p)
            if type(v) is int:
                return -v if v != INT_MIN else v  # Java int overflow
            if type(v) is Long:
                return Long(-v if v != LONG_MIN else v)
            if type(v) is float:
                return -v
            return None

        return negate
    if kind == "not":

        def not_(p: Props) -> object:
            v = left(p)
            if v is None:
                return None
            if type(v) is not bool:
                raise EvalError("NOT of a non-boolean")
            return not v

        return not_
    if kind == "cast":

        def cast(p: Props) -> object:
            v = left(p)
            return None if v is None else (v if type(v) is bool else False)

        return cast
    if kind == "in":
        values = node.value
        negated = node.negated
        assert isinstance(values, frozenset)

        def in_(p: Props) -> object:
            v = left(p)
            if type(v) is not str:
                return None
            return (v in values) != negated

        return in_
    assert node.right is not None
    right = _compile(node.right)
    if kind == "and":

        def and_(p: Props) -> object:
            lv = left(p)
            if lv is False:
                return False
            rv = right(p)
            if rv is False:
                return False
            return None if lv is None or rv is None else True

        return and_
    if kind == "or":

        def or_(p: Props) -> object:
            lv = left(p)
            if lv is True:
                return True
            rv = right(p)
            if rv is True:
                return True
            return None if lv is None or rv is None else False

        return or_
    if kind == "eq":

        def eq(p: Props) -> object:
            lv, rv = left(p), right(p)
            if lv is None or rv is None:
                if lv is None and rv is None:
                    return True
                return None if lv is None else False
            if java_equals(lv, rv):
                return True
            return compare(lv, rv) == 0

        return eq
    test = _SIGN_TESTS[str(node.value)]

    def cmp(p: Props) -> object:
        lv = left(p)
        if lv is None:
            return None
        rv = right(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            lv, rv = java_double(lv), java_double(rv)
        return test(compare(lv, rv))

    return cmp


# ---------------------------------------------------------------- tag-hash outcomes
_T, _F, _N, _E = "T", "F", "N", "E"
_ANY = frozenset((_T, _F, _N, _E))


def _tags_leaf(node: Node) -> bool:
    """A test of ``TAGS`` against string literals that the tag hash can decide."""
    left, right = node.left, node.right
    if node.kind == "in":
        return left is not None and left.kind == "prop" and left.value == TAGS
    if node.kind != "eq" or left is None or right is None:
        return False
    if left.kind == "prop" and left.value == TAGS:
        return right.kind == "const" and (right.value is None or type(right.value) is str)
    if right.kind == "prop" and right.value == TAGS:
        return left.kind == "const" and type(left.value) is str
    return False


def _uses_tags(node: Node) -> bool:
    if node.kind in ("and", "or", "not"):
        return any(_uses_tags(n) for n in (node.left, node.right) if n is not None)
    return _tags_leaf(node)


def _outcomes(node: Node, code: int) -> frozenset[str]:
    """Every outcome ``node`` may have for a message whose consume-queue tag code is ``code``
    (0: no tag, or a tag whose Java hash is 0)."""
    kind = node.kind
    absent = code == 0
    if kind == "const":
        v = node.value
        return frozenset((_N if v is None else _T if v is True else _F,)) if node.boolean else _ANY
    if kind == "not":
        assert node.left is not None
        flip = {_T: _F, _F: _T, _N: _N, _E: _E}
        return frozenset(flip[o] for o in _outcomes(node.left, code))
    if kind in ("and", "or"):
        assert node.left is not None
        assert node.right is not None
        left, right = _outcomes(node.left, code), _outcomes(node.right, code)
        stop = _F if kind == "and" else _T
        result: set[str] = set()
        for lo in left:
            if lo in (stop, _E):
                result.add(lo)
                continue
            for ro in right:
                result.add(ro if ro in (stop, _E) else _N if _N in (lo, ro) else lo)
        return frozenset(result)
    if not _tags_leaf(node):
        return _ANY
    if kind == "in":
        assert isinstance(node.value, frozenset)
        hit = code in {tags_code(v) for v in node.value}
        yes, no = (_F, _T) if node.negated else (_T, _F)
        out = {no} | ({yes} if hit else set()) | ({_N} if absent else set())
        return frozenset(out)
    assert node.left is not None
    assert node.right is not None
    if node.right.kind == "const" and node.right.value is None:  # TAGS IS NULL
        return frozenset({_F} | ({_T} if absent else set()))
    tag_on_left = node.left.kind == "prop"
    literal = str((node.right if tag_on_left else node.left).value)
    out = {_F} | ({_T} if tags_code(literal) == code else set())
    if absent:
        out.add(_N if tag_on_left else _F)
    return frozenset(out)


# ---------------------------------------------------------------- the compiled filter
class SqlFilter:
    """A compiled SQL92 expression. Thread-safe."""

    def __init__(self, expression: str, tree: Node) -> None:
        self.expression = expression
        self.tree = tree
        self._eval = _compile(tree)
        self.decides_by_tags = _uses_tags(tree)
        self._by_code: dict[int, bool] = {}

    def matches(self, properties: Props) -> bool:
        """True only when the expression is TRUE for a message with these properties."""
        try:
            return self._eval(properties) is True
        except (EvalError, OverflowError, ValueError):
            return False

    def accepts_tags_code(self, code: int) -> bool:
        """False when no message with this consume-queue tag code can match."""
        known = self._by_code.get(code)
        if known is None:
            known = _T in _outcomes(self.tree, code)
            if len(self._by_code) >= TAGS_CODE_CACHE_MAX:
                self._by_code.clear()
            self._by_code[code] = known
        return known

    def __repr__(self) -> str:
        return f"SqlFilter({self.expression!r})"


def parse(text: str) -> SqlFilter:
    """Compile ``text`` (no cache); raises :class:`SqlFilterError`."""
    return SqlFilter(text, parse_tree(text))


@functools.lru_cache(maxsize=CACHE_SIZE)
def compile_expression(text: str) -> SqlFilter:
    """:func:`parse` with an LRU cache by text (a failure is not cached)."""
    return parse(text)
