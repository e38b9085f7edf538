"""The ``gannet`` data source over two broker groups in process (``broker-0``, ``broker-1``, one
member each, knowing each other by seeds), on Spark ``local[2]``: a batch read asked of one
member reads every queue of both groups, one partition per queue; a stream checkpoints offsets
per group and continues from them, and a checkpoint from before broker groups continues in the
group it meant; a write spreads its batches over both groups and keeps a message group in one;
PullRecords of the wrong group's queue is refused."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.pipeline import calling, options, reading, rows
from gannet.pipeline.calling import BrokerConnection, BrokerError
from gannet.pipeline.ranges import LEGACY_GROUP

from .conftest import settle

POLL_S = 0.2
WAIT_S = 30.0
STREAM_TIMEOUT_S = 300


@dataclasses.dataclass
class Groups:
    zero: threads.BrokerThread
    one: threads.BrokerThread

    def admin(self, broker: threads.BrokerThread) -> admin_pb2_grpc.AdminStub:
        return admin_pb2_grpc.AdminStub(grpc.insecure_channel(broker.endpoint))  # type: ignore[no-untyped-call]

    def route(self, topic: str) -> list[tuple[str, int]]:
        with BrokerConnection([self.zero.endpoint]) as conn:
            try:
                return [(q.group, q.queue_id) for q in conn.route(topic)]
            except BrokerError:
                return []


def _start(root: Path, name: str, seeds: tuple[str, ...] = ()) -> threads.BrokerThread:
    store = dataclasses.replace(
        StoreConfig.for_tests(root / name, flush_mode=FlushMode.ASYNC_FLUSH), broker_name=name
    )
    config = BrokerConfig(
        store=store, listen_port=0, cluster_seeds=seeds, group_poll_interval_s=POLL_S
    )
    return threads.start(config)


def _until(condition: Any, what: str) -> None:
    """Wait, bounded, for another thread's poller to make ``condition`` true."""
    deadline = time.monotonic() + WAIT_S
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        pause.wait(0.05)


@pytest.fixture(scope="module")
def groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Groups]:
    root = tmp_path_factory.mktemp("source-groups")
    zero = _start(root, "broker-0")
    one = _start(root, "broker-1", (zero.endpoint,))
    made = Groups(zero, one)
    made.admin(zero).SetClusterSeeds(
        admin_pb2.SetClusterSeedsRequest(seeds=[one.endpoint]), timeout=10
    )

    def both_known() -> bool:
        views = [
            made.admin(b).GetClusterView(admin_pb2.GetClusterViewRequest()) for b in (zero, one)
        ]
        return all(len(v.groups) == 2 for v in views)

    _until(both_known, "both groups to know each other")
    yield made
    one.stop()
    zero.stop()


_names = iter(range(10_000))


def _topic(groups: Groups, queues: int = 2, kind: admin_pb2.MessageType = admin_pb2.NORMAL) -> str:
    """A topic with ``queues`` queues in both groups, routed over both by broker-0."""
    name = f"GroupsRead{next(_names)}"
    groups.admin(groups.zero).CreateTopic(
        admin_pb2.CreateTopicRequest(name=name, queue_nums=queues, message_type=kind), timeout=10
    )
    want = [(g, q) for g in ("broker-0", "broker-1") for q in range(queues)]
    _until(lambda: groups.route(name) == want, f"broker-0's route of {name} over both groups")
    return name


def _send_each(broker: threads.BrokerThread, topic: str, bodies: list[bytes]) -> None:
    """One SendMessage per body at ``broker``: its group's queues in turn."""
    ids = rows.MessageIds()
    with BrokerConnection([broker.endpoint]) as conn:
        for body in bodies:
            conn.send([rows.row_message({"body": body}, topic, ids.next(), 0)])
    settle(broker)


def test_a_batch_read_covers_every_queue_of_every_group(gannet_spark: Any, groups: Groups) -> None:
    topic = _topic(groups)
    zero = [f"zero {i}".encode() for i in range(6)]
    one = [f"one {i}".encode() for i in range(5)]
    _send_each(groups.zero, topic, zero)
    _send_each(groups.one, topic, one)
    reader = (
        gannet_spark.read.format("gannet")
        .option("endpoints", groups.zero.endpoint)
        .option("topic", topic)
    )
    df = reader.load()
    assert df.rdd.getNumPartitions() == 4  # one per queue: 2 queues x 2 groups
    got = sorted((r.broker, r.queue_id, r.queue_offset, bytes(r.body)) for r in df.collect())
    assert sorted(body for g, _, _, body in got if g == "broker-0") == sorted(zero)
    assert sorted(body for g, _, _, body in got if g == "broker-1") == sorted(one)
    assert len({(g, q, o) for g, q, o, _ in got}) == len(zero) + len(one)
    # a bound by queue id applies in every group: queue 1 from offset 1 on
    bounded = reader.option("queues", "1").option("startingOffsets", '{"1": 1}').load()
    picked = sorted((r.broker, r.queue_offset) for r in bounded.collect())
    assert picked == [("broker-0", 1), ("broker-0", 2), ("broker-1", 1)]


