"""Batch and streaming readers of the ``gannet`` data source, over every broker group.

Planning runs on the driver: the topic's readable queues in every broker group come from
QueryRoute of the member the ``endpoints`` option names (any member of any group answers for the
whole cluster, listing each queue's group and that group's members, leader first), or only the
queue ids of the ``queues`` option (in every group). Each queue's start and end come from
QueryOffset at its own group (``BEGINNING``/``END``/``TIMESTAMP``; offsets are per group), and
every ``[start, end)`` range is cut into partitions of at most ``maxPartitionMessages`` offsets
(:func:`gannet.pipeline.ranges.split`): one partition or more per queue across all groups. Each
Spark task reads its range from its queue's group, connecting to the members in route order
(leader first) and, when a member stops answering, continuing at the next offset from another
(at most :data:`FAILOVER_ATTEMPTS_MAX` times; any member serves committed messages). It reads
with Admin PullRecords (``pullBatchSize`` messages a call, following ``next_offset``): the
broker answers with the stored records in one reply, which are parsed into Arrow columns in
bulk (:func:`gannet.pipeline.columns.records_chunk`, :func:`gannet.pipeline.rows.records_batch`)
and yielded as one ``pyarrow.RecordBatch`` per pull, which Spark moves into the JVM column by
column. Only committed messages are served, so a range never shows a message a failover could
lose. A batch end beyond a queue's current end is read up to that end.

Streaming (:class:`StreamReader`): an offset is JSON of group → queue id → next queue offset
(:mod:`ranges`), checkpointed by Spark. ``latestOffset`` asks the route again, so queues and
groups added to the topic are picked up (from offset 0); with ``maxMessagesPerTrigger`` each
micro-batch moves at most that many offsets, shared fairly by the queues of all groups. A
restart continues from the checkpointed offsets: no gap, no duplicate. A checkpoint written
before broker groups (queue id → offset) continues too: its queues are those of the topic's only
group, or, with several groups, of the group of the member the ``endpoints`` option reaches
first (the one the old reader read from); with neither the query fails naming the checkpoint.
``commit`` does nothing — Spark's checkpoint is the source of truth, and pulls never move group
offsets.

A start offset below the queue's earliest (cleaned up) fails the task with a message saying
so, unless ``failOnDataLoss=false``, which continues at the earliest offset.

Used by :mod:`gannet.pipeline.datasource`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import grpc
import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from rocketmq.grpc_protocol import Code, definition_pb2

from gannet.pipeline import calling, columns, options, ranges, rows
from gannet.pipeline.calling import BrokerConnection, BrokerError, RoutedQueue
from gannet.pipeline.options import Bound, OptionError, ReadOptions
from gannet.pipeline.ranges import QueueKey, QueueRange

STALLED_PULLS_MAX = 5
STALL_POLLING_MS = 1_000
FAILOVER_ATTEMPTS_MAX = 6
"""Reconnections of one task to its group's members (in route order) before it fails."""


class GannetReadError(RuntimeError):
    """A partition could not be read; the message names topic, group, queue and offset."""


@dataclass(frozen=True)
class QueuePartition(InputPartition):
    """One Spark partition: queue offsets ``[start, end)`` of one queue of broker group
    ``group``, read from ``endpoints`` (its members, leader first)."""

    queue_id: int
    start: int
    end: int
    group: str = ranges.LEGACY_GROUP
    endpoints: tuple[str, ...] = ()


class GroupConnections:
    """Driver-side connections to each broker group (one channel per group, opened on first
    use at the group's members in route order); use as a context manager."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.entry = BrokerConnection(opts.endpoints, timeout_s=opts.timeout_s)
        self._by_group: dict[str, BrokerConnection] = {}

    def of(self, queue: RoutedQueue) -> BrokerConnection:
        conn = self._by_group.get(queue.group)
        if conn is None:
            if self.entry.endpoint in queue.endpoints:
                conn = self.entry
            else:
                conn = BrokerConnection(queue.endpoints, timeout_s=self.opts.timeout_s)
            self._by_group[queue.group] = conn
        return conn

    def close(self) -> None:
        for conn in self._by_group.values():
            if conn is not self.entry:
                conn.close()
        self.entry.close()

    def __enter__(self) -> GroupConnections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- planning
def routed_queues(conn: BrokerConnection, opts: ReadOptions) -> list[RoutedQueue]:
    """The readable queues of every group the reader reads (the ``queues`` option: those ids
    in every group)."""
    readable = [q for q in conn.route(opts.topic) if q.readable]
    if opts.queues is None:
        return readable
    ids = {q.queue_id for q in readable}
    missing = sorted(set(opts.queues) - ids)
    if missing:
        raise OptionError(
            f"option 'queues': {', '.join(map(str, missing))} not readable queue(s) of topic "
            f"{opts.topic!r} (readable: {', '.join(map(str, sorted(ids))) or 'none'})"
        )
    return [q for q in readable if q.queue_id in opts.queues]


def queue_ids(conn: BrokerConnection, opts: ReadOptions) -> list[int]:
    """The queue ids read, in any group, ascending."""
    return sorted({q.queue_id for q in routed_queues(conn, opts)})


def resolve(conn: BrokerConnection, topic: str, queue_id: int, bound: Bound) -> int:
    """The queue offset a bound names for one queue (``conn``: a member of its group)."""
    if bound.timestamp_ms is not None:
        return conn.query_offset(topic, queue_id, definition_pb2.TIMESTAMP, bound.timestamp_ms)
    offset = bound.offsets.get(queue_id, bound.default)
    if offset == options.EARLIEST:
        return conn.query_offset(topic, queue_id, definition_pb2.BEGINNING)
    if offset == options.LATEST:
        return conn.query_offset(topic, queue_id, definition_pb2.END)
    return offset


def _is_latest(bound: Bound, queue_id: int) -> bool:
    """Whether ``bound`` names the queue's end (answered by the END query the plan makes)."""
    return bound.timestamp_ms is None and bound.offsets.get(queue_id, bound.default) == (
        options.LATEST
    )


