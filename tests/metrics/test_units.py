"""BrokerMetrics without a broker: bounded topic labels, private registries, code names."""

from __future__ import annotations

from pathlib import Path

from gannet.node.metrics import broker_metrics
from gannet.node.protocol import statuses
from gannet.node.store.log.records import Message

from .conftest import samples


def _text(metrics: broker_metrics.BrokerMetrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


def test_topics_past_the_limit_are_counted_as_other() -> None:
    metrics = broker_metrics.BrokerMetrics(topics_max=2)
    for topic in ("A", "B", "C", "D", "A"):
        metrics.on_sent(topic, [Message(topic=topic, body=b"xyz")])
    found = samples(_text(metrics))
    topics = {
        dict(labels)["topic"]: v
        for (name, labels), v in found.items()
        if name == "gannet_messages_in_total"
    }
    assert topics == {"A": 2, "B": 1, "_other": 2}
    assert found[("gannet_bytes_in_total", frozenset({("topic", "_other")}))] == 6


def test_each_broker_has_its_own_registry() -> None:
    first = broker_metrics.BrokerMetrics()
    second = broker_metrics.BrokerMetrics()  # the global registry would refuse duplicates
    first.on_sent("T", [Message(topic="T", body=b"1")])
    assert ("gannet_messages_in_total", frozenset({("topic", "T")})) in samples(_text(first))
    assert ("gannet_messages_in_total", frozenset({("topic", "T")})) not in samples(_text(second))


def test_no_created_series() -> None:
    metrics = broker_metrics.BrokerMetrics()
    metrics.on_sent("T", [Message(topic="T", body=b"1")])
    assert "_created" not in _text(metrics)


def test_code_names() -> None:
    assert statuses.code_name(20000) == "OK"
    assert statuses.code_name(40402) == "TOPIC_NOT_FOUND"
    assert statuses.code_name(12345) == "12345"


def test_size_buckets_count_a_value_equal_to_a_bound_in_that_bucket() -> None:
    metrics = broker_metrics.BrokerMetrics()
    metrics.on_sent("T", [Message(topic="T", body=b"x" * n) for n in (1, 128, 129, 5_000_000)])
    found = samples(_text(metrics))

    def bucket(le: str) -> float:
        return found[("gannet_message_size_bytes_bucket", frozenset({("le", le)}))]

    assert bucket("128.0") == 2
    assert bucket("1024.0") == 3
    assert bucket("4.194304e+06") == 3
    assert bucket("+Inf") == 4
    assert found[("gannet_message_size_bytes_count", frozenset())] == 4
    assert found[("gannet_message_size_bytes_sum", frozenset())] == 1 + 128 + 129 + 5_000_000


def test_requests_past_the_limit_get_a_bare_503() -> None:
    import socket
    import time

    from prometheus_client import CollectorRegistry

    from gannet.node.metrics import http_serving

    from .conftest import http_get

    server = http_serving.MetricsServer(
        "127.0.0.1:0", CollectorRegistry(), lambda: None, requests_inflight_max=1
    )
    try:
        with socket.create_connection(("127.0.0.1", server.port)):  # holds the only slot
            status, _ = http_get(server.port, "/healthz")
        assert status == 503
        # The slot frees once the handler thread sees the held connection close.
        deadline = time.monotonic() + 10
        while http_get(server.port, "/healthz")[0] == 503:
            assert time.monotonic() < deadline, "the slot was never released"
    finally:
        server.close()


def test_recovery_truncation_is_counted_before_the_store_opens(tmp_path: Path) -> None:
    import struct

    from gannet.node.store.config import FlushMode, StoreConfig
    from gannet.node.store.message_store import MessageStore

    config = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    with MessageStore(config).open() as store:
        last = [store.put_message(Message(topic="T", body=b"x" * 500)) for _ in range(5)][-1]
    segment = tmp_path / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:  # tear the last record, as a crash mid-write does
        f.seek(last.wrote_offset + 300)
        f.write(b"\xab" * 100)
    with open(tmp_path / "checkpoint", "r+b") as f:  # flushed only up to the record before
        f.seek(40)
        f.write(struct.pack(">q", last.wrote_offset))
    (tmp_path / "abort").write_text("1")
    metrics = broker_metrics.BrokerMetrics()
    store = MessageStore(config)
    metrics.watch_store(store, lambda: False)
    before = samples(_text(metrics))
    assert before[("gannet_store_truncations_total", frozenset({("cause", "recovery")}))] == 0
    store.open(start_services=False)
    try:
        found = samples(_text(metrics))
    finally:
        store.close()
    recovery = frozenset({("cause", "recovery")})
    assert found[("gannet_store_truncations_total", recovery)] == 1
    assert found[("gannet_store_truncated_bytes_total", recovery)] == last.wrote_bytes
    divergence = frozenset({("cause", "divergence")})
    assert found[("gannet_store_truncations_total", divergence)] == 0