def test_a_stream_keeps_offsets_per_group_and_reads_old_checkpoints(
    gannet_spark: Any, groups: Groups, tmp_path: Path
) -> None:
    topic = _topic(groups)
    _send_each(groups.zero, topic, [b"a0", b"a1", b"a2"])
    _send_each(groups.one, topic, [b"b0"])
    seen: list[tuple[str, int, int, bytes]] = []

    def run(checkpoint: Path) -> None:
        def collect(batch: Any, batch_id: int) -> None:
            seen.extend(
                (r.broker, r.queue_id, r.queue_offset, bytes(r.body)) for r in batch.collect()
            )

        stream = (
            gannet_spark.readStream.format("gannet")
            .option("endpoints", groups.one.endpoint)
            .option("topic", topic)
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
            query.stop()
        assert finished
        assert query.exception() is None

    run(tmp_path / "checkpoint")
    assert sorted(b for *_, b in seen) == [b"a0", b"a1", b"a2", b"b0"]
    _send_each(groups.one, topic, [b"b1", b"b2"])
    del seen[:]
    run(tmp_path / "checkpoint")
    assert sorted(b for *_, b in seen) == [b"b1", b"b2"]  # no gap, no duplicate

    # The offsets Spark checkpoints name the group; an old one (queue id -> offset) is taken
    # for the group of the member the endpoints option reaches (broker-1 here).
    opts = options.read_options({"endpoints": groups.one.endpoint, "topic": topic}, streaming=True)
    stream_reader = reading.StreamReader(opts)
    initial = stream_reader.initialOffset()
    assert initial == {"broker-0": {"0": 0, "1": 0}, "broker-1": {"0": 0, "1": 0}}
    legacy = {"0": 1, "1": 1}
    assert stream_reader._offsets(legacy) == {("broker-1", 0): 1, ("broker-1", 1): 1}
    latest = stream_reader.latestOffset(legacy, stream_reader.getDefaultReadLimit())
    assert sorted(latest) == ["broker-0", "broker-1"]
    assert [sum(latest[g].values()) for g in sorted(latest)] == [3, 3]  # 3 sent to each
    parts = stream_reader.partitions(legacy, latest)
    spans = {(p.group, p.queue_id): (p.start, p.end) for p in parts}  # type: ignore[attr-defined]
    want = {
        (g, int(q)): (1 if g == "broker-1" else 0, end)
        for g, ends in latest.items()
        for q, end in ends.items()
        if end > (1 if g == "broker-1" else 0)
    }
    assert spans == want
    assert all(p.endpoints for p in parts)  # type: ignore[attr-defined]
    assert LEGACY_GROUP == ""


def test_a_write_spreads_over_the_groups_and_keeps_a_message_group_in_one(
    gannet_spark: Any, groups: Groups
) -> None:
    topic = _topic(groups, kind=admin_pb2.MIXED)
    bodies = [f"w{i}".encode() for i in range(40)]
    df = gannet_spark.createDataFrame([(b,) for b in bodies], "body binary").repartition(2)
    writer = df.write.format("gannet").option("endpoints", groups.zero.endpoint)
    writer.option("topic", topic).option("batchSize", 5).mode("append").save()
    fifo = gannet_spark.createDataFrame(
        [(f"f{i}".encode(), "orders-7") for i in range(6)], "body binary, message_group string"
    ).coalesce(1)
    fifo.write.format("gannet").option("endpoints", groups.one.endpoint).option(
        "topic", topic
    ).mode("append").save()
    for broker in (groups.zero, groups.one):
        settle(broker)
    read = (
        gannet_spark.read.format("gannet")
        .option("endpoints", groups.zero.endpoint)
        .option("topic", topic)
        .load()
        .collect()
    )
    plain = [r for r in read if bytes(r.body).startswith(b"w")]
    assert sorted(bytes(r.body) for r in plain) == sorted(bodies)
    assert {r.broker for r in plain} == {"broker-0", "broker-1"}
    ordered = [r for r in read if bytes(r.body).startswith(b"f")]
    assert len({(r.broker, r.queue_id) for r in ordered}) == 1  # one queue of one group
    in_order = sorted(ordered, key=lambda r: r.queue_offset)
    assert [bytes(r.body) for r in in_order] == [f"f{i}".encode() for i in range(6)]


def test_pull_records_is_bounded_and_refuses_bad_offsets(groups: Groups) -> None:
    topic = _topic(groups, queues=1)
    _send_each(groups.one, topic, [b"x" * 100 for _ in range(5)])
    with BrokerConnection([groups.one.endpoint]) as conn:
        got = conn.pull_records(topic, 0, 1, messages_max=3)
        assert (got.count, got.next_offset) == (3, 4)
        empty = conn.pull_records(topic, 0, 5, messages_max=3)
        assert (empty.count, empty.records, empty.next_offset) == (0, b"", 5)
        with pytest.raises(BrokerError, match=r"ILLEGAL_OFFSET.*holds 0\.\.5"):
            conn.pull_records(topic, 0, 9, messages_max=3)
        with pytest.raises(BrokerError, match="BAD_REQUEST"):
            conn.pull_records(topic, 0, 0, messages_max=0)


def test_a_task_reads_from_the_next_member_when_one_does_not_answer(
    groups: Groups, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition lists its group's members leader first; one that does not answer (here a
    closed port first) is passed over and the range is read from the next."""
    monkeypatch.setattr(calling, "CONNECT_TIMEOUT_S", 1.0)
    topic = _topic(groups, queues=1)
    _send_each(groups.one, topic, [b"m0", b"m1", b"m2"])
    opts = options.read_options(
        {"endpoints": groups.zero.endpoint, "topic": topic}, streaming=False
    )
    dead = _closed_port_endpoint()
    part = reading.QueuePartition(0, 0, 3, "broker-1", (dead, groups.one.endpoint))
    read = [b for batch in reading.read_range(opts, part) for b in batch.column("body").to_pylist()]
    assert read == [b"m0", b"m1", b"m2"]
    with pytest.raises(reading.GannetReadError, match="broker-1"):
        list(reading.read_range(opts, reading.QueuePartition(0, 0, 3, "broker-1", (dead,))))


def _closed_port_endpoint() -> str:
    with socket.socket() as probe:  # a port nothing listens on once the socket is closed
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"
