"""SQL92 filters (:mod:`gannet.node.pop.sql_filter`): RocketMQ's grammar, its three-valued
evaluation with Java conversions, error positions, the tag-hash prefilter and the store scan
that uses it (records of non-matching tags are never read)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.node.pop import filtering, sql_filter
from gannet.node.pop.errors import FilterExpressionIllegal
from gannet.node.store import properties as props
from gannet.node.store.hashing import tags_code
from gannet.node.store.log import records
from gannet.node.store.log.records import Message

from .pop_harness import GROUP, TOPIC, Harness, bodies_of


def matches(text: str, **properties: str) -> bool:
    return sql_filter.parse(text).matches(properties)


@pytest.mark.parametrize(
    ("text", "properties", "expected"),
    [
        # numeric comparisons convert the string property to the literal's type
        ("a > 5", {"a": "10"}, True),
        ("a > 5", {"a": "3"}, False),
        ("a >= 5 AND a <= 5", {"a": "5"}, True),
        ("a < 5.5", {"a": "5.25"}, True),
        ("a = 5", {"a": "5"}, True),
        ("a = 5.0", {"a": "5"}, True),
        ("a > 2147483648", {"a": "2147483649"}, True),  # a Long literal: Long.valueOf
        ("a > -5", {"a": "-1"}, True),
        ("a > 1.5", {"a": " 2 "}, True),  # Double.valueOf trims
        ("a > b", {"a": "2.5", "b": "1e0"}, True),  # two strings: both as doubles
        # what does not convert is an evaluation error: no match
        ("a > 5", {"a": "abc"}, False),
        ("a = 5", {"a": "5.0"}, False),  # Integer.valueOf("5.0") fails
        ("a > 5", {"a": "2147483648"}, False),  # out of Integer range
        ("a = 5 OR b = 'x'", {"a": "abc", "b": "x"}, False),  # the error is not skipped
        ("b = 'x' OR a = 5", {"a": "abc", "b": "x"}, True),  # ...unless short-circuited
        # three-valued logic: a missing property is unknown
        ("a > 5", {}, False),
        ("NOT (a > 5)", {}, False),
        ("a > 5 OR b = 'y'", {"b": "y"}, True),
        ("a > 5 AND b = 'y'", {"b": "y"}, False),
        ("NOT (a > 5 AND b = 'n')", {"b": "y"}, True),  # NULL AND FALSE is FALSE
        ("a IS NULL", {}, True),
        ("a IS NOT NULL", {"a": ""}, True),
        ("a IN ('x', 'y')", {"a": "y"}, True),
        ("a NOT IN ('x', 'y')", {"a": "z"}, True),
        ("a NOT IN ('x', 'y')", {}, False),
        ("a BETWEEN 1 AND 3", {"a": "3"}, True),
        ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
        ("a NOT BETWEEN 1 AND 3", {}, False),
        # RocketMQ's equality quirks, kept
        ("a = b", {}, True),
        ("'x' <> a", {}, True),
        ("a <> 'x'", {}, False),
        ("a = TRUE", {"a": "true"}, True),
        ("a = 'it''s'", {"a": "it's"}, True),
        # booleans, keywords in any case, comments, the TAGS property
        ("TRUE", {}, True),
        ("FALSE OR NULL", {}, False),
        ("a", {"a": "true"}, False),  # a string is never a boolean
        ("a between 1 and 3 and TAGS in ('t')", {"a": "2", "TAGS": "t"}, True),
        ("tags IN ('t')", {"TAGS": "t"}, False),  # property names are case-sensitive
        ("/* big */ a > 5 -- orders\n", {"a": "6"}, True),
        ("NOT a = 'x'", {"a": "x"}, False),  # NOT binds tighter: (NOT a) = 'x'
    ],
)
def test_evaluation(text: str, properties: dict[str, str], expected: bool) -> None:
    assert sql_filter.parse(text).matches(properties) is expected


@pytest.mark.parametrize(
    ("text", "detail", "column"),
    [
        ("a >", "ends too early", 4),
        ("(a > 1", "ends too early", 7),
        ("a @ 1", "unexpected character '@'", 3),
        ("a 'x'", "unexpected", 3),
        ("a > 'x'", "cannot be compared", 5),
        ("a > TRUE", "cannot be compared", 5),
        ("a > (b = 1)", "cannot be compared", 6),
        ("a = NULL", "use IS NULL", 5),
        ("TRUE = 'x'", "cannot be compared", 8),
        ("a BETWEEN 3 AND 1", "low <= high", 11),
        ("a IN (1, 2)", "unexpected '1'", 7),
        ("'x' IN ('a')", "needs a property", 1),
        ("5", "does not give a boolean", 1),
        ("NOT 5", "does not give a boolean", 5),
        ("x = 1 AND 7", "does not give a boolean", 11),
        ("a > 0.0", "smallest positive double", 5),
        ("a > 9223372036854775808", "is above", 5),
        ("", "empty", 1),
    ],
)
def test_errors_name_the_problem_and_its_column(text: str, detail: str, column: int) -> None:
    with pytest.raises(sql_filter.SqlFilterError) as caught:
        sql_filter.parse(text)
    assert detail in str(caught.value)
    assert caught.value.column == column
    assert caught.value.line == 1


def test_error_line_and_column_on_a_later_line() -> None:
    with pytest.raises(sql_filter.SqlFilterError) as caught:
        sql_filter.parse("a = 'x'\n  AND b >> 3")
    assert (caught.value.line, caught.value.column, caught.value.position) == (2, 10, 17)


def test_deep_expressions_are_refused_not_crashing() -> None:
    assert sql_filter.parse(" OR ".join(["a = 1"] * 150)).matches({"a": "1"})
    for text in (" AND ".join(["a = 1"] * 600), "NOT " * 1500 + "TRUE"):
        with pytest.raises(sql_filter.SqlFilterError, match="nests more than 200"):
            sql_filter.parse(text)


def test_filtering_wraps_errors_as_illegal_filter_expression() -> None:
    with pytest.raises(FilterExpressionIllegal, match=r"SQL92 .*line 1, column 5"):
        filtering.parse("a > 'x'", filtering.ExpressionType.SQL92)
    with pytest.raises(FilterExpressionIllegal, match="at most 4096"):
        filtering.parse("a = 1 OR " * 600 + "TRUE", filtering.ExpressionType.SQL92)


def test_compiled_once_per_text() -> None:
    first = sql_filter.compile_expression("region = 'eu' AND qty > 1")
    assert sql_filter.compile_expression("region = 'eu' AND qty > 1") is first


@pytest.mark.parametrize(
    ("text", "tag", "accepted"),
    [
        ("TAGS = 'a'", "a", True),
        ("TAGS = 'a'", "b", False),
        ("TAGS = 'a'", None, False),
        ("TAGS IN ('a', 'b') AND price > 10", "c", False),
        ("TAGS IN ('a', 'b') AND price > 10", "b", True),
        ("TAGS = 'a' OR price > 10", "c", True),  # price decides: the record must be read
        ("TAGS NOT IN ('a')", "b", True),
        ("TAGS NOT IN ('a')", "a", True),  # another tag may share a's hash
        ("NOT (TAGS = 'a')", "b", True),
        ("TAGS IS NULL", "a", False),
        ("TAGS IS NULL", None, True),
        ("TAGS IS NOT NULL", None, True),  # code 0: no tag, or a tag whose hash is 0
    ],
)
def test_tag_hash_prefilter(text: str, tag: str | None, accepted: bool) -> None:
    assert sql_filter.parse(text).accepts_tags_code(tags_code(tag)) is accepted


# ---------------------------------------------------------------- properties
_TAG_VALUES = ["a", "b", "", "Aa", "BB"]  # "Aa" and "BB" share a Java hash
_NUM_VALUES = ["1", "5", "-3", "2.5", "x", ""]


@st.composite
def atoms(draw: st.DrawFn) -> str:
    tag = draw(st.sampled_from(["a", "b", "Aa", "BB"]))
    return draw(
        st.sampled_from(
            [
                f"TAGS = '{tag}'",
                f"'{tag}' = TAGS",
                f"TAGS <> '{tag}'",
                f"TAGS IN ('{tag}', 'b')",
                f"TAGS NOT IN ('{tag}')",
                "TAGS IS NULL",
                "TAGS IS NOT NULL",
                "n > 2",
                "n = 5",
                "n BETWEEN 1 AND 5",
                "n IS NULL",
                "m = 'x'",
                "TRUE",
                "NULL",
            ]
        )
    )


expressions = st.recursive(
    atoms(),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda p: f"({p[0]} AND {p[1]})"),
        st.tuples(inner, inner).map(lambda p: f"({p[0]} OR {p[1]})"),
        inner.map(lambda e: f"NOT ({e})"),
    ),
    max_leaves=4,
)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, str]:
    properties: dict[str, str] = {}
    for name, values in (("TAGS", _TAG_VALUES), ("n", _NUM_VALUES), ("m", ["x", "y"])):
        if draw(st.booleans()):
            properties[name] = draw(st.sampled_from(values))
    return properties


@settings(max_examples=150, deadline=None)
@given(expressions, messages())
def test_prefilter_never_rejects_a_match(text: str, properties: dict[str, str]) -> None:
    compiled = sql_filter.parse(text)
    if compiled.matches(properties):
        assert compiled.accepts_tags_code(tags_code(properties.get("TAGS")))


@settings(max_examples=100, deadline=None)
@given(expressions, expressions, messages())
def test_de_morgan_holds_in_three_valued_logic(a: str, b: str, properties: dict[str, str]) -> None:
    left = sql_filter.parse(f"NOT ({a} AND {b})").matches(properties)
    right = sql_filter.parse(f"NOT ({a}) OR NOT ({b})").matches(properties)
    assert left == right


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab'()=<>!-.0123456789 ANDORTIXULSBEW\n", max_size=40))
def test_any_text_parses_or_fails_with_a_position(text: str) -> None:
    position = 0
    try:
        sql_filter.parse(text)
    except sql_filter.SqlFilterError as exc:
        position = exc.position
    assert 0 <= position <= len(text)


# ---------------------------------------------------------------- the store scan
@pytest.mark.parametrize("force_v2", [False, True])
@pytest.mark.parametrize("host", ["10.0.0.1", "fe80::1"])
def test_decode_properties_reads_only_the_properties(force_v2: bool, host: str) -> None:
    msg = Message(
        topic="T",
        body=b"x" * 300,
        properties={props.TAGS: "t", "amount": "5", "note": "a\u00e9b"},
        born_host=(host, 1),
        store_host=(host, 2),
    )
    data = bytes(records.encode(msg, body_size_max_bytes=1 << 20, force_v2=force_v2))
    assert records.decode_properties(data) == records.decode(data).properties
    with pytest.raises(ValueError, match="undecodable"):
        records.decode_properties(data[:60])


def _produce(harness: Harness, tag: str, amount: int) -> None:
    body = f"{tag}-{amount}"
    harness.store.put_messages(
        [
            Message(
                topic=TOPIC,
                body=body.encode(),
                queue_id=0,
                properties={props.TAGS: tag, props.KEYS: body, "amount": str(amount)},
            )
        ]
    )
    harness.settle()


def _count_reads(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads: list[int] = []
    original = harness.store.reads.read  # every read of a record by offset goes through it

    def counting(offset: int, size: int) -> bytes | None:
        reads.append(offset)
        return original(offset, size)

    monkeypatch.setattr(harness.store.reads, "read", counting)
    return reads


def test_pop_with_sql_reads_only_records_the_tag_hash_admits(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(10):
        _produce(harness, "paid" if i % 5 == 0 else "created", i * 10)
    reads = _count_reads(harness, monkeypatch)
    sql = filtering.parse("TAGS = 'paid' AND amount >= 50", filtering.ExpressionType.SQL92)
    got = harness.pop(tag_filter=sql)
    assert bodies_of(got) == ["paid-50"]
    assert len(reads) == 2  # paid-0 (read, amount fails) and paid-50; no "created" record


def test_pop_with_sql_on_properties_skips_and_advances(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(6):
        _produce(harness, "created", i)
    sql = filtering.parse("amount IN ('1', '4') OR amount > 4", filtering.ExpressionType.SQL92)
    got = harness.pop(tag_filter=sql)
    assert sorted(bodies_of(got)) == ["created-1", "created-4", "created-5"]
    harness.advance(11_000)
    assert harness.store.consumer_offsets.query(GROUP, TOPIC, 0) == 6
