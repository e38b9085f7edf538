"""The ``gannet`` Spark data source on local Spark against an in-process broker: batch reads
give back exactly what the official client produced, ranges/filters/timestamps select the
right rows, writes round-trip, and bad options or rows fail with messages naming them."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2

from gannet.node.broker import threads
from gannet.node.protocol.gen import admin_pb2
from gannet.pipeline import rows
from gannet.pipeline.calling import BrokerConnection
from gannet.pipeline.rows import MessageIds, row_message

from .conftest import new_topic, settle

MESSAGES = 30


@pytest.fixture(scope="module")
def produced(gannet_broker: threads.BrokerThread, gannet_admin: Any) -> dict[str, Any]:
    """A 3-queue topic with MESSAGES messages from the official Producer, and their receipts."""
    topic = new_topic(gannet_admin, queues=3)
    config = ClientConfiguration(gannet_broker.endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,))
    producer.startup()
    sent = {}
    try:
        for i in range(MESSAGES):
            msg = Message()
            msg.topic = topic
            msg.body = f"payload {i}".encode() * (1 + i % 3)
            msg.tag = "even" if i % 2 == 0 else "odd"
            msg.keys = f"k{i}"
            msg.keys = "all"
            msg.add_property("n", str(i))
            receipt = producer.send(msg)
            sent[receipt.message_id] = (i, msg.body, receipt.offset)
    finally:
        producer.shutdown()
    settle(gannet_broker)
    return {"topic": topic, "sent": sent}


def _reader(spark: Any, broker: threads.BrokerThread, topic: str, **options: object) -> Any:
    reader = spark.read.format("gannet").option("endpoints", broker.endpoint)
    reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def test_batch_read_gives_back_what_the_official_producer_sent(
    gannet_spark: Any, gannet_broker: threads.BrokerThread, produced: dict[str, Any]
) -> None:
    df = _reader(gannet_spark, gannet_broker, produced["topic"], maxPartitionMessages=4).load()
    rows = df.collect()
    sent = produced["sent"]
    assert len(rows) == MESSAGES
    assert {r.message_id for r in rows} == set(sent)
    for row in rows:
        i, body, offset = sent[row.message_id]
        assert row.topic == produced["topic"]
        assert row.body == body
        assert sorted(row.keys) == sorted([f"k{i}", "all"])
        assert row.tag == ("even" if i % 2 == 0 else "odd")
        assert row.properties == {"n": str(i)}
        assert row.queue_offset == offset
        assert isinstance(row.born_timestamp, dt.datetime)
        assert row.store_timestamp >= row.born_timestamp - dt.timedelta(seconds=1)
    by_queue: dict[int, list[int]] = {}
    for row in rows:
        by_queue.setdefault(row.queue_id, []).append(row.queue_offset)
    assert len(by_queue) == 3  # the producer spreads over every queue
    for offsets in by_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))  # no gap, no duplicate
    # Ranges are cut into partitions of at most maxPartitionMessages offsets.
    assert df.rdd.getNumPartitions() == sum(-(-len(o) // 4) for o in by_queue.values())


def test_offsets_queues_and_tag_filter_select_rows(
    gannet_spark: Any, gannet_broker: threads.BrokerThread, produced: dict[str, Any]
) -> None:
    topic = produced["topic"]
    ranged = _reader(
        gannet_spark,
        gannet_broker,
        topic,
        queues="0,1",
        startingOffsets='{"0": 1, "1": -2}',
        endingOffsets='{"0": 3}',
    ).load()
    got = sorted((r.queue_id, r.queue_offset) for r in ranged.collect())
    queue1 = [offset for q, offset in got if q == 1]
    assert [(q, offset) for q, offset in got if q == 0] == [(0, 1), (0, 2)]
    assert queue1
    assert queue1 == list(range(len(queue1)))  # earliest..latest
    evens = _reader(gannet_spark, gannet_broker, topic, filter="even").load().collect()
    assert len(evens) == MESSAGES // 2
    assert {r.tag for r in evens} == {"even"}


def test_timestamps_bound_the_read(
    gannet_spark: Any, gannet_broker: threads.BrokerThread, gannet_admin: Any
) -> None:
    topic = new_topic(gannet_admin, queues=1)
    with BrokerConnection([gannet_broker.endpoint]) as conn:
        conn.send([_message(topic, b"old-1"), _message(topic, b"old-2")])
        settle(gannet_broker)
        pulled = conn.pull(topic, 0, 0, batch_size=8)
        stamps = [m.system_properties.store_timestamp for m in pulled.messages]
        boundary_ms = max(t.seconds * 1000 + t.nanos // 1_000_000 for t in stamps) + 1
        while time.time_ns() // 1_000_000 <= boundary_ms:  # store times have 1 ms precision
            time.sleep(0.001)
        conn.send([_message(topic, b"new-1")])
    settle(gannet_broker)
    newer = _reader(gannet_spark, gannet_broker, topic, startingTimestamp=boundary_ms).load()
    assert [r.body for r in newer.collect()] == [b"new-1"]
    older = _reader(gannet_spark, gannet_broker, topic, endingTimestamp=boundary_ms).load()
    assert sorted(r.body for r in older.collect()) == [b"old-1", b"old-2"]


_ids = MessageIds()


def _message(topic: str, body: bytes) -> Any:
    return row_message({"body": body}, topic, _ids.next(), 0)


def _write(
    spark: Any,
    broker: threads.BrokerThread,
    topic: str,
    records: list[dict[str, Any]],
    schema: str = "body binary",
    **options: object,
) -> None:
    columns = [c.split()[0] for c in schema.split(", ")]
    # One partition: one task sends the rows in order (several tasks would interleave).
    df = spark.createDataFrame([tuple(r.get(c) for c in columns) for r in records], schema)
    df = df.coalesce(1)
    writer = df.write.format("gannet").option("endpoints", broker.endpoint).option("topic", topic)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def test_message_groups_keep_order_in_one_queue(
    gannet_spark: Any, gannet_broker: threads.BrokerThread, gannet_admin: Any
) -> None:
    topic = new_topic(gannet_admin, queues=4, kind=admin_pb2.FIFO)
    records = [{"body": f"{g}-{i}".encode(), "message_group": g} for i in range(6) for g in "ab"]
    _write(gannet_spark, gannet_broker, topic, records, "body binary, message_group string")
    rows = _reader(gannet_spark, gannet_broker, topic).load().collect()
    for group in "ab":
        mine = sorted(
            (r.queue_offset, r.queue_id, r.body) for r in rows if r.body[:1] == group.encode()
        )
        assert len({q for _, q, _ in mine}) == 1
        assert [b for _, _, b in mine] == [f"{group}-{i}".encode() for i in range(6)]


def test_write_then_read_round_trip(
    gannet_spark: Any,
    gannet_broker: threads.BrokerThread,
    produced: dict[str, Any],
    gannet_admin: Any,
) -> None:
    """Rows read from one topic (bodies, keys, tags, properties) written to another in
    batches of 7 and read back: the same messages with new ids; read-only columns ignored."""
    target = new_topic(gannet_admin, queues=2)
    source = _reader(gannet_spark, gannet_broker, produced["topic"]).load()
    writer = source.write.format("gannet").option("endpoints", gannet_broker.endpoint)
    writer.option("topic", target).option("batchSize", 7).mode("append").save()
    copied = _reader(gannet_spark, gannet_broker, target).load().collect()

    def content(r: Any) -> tuple[object, ...]:
        return (r.body, tuple(sorted(r.keys)), r.tag, tuple(sorted(r.properties.items())))

    want = [
        (body, tuple(sorted([f"k{i}", "all"])), "even" if i % 2 == 0 else "odd", (("n", str(i)),))
        for i, body, _ in produced["sent"].values()
    ]
    assert sorted(map(content, copied)) == sorted(want)
    assert {r.topic for r in copied} == {target}
    assert not {r.message_id for r in copied} & set(produced["sent"])


def test_delivery_time_delays_a_written_message(
    gannet_spark: Any, gannet_broker: threads.BrokerThread, gannet_admin: Any
) -> None:
    topic = new_topic(gannet_admin, queues=1, kind=admin_pb2.DELAY)
    deliver_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)
    df = gannet_spark.createDataFrame(
        [(b"later", deliver_at)], "body binary, delivery_time timestamp"
    )
    writer = df.write.format("gannet").option("endpoints", gannet_broker.endpoint)
    writer.option("topic", topic).mode("append").save()
    with BrokerConnection([gannet_broker.endpoint]) as conn:
        pulled = conn.pull(topic, 0, 0, batch_size=8, polling_ms=15_000)  # wakes on delivery
    assert [m.body for m in pulled.messages] == [b"later"]
    stored = pulled.messages[0].system_properties.store_timestamp
    assert stored.seconds + 1 >= int(deliver_at.timestamp())  # not before its time (1 s ticks)
    assert pulled.messages[0].system_properties.message_type == definition_pb2.DELAY


def _failure(action: Callable[[], object]) -> str:
    """The text of the error ``action`` fails with (Spark wraps a worker's error in its own)."""
    try:
        action()
    except Exception as exc:
        return str(exc)
    raise AssertionError("expected the action to fail")


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"topic": None}, "option 'topic' is required"),  # checked when the reader is made
        ({"queues": "0,9"}, "option 'queues': 9 not readable"),  # checked against the route
        ({"topic": "NoSuchTopic"}, "TOPIC_NOT_FOUND"),  # the broker's answer
    ],
)
def test_bad_read_options_fail_with_clear_errors(
    gannet_spark: Any,
    gannet_broker: threads.BrokerThread,
    produced: dict[str, Any],
    options: dict[str, str | None],
    needle: str,
) -> None:
    reader = gannet_spark.read.format("gannet")
    merged = {"endpoints": gannet_broker.endpoint, "topic": produced["topic"], **options}
    for key, value in merged.items():
        if value is not None:
            reader = reader.option(key, value)
    assert needle in _failure(lambda: reader.load().collect())


