"""Byte-level tests of the commit-log record codec, properties, hashes and message ids.

Expected bytes are written out field by field from ``docs/formats/commitlog.md`` §3 and §5, not
produced by the encoder under test.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gannet.node.store import msgids
from gannet.node.store import properties as props
from gannet.node.store.errors import MessageIllegal, MessageTooLarge, PropertiesTooLarge
from gannet.node.store.hashing import body_crc32, index_key_hash, java_string_hash, tags_code
from gannet.node.store.log import layout, packing, record_checks, records
from gannet.node.store.log.records import Message

# A V1 record: topic "T", body b"hi", properties TAGS=a, born 10.0.0.1:7, store 127.0.0.1:10911.
EXPECTED_V1 = bytes.fromhex(
    "00000065"  # TOTALSIZE 101 = 91 + body 2 + topic 1 + properties 7
    "DAA320A7"  # MAGICCODE V1
    "58932AAC"  # BODYCRC = crc32(b"hi") & 0x7FFFFFFF
    "00000003"  # QUEUEID 3
    "00000009"  # FLAG 9
    "0000000000000005"  # QUEUEOFFSET 5
    "0000000000000040"  # PHYSICALOFFSET 64
    "00000000"  # SYSFLAG
    "0000000000000064"  # BORNTIMESTAMP 100
    "0A000001" "00000007"  # BORNHOST 10.0.0.1:7
    "00000000000000C8"  # STORETIMESTAMP 200
    "7F000001" "00002A9F"  # STOREHOST 127.0.0.1:10911
    "00000002"  # RECONSUMETIMES 2
    "0000000000000000"  # PREPARED TRANSACTION OFFSET
    "00000002" "6869"  # BODY
    "01" "54"  # TOPIC (1-byte length in V1)
    "0007" "54414753" "01" "61" "02"  # PROPERTIES "TAGS\x01a\x02"
)  # fmt: skip


def sample(**kw: object) -> records.Message:
    base = records.Message(
        topic="T",
        body=b"hi",
        queue_id=3,
        flag=9,
        properties={"TAGS": "a"},
        born_timestamp_ms=100,
        born_host=("10.0.0.1", 7),
        store_timestamp_ms=200,
        store_host=("127.0.0.1", 10911),
        reconsume_times=2,
        queue_offset=5,
        physical_offset=64,
    )
    for k, v in kw.items():
        setattr(base, k, v)
    return base


def test_v1_record_bytes_match_the_reference_layout() -> None:
    assert bytes(records.encode(sample(), body_size_max_bytes=1024)) == EXPECTED_V1


def test_patch_writes_offsets_and_store_time_at_their_positions() -> None:
    buf = records.encode(
        sample(queue_offset=0, physical_offset=0, store_timestamp_ms=0), body_size_max_bytes=1024
    )
    records.patch_append_fields(buf, 0, queue_offset=5, physical_offset=64, store_timestamp_ms=200)
    assert bytes(buf) == EXPECTED_V1


def test_ipv6_hosts_set_sysflag_bits_and_move_the_store_timestamp() -> None:
    msg = sample(born_host=("::1", 7), store_host=("fe80::2", 9))
    buf = records.encode(msg, body_size_max_bytes=1024)
    assert struct.unpack_from(">i", buf, 0)[0] == 101 + 24
    sys_flag = struct.unpack_from(">i", buf, 36)[0]
    assert sys_flag == layout.SYSFLAG_BORNHOST_V6 | layout.SYSFLAG_STOREHOST_V6
    assert buf[48:64] == bytes(15) + b"\x01"
    assert struct.unpack_from(">q", buf, 68)[0] == 200  # 56 + 12
    back = records.decode(buf)
    assert back.born_host == ("::1", 7)
    assert back.store_host == ("fe80::2", 9)


def test_long_topic_uses_v2_magic_and_two_byte_length() -> None:
    topic = "%RETRY%" + "g" * 130
    buf = records.encode(sample(topic=topic), body_size_max_bytes=1024)
    assert struct.unpack_from(">i", buf, 4)[0] == layout.MAGIC_V2
    assert struct.unpack_from(">i", buf, 0)[0] == 91 + 2 + 1 + len(topic) + 7
    assert records.decode(buf).topic == topic


def test_blank_record_bytes() -> None:
    assert records.blank_record(1000) == bytes.fromhex("000003E8CBD43194")


def test_whole_record_crc_tail_is_least_significant_digit_first() -> None:
    assert records.crc_property_tail(12345) == b"__CRC32#\x015432100000\x02"
    buf = records.encode(sample(), body_size_max_bytes=1024, append_crc=True)
    records.patch_append_fields(
        buf, 0, queue_offset=5, physical_offset=64, store_timestamp_ms=200, append_crc=True
    )
    res = record_checks.check_record(buf, 0, len(buf), check_crc=True)
    assert res.ok, res.error
    buf[90] ^= 0x01  # flip a bit in the body
    assert not record_checks.check_record(buf, 0, len(buf), check_crc=True).ok


def test_check_record_extracts_dispatch_info() -> None:
    msg = sample(properties={"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "U"})
    buf = records.encode(msg, body_size_max_bytes=1024)
    res = record_checks.check_record(buf, 0, len(buf), check_crc=True)
    assert res.ok
    assert res.info is not None
    info = res.info
    assert (info.topic, info.queue_id, info.commit_offset, info.queue_offset) == ("T", 3, 64, 5)
    assert info.tags_code == java_string_hash("a") == 97
    assert info.keys == "k1 k2"
    assert info.uniq_key == "U"
    assert info.size == len(buf)


@pytest.mark.parametrize(
    ("mutate", "reason", "check_crc"),
    [
        (lambda b: b.__setitem__(slice(4, 8), b"\0\0\0\0"), "bad magic", True),
        (lambda b: b.__setitem__(slice(0, 4), struct.pack(">i", 5000)), "outside", True),
        (lambda b: b.__setitem__(88, b[88] ^ 0xFF), "CRC", True),
        (lambda b: b.__setitem__(slice(92, 94), struct.pack(">h", 6)), "TOTALSIZE", False),
        (lambda b: b.__setitem__(slice(84, 88), struct.pack(">i", 3)), "overruns", False),
    ],
)
def test_damaged_records_are_refused_with_a_reason(mutate, reason: str, check_crc: bool) -> None:
    buf = bytearray(EXPECTED_V1)
    mutate(buf)
    res = record_checks.check_record(buf, 0, len(buf), check_crc=check_crc)
    assert not res.ok
    assert reason in res.error


def test_truncated_record_is_refused() -> None:
    res = record_checks.check_record(EXPECTED_V1[:60], 0, 60, check_crc=True)
    assert not res.ok


def test_blank_is_end_of_file() -> None:
    res = record_checks.check_record(records.blank_record(64), 0, 64, check_crc=True)
    assert res.ok
    assert res.size == 0


def test_oversize_body_and_properties_are_refused_naming_the_limit() -> None:
    with pytest.raises(MessageTooLarge, match="maxMessageSize"):
        records.encode(sample(body=b"x" * 2000), body_size_max_bytes=1024)
    with pytest.raises(PropertiesTooLarge, match="32767"):
        records.encode(sample(properties={"k": "v" * 40000}), body_size_max_bytes=1024)


def test_properties_encoding_and_rocketmq_parse_rules() -> None:
    assert props.encode({"A": "1", "B": "2"}) == "A\x011\x02B\x012\x02"
    assert props.encode({}) == ""
    assert props.encode({"__RMQ.TRANSIENT.X": "1"}) == ""
    # empty key, empty value and short segments are dropped
    assert props.decode("A\x011\x02\x01x\x02B\x01\x02ok\x01yes\x02") == {"A": "1", "ok": "yes"}
    assert props.split_keys("a  b ") == ["a", "b"]


def test_java_string_hash_known_values() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0  # abs(MIN_VALUE) overflows → 0
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00  # surrogate pair
    assert java_string_hash("é") == 0xE9
    assert tags_code(None) == 0
    assert index_key_hash("T#k") == abs(java_string_hash("T#k"))


_hosts = st.sampled_from([("127.0.0.1", 10911), ("10.1.2.3", 0), ("::1", 8081)])
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)


@given(
    topic=st.sampled_from(["T", "Topic-%", "t" * 127, "u" * 128, "Ω-topic"]),
    body=st.binary(max_size=2000),
    queue_id=_int32,
    flag=_int32,
    sys_flag=_int32,
    reconsume=_int32,
    born_ms=_int64,
    prepared=_int64,
    born=_hosts,
    store=_hosts,
    properties=st.dictionaries(
        st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "a", "Ω", "__RMQ.TRANSIENT.X"]),
        st.text(max_size=20),
        max_size=5,
    ),
    crc=st.booleans(),
)
def test_record_fields_equal_split_record(
    topic: str, body: bytes, queue_id: int, flag: int, sys_flag: int, reconsume: int,
    born_ms: int, prepared: int, born: tuple[str, int], store: tuple[str, int],
    properties: dict[str, str], crc: bool,
) -> None:  # fmt: skip
    """The append path's one-pass encoder gives the reference encoder's fields, and packing
    them gives :func:`records.encode`'s bytes."""
    msg = Message(
        topic=topic, body=body, queue_id=queue_id, flag=flag, properties=properties,
        sys_flag=sys_flag, born_timestamp_ms=born_ms, born_host=born, store_host=store,
        reconsume_times=reconsume, prepared_transaction_offset=prepared, queue_offset=7,
        physical_offset=4096, store_timestamp_ms=1_700_000_000_123,
    )  # fmt: skip
    fields = packing.record_fields(msg, body_size_max_bytes=1 << 20, append_crc=crc)
    assert fields == tuple(records.split_record(msg, body_size_max_bytes=1 << 20, append_crc=crc))
    buf = bytearray(fields[0] + 5)
    packing.pack_record_into(buf, 5, fields, 7, 4096, 1_700_000_000_123, append_crc=crc)
    expected = records.encode(msg, body_size_max_bytes=1 << 20, append_crc=crc)
    if crc:
        records.seal_crc(expected)
    assert bytes(buf[5:]) == bytes(expected)


