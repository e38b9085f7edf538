"""The Arrow form of the ``gannet`` data source's rows, without Spark: pulled messages become
record batches with exactly the values and types the row-by-row reader gave Spark, the batch
schema is the one Spark 4 demands for the read schema, and written Arrow batches become the
same v2 messages rows did."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from rocketmq.grpc_protocol import definition_pb2

from gannet.pipeline import rows, writing

READ_STRUCT = StructType(
    [
        StructField("topic", StringType()),
        StructField("queue_id", IntegerType()),
        StructField("queue_offset", LongType()),
        StructField("message_id", StringType()),
        StructField("keys", ArrayType(StringType())),
        StructField("tag", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("body", BinaryType()),
        StructField("born_timestamp", TimestampType()),
        StructField("store_timestamp", TimestampType()),
        StructField("broker", StringType()),
    ]
)


def test_read_schema_and_its_arrow_form_are_what_spark_expects() -> None:
    ddl = ",".join(f.replace(" ", ":", 1) for f in rows.READ_SCHEMA.split(", "))
    assert READ_STRUCT.simpleString() == f"struct<{ddl}>"
    # pyspark's reader compares each batch's schema with exactly this and refuses others.
    assert to_arrow_schema(READ_STRUCT, timezone="UTC").equals(rows.READ_ARROW_SCHEMA)


def old_message_row(message: definition_pb2.Message) -> tuple[Any, ...]:
    """The row the tuple-yielding reader built for a message (the oracle)."""
    sp = message.system_properties

    def when(ts: Any) -> dt.datetime:
        return dt.datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=dt.UTC)

    return (
        str(message.topic.name),
        int(sp.queue_id),
        int(sp.queue_offset),
        str(sp.message_id),
        [str(k) for k in sp.keys],
        str(sp.tag) if sp.HasField("tag") else None,
        dict(message.user_properties),
        bytes(message.body),
        when(sp.born_timestamp),
        when(sp.store_timestamp),
        "",
    )


texts = st.text(max_size=10)
millis = st.integers(0, 4_102_444_800_000)  # up to 2100, the store's precision


@st.composite
def pulled_messages(draw: st.DrawFn) -> definition_pb2.Message:
    sp = definition_pb2.SystemProperties(
        message_id=draw(st.text(min_size=1, max_size=34)),
        queue_id=draw(st.integers(0, 2**31 - 1)),
        queue_offset=draw(st.integers(0, 2**63 - 1)),
        keys=draw(st.lists(texts, max_size=4)),
    )
    tag = draw(st.none() | texts)
    if tag is not None:
        sp.tag = tag
    sp.born_timestamp.FromMilliseconds(draw(millis))
    sp.store_timestamp.FromMilliseconds(draw(millis))
    body = draw(st.binary(max_size=3000) | st.sampled_from([b"", b"B" * (2 * 2**20)]))
    return definition_pb2.Message(
        topic=definition_pb2.Resource(name=draw(st.sampled_from(["t", "Orders-ü"]))),
        user_properties=draw(st.dictionaries(texts, texts, max_size=4)),
        system_properties=sp,
        body=body,
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(pulled_messages(), max_size=8))
def test_a_batch_holds_the_rows_the_tuple_reader_gave(
    messages: list[definition_pb2.Message],
) -> None:
    batch = rows.messages_batch(messages)
    assert batch.schema.equals(rows.READ_ARROW_SCHEMA)
    assert batch.num_rows == len(messages)
    got = [tuple(r.values()) for r in batch.to_pylist()]
    expected = [old_message_row(m) for m in messages]
    for row, want in zip(got, expected, strict=True):
        # Arrow hands a map back as pairs; Spark turns either into the same MapType value.
        assert row[:6] == want[:6]
        assert row[7:] == want[7:]
        assert dict(row[6]) == want[6]
        assert len(row[6]) == len(want[6])


def test_written_arrow_batches_become_the_messages_rows_did() -> None:
    delivery = dt.datetime(2030, 1, 2, 3, 4, 5, 678_000, tzinfo=dt.UTC)
    batch = pa.RecordBatch.from_pydict(
        {
            "body": pa.array([b"one", b"two"], pa.binary()),
            "keys": pa.array([["k1", None, "k2"], None], pa.list_(pa.string())),
            "tag": pa.array(["T", None]),
            "properties": pa.array(
                [[("a", "1"), ("b", None)], None], pa.map_(pa.string(), pa.string())
            ),
            "delivery_time": pa.array([delivery, None], pa.timestamp("us", tz="UTC")),
            "queue_offset": pa.array([5, 6], pa.int64()),  # read-only: ignored
        }
    )
    got = [
        rows.row_message(fields, "orders", f"ID{i}", 1_700_000_000_000)
        for i, fields in enumerate(writing.batch_rows([batch]))
    ]
    as_rows: list[dict[str, Any]] = [
        {"body": b"one", "keys": ["k1", None, "k2"], "tag": "T",
         "properties": {"a": "1", "b": None}, "delivery_time": delivery},
        {"body": b"two", "keys": None, "tag": None, "properties": None, "delivery_time": None},
    ]  # fmt: skip
    want = [
        rows.row_message(r, "orders", f"ID{i}", 1_700_000_000_000) for i, r in enumerate(as_rows)
    ]
    assert got == want
    assert got[0].system_properties.delivery_timestamp.ToMilliseconds() == int(
        delivery.timestamp() * 1000
    )
    assert dict(got[0].user_properties) == {"a": "1"}
    assert list(got[0].system_properties.keys) == ["k1", "k2"]
