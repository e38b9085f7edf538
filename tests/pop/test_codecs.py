"""Byte-exact fixtures for the Pop formats of ``docs/formats/pop.md`` §2–§3."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.node.pop import acks, checkpoints, filtering, receipts
from gannet.node.pop.acks import AckMsg
from gannet.node.pop.checkpoints import PopCheckPoint
from gannet.node.pop.errors import (
    FilterExpressionIllegal,
    PopRequestIllegal,
    ReceiptHandleIllegal,
)
from gannet.node.pop.receipts import ReceiptHandle, TopicFlag
from gannet.node.store.hashing import tags_code
from gannet.node.store.queues.consume_queues import CqUnit

CK = PopCheckPoint(
    start_offset=100,
    pop_time_ms=1700000000000,
    invisible_time_ms=60000,
    num=3,
    queue_id=2,
    topic="Orders",
    cid="GID",
    broker_name="broker-a",
    offset_diffs=(0, 1, 3),
)
CK_JSON = (
    b'{"bm":0,"bn":"broker-a","c":"GID","d":[0,1,3],"it":60000,"n":3,"pt":1700000000000,'
    b'"q":2,"reviveTime":1700000060000,"ro":0,"so":100,"t":"Orders"}'
)


def test_checkpoint_json_is_fastjson_shaped() -> None:
    assert checkpoints.encode(CK) == CK_JSON
    assert checkpoints.decode(CK_JSON) == CK


def test_checkpoint_with_re_put_times_and_without_diffs() -> None:
    old = b'{"so":5,"pt":1,"it":2,"bm":1,"n":2,"q":0,"t":"T","c":"G","ro":9,"rp":"3"}'
    ck = checkpoints.decode(old)
    assert ck.offset_diffs is None
    assert ck.queue_offset(1) == 6
    assert ck.index_of(6) == 1
    assert ck.index_of(7) == -1
    assert ck.parse_re_put_times() == 3
    assert ck.is_acked(0)
    assert not ck.is_acked(1)
    assert b'"rp":"3"' in checkpoints.encode(ck)
    garbled = checkpoints.decode(old.replace(b'"3"', b'"x"'))
    assert garbled.parse_re_put_times() == 127


def test_checkpoint_index_of_uses_diffs() -> None:
    assert [CK.index_of(o) for o in (99, 100, 101, 102, 103)] == [-1, 0, 1, -1, 2]
    assert CK.queue_offset(2) == 103
    assert CK.revive_time_ms == 1700000060000


def test_checkpoint_keys() -> None:
    assert checkpoints.ck_unique_key(CK) == "Orders@2@100@GID@1700000000000@broker-a@ck"
    assert checkpoints.ck_revive_key(CK) == "OrdersGID21001700000000000broker-a"


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"not json",
        b'{"so":"x","pt":1,"it":1,"n":1,"q":0,"t":"T","c":"G"}',
        b'{"so":1}',
        b'{"so":1,"pt":1,"it":1,"n":0,"q":0,"t":"T","c":"G"}',
        b'{"so":1,"pt":1,"it":1,"n":99999999999,"q":0,"t":"T","c":"G"}',
        b'{"so":1,"pt":1,"it":1,"n":2,"d":[0,1,2],"q":0,"t":"T","c":"G"}',
        b'{"so":1,"pt":1,"it":1,"n":2,"bm":4,"q":0,"t":"T","c":"G"}',
    ],
)
def test_bad_checkpoint_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(PopRequestIllegal):
        checkpoints.decode(body)


def test_checkpoint_bitmap_invariants_stop_a_broken_checkpoint() -> None:
    """Ack bits only for messages the checkpoint holds; as many offset diffs as messages."""
    assert CK.with_bits(0b101).bit_map == 0b101
    with pytest.raises(AssertionError, match="beyond the 3 of the checkpoint"):
        CK.with_bits(0b1000)
    with pytest.raises(AssertionError, match="with 2 offset diffs"):
        dataclasses.replace(CK, offset_diffs=(0, 1))
    with pytest.raises(AssertionError, match="beyond the 3"):
        dataclasses.replace(CK, bit_map=0b1111)


ACK = AckMsg(102, 100, "GID", "Orders", 2, 1700000000000, "broker-a")
ACK_JSON = b'{"ao":102,"bn":"broker-a","c":"GID","pt":1700000000000,"q":2,"so":100,"t":"Orders"}'


def test_ack_json_and_unique_key() -> None:
    assert acks.encode(ACK) == ACK_JSON
    assert acks.decode(ACK_JSON) == ACK
    assert acks.ack_unique_key(ACK) == "Orders@2@102@GID@1700000000000@broker-a@ack"
    assert ACK.revive_key("x") == checkpoints.ck_revive_key(CK)


def test_batch_ack_json_and_unique_key() -> None:
    batch = AckMsg(-1, 100, "GID", "Orders", 2, 1700000000000, None, (100, 103))
    body = acks.encode(batch)
    assert (
        body
        == b'{"ao":-1,"aol":[100,103],"c":"GID","pt":1700000000000,"q":2,"so":100,"t":"Orders"}'
    )
    assert acks.decode(body) == batch
    assert acks.ack_unique_key(batch) == "Orders@2@[100, 103]@GID@1700000000000@bAck"
    assert batch.revive_key("broker-a") == checkpoints.ck_revive_key(CK)


def test_ack_accepts_long_java_names() -> None:
    long_names = (
        b'{"ackOffset":7,"startOffset":5,"consumerGroup":"G","topic":"T","queueId":1,'
        b'"popTime":9,"brokerName":"b"}'
    )
    assert acks.decode(long_names) == AckMsg(7, 5, "G", "T", 1, 9, "b")


def test_extra_info_and_receipt_handle() -> None:
    handle = ReceiptHandle(100, 1700000000000, 60000, 3, TopicFlag.NORMAL, "broker-a", 2, 102, 8812)
    assert handle.extra_info() == "100 1700000000000 60000 3 0 broker-a 2 102"
    assert handle.encode() == "100 1700000000000 60000 3 0 broker-a 2 102 8812"
    assert receipts.parse(handle.encode()) == handle
    assert receipts.parse(handle.extra_info()).commit_offset == -1
    assert handle.next_visible_time_ms == 1700000060000
    order = receipts.parse("5 1 2 999 0 b 0 5")
    assert order.is_order


def test_topic_flags() -> None:
    assert receipts.topic_flag("Orders") is TopicFlag.NORMAL
    assert receipts.topic_flag("%RETRY%GID_Orders") is TopicFlag.RETRY_V1
    assert receipts.topic_flag("%RETRY%GID+Orders") is TopicFlag.RETRY_V2
    assert receipts.real_topic(TopicFlag.RETRY_V1, "GID", "Orders") == "%RETRY%GID_Orders"
    assert receipts.real_topic(TopicFlag.RETRY_V2, "GID", "Orders") == "%RETRY%GID+Orders"
    assert receipts.start_offset_info(TopicFlag.RETRY_V1, 0, 7) == "1 0 7"
    assert receipts.msg_offset_info(TopicFlag.NORMAL, 2, [7, 8]) == "0 2 7,8"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1 2 3",
        "a 1 2 3 0 b 0 5",
        "1 2 3 4 7 b 0 5",
        "1 2 3 4 0  0 5",
        "1 2 3 4 0 b -1 5",
        "1 2 3 4 0 b 0 5 6 7",
        "1" * 2000,
    ],
)
def test_bad_receipt_handles_are_refused(text: str) -> None:
    with pytest.raises(ReceiptHandleIllegal):
        receipts.parse(text)


_EDGE_NUMBERS = (
    "0",
    "7",
    "999",
    "2147483647",
    "2147483648",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999",
    "-1",
    "007",
    "1_0",
    "\u0663",
    "",
)


_NUMBERS = st.one_of(st.sampled_from(_EDGE_NUMBERS), st.integers(0, 2**64).map(str))


@settings(max_examples=400, deadline=None)
@given(
    head=st.lists(_NUMBERS, min_size=4, max_size=4),
    flag=st.sampled_from(("0", "1", "2", "3", "01", "")),
    broker=st.sampled_from(("b", "broker-a", "", "x\ty")),
    tail=st.lists(_NUMBERS, min_size=2, max_size=4),
)
def test_parse_fast_path_agrees_with_the_field_checks(
    head: list[str], flag: str, broker: str, tail: list[str]
) -> None:
    """``parse``'s one-match path gives the handle or the error the field-by-field checks
    give, for 8 to 10 fields of numbers near every limit."""
    text = " ".join([*head, flag, broker, *tail])

    def outcome(parse: Callable[[str], ReceiptHandle]) -> object:
        try:
            return parse(text)
        except ReceiptHandleIllegal as exc:
            return ("illegal", str(exc))

    assert outcome(receipts.parse) == outcome(receipts._parse_checked)


def test_parse_fast_path_keeps_the_range_checks() -> None:
    ok = "100 1700000000000 60000 3 0 broker-a 2 102 8812"
    assert receipts.parse(ok) == receipts._parse_checked(ok)
    for bad in (
        "100 9223372036854775807 1 3 0 b 2 102 8812",  # pop + invisible past a long
        "103 1 1 3 0 b 2 102 8812",  # checkpoint offset past the message's
        "1 1 1 2147483648 0 b 2 102 8812",  # revive queue past an int
        "1 1 1 3 0 b 2147483648 102 8812",  # queue id past an int
        "1 1 1 3 0 b 2 9223372036854775808 8812",  # queue offset past a long
        "1 1 1 3 0 b 2 102 9223372036854775808",  # commit offset past a long
    ):
        with pytest.raises(ReceiptHandleIllegal):
            receipts.parse(bad)


def _unit(tag: str | None) -> CqUnit:
    return CqUnit(0, 0, 10, tags_code(tag))


def test_tag_filters() -> None:
    assert filtering.parse("*").matches_all
    assert filtering.parse("").matches_all
    assert filtering.parse(None).matches_all
    f = filtering.parse(" TagA || TagB ||")
    assert isinstance(f, filtering.TagFilter)
    assert f.tags == frozenset({"TagA", "TagB"})
    assert f.accepts_unit(_unit("TagA"))
    assert not f.accepts_unit(_unit("TagC"))
    assert not f.accepts_unit(_unit(None))
    assert f.matches_tag("TagB")
    assert not f.matches_tag(None)
    assert filtering.parse("a || *").matches_all


def test_bad_filters() -> None:
    with pytest.raises(FilterExpressionIllegal, match=r"SQL92.*line 1, column 5"):
        filtering.parse("a > 'x'", filtering.ExpressionType.SQL92)
    with pytest.raises(FilterExpressionIllegal):
        filtering.parse("||")