def test_bad_writes_fail_with_clear_errors(
    gannet_spark: Any, gannet_broker: threads.BrokerThread, gannet_admin: Any
) -> None:
    topic = new_topic(gannet_admin, queues=1)
    spark, broker = gannet_spark, gannet_broker
    text = _failure(lambda: _write(spark, broker, topic, [{"colour": "x"}], "colour string"))
    assert "needs a 'body' column" in text
    extra = [{"body": b"x", "extra": 1}]
    text = _failure(lambda: _write(spark, broker, topic, extra, "body binary, extra int"))
    assert "column 'extra' cannot be written" in text
    empty = [{"body": b"ok"}, {"body": b""}]
    text = _failure(lambda: _write(spark, broker, topic, empty, batchSize=1))
    assert "row 1: body must be non-empty" in text
    text = _failure(lambda: _write(spark, broker, "NoSuchTopic", [{"body": b"x"}]))
    assert "option 'topic'" in text
    assert "TOPIC_NOT_FOUND" in text
    fifo = new_topic(gannet_admin, queues=1, kind=admin_pb2.FIFO)  # refuses group-less rows
    normal = [{"body": b"a"}, {"body": b"b"}, {"body": b"c"}]
    text = _failure(lambda: _write(spark, broker, fifo, normal, batchSize=2))
    assert "partition 0: rows 0..1 (2 messages" in text
    assert "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE" in text
    df = spark.createDataFrame([(b"x",)], "body binary")
    writer = df.write.format("gannet").option("endpoints", broker.endpoint)
    text = _failure(lambda: writer.option("topic", topic).mode("overwrite").save())
    assert "append-only" in text


