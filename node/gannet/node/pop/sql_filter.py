"""SQL92 message filters (``FilterExpression`` of type SQL92): parse once, evaluate per message.

Grammar (RocketMQ's ``SelectorParser``, itself ActiveMQ's JMS selector without LIKE,
arithmetic, hex and octal literals), keywords case-insensitive, precedence from loosest::

    expr      := and ( OR and )*
    and       := eq ( AND eq )*
    eq        := cmp ( '=' cmp | '<>' cmp | IS NULL | IS NOT NULL )*
    cmp       := unary ( ('>'|'>='|'<'|'<=') unary | [NOT] BETWEEN unary AND unary
                       | [NOT] IN '(' 'str' (',' 'str')* ')' )*
    unary     := '+' unary | '-' unary | NOT unary | primary
    primary   := 'string' | integer | decimal | TRUE | FALSE | NULL | property | '(' expr ')'

Strings are single-quoted (``''`` is a quote); integers are ``0`` or ``[1-9][0-9]*`` with an
optional ``L``, at most ``Long.MAX_VALUE`` (Integer inside the int range, else Long); decimals
are ``5.``, ``5.5``, ``.5``, ``5E10`` (Double; RocketMQ refuses infinite ones and any below
``Double.MIN_VALUE``, so ``0.0`` too); properties are ``[A-Za-z_$][A-Za-z0-9_$]*``; ``--`` line
and ``/* */`` block comments are skipped. Note that ``NOT`` binds tighter than ``=``: ``NOT a =
'x'`` is ``(NOT a) = 'x'``, as in RocketMQ. Checks at parse time, as RocketMQ makes them:
``>``/``>=``/``<``/``<=``/``BETWEEN`` operands may not be string, boolean or NULL literals nor
boolean expressions; ``=``/``<>`` may not compare with the ``NULL`` literal (use ``IS NULL``);
``IN`` needs a property on its left; ``BETWEEN`` literal bounds must be ordered; the whole
expression and each ``AND``/``OR``/``NOT`` operand must be boolean (a bare property is a boolean
cast). Gannet adds one limit: the tree may be at most :data:`DEPTH_MAX` operators deep (a chain
of 200 ``OR``s), so that compiling and evaluating never exhaust the stack. A failure raises
:class:`SqlFilterError` with the offset, line and column of the error.

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
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import lark
from lark import Token

from gannet.node.pop.sql_values import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    EvalError,
    Long,
    compare,
    java_double,
    java_equals,
)
from gannet.node.store.hashing import tags_code

CACHE_SIZE = 256
DEPTH_MAX = 200
TAGS_CODE_CACHE_MAX = 4096
TAGS = "TAGS"

_DOUBLE_MIN = 5e-324  # Double.MIN_VALUE, the smallest positive double

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr | or_expr OR and_expr -> or_
?and_expr: eq_expr | and_expr AND eq_expr -> and_
?eq_expr: cmp_expr
    | eq_expr EQ cmp_expr -> eq
    | eq_expr NE cmp_expr -> ne
    | eq_expr IS NULL -> is_null
    | eq_expr IS NOT NULL -> is_not_null
?cmp_expr: unary
    | cmp_expr CMP unary -> cmp
    | cmp_expr BETWEEN unary AND unary -> between
    | cmp_expr NOT BETWEEN unary AND unary -> not_between
    | cmp_expr IN "(" strings ")" -> in_
    | cmp_expr NOT IN "(" strings ")" -> not_in
strings: STRING ("," STRING)*
?unary: PLUS unary -> pos
    | MINUS unary -> neg
    | NOT unary -> not_
    | primary
?primary: STRING -> string
    | FLOAT -> float_
    | DECIMAL -> decimal
    | TRUE -> true
    | FALSE -> false
    | NULL -> null
    | ID -> prop
    | "(" or_expr ")"

NOT.2: /not(?![a-z0-9_$])/i
AND.2: /and(?![a-z0-9_$])/i
OR.2: /or(?![a-z0-9_$])/i
BETWEEN.2: /between(?![a-z0-9_$])/i
IN.2: /in(?![a-z0-9_$])/i
TRUE.2: /true(?![a-z0-9_$])/i
FALSE.2: /false(?![a-z0-9_$])/i
NULL.2: /null(?![a-z0-9_$])/i
IS.2: /is(?![a-z0-9_$])/i
ID: /[a-z_$][a-z0-9_$]*/i
FLOAT.3: /[0-9]+\.[0-9]*(e[+-]?[0-9]+)?|\.[0-9]+(e[+-]?[0-9]+)?|[0-9]+e[+-]?[0-9]+/i
DECIMAL: /(0|[1-9][0-9]*)l?/i
STRING: /'(''|[^'])*'/
EQ: "="
NE.3: "<>"
CMP: ">=" | "<=" | ">" | "<"
PLUS: "+"
MINUS: "-"

%ignore /[ \t\n\r\f]+/
%ignore /--[^\n\r]*(\r\n|\n|\r)/
%ignore /\/\*[^*]*\*+([^*\/][^*]*\*+)*\//
"""