def test_record_fields_refuse_what_split_record_refuses() -> None:
    for field, value in (("queue_id", 2**31), ("born_timestamp_ms", -(2**63) - 1)):
        msg = Message(topic="T", body=b"x")
        setattr(msg, field, value)
        with pytest.raises(MessageIllegal, match="must fit") as fast:
            packing.record_fields(msg, body_size_max_bytes=100)
        with pytest.raises(MessageIllegal, match="must fit") as reference:
            records.split_record(msg, body_size_max_bytes=100)
        assert str(fast.value) == str(reference.value)
    with pytest.raises(MessageTooLarge, match="101 bytes"):
        packing.record_fields(Message(topic="T", body=b"x" * 101), body_size_max_bytes=100)
    big = Message(topic="T", body=b"x", properties={"k": "v" * 40_000})
    with pytest.raises(PropertiesTooLarge):
        packing.record_fields(big, body_size_max_bytes=100)


def test_message_copy_copies_every_field_and_owns_its_properties() -> None:
    import dataclasses

    msg = Message(
        topic="T", body=b"b", queue_id=1, flag=2, properties={"a": "1"}, sys_flag=3,
        born_timestamp_ms=4, born_host=("10.0.0.1", 5), store_timestamp_ms=6,
        store_host=("10.0.0.2", 7), reconsume_times=8, prepared_transaction_offset=9,
        queue_offset=10, physical_offset=11, body_crc=12, store_size=13,
    )  # fmt: skip
    copied = msg.copy()
    assert copied == msg
    assert [getattr(copied, f.name) for f in dataclasses.fields(Message)] == [
        getattr(msg, f.name) for f in dataclasses.fields(Message)
    ]
    copied.properties["b"] = "2"
    assert msg.properties == {"a": "1"}


