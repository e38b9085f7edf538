"""The pure parts of the ``gannet`` data source, without Spark: option parsing and its error
messages, range splitting and fair sharing of a trigger limit, row/message conversion, message
ids, write batching and retries."""

from __future__ import annotations

import datetime as dt
import random

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rocketmq.grpc_protocol import Code, definition_pb2

from gannet.pipeline import options, ranges, reading, rows, writing
from gannet.pipeline.calling import BrokerError
from gannet.pipeline.options import OptionError
from gannet.pipeline.ranges import QueueRange

BASE = {"endpoints": "127.0.0.1:8081", "topic": "orders"}


def test_read_options_defaults_and_case_insensitive_names() -> None:
    opts = options.read_options(
        {**BASE, "STARTINGOFFSETS": '{"0": 5, "2": -1}', "Filter": "a || b"}, streaming=False
    )
    assert opts.endpoints == ("127.0.0.1:8081",)
    assert opts.start.offsets == {0: 5, 2: options.LATEST}
    assert opts.start.default == options.EARLIEST
    assert opts.end.default == options.LATEST
    assert opts.expression == "a || b"
    assert opts.partition_messages_max == 100_000
    assert opts.fail_on_data_loss is True


def test_timestamps_accept_epoch_ms_and_iso() -> None:
    opts = options.read_options(
        {**BASE, "startingTimestamp": "2026-11-22T08:00:00Z", "endingTimestamp": "1795334400001"},
        streaming=False,
    )
    want = int(dt.datetime(2026, 11, 22, 8, tzinfo=dt.UTC).timestamp() * 1000)
    assert opts.start.timestamp_ms == want
    assert opts.end.timestamp_ms == 1795334400001


@pytest.mark.parametrize(
    ("given", "streaming", "needle"),
    [
        ({"endpoints": "127.0.0.1:8081"}, False, "option 'topic' is required"),
        ({**BASE, "endpoints": "localhost"}, False, "is not host:port"),
        ({**BASE, "startingOffsets": "soon"}, False, "must be 'earliest', 'latest' or a JSON"),
        ({**BASE, "startingOffsets": '{"x": 1}'}, False, "queue id 'x'"),
        ({**BASE, "endingOffsets": '{"0": -3}'}, False, "offset -3 of queue 0"),
        ({**BASE, "maxPartitionMessages": "0"}, False, "'maxPartitionMessages' must be in 1.."),
        ({**BASE, "pullBatchSize": "many"}, False, "'pullBatchSize' must be an integer"),
        ({**BASE, "failOnDataLoss": "maybe"}, False, "must be true or false"),
        ({**BASE, "colour": "red"}, False, "unknown option(s) colour"),
        ({**BASE, "queues": "0,x"}, False, "'x' is not one"),
        ({**BASE, "startingTimestamp": "yesterday"}, False, "epoch milliseconds or ISO-8601"),
        (
            {**BASE, "startingOffsets": "earliest", "startingTimestamp": "1"},
            False,
            "either 'startingOffsets' or 'startingTimestamp'",
        ),
        (
            {**BASE, "startingTimestamp": "10", "endingTimestamp": "5"},
            False,
            "'startingTimestamp' is after 'endingTimestamp'",
        ),
        ({**BASE, "endingOffsets": "latest"}, True, "a stream has no end"),
        ({**BASE, "maxMessagesPerTrigger": "5"}, False, "is for spark.readStream"),
        ({**BASE, "maxMessagesPerTrigger": "-5"}, True, "must be in 1.."),
    ],
)
def test_bad_read_options_name_the_problem(
    given: dict[str, str], streaming: bool, needle: str
) -> None:
    with pytest.raises(OptionError) as excinfo:
        options.read_options(given, streaming=streaming)
    assert needle in str(excinfo.value)


def test_write_options() -> None:
    opts = options.write_options({**BASE, "batchSize": "10", "maxRetries": "0"})
    assert (opts.batch_messages_max, opts.retries_max, opts.backoff_ms_first) == (10, 0, 100)
    with pytest.raises(OptionError, match=r"'batchSize' must be in 1\.\.1024"):
        options.write_options({**BASE, "batchSize": "5000"})
    with pytest.raises(OptionError, match="unknown option"):
        options.write_options({**BASE, "startingOffsets": "earliest"})


def test_split_cuts_ranges_in_order() -> None:
    pieces = ranges.split([QueueRange(0, 3, 12), QueueRange(1, 5, 5), QueueRange(2, 0, 4)], 4)
    assert pieces == [
        QueueRange(0, 3, 7),
        QueueRange(0, 7, 11),
        QueueRange(0, 11, 12),
        QueueRange(2, 0, 4),
    ]
    assert ranges.split([QueueRange(1, 0, 5, "broker-1")], 3) == [
        QueueRange(1, 0, 3, "broker-1"),
        QueueRange(1, 3, 5, "broker-1"),
    ]