class SqlFilterError(ValueError):
    """An SQL92 expression that does not parse or breaks a rule; ``position`` is the 0-based
    character offset of the error, ``line``/``column`` 1-based."""

    def __init__(self, detail: str, text: str, position: int) -> None:
        position = max(0, min(position, len(text)))
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        super().__init__(f"{detail} at line {line}, column {column} (offset {position})")
        self.detail = detail
        self.position = position
        self.line = line
        self.column = column


# ---------------------------------------------------------------- the tree
Props = Mapping[str, str]
Eval = Callable[[Props], object]


@dataclass(frozen=True, slots=True)
class Node:
    """A parsed expression part; ``boolean`` marks RocketMQ's ``BooleanExpression``."""

    kind: str  # const prop neg not and or cast eq cmp in
    boolean: bool
    value: object = None  # const value; prop name; cmp operator; in: frozenset of strings
    left: Node | None = None
    right: Node | None = None
    negated: bool = False  # in: NOT IN
    at: int = 0  # offset of the part's first character in the expression (error messages)

    @property
    def is_literal(self) -> bool:
        return self.kind == "const"


def _const(value: object, at: int = 0) -> Node:
    return Node("const", value is None or type(value) is bool, value, at=at)


_NULL = _const(None)


def _not(node: Node, at: int | None = None) -> Node:
    return Node("not", True, left=node, at=node.at if at is None else at)


def _eq(left: Node, right: Node) -> Node:
    return Node("eq", True, left=left, right=right, at=left.at)


def _cmp(op: str, left: Node, right: Node) -> Node:
    return Node("cmp", True, op, left, right, at=left.at)


def _logic(kind: str, left: Node, right: Node) -> Node:
    return Node(kind, True, left=left, right=right, at=left.at)


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


# ---------------------------------------------------------------- parsing
@functools.cache
def _parser() -> lark.Lark:
    return lark.Lark(_GRAMMAR, parser="lalr", maybe_placeholders=False)


def _pos(item: Token | Node | Any) -> int:
    return int(item.start_pos) if isinstance(item, Token) and item.start_pos is not None else 0