def plan_batch(groups: GroupConnections, opts: ReadOptions) -> list[QueueRange]:
    """The ``[start, end)`` range of every queue read in every group (ends past a queue's end
    are cut)."""
    planned: list[QueueRange] = []
    for routed in routed_queues(groups.entry, opts):
        conn, q = groups.of(routed), routed.queue_id
        top = conn.query_offset(opts.topic, q, definition_pb2.END)
        start = resolve(conn, opts.topic, q, opts.start)
        end = top if _is_latest(opts.end, q) else resolve(conn, opts.topic, q, opts.end)
        if start > end:
            raise OptionError(
                f"queue {q} of {opts.topic!r} in group {routed.group}: start offset {start} is "
                f"after end offset {end}"
            )
        planned.append(QueueRange(q, start, min(end, top), routed.group))
    return planned


def partitions_of(
    planned: list[QueueRange], count_max: int, endpoints: dict[str, tuple[str, ...]]
) -> list[QueuePartition]:
    pieces = ranges.split(planned, count_max)
    if not pieces:  # Spark wants at least one partition; this one reads nothing
        return [QueuePartition(-1, 0, 0)]
    return [
        QueuePartition(p.queue_id, p.start, p.end, p.group, endpoints.get(p.group, ()))
        for p in pieces
    ]


def group_endpoints(route: Sequence[RoutedQueue]) -> dict[str, tuple[str, ...]]:
    return {q.group: q.endpoints for q in route}


# ---------------------------------------------------------------------- reading a range
def read_range(opts: ReadOptions, part: QueuePartition) -> Iterator[pa.RecordBatch]:
    """The rows of one partition, pulled in order: one record batch per pull (none for an
    empty range), failing over between the group's members."""
    if part.end <= part.start:
        return
    endpoints = part.endpoints or opts.endpoints
    offset, failures = part.start, 0
    while offset < part.end:
        first = failures % len(endpoints)
        try:
            with BrokerConnection(
                endpoints[first:] + endpoints[:first], timeout_s=opts.timeout_s
            ) as conn:
                for batch, next_offset in _pull_range(conn, opts, part, offset):
                    offset = next_offset
                    if batch is not None:
                        yield batch
                return
        except (grpc.RpcError, ConnectionError) as exc:
            transient = isinstance(exc, ConnectionError) or exc.code() in calling.RETRYABLE_GRPC
            if not transient or failures >= FAILOVER_ATTEMPTS_MAX:
                raise GannetReadError(
                    f"queue {part.queue_id} of {opts.topic!r} in group {part.group or '?'} at "
                    f"offset {offset}: {_describe(exc)} (tried {failures + 1} time(s) at "
                    f"{', '.join(endpoints)})"
                ) from exc
            failures += 1


def _describe(exc: Exception) -> str:
    if isinstance(exc, grpc.RpcError):
        return f"gRPC {exc.code().name}: {exc.details()}"
    return str(exc)


