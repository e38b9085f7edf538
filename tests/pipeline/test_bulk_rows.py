"""The reader's rows built column-wise (:func:`rows.records_batch` over
:func:`columns.records_chunk`, properties with Arrow compute) against the same rows built record
by record with the store's decoder (the oracle: what the reader built before), for random
records (random bodies, property maps with odd names and values, IPv6 hosts, records without
``UNIQ_KEY``, whole-record CRCs); the property parser against the store's decoder for random
strings; a corrupt reply refused with the record it names."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gannet.node.store import properties as props
from gannet.node.store.log import records
from gannet.node.store.log.records import Message
from gannet.node.store.msgids import create_offset_msg_id
from gannet.pipeline import columns, propcolumns, rows

from .test_columns import stored_messages

pieces = st.sampled_from(["a", "KEYS", "TAGS", "UNIQ_KEY", "\x01", "\x02", "é", " ", "", "__x"])
property_strings = st.lists(pieces, max_size=14).map("".join)


def reply_bytes(messages: list[tuple[Message, bool, bool]]) -> bytes:
    """The records of ``messages`` back to back, as a PullRecords reply holds them."""
    buf = bytearray()
    for i, (msg, crc, v2) in enumerate(messages):
        msg.physical_offset = 4096 * (i + 1)  # copied from a log: positions differ
        record = records.encode(msg, body_size_max_bytes=4 * 2**20, append_crc=crc, force_v2=v2)
        if crc:
            records.seal_crc(record)
        buf += record
    return bytes(buf)


def oracle_row(buf: bytes, position: int, broker: str) -> dict[str, object]:
    """One read row built record by record, as the reader did before."""
    msg = records.decode(buf, position)
    found = msg.properties
    uniq = found.get(props.UNIQ_KEY) or create_offset_msg_id(*msg.store_host, msg.physical_offset)
    hidden = rows._HIDDEN_PROPERTIES
    return {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "message_id": uniq,
        "keys": props.split_keys(found.get(props.KEYS)),
        "tag": found.get(props.TAGS),
        "properties": [
            (k, v)
            for k, v in found.items()
            if k not in hidden and not k.startswith(props.TRANSIENT_PREFIX)
        ],
        "body": msg.body,
        "born_ms": msg.born_timestamp_ms,
        "store_ms": msg.store_timestamp_ms,
        "broker": broker,
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=stored_messages(), broker=st.sampled_from(["", "broker-0"]))
def test_column_wise_rows_equal_the_record_by_record_rows(
    messages: list[tuple[Message, bool, bool]], broker: str
) -> None:
    buf = reply_bytes(messages)
    chunk = columns.records_chunk(buf, len(messages))
    batch = rows.records_batch(buf, chunk, broker)
    assert batch.schema.equals(rows.READ_ARROW_SCHEMA)
    micros = {
        name: batch.column(name).cast(pa.int64()).to_pylist()
        for name in ("born_timestamp", "store_timestamp")
    }
    got = batch.drop_columns(["born_timestamp", "store_timestamp"]).to_pylist()
    want = [oracle_row(buf, int(p), broker) for p in chunk.positions]
    assert micros["born_timestamp"] == [_ms(w.pop("born_ms")) * 1000 for w in want]
    assert micros["store_timestamp"] == [_ms(w.pop("store_ms")) * 1000 for w in want]
    assert got == want


def _ms(value: object) -> int:
    assert isinstance(value, int)
    return value


@settings(max_examples=300, deadline=None)
@given(st.lists(property_strings, max_size=8))
def test_the_property_columns_equal_the_store_decoder(texts: list[str]) -> None:
    found = propcolumns.parse(pa.array([t.encode() for t in texts], pa.binary()))
    decoded = [props.decode(t) for t in texts]
    assert [list(m) for m in found.maps().to_pylist()] == [list(d.items()) for d in decoded]
    for name in ("KEYS", "TAGS", "UNIQ_KEY", "a"):
        assert found.value(name).to_pylist() == [d.get(name) for d in decoded]
    keys = propcolumns.keys_lists(found.value("KEYS")).to_pylist()
    assert keys == [props.split_keys(d.get("KEYS")) for d in decoded]


def test_bytes_that_are_not_utf8_decode_as_the_store_decoder_replaces_them() -> None:
    raw = b"a\x01\xff\xfe\x02b\x01c\x02"
    found = propcolumns.parse(pa.array([raw], pa.binary()))
    expected = props.decode(raw.decode("utf-8", errors="replace"))
    assert [dict(m) for m in found.maps().to_pylist()] == [expected]


def test_a_corrupt_reply_is_refused_naming_the_record() -> None:
    messages = [
        (Message(topic="T", body=b"b" * 50, queue_offset=i), False, False) for i in range(3)
    ]
    buf = bytearray(reply_bytes(messages))
    second = records.decode(bytes(buf), 0).store_size
    buf[second + records.decode(bytes(buf), second).store_size - 10] ^= 0xFF  # a body byte
    with pytest.raises(ValueError, match=rf"record 1 of the reply \(at byte {second}\)"):
        columns.records_chunk(bytes(buf), 3)
    with pytest.raises(ValueError, match="holds 4 records"):
        columns.records_chunk(bytes(buf), 4)
