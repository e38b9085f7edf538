"""Batch writer of the ``gannet`` data source: ``df.write.format("gannet")``.

Spark hands each task its rows as ``pyarrow.RecordBatch`` es (the writer is a
``DataSourceArrowWriter``: no Spark ``Row`` per row); the task reads them column by column and
converts each row to a v2 message (:func:`gannet.pipeline.rows.row_message`, a fresh RocketMQ
message id per row) and sends them with SendMessage in batches of at most
``batchSize`` messages and ``batchBytes`` body bytes. A batch never mixes message groups: the
broker puts a whole request into one queue, chosen by the group for FIFO messages, so rows of
one group stay in order in one queue.

A batch answered with a retryable code (``TOO_MANY_REQUESTS``, ``INTERNAL_SERVER_ERROR``,
persistence timeouts, ``HA_NOT_AVAILABLE``) or a transport error (UNAVAILABLE,
DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED) is resent with the same message ids after a backoff of
``retryBackoffMs``, doubling up to :data:`BACKOFF_MS_MAX`, at most ``maxRetries`` times. Any
other failure, or running out of retries, fails the task with :class:`GannetWriteError`
naming the partition, the rows of the failed batch, its first message id and the broker's
code and message. Batches before it were written: delivery is at-least-once (a retried Spark
task sends its rows again, with new ids).

Used by :mod:`gannet.pipeline.datasource`.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from rocketmq.grpc_protocol import definition_pb2

from gannet.pipeline import calling, rows
from gannet.pipeline.calling import BrokerConnection, BrokerError
from gannet.pipeline.options import WriteOptions

BACKOFF_MS_MAX = 10_000


class GannetWriteError(RuntimeError):
    """A batch of rows could not be sent; the message says which and why."""


@dataclass(frozen=True)
class SentMessages(WriterCommitMessage):
    partition_id: int
    messages: int
    batches: int


@dataclass(frozen=True, slots=True)
class Batch:
    """Messages of consecutive rows ``first_row .. first_row + len(messages) - 1``."""

    first_row: int
    messages: list[definition_pb2.Message]


def batches(
    messages: Iterable[tuple[int, definition_pb2.Message]],
    *,
    messages_max: int,
    bytes_max: int,
) -> Iterator[Batch]:
    """Group (row index, message) pairs into batches (see the module docstring)."""
    current: list[definition_pb2.Message] = []
    first_row, size_bytes, group = 0, 0, ""
    for index, message in messages:
        body_bytes = len(message.body)
        this_group = str(message.system_properties.message_group)
        if current and (
            len(current) >= messages_max
            or size_bytes + body_bytes > bytes_max
            or this_group != group
        ):
            yield Batch(first_row, current)
            current, size_bytes = [], 0
        if not current:
            first_row, group = index, this_group
        current.append(message)
        size_bytes += body_bytes
    if current:
        yield Batch(first_row, current)


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, BrokerError):
        return exc.retryable
    if isinstance(exc, grpc.RpcError):
        return exc.code() in calling.RETRYABLE_GRPC
    return False


def send_with_retries(
    send: Callable[[list[definition_pb2.Message]], object],
    batch: Batch,
    *,
    retries_max: int,
    backoff_ms_first: int,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Send one batch; the number of attempts it took. Raises the last error when it fails."""
    backoff_ms = backoff_ms_first
    attempt = 1
    while True:
        try:
            send(batch.messages)
            return attempt
        except (BrokerError, grpc.RpcError) as exc:
            if not _retryable(exc) or attempt > retries_max:
                raise
        sleep(backoff_ms / 1000)
        backoff_ms = min(backoff_ms * 2, BACKOFF_MS_MAX)
        attempt += 1


def _describe(exc: Exception) -> str:
    if isinstance(exc, grpc.RpcError):
        return f"gRPC {exc.code().name}: {exc.details()}"
    return str(exc)


def batch_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[dict[str, object]]:
    """The rows of record batches as ``{column: value}``, converted one column at a time."""
    for batch in batches:
        names = batch.schema.names
        values = [column.to_pylist() for column in batch.columns]
        for row in zip(*values, strict=True):
            yield dict(zip(names, row, strict=True))


def group_index(batch: Batch, groups: int, turn: int) -> int:
    """Which of ``groups`` writable groups a batch goes to (see the module docstring)."""
    message_group = str(batch.messages[0].system_properties.message_group)
    if message_group:
        return zlib.crc32(message_group.encode()) % groups
    return turn % groups


