"""Batch and streaming readers of the ``gannet`` data source.

Planning runs on the driver: the topic's readable queues come from QueryRoute (or the
``queues`` option), each queue's start and end from QueryOffset (``BEGINNING``/``END``/
``TIMESTAMP``), and every ``[start, end)`` range is cut into partitions of at most
``maxPartitionMessages`` offsets (:func:`gannet.pipeline.ranges.split`). Each Spark task pulls
its range with PullMessage (``pullBatchSize`` messages a call, following ``next_offset``) and
yields one ``pyarrow.RecordBatch`` per pull (:func:`gannet.pipeline.rows.messages_batch`), which
Spark moves into the JVM column by column. Only committed messages are served, so
a range never shows a message a failover could lose. A batch end beyond a queue's current end
is read up to that end.

Streaming (:class:`StreamReader`): an offset is JSON of queue id → next queue offset
(:mod:`ranges`), checkpointed by Spark. ``latestOffset`` asks the route again, so queues added
to the topic are picked up (from offset 0); with ``maxMessagesPerTrigger`` each micro-batch
moves at most that many offsets, shared fairly by the queues. A restart continues from the
checkpointed offsets: no gap, no duplicate. ``commit`` does nothing — Spark's checkpoint is the
source of truth, and pulls never move group offsets.

A start offset below the queue's earliest (cleaned up) fails the task with a message saying
so, unless ``failOnDataLoss=false``, which continues at the earliest offset.

Used by :mod:`gannet.pipeline.datasource`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from rocketmq.grpc_protocol import Code, definition_pb2

from gannet.pipeline import options, ranges, rows
from gannet.pipeline.calling import BrokerConnection, BrokerError
from gannet.pipeline.options import Bound, OptionError, ReadOptions
from gannet.pipeline.ranges import QueueRange

STALLED_PULLS_MAX = 5
STALL_POLLING_MS = 1_000


class GannetReadError(RuntimeError):
    """A partition could not be read; the message names topic, queue and offset."""


@dataclass(frozen=True)
class QueuePartition(InputPartition):
    """One Spark partition: queue offsets ``[start, end)`` of one queue."""

    queue_id: int
    start: int
    end: int


# ---------------------------------------------------------------------- planning
def queue_ids(conn: BrokerConnection, opts: ReadOptions) -> list[int]:
    readable = conn.readable_queue_ids(opts.topic)
    if opts.queues is None:
        return readable
    missing = sorted(set(opts.queues) - set(readable))
    if missing:
        raise OptionError(
            f"option 'queues': {', '.join(map(str, missing))} not readable queue(s) of topic "
            f"{opts.topic!r} (readable: {', '.join(map(str, readable)) or 'none'})"
        )
    return list(opts.queues)


def resolve(conn: BrokerConnection, topic: str, queue_id: int, bound: Bound) -> int:
    """The queue offset a bound names for one queue."""
    if bound.timestamp_ms is not None:
        return conn.query_offset(topic, queue_id, definition_pb2.TIMESTAMP, bound.timestamp_ms)
    offset = bound.offsets.get(queue_id, bound.default)
    if offset == options.EARLIEST:
        return conn.query_offset(topic, queue_id, definition_pb2.BEGINNING)
    if offset == options.LATEST:
        return conn.query_offset(topic, queue_id, definition_pb2.END)
    return offset


def plan_batch(conn: BrokerConnection, opts: ReadOptions) -> list[QueueRange]:
    """The ``[start, end)`` range of every queue read (ends past a queue's end are cut)."""
    planned: list[QueueRange] = []
    for q in queue_ids(conn, opts):
        start = resolve(conn, opts.topic, q, opts.start)
        end = resolve(conn, opts.topic, q, opts.end)
        top = conn.query_offset(opts.topic, q, definition_pb2.END)
        if start > end:
            raise OptionError(
                f"queue {q} of {opts.topic!r}: start offset {start} is after end offset {end}"
            )
        planned.append(QueueRange(q, start, min(end, top)))
    return planned


def partitions_of(planned: list[QueueRange], count_max: int) -> list[QueuePartition]:
    pieces = ranges.split(planned, count_max)
    if not pieces:  # Spark wants at least one partition; this one reads nothing
        return [QueuePartition(-1, 0, 0)]
    return [QueuePartition(p.queue_id, p.start, p.end) for p in pieces]


# ---------------------------------------------------------------------- reading a range
def read_range(opts: ReadOptions, part: QueuePartition) -> Iterator[pa.RecordBatch]:
    """The rows of one partition, pulled in order: one record batch per pull (none for an
    empty range)."""
    if part.end <= part.start:
        return
    with BrokerConnection(opts.endpoints, timeout_s=opts.timeout_s) as conn:
        yield from _pull_range(conn, opts, part)


def _pull_range(
    conn: BrokerConnection, opts: ReadOptions, part: QueuePartition
) -> Iterator[pa.RecordBatch]:
    topic, q = opts.topic, part.queue_id
    offset, stalls = part.start, 0
    while offset < part.end:
        try:
            pulled = conn.pull(
                topic,
                q,
                offset,
                batch_size=min(opts.pull_batch_size, part.end - offset),
                expression=opts.expression,
                group=opts.group,
                polling_ms=STALL_POLLING_MS if stalls else 0,
            )
        except BrokerError as exc:
            offset = _after_illegal_offset(conn, opts, q, offset, exc)
            continue
        messages = pulled.messages
        inside = len(messages)
        while inside and messages[inside - 1].system_properties.queue_offset >= part.end:
            inside -= 1  # offsets ascend: only a tail can lie past the range
        if inside:
            yield rows.messages_batch(messages[:inside] if inside < len(messages) else messages)
        if inside < len(messages):
            return
        if pulled.next_offset > offset:
            offset, stalls = pulled.next_offset, 0
            continue
        stalls += 1
        if stalls > STALLED_PULLS_MAX:
            raise GannetReadError(
                f"queue {q} of {topic!r} makes no progress at offset {offset} (planned end "
                f"{part.end}); was the topic or queue recreated?"
            )


def _after_illegal_offset(
    conn: BrokerConnection, opts: ReadOptions, queue_id: int, offset: int, exc: BrokerError
) -> int:
    """Where to continue after a failed pull, or raise GannetReadError."""
    where = f"queue {queue_id} of {opts.topic!r} at offset {offset}"
    if exc.code != Code.ILLEGAL_OFFSET:
        raise GannetReadError(f"{where}: {exc}") from exc
    earliest = conn.query_offset(opts.topic, queue_id, definition_pb2.BEGINNING)
    if offset >= earliest:
        raise GannetReadError(f"{where}: {exc}") from exc
    if opts.fail_on_data_loss:
        raise GannetReadError(
            f"{where}: messages {offset}..{earliest - 1} were cleaned up (the queue now starts "
            f"at {earliest}); set option failOnDataLoss=false to skip them"
        ) from exc
    return earliest


# ---------------------------------------------------------------------- Spark readers
class BatchReader(DataSourceReader):
    """``spark.read.format("gannet")``."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        with BrokerConnection(self.opts.endpoints, timeout_s=self.opts.timeout_s) as conn:
            planned = plan_batch(conn, self.opts)
        return partitions_of(planned, self.opts.partition_messages_max)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueuePartition)
        return read_range(self.opts, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("gannet")``.

    With ``trigger(availableNow=True)`` the queues' ends at the start of the query are the
    target (:meth:`prepareForTriggerAvailableNow`): micro-batches, still bounded by
    ``maxMessagesPerTrigger``, stop there.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: dict[int, int] | None = None

    def _connect(self) -> BrokerConnection:
        return BrokerConnection(self.opts.endpoints, timeout_s=self.opts.timeout_s)

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 — Spark's method names
        with self._connect() as conn:
            start = {
                q: resolve(conn, self.opts.topic, q, self.opts.start)
                for q in queue_ids(conn, self.opts)
            }
        return ranges.to_json_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.opts.trigger_messages_max is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.trigger_messages_max)

    def _latest(self) -> dict[int, int]:
        with self._connect() as conn:
            return {
                q: conn.query_offset(self.opts.topic, q, definition_pb2.END)
                for q in queue_ids(conn, self.opts)
            }

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self._latest()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        latest = self._latest() if self._target is None else self._target
        rows_max = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = ranges.apportion(ranges.from_json_offsets(start), latest, rows_max)
        return ranges.to_json_offsets(end)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        begin = ranges.from_json_offsets(start)
        planned = [
            QueueRange(q, begin.get(q, 0), stop)
            for q, stop in sorted(ranges.from_json_offsets(end).items())
        ]
        pieces = ranges.split(planned, self.opts.partition_messages_max)
        return [QueuePartition(p.queue_id, p.start, p.end) for p in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueuePartition)
        return read_range(self.opts, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets (see the module docstring)."""
