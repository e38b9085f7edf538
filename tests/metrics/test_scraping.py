"""A live broker's ``/metrics`` over HTTP: the figures move with the traffic sent through the
v2 API, the store gauges follow the store, every sample names the broker group, and promtool
finds the exposition clean."""

from __future__ import annotations

import concurrent.futures

from rocketmq.grpc_protocol import Code

from gannet.node.broker import threads
from gannet.node.protocol.gen import admin_pb2

from .conftest import (
    RPC_TIMEOUT_S,
    broker_labels,
    create_topic,
    http_get,
    metrics_port,
    run_promtool,
    samples,
    scrape,
    send,
    value,
)
from .test_consumers import ack, receive

WORKERS = 4
SENDS_PER_WORKER = 50


def _settle(broker: threads.BrokerThread) -> None:
    store = broker.broker.store
    assert store.wait_dispatched(store.commitlog.max_offset(), timeout_s=10)


def test_sends_move_the_topic_counters_size_histogram_and_rpc_latency(
    broker, admin, messaging
) -> None:
    port = metrics_port(broker)
    topic = create_topic(admin)
    bodies = [b"a" * 10, b"b" * 2000, b"c" * 10_000]
    before = scrape(port)
    assert send(messaging, topic, bodies).status.code == Code.OK
    assert send(messaging, topic, [b"d" * 5]).status.code == Code.OK
    after = scrape(port)

    assert value(after, "gannet_messages_in_total", topic=topic) == 4
    assert value(after, "gannet_bytes_in_total", topic=topic) == 12_015
    size_count = "gannet_message_size_bytes_count"
    assert value(after, size_count) - value(before, size_count) == 4
    small = "gannet_message_size_bytes_bucket"
    assert value(after, small, le="128.0") - value(before, small, le="128.0") == 2
    rpc = {"rpc": "SendMessage", "code": "OK"}
    count = "gannet_rpc_duration_seconds_count"
    assert value(after, count, **rpc) - value(before, count, **rpc) == 2
    assert value(after, "gannet_rpc_duration_seconds_sum", **rpc) > 0


def test_refused_sends_are_timed_under_their_v2_code(broker, messaging) -> None:
    port = metrics_port(broker)
    labels = {"rpc": "SendMessage", "code": "TOPIC_NOT_FOUND"}
    before = value(scrape(port), "gannet_rpc_duration_seconds_count", **labels)
    assert send(messaging, "NoSuchTopic", [b"x"]).status.code == Code.TOPIC_NOT_FOUND
    after = scrape(port)
    assert value(after, "gannet_rpc_duration_seconds_count", **labels) == before + 1
    assert value(after, "gannet_messages_in_total", topic="NoSuchTopic") == 0


def test_store_gauges_follow_the_store(broker, admin, messaging) -> None:
    port = metrics_port(broker)
    topic = create_topic(admin)
    assert send(messaging, topic, [b"x" * 100] * 3).status.code == Code.OK
    _settle(broker)
    text = scrape(port)
    stats = broker.broker.store.statistics()
    assert value(text, "gannet_store_open") == 1
    assert value(text, "gannet_broker_ready") == 1
    assert value(text, "gannet_store_max_offset_bytes") == stats.max_offset > 0
    assert value(text, "gannet_store_flushed_offset_bytes") == stats.max_offset  # SYNC flush
    assert value(text, "gannet_store_dispatched_offset_bytes") == stats.max_offset
    assert value(text, "gannet_store_dispatch_lag_bytes") == 0
    assert value(text, "gannet_store_flush_lag_bytes") == 0
    assert value(text, "gannet_store_consume_queues") >= 1
    assert value(text, "gannet_store_commitlog_files") == stats.commitlog_files
    assert 0 < value(text, "gannet_store_disk_used_ratio") <= 1
    assert value(text, "gannet_store_disk_clean_forcibly_ratio") == 0.85
    assert value(text, "gannet_store_disk_hysteresis_ratio") == 0.02
    assert value(text, "gannet_store_writable") == 1
    assert value(text, "gannet_store_fsync_failed") == 0
    assert value(text, "process_resident_memory_bytes") > 0
    assert value(text, "process_cpu_seconds_total") > 0
    assert value(text, "gannet_grpc_inflight_requests") == 0


