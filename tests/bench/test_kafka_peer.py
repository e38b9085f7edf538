"""Apache Kafka as a benchmark peer (bench/peers/kafka.py, the ``kafka_*`` drivers): its
configuration as pure functions, and one real run — a KRaft broker started from the Maven jars,
a tiny S1 produced and consumed through the load-generator workers, then the consumer group's
committed offsets checked against the partitions' end offsets. The real run is skipped, with
the reason, where java, confluent-kafka or the jars (and mvn to fetch them) are missing."""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.loadgen import drivers, phases, run, scenarios
from bench.peers import kafka, processes
from bench.peers.base import Layout


def test_server_properties_make_one_combined_kraft_node() -> None:
    text = kafka.server_properties(Path("/d"), 19092, 19093)
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["log.dirs"] == "/d"
    assert props["offsets.topic.replication.factor"] == "1"
    assert "flush.messages" not in text  # async = Kafka's defaults
    assert f"<kafka.version>{kafka.VERSION}</kafka.version>" in kafka.POM.read_text()


def test_flush_modes_map_to_topic_configs() -> None:
    assert kafka.topic_config("async") == {}
    assert kafka.topic_config("sync") == {"flush.messages": "1"}
    with pytest.raises(ValueError, match="flush='fast'"):
        kafka.topic_config("fast")
    ids = {kafka.cluster_id() for _ in range(2000)}  # 1 in 64 raw draws starts with "-"
    assert len(ids) == 2000
    assert all(len(i) == 22 and "=" not in i and not i.startswith("-") for i in ids)


def test_r3_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(processes.PeerError, match="three JVM brokers do not fit"):
        kafka.start(tmp_path, "sync", 3, Layout(("t",), 16, "g"))


def _spec(scenario: scenarios.Scenario) -> drivers.WorkerSpec:
    return drivers.WorkerSpec("kafka", "kafka", "127.0.0.1:1", scenario, 0, 1, ("t",), "g",
                              10, 1, 11, 5.0)  # fmt: skip


def test_stock_and_batched_producer_settings() -> None:
    stock = drivers.kafka_producer_config(_spec(scenarios.SCENARIOS["S1"]))
    assert stock["acks"] == "all"
    assert stock["linger.ms"] == 0
    assert "batch.num.messages" not in stock
    assert drivers.kafka_in_flight(scenarios.SCENARIOS["S1"]) == 64
    batched = drivers.kafka_producer_config(_spec(scenarios.SCENARIOS["S3"]))
    assert batched["batch.num.messages"] == 32
    assert batched["linger.ms"] > 0
    assert batched["batch.size"] >= 32 * 100
    assert drivers.kafka_in_flight(scenarios.SCENARIOS["S3"]) == 4 * 32
    consumer = drivers.kafka_consumer_config(_spec(scenarios.SCENARIOS["S1"]))
    assert consumer["enable.auto.commit"] is False
    assert consumer["group.id"] == "g"


def _need_kafka() -> None:
    if shutil.which("java") is None:
        pytest.skip("java is not installed (make bench-peers installs a JDK)")
    pytest.importorskip(
        "confluent_kafka", reason="confluent-kafka is not installed (make bench-peers: bench extra)"
    )
    if not (kafka.lib_dir() / f"kafka_2.13-{kafka.VERSION}.jar").exists():
        if shutil.which("mvn") is None:
            pytest.skip("Kafka jars are not cached and mvn is missing (make bench-peers)")
        try:
            kafka.fetch()
        except processes.PeerError as exc:
            pytest.skip(f"Kafka jars could not be fetched from Maven Central: {exc}")


def _committed_and_end(endpoint: str, topic: str, group: str, partitions: int) -> list[Any]:
    from confluent_kafka import Consumer, TopicPartition  # type: ignore[import-not-found,unused-ignore]

    consumer = Consumer({"bootstrap.servers": endpoint, "group.id": group})
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        committed = consumer.committed(wanted, timeout=30)
        ends = [consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in wanted]
        return [(c.offset, end) for c, end in zip(committed, ends, strict=True)]
    finally:
        consumer.close()


def _topic_config(endpoint: str, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient  # type: ignore[import-not-found,unused-ignore]
    from confluent_kafka.admin._config import (  # type: ignore[import-not-found,unused-ignore]
        ConfigResource,
    )

    admin = AdminClient({"bootstrap.servers": endpoint})
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {name: str(entry.value) for name, entry in entries.items()}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_tiny_s1_against_kafka_gets_every_message_back(tmp_path: Path) -> None:
    _need_kafka()
    scenario = dataclasses.replace(
        scenarios.SCENARIOS["S1"], messages=200, warmup_messages=20, repetitions=1,
        max_duration_s=30.0,
    )  # fmt: skip
    tag = uuid.uuid4().hex[:6]
    layout = Layout(tuple(scenario.topic_names(tag)), scenario.queues_per_topic, f"g-{tag}")
    running = kafka.start(tmp_path, "async", 1, layout)
    try:
        assert running.version.startswith(f"Apache Kafka {kafka.VERSION}")
        assert "librdkafka" in str(running.settings["client"])
        produce = phases.run(
            "produce", run.specs_for("produce", running, "kafka", scenario, layout), running.pids
        )
        consume = phases.run(
            "consume", run.specs_for("consume", running, "kafka", scenario, layout), running.pids
        )
        assert (produce.done, produce.errors) == (200, 0), produce.first_error
        assert produce.usage.cpu_s > 0
        assert (consume.done, consume.errors) == (220, 0), consume.first_error  # + warm-up
        # Every produced message was consumed and acknowledged: the group's committed offset
        # of each partition is that partition's end offset.
        offsets = _committed_and_end(running.endpoint, layout.topics[0], layout.group, 1)
        assert offsets == [(220, 220)]
        # The sync-flush scenarios' topics carry flush.messages=1 (fsync after every append).
        durable = Layout((f"durable-{tag}",), 2, layout.group)
        kafka.create_topics(running.endpoint, durable, kafka.topic_config("sync"))
        assert _topic_config(running.endpoint, durable.topics[0])["flush.messages"] == "1"
        assert _topic_config(running.endpoint, layout.topics[0])["flush.messages"] != "1"
    finally:
        running.stop()
    assert all(child.process.poll() is not None for child in running.children)
