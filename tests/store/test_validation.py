"""Topic, group and user-property rules (gannet.node.store.validation)."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gannet.node.store import validation as v
from gannet.node.store.errors import (
    GroupNameIllegal,
    MessageIllegal,
    PropertiesTooLarge,
    TopicNameIllegal,
)

LEGAL_CHARS = string.ascii_letters + string.digits + "%|_-"


# --- topics -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["TopicTest", "a", "a|b", "%RETRY%g", "x-y_z%9", "TBW102"])
def test_legal_topic_names_pass(name):
    v.validate_topic(name)


def test_topic_length_limit_is_127_bytes():
    v.validate_topic("t" * 127)
    with pytest.raises(TopicNameIllegal, match=r"is 128 bytes; at most 127 bytes"):
        v.validate_topic("t" * 128)


@pytest.mark.parametrize("prefix", ["%RETRY%", "%DLQ%"])
def test_retry_and_dlq_topics_may_have_255_bytes(prefix):
    v.validate_topic(prefix + "g" * (255 - len(prefix)))
    with pytest.raises(TopicNameIllegal, match=r"is 256 bytes; at most 255 bytes"):
        v.validate_topic(prefix + "g" * (256 - len(prefix)))


def test_a_plain_topic_of_255_bytes_is_too_long():
    with pytest.raises(TopicNameIllegal, match="at most 127"):
        v.validate_topic("t" * 255)


@pytest.mark.parametrize("name", ["", " ", "\t \n"])
def test_blank_topic_is_refused(name):
    with pytest.raises(TopicNameIllegal, match="topic name is blank"):
        v.validate_topic(name)


@pytest.mark.parametrize(
    ("name", "char", "position"),
    [
        ("my topic", "' '", 2),
        ("a.b", "'.'", 1),
        ("t@g", "'@'", 1),
        ("caf\u00e9", "'é'", 3),
        ("a/b", "'/'", 1),
        ("a+b", "'+'", 1),
    ],
)
def test_illegal_character_is_named_with_its_position_and_the_charset(name, char, position):
    with pytest.raises(TopicNameIllegal) as info:
        v.validate_topic(name)

    message = str(info.value)
    assert f"illegal character {char}" in message
    assert f"at position {position}" in message
    assert "[%|a-zA-Z0-9_-]" in message


def test_long_names_are_shortened_in_messages():
    with pytest.raises(TopicNameIllegal) as info:
        v.validate_topic("t" * 1000)

    assert len(str(info.value)) < 250
    assert "(1000 characters)" in str(info.value)


@pytest.mark.parametrize(
    "name",
    [
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "OFFSET_MOVED_EVENT",
        "rmq_sys_wheel_timer",
        "rmq_sys_REVIVE_LOG_DefaultCluster",
    ],
)
def test_system_topics_are_valid_names_but_refused_for_clients(name):
    assert v.is_system_topic(name)
    v.validate_topic(name)
    with pytest.raises(TopicNameIllegal, match="system topic"):
        v.validate_topic(name, allow_system=False)


def test_ordinary_topic_is_not_a_system_topic():
    assert not v.is_system_topic("TopicTest")
    assert not v.is_system_topic("RMQ_SYS_something_else")
    v.validate_topic("TopicTest", allow_system=False)


@given(st.text(alphabet=LEGAL_CHARS, min_size=1, max_size=127))
def test_any_legal_name_up_to_127_passes(name):
    v.validate_topic(name)
    v.validate_group(name[:120])


@given(
    st.text(alphabet=LEGAL_CHARS, max_size=20),
    st.characters().filter(lambda c: c not in LEGAL_CHARS and not c.isspace()),
    st.text(alphabet=LEGAL_CHARS, max_size=20),
)
def test_any_name_with_an_illegal_character_fails(head, bad, tail):
    with pytest.raises(TopicNameIllegal, match=f"at position {len(head)}"):
        v.validate_topic(head + bad + tail)
    with pytest.raises(GroupNameIllegal):
        v.validate_group(head + bad + tail)


# --- groups -----------------------------------------------------------------------------------


def test_group_length_limit_is_120_bytes():
    v.validate_group("g" * 120)
    with pytest.raises(GroupNameIllegal, match=r"is 121 bytes; at most 120 bytes"):
        v.validate_group("g" * 121)


def test_legacy_group_limit_is_255_bytes():
    v.validate_group("g" * 255, length_max_bytes=v.GROUP_NAME_LEGACY_BYTES_MAX)
    with pytest.raises(GroupNameIllegal, match=r"is 256 bytes; at most 255 bytes"):
        v.validate_group("g" * 256, length_max_bytes=v.GROUP_NAME_LEGACY_BYTES_MAX)


def test_group_blank_and_illegal_characters():
    with pytest.raises(GroupNameIllegal, match="group name is blank"):
        v.validate_group(" ")
    with pytest.raises(GroupNameIllegal, match=r"illegal character '\.' \(U\+002E\)"):
        v.validate_group("my.group")


def test_system_group_prefix_is_refused_for_clients():
    v.validate_group("CID_RMQ_SYS_REVIVE_GROUP")
    assert v.is_system_group(v.REVIVE_GROUP)
    with pytest.raises(GroupNameIllegal, match="reserved"):
        v.validate_group("CID_RMQ_SYS_x", allow_system=False)


# --- names the broker builds --------------------------------------------------------------------


def test_derived_names():
    assert v.retry_topic_v1("g", "t") == "%RETRY%g_t"
    assert v.retry_topic_v2("g", "t") == "%RETRY%g+t"
    assert v.group_retry_topic("g") == "%RETRY%g"
    assert v.dlq_topic("g") == "%DLQ%g"
    assert v.revive_topic("DefaultCluster") == "rmq_sys_REVIVE_LOG_DefaultCluster"
    assert v.is_retry_topic("%RETRY%g")
    assert not v.is_retry_topic("%DLQ%g")
    assert v.is_dlq_topic("%DLQ%g")
    assert not v.is_dlq_topic("TopicTest")


def test_longest_group_and_topic_make_a_valid_retry_topic():
    retry = v.retry_topic_v1("g" * 120, "t" * 127)

    assert len(retry) == 255
    v.validate_topic(retry)


def test_original_topic_of_pop_retry_topics():
    assert v.original_topic("%RETRY%g_t", "g") == "t"
    assert v.original_topic("%RETRY%g+t_x", "g") == "t_x"
    assert v.original_topic("%RETRY%a_b_t", "a_b") == "t"
    assert v.original_topic("%RETRY%g", "g") is None
    assert v.original_topic("%RETRY%h_t", "g") is None


# --- user properties ----------------------------------------------------------------------------


def test_reserved_keys_are_the_51_of_string_hash_set():
    assert len(v.RESERVED_PROPERTY_KEYS) == 51
    for key in ("TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TIMER_DELIVER_MS", "__CRC32#", "MSG_TYPE"):
        assert key in v.RESERVED_PROPERTY_KEYS
    assert "__SHARDINGKEY" not in v.RESERVED_PROPERTY_KEYS


def test_ordinary_properties_pass():
    v.validate_user_properties({"orderId": "42", "region": "eu", "empty": ""}, "TagA", ["k1"])


def test_128_properties_pass_and_129_are_too_many():
    v.validate_user_properties({f"k{i}": "v" for i in range(128)})
    with pytest.raises(PropertiesTooLarge, match="129 user properties; at most 128"):
        v.validate_user_properties({f"k{i}": "v" for i in range(129)})


@pytest.mark.parametrize("key", ["TAGS", "UNIQ_KEY", "__BORNHOST", "TIMER_OUT_MS"])
def test_reserved_key_is_refused(key):
    with pytest.raises(MessageIllegal, match="reserved") as info:
        v.validate_user_properties({key: "x"})

    assert not isinstance(info.value, PropertiesTooLarge)


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x02", "\n", "\x7f", "\x85", "\x9f"])
def test_control_characters_in_keys_and_values_are_refused(char):
    code = f"U+{ord(char):04X}"
    with pytest.raises(MessageIllegal, match=rf"control character {code.replace('+', '[+]')}"):
        v.validate_user_properties({f"a{char}b": "x"})
    with pytest.raises(MessageIllegal, match="value of user property 'k'"):
        v.validate_user_properties({"k": f"x{char}"})


def test_non_control_unicode_is_fine():
    v.validate_user_properties({"k\u00a0": "\u00e9\u4e2d\U0001f600"})


def test_empty_and_transient_keys_are_refused():
    with pytest.raises(MessageIllegal, match="empty key"):
        v.validate_user_properties({"": "x"})
    with pytest.raises(MessageIllegal, match="never stored"):
        v.validate_user_properties({"__RMQ.TRANSIENT.x": "y"})


def test_size_limit_counts_utf8_bytes_of_properties_tag_and_keys():
    # 16 KiB exactly: key "k" (1) + value + tag "t" (1) + keys "ab","c" (3).
    value = "v" * (16 * 1024 - 5)
    v.validate_user_properties({"k": value}, "t", ["ab", "c"])
    with pytest.raises(PropertiesTooLarge, match="16385 bytes; at most 16384"):
        v.validate_user_properties({"k": value + "v"}, "t", ["ab", "c"])
    # "é" is 2 bytes in UTF-8.
    with pytest.raises(PropertiesTooLarge, match="16385 bytes"):
        v.validate_user_properties({"k": "é" * (16 * 1024 // 2)})


def test_tag_rules():
    v.validate_tag("TagA")
    with pytest.raises(MessageIllegal, match="blank"):
        v.validate_tag("  ")
    with pytest.raises(MessageIllegal, match="'\\|'"):
        v.validate_tag("a|b")
    with pytest.raises(MessageIllegal, match="control character"):
        v.validate_tag("a\x00")


def test_key_rules():
    v.validate_keys(["k1", "k 2"])
    with pytest.raises(MessageIllegal, match="blank"):
        v.validate_keys(["k1", " "])
    with pytest.raises(MessageIllegal, match="control character"):
        v.validate_keys(["a\tb"])
