"""fastjson dialect reader and strict writer (gannet.node.store.configs.fastjson)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gannet.node.store.configs import fastjson
from gannet.node.store.configs.fastjson import DataVersion, JsonSyntaxError, JsonValue
from gannet.node.store.errors import CorruptionError

# What RocketMQ 5 (fastjson 1.2.83, pretty format) writes for consumerOffset.json: tab
# indentation, bare integer keys, and the closing brace of an integer map on its own line.
ROCKETMQ_CONSUMER_OFFSET = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":2,\n'
    '\t\t"stateVersion":0,\n'
    '\t\t"timestamp":1700000000123\n'
    "\t},\n"
    '\t"groupTopicMap":{\n'
    '\t\t"please_rename_unique_group_name_4":["TopicTest","%RETRY%please_rename_unique_group_name_4"]\n'
    "\t},\n"
    '\t"offsetTable":{\n'
    '\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0\n'
    "\t\t},\n"
    '\t\t"TopicTest@please_rename_unique_group_name_4":{0:5280,1:5312,2:5297,3:5303\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)


def test_rocketmq_consumer_offset_file_with_bare_integer_keys_parses():
    document = fastjson.loads(ROCKETMQ_CONSUMER_OFFSET)

    assert isinstance(document, dict)
    assert document["offsetTable"] == {
        "%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4": {"0": 0},
        "TopicTest@please_rename_unique_group_name_4": {
            "0": 5280,
            "1": 5312,
            "2": 5297,
            "3": 5303,
        },
    }
    assert DataVersion.from_json(document["dataVersion"]) == DataVersion(2, 0, 1700000000123)


def test_bare_keys_keep_their_exact_text_and_negative_integers_are_keys():
    assert fastjson.loads("{007:1,-3:2}") == {"007": 1, "-3": 2}


def test_bare_identifier_keys_are_tolerated():
    assert fastjson.loads("{ counter : 1, $x_1:{a:true}, null:null }") == {
        "counter": 1,
        "$x_1": {"a": True},
        "null": None,
    }


def test_string_contents_that_look_like_bare_keys_are_not_altered():
    text = r'{"a":"{0:1,x:2}", 5:"\"q\", 6:7", "b":["{", ",1:", "\\", "\u00e9"]}'

    assert fastjson.loads(text) == {
        "a": "{0:1,x:2}",
        "5": '"q", 6:7',
        "b": ["{", ",1:", "\\", "é"],
    }


def test_strict_json_passes_through_unchanged():
    text = '{"a":[1,2.5,-3e2,true,false,null],"b":{"c":"d"}}'

    assert fastjson.loads(text) == json.loads(text)


def test_bytes_input_may_start_with_a_byte_order_mark():
    assert fastjson.loads(b"\xef\xbb\xbf{0:1}") == {"0": 1}


def test_raw_control_characters_inside_strings_are_accepted():
    assert fastjson.loads('{"a":"x\ty\x01"}') == {"a": "x\ty\x01"}


@pytest.mark.parametrize(
    ("text", "offset"),
    [
        ('{"a":"x,1:2}', 5),  # unterminated string
        ("{0:1,1:x}", 7),  # the offset is in the caller's text, not the quoted one
        ("{1.5:2}", 1),
        ('{"a":1,}', 7),
        ("[1,2", 4),
    ],
)
def test_syntax_errors_name_the_offset_in_the_original_text(text, offset):
    with pytest.raises(JsonSyntaxError) as info:
        fastjson.loads(text)

    assert info.value.offset == offset
    assert f"at offset {offset}" in str(info.value)


@pytest.mark.parametrize("text", ["NaN", '{"a":Infinity}', "[-Infinity]", "{'a':1}", "", "  "])
def test_non_json_is_refused(text):
    with pytest.raises(JsonSyntaxError):
        fastjson.loads(text)


def test_syntax_error_is_a_corruption_error_and_a_value_error():
    with pytest.raises(CorruptionError):
        fastjson.loads("{")
    with pytest.raises(ValueError, match="not UTF-8"):
        fastjson.loads(b"\xff\xfe")


def test_dumps_uses_fastjson_pretty_layout_with_sorted_keys():
    text = fastjson.dumps(
        {"topicName": "t", "attributes": {}, "perm": 6, "offsets": {"10": 1, "2": 2, "-1": 3}}
    )

    assert text == (
        "{\n"
        '\t"attributes":{},\n'
        '\t"offsets":{\n'
        '\t\t"-1":3,\n'
        '\t\t"2":2,\n'
        '\t\t"10":1\n'
        "\t},\n"
        '\t"perm":6,\n'
        '\t"topicName":"t"\n'
        "}"
    )


def test_dumps_writes_non_ascii_as_utf8_and_escapes_control_characters():
    data = fastjson.encode({"k": "é\x01"})

    assert data == b'{\n\t"k":"\xc3\xa9\\u0001"\n}'
    assert json.loads(data) == {"k": "é\x01"}


def test_dumps_refuses_what_strict_json_cannot_hold():
    with pytest.raises(TypeError, match="keys must be str"):
        fastjson.dumps({1: 2})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="Out of range float"):
        fastjson.dumps({"a": float("nan")})


def test_data_version_reads_the_old_timestatmp_spelling_and_defaults():
    assert DataVersion.from_json({"counter": 4, "timestatmp": 99}) == DataVersion(4, 0, 99)
    assert DataVersion.from_json(None) == DataVersion()
    assert DataVersion(1, 2, 3).next(10) == DataVersion(2, 2, 10)
    assert DataVersion(1, 2, 3).next(10, state_version=7) == DataVersion(2, 7, 10)


# --- properties -------------------------------------------------------------------------------

_tricky_text = st.text(alphabet=st.sampled_from(list('{}[]:,"\\ \t\n0123456789-.eabé\x01$_'))) | (
    st.text()
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _tricky_text
)
_json_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(_tricky_text, children, max_size=5)
    ),
    max_leaves=25,
)


def _same(a: JsonValue, b: JsonValue) -> bool:
    """Equal including int-vs-float distinctions."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@given(
    value=_json_values,
    indent=st.sampled_from([None, 0, 2, "\t"]),
    ensure_ascii=st.booleans(),
    compact=st.booleans(),
)
def test_reader_agrees_with_json_loads_on_strict_json(value, indent, ensure_ascii, compact):
    separators = (",", ":") if compact else (", ", ": ")
    text = json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators)

    assert _same(fastjson.loads(text), json.loads(text))


def _render_fastjson(value: JsonValue) -> str:
    """Render like fastjson: keys that are integers go out bare."""
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            bare = key.lstrip("-").isdecimal() and key.isascii()
            shown = key if bare else json.dumps(key)
            items.append(f"{shown}:{_render_fastjson(item)}")
        return "{" + ",\n\t".join(items) + "\n}"
    if isinstance(value, list):
        return "[" + ",".join(_render_fastjson(item) for item in value) + "]"
    return json.dumps(value)


_int_keyed = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.integers().map(str), children, max_size=4)
        | st.dictionaries(_tricky_text, children, max_size=4)
    ),
    max_leaves=25,
)


@given(_int_keyed)
def test_bare_integer_keys_parse_like_their_quoted_form(value):
    assert _same(fastjson.loads(_render_fastjson(value)), value)


@given(_json_values)
def test_dumps_then_loads_round_trips(value):
    text = fastjson.dumps(value)

    assert _same(json.loads(text), value)
    assert _same(fastjson.loads(text), value)