class _Build(lark.Transformer[Token, Node]):
    """Lark tree → :class:`Node`, with RocketMQ's parse-time checks."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def _fail(self, detail: str, at: Token | Node) -> SqlFilterError:
        return SqlFilterError(detail, self.text, at.at if isinstance(at, Node) else _pos(at))

    def _boolean(self, node: Node, at: Token) -> Node:
        if node.boolean:
            return node
        if node.kind == "prop":
            return Node("cast", True, left=node, at=node.at)
        raise self._fail(f"{_show(node)} does not give a boolean value", node)

    def _orderable(self, node: Node, at: Token) -> None:
        if (node.is_literal and type(node.value) not in (int, Long, float)) or (
            node.boolean and not node.is_literal
        ):
            raise self._fail(f"{_show(node)} cannot be compared with {at.value!r}", node)

    def _equatable(self, left: Node, right: Node, at: Token) -> None:
        for node in (left, right):
            if node.is_literal and node.value is None:
                raise self._fail(
                    f"NULL cannot be compared with {at.value!r}; use IS NULL / IS NOT NULL", node
                )
        if left.is_literal and right.is_literal and left.boolean and not right.boolean:
            raise self._fail(f"{_show(left)} cannot be compared with {_show(right)}", right)

    # --- logic
    def or_(self, c: list[Any]) -> Node:
        return _logic("or", self._boolean(c[0], c[1]), self._boolean(c[2], c[1]))

    def and_(self, c: list[Any]) -> Node:
        return _logic("and", self._boolean(c[0], c[1]), self._boolean(c[2], c[1]))

    def not_(self, c: list[Any]) -> Node:
        return _not(self._boolean(c[1], c[0]), _pos(c[0]))

    # --- equality
    def eq(self, c: list[Any]) -> Node:
        self._equatable(c[0], c[2], c[1])
        return _eq(c[0], c[2])

    def ne(self, c: list[Any]) -> Node:
        self._equatable(c[0], c[2], c[1])
        return _not(_eq(c[0], c[2]))

    def is_null(self, c: list[Any]) -> Node:
        return _eq(c[0], _NULL)

    def is_not_null(self, c: list[Any]) -> Node:
        return _not(_eq(c[0], _NULL))

    # --- comparison
    def cmp(self, c: list[Any]) -> Node:
        left, op, right = c
        self._orderable(left, op)
        self._orderable(right, op)
        return _cmp(str(op.value), left, right)

    def between(self, c: list[Any]) -> Node:
        value, at, low, _, high = c
        self._check_bounds(low, high, at)
        for node in (value, low, high):
            self._orderable(node, at)
        return _logic("and", _cmp(">=", value, low), _cmp("<=", value, high))

    def not_between(self, c: list[Any]) -> Node:
        value, at, _, low, _, high = c
        for node in (value, low, high):
            self._orderable(node, at)
        return _logic("or", _cmp("<", value, low), _cmp(">", value, high))

    def _check_bounds(self, low: Node, high: Node, at: Token) -> None:
        if not (low.is_literal and high.is_literal):
            return
        if low.value is None or high.value is None:
            raise self._fail("BETWEEN bounds cannot be NULL", low)
        try:
            ordered = compare(high.value, low.value) >= 0
        except EvalError as exc:
            raise self._fail(f"BETWEEN bounds cannot be compared: {exc}", low) from None
        if not ordered:
            raise self._fail(f"BETWEEN needs low <= high, got {_show(low)} AND {_show(high)}", low)

    def in_(self, c: list[Any]) -> Node:
        return self._in(c[0], c[1], c[2], negated=False)

    def not_in(self, c: list[Any]) -> Node:
        return self._in(c[0], c[2], c[3], negated=True)

    def _in(self, left: Node, at: Token, values: frozenset[str], *, negated: bool) -> Node:
        if left.kind != "prop":
            raise self._fail(f"IN needs a property on its left, got {_show(left)}", left)
        return Node("in", True, values, left, negated=negated, at=left.at)

    def strings(self, c: list[Token]) -> frozenset[str]:
        return frozenset(_unquote(t) for t in c)

    # --- unary and literals
    def pos(self, c: list[Any]) -> Node:
        return c[1]  # type: ignore[no-any-return]

    def neg(self, c: list[Any]) -> Node:
        return Node("neg", False, left=c[1], at=_pos(c[0]))

    def string(self, c: list[Token]) -> Node:
        return _const(_unquote(c[0]), _pos(c[0]))

    def decimal(self, c: list[Token]) -> Node:
        text = str(c[0]).rstrip("lL")
        value = int(text)
        if value > LONG_MAX:
            raise self._fail(f"integer {text} is above {LONG_MAX}", c[0])
        return _const(value if value <= INT_MAX else Long(value), _pos(c[0]))

    def float_(self, c: list[Token]) -> Node:
        value = float(str(c[0]))
        if math.isinf(value):
            raise self._fail(f"{c[0]} is above the largest double", c[0])
        if value < _DOUBLE_MIN:
            raise self._fail(
                f"{c[0]} is below the smallest positive double (RocketMQ's rule; write 0)", c[0]
            )
        return _const(value, _pos(c[0]))

    def true(self, c: list[Token]) -> Node:
        return _const(True, _pos(c[0]))

    def false(self, c: list[Token]) -> Node:
        return _const(False, _pos(c[0]))

    def null(self, c: list[Token]) -> Node:
        return _const(None, _pos(c[0]))

    def prop(self, c: list[Token]) -> Node:
        return Node("prop", False, str(c[0]), at=_pos(c[0]))


def _depth(root: Node) -> int:
    """How deep the tree is (iterative: a long AND chain is a deep tree)."""
    deepest, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((n, depth + 1) for n in (node.left, node.right) if n is not None)
    return deepest


def _unquote(token: Token) -> str:
    return str(token)[1:-1].replace("''", "'")


def _show(node: Node) -> str:
    if node.kind == "const":
        v = node.value
        if v is None or type(v) is bool:
            return str(v).upper() if v is not None else "NULL"
        return "'" + v.replace("'", "''") + "'" if isinstance(v, str) else repr(v)
    if node.kind == "prop":
        return str(node.value)
    return "a boolean expression" if node.boolean else "a negated value"


def parse(text: str) -> SqlFilter:
    """Compile ``text`` (no cache); raises :class:`SqlFilterError`."""
    if not text.strip():
        raise SqlFilterError("the SQL92 expression is empty", text, 0)
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedEOF:
        raise SqlFilterError("the SQL92 expression ends too early", text, len(text)) from None
    except lark.exceptions.UnexpectedCharacters as exc:
        at = exc.pos_in_stream or 0
        raise SqlFilterError(f"unexpected character {text[at : at + 1]!r}", text, at) from None
    except lark.exceptions.UnexpectedToken as exc:
        token = exc.token
        if token.type == "$END":
            raise SqlFilterError("the SQL92 expression ends too early", text, len(text)) from None
        raise SqlFilterError(f"unexpected {str(token)!r}", text, _pos(token)) from None
    try:
        node = _Build(text).transform(tree)
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, SqlFilterError):
            raise exc.orig_exc from None
        raise
    except RecursionError:
        node = None
    if node is None or _depth(node) > DEPTH_MAX:
        raise SqlFilterError(
            f"the SQL92 expression nests more than {DEPTH_MAX} operators deep", text, 0
        )
    start = Token("START", "", start_pos=0)
    return SqlFilter(text, _Build(text)._boolean(node, start))


@functools.lru_cache(maxsize=CACHE_SIZE)
def compile_expression(text: str) -> SqlFilter:
    """:func:`parse` with an LRU cache by text (a failure is not cached)."""
    return parse(text)