def _java_hash_by_horner(text: str) -> int:
    """``String.hashCode`` the way Java writes it, one UTF-16 unit at a time."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h & 0x80000000 else h


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=300))
def test_java_string_hash_base31_fast_path_matches_horner(text: str) -> None:
    assert java_string_hash(text) == _java_hash_by_horner(text)


def test_java_string_hash_at_and_past_the_fast_path_length() -> None:
    for length in (1, 3999, 4000, 4001, 9000):
        text = ("Topic#" + "~\x7f0aZ" * 2000)[:length]
        assert java_string_hash(text) == _java_hash_by_horner(text), length


def test_body_crc_is_masked() -> None:
    assert body_crc32(b"hi") == 0x58932AAC
    assert body_crc32(b"") == 0


def test_offset_msg_id_bytes_and_decoding() -> None:
    msg_id = msgids.create_offset_msg_id("127.0.0.1", 10911, 0x0102030405)
    assert msg_id == "7F00000100002A9F0000000102030405"
    decoded = msgids.decode_offset_msg_id(msg_id)
    assert decoded == msgids.OffsetMsgId("127.0.0.1", 10911, 0x0102030405)
    v6 = msgids.create_offset_msg_id("::1", 1, 2)
    assert len(v6) == 56
    assert msgids.decode_offset_msg_id(v6).commit_offset == 2
    with pytest.raises(MessageIllegal, match="32"):
        msgids.decode_offset_msg_id("ABC")


def test_uniq_key_layout() -> None:
    gen = msgids.UniqKeyGenerator("10.0.0.1", 0x1234, 0x01020304)
    assert gen.prefix == "0A000001" + "1234" + "01020304"
    now = msgids.month_start_ms(1_700_000_000_000) + 5000
    key = gen.next_key(now)
    assert len(key) == 32
    assert key.startswith(gen.prefix)
    parts = msgids.decode_uniq_key(key)
    assert parts.month_offset_ms == 5000
    assert parts.counter == 1
    assert parts.pid == 0x1234
    assert msgids.decode_uniq_key(gen.next_key(now)).counter == 2


def test_uniq_keys_of_a_batch_are_the_keys_one_at_a_time() -> None:
    """A put draws its keys in one call: the same keys, counter wrapping at 0xFFFF."""
    now = msgids.month_start_ms(1_700_000_000_000) + 7000
    one_by_one = msgids.UniqKeyGenerator("10.0.0.1", 7, 9)
    batched = msgids.UniqKeyGenerator("10.0.0.1", 7, 9)
    expected = [one_by_one.next_key(now) for _ in range(0x10003)]
    got = batched.next_keys(now, 0xFFFE) + batched.next_keys(now, 5)
    assert got == expected
    assert [msgids.decode_uniq_key(k).counter for k in got[0xFFFD:]] == [0xFFFE, 0xFFFF, 0, 1, 2, 3]
    assert batched.next_keys(now, 0) == []


hosts = st.sampled_from([("127.0.0.1", 1), ("10.1.2.3", 65535), ("::1", 8081), ("2001:db8::5", 0)])
prop_text = st.text(
    alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]),
    min_size=1,
    max_size=20,
)


@given(
    topic=st.text(alphabet="abcXYZ09_-%|", min_size=1, max_size=200),
    body=st.binary(max_size=300),
    queue_id=st.integers(0, 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=st.dictionaries(prop_text, prop_text, max_size=5),
    born=hosts,
    store=hosts,
    ts=st.integers(0, 2**62),
    qoff=st.integers(0, 2**62),
)
def test_round_trip(topic, body, queue_id, flag, properties, born, store, ts, qoff) -> None:
    msg = records.Message(
        topic=topic,
        body=body,
        queue_id=queue_id,
        flag=flag,
        properties=properties,
        born_host=born,
        store_host=store,
        born_timestamp_ms=ts,
        store_timestamp_ms=ts,
        queue_offset=qoff,
    )
    buf = records.encode(msg, body_size_max_bytes=1024)
    res = record_checks.check_record(buf, 0, len(buf), check_crc=True)
    assert res.ok
    assert res.size == len(buf)
    back = records.decode(buf)
    assert back.topic == topic
    assert back.body == body
    # transient properties are never stored (Hypothesis finds the prefix among the constants)
    stored = {k: v for k, v in properties.items() if not k.startswith(props.TRANSIENT_PREFIX)}
    assert back.properties == stored
    assert (back.queue_id, back.flag, back.born_host, back.store_host) == (
        queue_id,
        flag,
        born,
        store,
    )
    assert back.queue_offset == qoff
    assert back.store_timestamp_ms == ts


@given(
    position=st.integers(0, len(EXPECTED_V1) - 1),
    value=st.integers(0, 255),
    cut=st.integers(8, len(EXPECTED_V1)),
)
def test_fast_structure_check_agrees_with_the_full_check(position, value, cut) -> None:
    """Recovery's fast path must accept exactly what the full parser accepts."""
    buf = bytearray(EXPECTED_V1)
    buf[position] = value
    full = record_checks.check_record(buf, 0, cut, check_crc=True)
    head, _size, error = record_checks.check_structure(buf, 0, cut, check_crc=True)
    assert (head is not None) == full.ok, (full.error, error)
    if head is not None and full.info is not None:
        assert (head.topic, head.queue_offset, head.size) == (
            full.info.topic,
            full.info.queue_offset,
            full.info.size,
        )