def _pull_range(
    conn: BrokerConnection, opts: ReadOptions, part: QueuePartition, offset: int
) -> Iterator[tuple[pa.RecordBatch | None, int]]:
    """(batch or None, the offset to read from next) per pull from ``offset`` to the end."""
    topic, q = opts.topic, part.queue_id
    stalls = 0
    while offset < part.end:
        try:
            pulled = conn.pull_records(
                topic,
                q,
                offset,
                messages_max=min(opts.pull_batch_size, part.end - offset),
                expression=opts.expression,
                group=opts.group,
                polling_ms=STALL_POLLING_MS if stalls else 0,
            )
        except BrokerError as exc:
            offset = _after_illegal_offset(conn, opts, part, offset, exc)
            yield None, offset
            continue
        if pulled.count:
            chunk = columns.records_chunk(pulled.records, pulled.count)
            inside = int(np.searchsorted(chunk.queue_offsets, part.end))  # offsets ascend
            batch = rows.records_batch(pulled.records, chunk, part.group)
            if inside < pulled.count:
                if inside:
                    yield batch.slice(0, inside), part.end
                return
            next_offset = max(pulled.next_offset, int(chunk.queue_offsets[-1]) + 1)
            offset, stalls = next_offset, 0
            yield batch, next_offset
            continue
        if pulled.next_offset > offset:
            offset, stalls = pulled.next_offset, 0
            yield None, offset
            continue
        stalls += 1
        if stalls > STALLED_PULLS_MAX:
            raise GannetReadError(
                f"queue {q} of {topic!r} in group {part.group or '?'} makes no progress at "
                f"offset {offset} (planned end {part.end}); was the topic or queue recreated?"
            )


def _after_illegal_offset(
    conn: BrokerConnection, opts: ReadOptions, part: QueuePartition, offset: int, exc: BrokerError
) -> int:
    """Where to continue after a failed pull, or raise GannetReadError."""
    queue_id = part.queue_id
    where = f"queue {queue_id} of {opts.topic!r} in group {part.group or '?'} at offset {offset}"
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
        with GroupConnections(self.opts) as groups:
            endpoints = group_endpoints(groups.entry.route(self.opts.topic))
            planned = plan_batch(groups, self.opts)
        return partitions_of(planned, self.opts.partition_messages_max, endpoints)

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
        self._target: dict[QueueKey, int] | None = None
        self._endpoints: dict[str, tuple[str, ...]] = {}
        self._legacy_group: str | None = None

    def initialOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 — Spark's method names
        with GroupConnections(self.opts) as groups:
            route = routed_queues(groups.entry, self.opts)
            self._endpoints.update(group_endpoints(route))
            start = {
                (r.group, r.queue_id): resolve(
                    groups.of(r), self.opts.topic, r.queue_id, self.opts.start
                )
                for r in route
            }
        return ranges.to_json_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.opts.trigger_messages_max is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.trigger_messages_max)

    def _latest(self) -> dict[QueueKey, int]:
        with GroupConnections(self.opts) as groups:
            route = routed_queues(groups.entry, self.opts)
            self._endpoints.update(group_endpoints(route))
            self._learn_legacy_group(groups.entry, route)
            return {
                (r.group, r.queue_id): groups.of(r).query_offset(
                    self.opts.topic, r.queue_id, definition_pb2.END
                )
                for r in route
            }

    def _learn_legacy_group(self, entry: BrokerConnection, route: Sequence[RoutedQueue]) -> None:
        names = sorted({r.group for r in route})
        if len(names) == 1:
            self._legacy_group = names[0]
            return
        for r in route:
            if entry.endpoint in r.endpoints:
                self._legacy_group = r.group
                return

    def _offsets(self, raw: Mapping[str, object]) -> dict[QueueKey, int]:
        """Checkpointed offsets, those of a checkpoint from before broker groups given the
        group they meant (see the module docstring)."""
        offsets = ranges.from_json_offsets(raw)
        if not any(group == ranges.LEGACY_GROUP for group, _ in offsets):
            return offsets
        if self._legacy_group is None:
            self._latest()
        if self._legacy_group is None:
            raise GannetReadError(
                f"the checkpoint's offsets {raw} name queues without a broker group (written "
                f"before broker groups), topic {self.opts.topic!r} has queues in several groups "
                f"and {self.opts.endpoints[0]} is a member of none of them; point option "
                "'endpoints' at a member of the group the old query read, or start a new "
                "checkpoint"
            )
        return {
            (self._legacy_group if g == ranges.LEGACY_GROUP else g, q): o
            for (g, q), o in offsets.items()
        }

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self._latest()

    def latestOffset(  # noqa: N802
        self, start: Mapping[str, object], limit: ReadLimit
    ) -> dict[str, dict[str, int]]:
        latest = self._latest() if self._target is None else self._target
        rows_max = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = ranges.apportion(self._offsets(start), latest, rows_max)
        return ranges.to_json_offsets(end)

    def partitions(
        self, start: Mapping[str, object], end: Mapping[str, object]
    ) -> Sequence[InputPartition]:
        begin = self._offsets(start)
        stop = self._offsets(end)
        if any(g not in self._endpoints for g, _ in stop):
            self._latest()  # a restart: partitions of a checkpointed batch come first
        planned = [QueueRange(q, begin.get((g, q), 0), o, g) for (g, q), o in sorted(stop.items())]
        pieces = ranges.split(planned, self.opts.partition_messages_max)
        return [
            QueuePartition(p.queue_id, p.start, p.end, p.group, self._endpoints.get(p.group, ()))
            for p in pieces
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueuePartition)
        return read_range(self.opts, partition)

    def commit(self, end: Mapping[str, object]) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets (see the module docstring)."""