def test_a_full_disk_shows_as_not_writable(broker) -> None:
    store = broker.broker.store
    store.disk_full = True
    try:
        text = scrape(metrics_port(broker))
    finally:
        store.disk_full = False
    assert value(text, "gannet_store_disk_full") == 1
    assert value(text, "gannet_store_writable") == 0


def test_cleanup_runs_are_counted(broker) -> None:
    port = metrics_port(broker)
    before = value(scrape(port), "gannet_cleanup_runs_total", reason="manual")
    broker.broker.store.clean_now()
    text = scrape(port)
    assert value(text, "gannet_cleanup_runs_total", reason="manual") == before + 1
    assert ("gannet_cleanup_files_removed_total", frozenset({("kind", "commitlog")})) in (
        samples(text)
    )
    assert ("gannet_cleanup_bytes_removed_total", frozenset()) in samples(text)


def test_promtool_finds_the_exposition_clean_under_load(broker, admin, messaging, promtool):
    """Sends, Pop receives and acks run while /metrics is scraped; every scrape is clean."""
    topics = [create_topic(admin) for _ in range(3)]
    group = f"G-{topics[0]}"
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=group), timeout=RPC_TIMEOUT_S)

    def send_some(worker: int) -> None:
        for i in range(SENDS_PER_WORKER):
            body = b"m" * (1 + 97 * i)
            assert send(messaging, topics[(worker + i) % 3], [body] * 2).status.code == Code.OK
        if worker == 0:
            received = receive(messaging, topics[0], group, 16)
            ack(messaging, topics[0], group, received[: len(received) // 2])

    port = metrics_port(broker)
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        sending = [pool.submit(send_some, w) for w in range(WORKERS)]
        texts = [scrape(port) for _ in range(5)]  # while the sends run
        for future in sending:
            future.result()
    send(messaging, "NoSuchTopic", [b"x"])
    texts.append(scrape(port))
    for text in texts:
        run_promtool(promtool, "check", "metrics", stdin=text)
    names = {name for name, _ in samples(texts[-1])}
    assert {"gannet_messages_out_total", "gannet_consumer_lag_messages"} <= names
    assert sum(value(texts[-1], "gannet_messages_in_total", topic=t) for t in topics) == (
        2 * WORKERS * SENDS_PER_WORKER
    )


def test_health_endpoints_and_unknown_paths(broker) -> None:
    port = metrics_port(broker)
    assert http_get(port, "/healthz") == (200, "ok\n")
    assert http_get(port, "/readyz") == (200, "ready\n")
    status, _ = http_get(port, "/nothing-here")
    assert status == 404


def test_every_sample_names_its_broker_group(broker, admin, messaging) -> None:
    """``broker="<--broker-name>"`` on every sample served (process_* and labelled families
    included), next to ``group`` (the consumer group), which it does not replace."""
    topic = create_topic(admin)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name=f"G-{topic}"), timeout=RPC_TIMEOUT_S)
    assert send(messaging, topic, [b"one"]).status.code == Code.OK
    _settle(broker)
    assert receive(messaging, topic, f"G-{topic}", 1)
    text = scrape(metrics_port(broker))
    name = broker.broker.config.store.broker_name
    assert name == "broker-a"
    found = broker_labels(text)
    assert len(found) > 40
    assert {n: values for n, values in found.items() if values != {name}} == {}
    outs = [line for line in text.splitlines() if line.startswith("gannet_messages_out_total{")]
    assert any(f'group="G-{topic}"' in line and f'broker="{name}"' in line for line in outs)
    # In-process readers keep the plain registry (no constant label).
    metrics = broker.broker.metrics
    assert metrics is not None
    assert metrics.registry.get_sample_value("gannet_broker_ready") == 1.0