@given(
    start=st.dictionaries(st.integers(0, 5), st.integers(0, 50), max_size=6),
    more=st.dictionaries(st.integers(0, 7), st.integers(0, 50), max_size=8),
    limit=st.none() | st.integers(0, 120),
)
def test_apportion_stays_within_limit_and_available(
    start: dict[int, int], more: dict[int, int], limit: int | None
) -> None:
    latest = {q: start.get(q, 0) + extra for q, extra in more.items()}
    end = ranges.apportion(start, latest, limit)
    begin = {q: start.get(q, 0) for q in end}
    moved = {q: end[q] - begin[q] for q in end}
    available = {q: max(0, latest.get(q, begin[q]) - begin[q]) for q in end}
    assert set(end) == set(start) | set(latest)
    assert all(0 <= moved[q] <= available[q] for q in end)
    total = sum(available.values())
    assert sum(moved.values()) == (total if limit is None else min(limit, total))
    if limit is not None and sum(moved.values()) < total:
        # fair: a queue holding back data got at least as much as any other got
        starved = [q for q in end if moved[q] < available[q]]
        assert all(moved[q] >= max(moved.values()) - 1 for q in starved)


def test_apportion_example_and_json_offsets() -> None:
    end = ranges.apportion({0: 10, 1: 0}, {0: 11, 1: 100, 2: 50}, 9)
    assert end == {0: 11, 1: 4, 2: 4}
    keyed = {("broker-1", 0): 3, ("broker-0", 2): 4, ("broker-0", 0): 11}
    assert ranges.to_json_offsets(keyed) == {"broker-0": {"0": 11, "2": 4}, "broker-1": {"0": 3}}
    assert ranges.from_json_offsets(ranges.to_json_offsets(keyed)) == keyed
    # a checkpoint from before broker groups: its queues get the legacy group
    assert ranges.from_json_offsets({"0": 11, "2": 4}) == {("", 0): 11, ("", 2): 4}
    with pytest.raises(ValueError, match="not queue id"):
        ranges.from_json_offsets({"zero": 1})
    with pytest.raises(ValueError, match="not queue id"):
        ranges.from_json_offsets({"broker-0": {"0": "eleven"}})


def _pb(
    body: bytes = b"x", group: str | None = None, message_id: str = "1"
) -> definition_pb2.Message:
    row = {"body": body, "message_group": group}
    return rows.row_message(row, "t", message_id, 0)


def test_row_message_and_messages_batch_round_trip() -> None:
    delivery = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    pb = rows.row_message(
        {
            "body": "text",
            "keys": "k1",
            "tag": "T",
            "properties": {"a": "1", "b": None},
            "delivery_time": delivery,
        },
        "orders",
        "ID1",
        1_700_000_000_123,
    )
    sp = pb.system_properties
    assert pb.body == b"text"
    assert list(sp.keys) == ["k1"]
    assert (sp.tag, sp.message_id, sp.message_type) == ("T", "ID1", definition_pb2.DELAY)
    assert dict(pb.user_properties) == {"a": "1"}
    assert sp.delivery_timestamp.seconds == int(delivery.timestamp())
    sp.queue_id, sp.queue_offset = 2, 7
    sp.store_timestamp.FromMilliseconds(1_700_000_000_456)
    row = tuple(rows.messages_batch([pb]).to_pylist()[0].values())
    assert row[:7] == ("orders", 2, 7, "ID1", ["k1"], "T", [("a", "1")])
    assert row[8].timestamp() == pytest.approx(1_700_000_000.123)
    assert _pb(group="g").system_properties.message_type == definition_pb2.FIFO
    with pytest.raises(ValueError, match="body must be non-empty"):
        rows.row_message({"body": b""}, "t", "1", 0)


def test_write_schema_check() -> None:
    rows.check_write_schema([("body", "binary"), ("queue_id", "int"), ("tag", "string")])
    with pytest.raises(ValueError, match="needs a 'body' column"):
        rows.check_write_schema([("tag", "string")])
    with pytest.raises(ValueError, match="'keys' is int; it must be array<string> or string"):
        rows.check_write_schema([("body", "binary"), ("keys", "int")])


def test_message_ids_are_unique_v1_ids() -> None:
    ids = rows.MessageIds()
    made = [ids.next() for _ in range(1000)]
    assert len(set(made)) == 1000
    assert all(len(m) == 34 and m.startswith("01") for m in made)
    int(made[0], 16)


def test_batches_respect_counts_bytes_and_groups() -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    messages = [
        (i, _pb(body=b"x" * rng.randint(1, 50), group=rng.choice([None, "a", "b"])))
        for i in range(200)
    ]
    made = list(writing.batches(messages, messages_max=7, bytes_max=100))
    assert [m for b in made for m in b.messages] == [m for _, m in messages]
    expected_first = 0
    for batch in made:
        assert batch.first_row == expected_first
        expected_first += len(batch.messages)
        assert len(batch.messages) <= 7
        assert len(batch.messages) == 1 or sum(len(m.body) for m in batch.messages) <= 100
        assert len({m.system_properties.message_group for m in batch.messages}) == 1