def test_arrow_batches_give_spark_exactly_the_rows_pulled(
    gannet_spark: Any, gannet_broker: threads.BrokerThread, gannet_admin: Any
) -> None:
    """Empty partitions, the largest body the test store takes, keys, tags and properties:
    Spark's rows equal the pulled messages as the tuple reader turned them into rows."""
    from .test_arrow_rows import old_message_row

    topic = new_topic(gannet_admin, queues=3)
    largest = gannet_broker.broker.store.config.message_body_size_max_bytes
    sent = [
        row_message(
            {"body": bytes([i]) * size, "keys": [f"k{i}", "all"], "tag": f"t{i % 2}",
             "properties": {"n": str(i), "ü": "∑"} if i % 2 else {}},
            topic, _ids.next(), 1_700_000_000_000 + i,
        )
        for i, size in enumerate([1, largest, 1024, 7])
    ]  # fmt: skip
    with BrokerConnection([gannet_broker.endpoint]) as conn:
        conn.send(sent)  # one request: one queue, so two of the three queues stay empty
        settle(gannet_broker)
        pulled = [m for q in range(3) for m in conn.pull(topic, q, 0, batch_size=16).messages]
    assert len(pulled) == len(sent)
    df = _reader(gannet_spark, gannet_broker, topic, maxPartitionMessages=1).load()
    assert (
        df.schema.simpleString()
        == "struct<" + ",".join(f.replace(" ", ":", 1) for f in rows.READ_SCHEMA.split(", ")) + ">"
    )
    got = sorted(df.collect(), key=lambda r: r.queue_offset)
    want = sorted((old_message_row(m) for m in pulled), key=lambda r: r[2])
    assert len(got) == len(want)
    for row, expected in zip(got, want, strict=True):
        assert tuple(row[:8]) == expected[:8]
        # Spark hands timestamps back as local naive datetimes, whichever way they went in.
        assert row.born_timestamp.timestamp() == expected[8].timestamp()
        assert row.store_timestamp.timestamp() == expected[9].timestamp()
    empty = _reader(gannet_spark, gannet_broker, new_topic(gannet_admin, queues=2)).load()
    assert empty.collect() == []
