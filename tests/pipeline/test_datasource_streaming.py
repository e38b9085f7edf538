"""``spark.readStream.format("gannet")`` on local Spark: micro-batches bounded by
``maxMessagesPerTrigger`` pick up new messages and new queues, and a restart from the
checkpoint continues with no gap and no duplicate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gannet.node.broker import threads
from gannet.node.protocol.gen import admin_pb2
from gannet.pipeline import rows
from gannet.pipeline.calling import BrokerConnection

from .conftest import CLIENT_METADATA, new_topic, settle

STREAM_TIMEOUT_S = 300  # generous: 2 shared cores are often loaded many times over
PER_TRIGGER = 6

Seen = list[tuple[int, int, int, bytes]]  # (batch id, queue id, queue offset, body)


def _send_each(broker: threads.BrokerThread, topic: str, bodies: list[bytes]) -> None:
    """One SendMessage per body, so the broker's round robin spreads them over the queues."""
    ids = rows.MessageIds()
    with BrokerConnection([broker.endpoint]) as conn:
        for body in bodies:
            conn.send([rows.row_message({"body": body}, topic, ids.next(), 0)])
    settle(broker)


def _run_until_caught_up(
    spark: Any, broker: threads.BrokerThread, topic: str, checkpoint: Path, seen: Seen
) -> None:
    def collect(batch: Any, batch_id: int) -> None:
        seen.extend((batch_id, r.queue_id, r.queue_offset, r.body) for r in batch.collect())

    stream = (
        spark.readStream.format("gannet")
        .option("endpoints", broker.endpoint)
        .option("topic", topic)
        .option("maxMessagesPerTrigger", PER_TRIGGER)
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(STREAM_TIMEOUT_S)
    finally:
        query.stop()  # a no-op when finished; otherwise it must not outlive the test
    assert finished, "the availableNow query did not finish"
    assert query.exception() is None


def test_stream_continues_from_its_checkpoint_and_picks_up_new_queues(
    gannet_spark: Any, gannet_broker: threads.BrokerThread, gannet_admin: Any, tmp_path: Path
) -> None:
    topic = new_topic(gannet_admin, queues=2)
    first = [f"first {i}".encode() for i in range(10)]
    _send_each(gannet_broker, topic, first)
    checkpoint = tmp_path / "checkpoint"
    seen: Seen = []
    _run_until_caught_up(gannet_spark, gannet_broker, topic, checkpoint, seen)
    assert sorted(body for *_, body in seen) == sorted(first)
    sizes: dict[int, int] = {}
    for batch_id, *_ in seen:
        sizes[batch_id] = sizes.get(batch_id, 0) + 1
    assert max(sizes.values()) <= PER_TRIGGER
    assert len(sizes) == 2  # 10 messages at most 6 a trigger

    gannet_admin.UpdateTopic(
        admin_pb2.UpdateTopicRequest(name=topic, queue_nums=3), metadata=CLIENT_METADATA
    )
    second = [f"second {i}".encode() for i in range(6)]
    _send_each(gannet_broker, topic, second)
    restarted: Seen = []
    _run_until_caught_up(gannet_spark, gannet_broker, topic, checkpoint, restarted)
    assert min(b for b, *_ in restarted) > max(sizes)  # batch ids continue after the restart
    assert sorted(body for *_, body in restarted) == sorted(second)  # no gap, no duplicate
    assert any(queue_id == 2 for _, queue_id, _, _ in restarted)  # the new queue is read
    everything = seen + restarted
    positions = sorted((q, offset) for _, q, offset, _ in everything)
    assert len(positions) == len(set(positions)) == len(first) + len(second)
    for queue_id in {q for q, _ in positions}:
        offsets = [o for q, o in positions if q == queue_id]
        assert offsets == list(range(len(offsets)))
