"""With auto-creation on, a producer's first use creates the topic (MIXED: every type)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.topic_configs import MessageType


@pytest.fixture
def auto_broker(tmp_path: Path) -> Iterator[threads.BrokerThread]:
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    running = threads.start(BrokerConfig(store=store, listen_port=0, auto_create_topics=True))
    yield running
    running.stop()


def test_unknown_topic_is_created_on_first_use(auto_broker: threads.BrokerThread) -> None:
    config = ClientConfiguration(auto_broker.endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, ("Fresh",))
    producer.startup()
    try:
        normal, fifo = Message(), Message()
        for msg in (normal, fifo):
            msg.topic = "Fresh"
            msg.body = b"x"
        fifo.message_group = "g"
        assert producer.send(normal).message_id
        assert producer.send(fifo).message_id
    finally:
        producer.shutdown()
    created = auto_broker.broker.store.topic_configs.get("Fresh")
    assert created is not None
    assert created.message_type is MessageType.MIXED
    assert created.write_queue_nums == 8