class _Failing(grpc.RpcError):  # type: ignore[misc]
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection refused"


def test_send_retries_retryable_failures_with_doubling_backoff() -> None:
    outcomes: list[Exception | None] = [
        BrokerError("SendMessage", Code.TOO_MANY_REQUESTS, "busy"),
        _Failing(),
        None,
    ]
    sleeps: list[float] = []

    def send(messages: list[definition_pb2.Message]) -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    batch = writing.Batch(0, [_pb()])
    attempts = writing.send_with_retries(
        send, batch, retries_max=3, backoff_ms_first=50, sleep=sleeps.append
    )
    assert attempts == 3
    assert sleeps == [0.05, 0.1]


def test_send_gives_up_on_permanent_errors_and_after_its_retries() -> None:
    sleeps: list[float] = []

    def refuse(messages: list[definition_pb2.Message]) -> None:
        raise BrokerError("SendMessage", Code.TOPIC_NOT_FOUND, "no topic")

    batch = writing.Batch(0, [_pb()])
    with pytest.raises(BrokerError, match="TOPIC_NOT_FOUND"):
        writing.send_with_retries(
            refuse, batch, retries_max=5, backoff_ms_first=1, sleep=sleeps.append
        )
    assert sleeps == []

    def busy(messages: list[definition_pb2.Message]) -> None:
        raise BrokerError("SendMessage", Code.TOO_MANY_REQUESTS, "busy")

    with pytest.raises(BrokerError, match="TOO_MANY_REQUESTS"):
        writing.send_with_retries(
            busy, batch, retries_max=2, backoff_ms_first=1, sleep=sleeps.append
        )
    assert len(sleeps) == 2


class _Cleaned:
    """A connection whose queue now starts at offset 10 (older messages cleaned up)."""

    def query_offset(self, topic: str, queue_id: int, policy: int, at_ms: int = 0) -> int:
        assert policy == definition_pb2.BEGINNING
        return 10


def test_a_cleaned_start_fails_or_skips_as_failondataloss_says() -> None:
    illegal = BrokerError("PullRecords", Code.ILLEGAL_OFFSET, "offset 3 is outside")
    part = reading.QueuePartition(0, 3, 20, "broker-1")
    strict = options.read_options(BASE, streaming=False)
    with pytest.raises(
        reading.GannetReadError,
        match=r"in group broker-1 at offset 3: messages 3\.\.9 were cleaned",
    ):
        reading._after_illegal_offset(_Cleaned(), strict, part, 3, illegal)  # type: ignore[arg-type]
    lenient = options.read_options({**BASE, "failOnDataLoss": "false"}, streaming=False)
    assert reading._after_illegal_offset(_Cleaned(), lenient, part, 3, illegal) == 10  # type: ignore[arg-type]
    other = BrokerError("PullRecords", Code.FORBIDDEN, "not readable")
    with pytest.raises(reading.GannetReadError, match="FORBIDDEN"):
        reading._after_illegal_offset(_Cleaned(), lenient, part, 3, other)  # type: ignore[arg-type]


class _Group:
    """A group's sender: refuses with ``error`` or records what it was sent."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.sent: list[str] = []

    def send(self, messages: list[definition_pb2.Message]) -> list[int]:
        if self.error is not None:
            raise self.error
        self.sent += [m.system_properties.message_id for m in messages]
        return list(range(len(messages)))


def test_a_batch_its_group_cannot_take_goes_to_the_next_group_unless_fifo() -> None:
    opts = options.write_options({**BASE, "maxRetries": "0"})  # no backoff sleeps here
    groups = [("broker-0", ("a:1",)), ("broker-1", ("b:1",)), ("broker-2", ("c:1",))]
    writer = writing.Writer(opts, groups)
    down, refusing, up = _Group(_Failing()), _Group(_Failing()), _Group()
    writer._send([down, refusing, up], 0, writing.Batch(0, [_pb(message_id="P")]), 3)
    assert up.sent == ["P"]  # broker-0 and broker-1 unavailable: broker-2 took it
    with pytest.raises(writing.GannetWriteError) as fifo:
        writer._send([down, up, up], 0, writing.Batch(4, [_pb(group="g", message_id="F")]), 3)
    assert "broker-0: gRPC UNAVAILABLE" in str(fifo.value)  # a message group stays in its group
    assert up.sent == ["P"]
    wrong = _Group(BrokerError("SendMessage", Code.TOPIC_NOT_FOUND, "no topic"))
    with pytest.raises(writing.GannetWriteError, match="TOPIC_NOT_FOUND"):
        writer._send([wrong, up, up], 0, writing.Batch(0, [_pb(message_id="Q")]), 3)
    assert up.sent == ["P"]  # a refusal that is not retryable is not sent elsewhere
    assert writing.group_index(writing.Batch(0, [_pb()]), 3, 7) == 1
    fifo_batch = writing.Batch(0, [_pb(group="orders-7")])
    assert writing.group_index(fifo_batch, 3, 0) == writing.group_index(fifo_batch, 3, 5)