class Sender(Protocol):
    def send(self, messages: list[definition_pb2.Message]) -> list[int]: ...


class GroupSender:
    """Sends to one broker group: a channel to its members in route order, reopened at the
    next member when a send fails for the transport (then the batch is retried as usual)."""

    def __init__(self, endpoints: tuple[str, ...], timeout_s: float) -> None:
        self.endpoints = endpoints
        self.timeout_s = timeout_s
        self._first = 0
        self._conn: BrokerConnection | None = None

    def send(self, messages: list[definition_pb2.Message]) -> list[int]:
        if self._conn is None:
            first = self._first % len(self.endpoints)
            ordered = self.endpoints[first:] + self.endpoints[:first]
            try:
                self._conn = BrokerConnection(ordered, timeout_s=self.timeout_s)
            except ConnectionError as exc:
                self._first += 1
                raise _Unreachable(str(exc)) from None
        try:
            return self._conn.send(messages)
        except grpc.RpcError:
            self.close()
            self._first += 1
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _Unreachable(grpc.RpcError):  # type: ignore[misc]  # grpc is untyped
    """No member of a group answered when its channel was opened (retryable)."""

    def __init__(self, details: str) -> None:
        super().__init__(details)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._details


class Writer(DataSourceArrowWriter):
    def __init__(
        self, opts: WriteOptions, groups: Sequence[tuple[str, tuple[str, ...]]] = ()
    ) -> None:
        self.opts = opts
        self.groups = tuple(groups) or (("", opts.endpoints),)
        """Writable groups in route order: (name, members' endpoints, leader first)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessages:
        context = TaskContext.get()
        partition_id = context.partitionId() if context is not None else 0
        ids = rows.MessageIds()
        sent = count = 0
        senders = [GroupSender(endpoints, self.opts.timeout_s) for _, endpoints in self.groups]
        try:
            converted = self._messages(batch_rows(iterator), ids, partition_id)
            for batch in batches(
                converted,
                messages_max=self.opts.batch_messages_max,
                bytes_max=self.opts.batch_bytes_max,
            ):
                index = group_index(batch, len(senders), partition_id + count)
                self._send(senders, index, batch, partition_id)
                sent += len(batch.messages)
                count += 1
        finally:
            for sender in senders:
                sender.close()
        return SentMessages(partition_id, sent, count)

    def _messages(
        self, iterator: Iterator[dict[str, object]], ids: rows.MessageIds, partition_id: int
    ) -> Iterator[tuple[int, definition_pb2.Message]]:
        for index, fields in enumerate(iterator):
            try:
                message = rows.row_message(
                    fields, self.opts.topic, ids.next(), time.time_ns() // 1_000_000
                )
            except ValueError as exc:
                raise GannetWriteError(
                    f"partition {partition_id}, row {index}: {exc}; nothing from this row on "
                    "was sent"
                ) from None
            yield index, message

    def _send(self, senders: Sequence[Sender], index: int, batch: Batch, partition_id: int) -> None:
        """Send ``batch`` to group ``index``; a batch without a message group that its group
        could not take (retries spent on retryable failures) goes to the next groups in turn."""
        ordered = [index]
        if not batch.messages[0].system_properties.message_group:
            ordered += [(index + k) % len(senders) for k in range(1, len(senders))]
        failures: list[str] = []
        for position, chosen in enumerate(ordered):
            try:
                send_with_retries(
                    senders[chosen].send,
                    batch,
                    retries_max=self.opts.retries_max,
                    backoff_ms_first=self.opts.backoff_ms_first,
                )
                return
            except (BrokerError, grpc.RpcError) as exc:
                name = self.groups[chosen][0] if chosen < len(self.groups) else str(chosen)
                failures.append(f"{name or 'broker'}: {_describe(exc)}")
                if _retryable(exc) and position + 1 < len(ordered):
                    continue
                last = batch.first_row + len(batch.messages) - 1
                raise GannetWriteError(
                    f"partition {partition_id}: rows {batch.first_row}..{last} "
                    f"({len(batch.messages)} messages, first message id "
                    f"{batch.messages[0].system_properties.message_id}) were not written to "
                    f"topic {self.opts.topic!r}: {'; '.join(failures)}; earlier rows of this "
                    "partition were"
                ) from None

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to finish: every batch was acknowledged durable when it was sent."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: sent messages cannot be withdrawn (at-least-once)."""
