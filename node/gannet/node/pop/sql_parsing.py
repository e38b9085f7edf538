"""SQL92 message filters, parsing: RocketMQ's grammar and parse-time checks, text → :class:`Node`.

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

The tree is small: ``<>`` is ``NOT =``, ``IS NULL`` is ``= NULL``, ``BETWEEN`` is two
comparisons joined by ``AND`` (``NOT BETWEEN``: ``OR``). Pure; :func:`parse_tree` is called by
:mod:`sql_filter`, which evaluates the tree.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import lark
from lark import Token

from gannet.node.pop.sql_values import DOUBLE_MIN, INT_MAX, LONG_MAX, EvalError, Long, compare

DEPTH_MAX = 200

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


_HINTS = {
    "`": " (RocketMQ's SQL92 has no quoted identifiers: write a property name bare, letters, "
    "digits, '_' and '$'; a name that needs quoting cannot be filtered on)",
    '"': " (strings are in single quotes: 'text')",
}
"""What a character the grammar has no place for usually meant, said with the refusal."""


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
        if value < DOUBLE_MIN:
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


def parse_tree(text: str) -> Node:
    """The checked tree of ``text``, boolean at its root; raises :class:`SqlFilterError`."""
    if not text.strip():
        raise SqlFilterError("the SQL92 expression is empty", text, 0)
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedEOF:
        raise SqlFilterError("the SQL92 expression ends too early", text, len(text)) from None
    except lark.exceptions.UnexpectedCharacters as exc:
        at = exc.pos_in_stream or 0
        found = text[at : at + 1]
        raise SqlFilterError(
            f"unexpected character {found!r}{_HINTS.get(found, '')}", text, at
        ) from None
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
    return _Build(text)._boolean(node, start)
