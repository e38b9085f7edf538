"""Fixtures of the pipeline tests: one local Spark session for the whole run, one store
written by the broker's own MessageStore (small files, so it has many segments, consume-queue
files and index files) that every job reads, and one in-process broker that the ``gannet``
data-source tests read from and write to."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import SYSFLAG_TRANSACTION_PREPARED_TYPE, Message
from gannet.node.store.message_store import MessageStore

TOPICS = ("Orders", "Payments")
MESSAGES = 700


@dataclass(frozen=True)
class WrittenMessage:
    topic: str
    queue_id: int
    queue_offset: int
    commit_offset: int
    body: bytes
    keys: list[str]
    tag: str | None
    uniq_key: str
    store_timestamp_ms: int
    consumable: bool


@dataclass(frozen=True)
class BrokerStore:
    config: StoreConfig
    written: list[WrittenMessage]


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("gannet-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _message(i: int) -> Message:
    topic = TOPICS[i % 6 == 0]  # Payments: one queue, many units (several CQ files)
    queue_id = 0 if topic == "Payments" else i % 3
    properties = {"TAGS": f"tag{i % 4}"}
    if i % 5:
        properties["KEYS"] = f"order-{i} customer-{i % 11}"
    sys_flag = SYSFLAG_TRANSACTION_PREPARED_TYPE if i % 97 == 13 else 0
    body = (f"message {i} ".encode() * 40)[: 50 + (i * 37) % 1400]
    return Message(
        topic=topic, body=body, queue_id=queue_id, properties=properties, sys_flag=sys_flag
    )


@pytest.fixture(scope="session")
def broker_store(tmp_path_factory: pytest.TempPathFactory) -> BrokerStore:
    root = tmp_path_factory.mktemp("broker")
    config = StoreConfig.for_tests(root, flush_mode=FlushMode.ASYNC_FLUSH)
    written: list[WrittenMessage] = []
    with MessageStore(config).open() as store:
        for i in range(MESSAGES):
            msg = _message(i)
            res = store.put_message(msg)
            written.append(
                WrittenMessage(
                    topic=msg.topic,
                    queue_id=msg.queue_id,
                    queue_offset=res.queue_offset,
                    commit_offset=res.wrote_offset,
                    body=msg.body,
                    keys=msg.keys,
                    tag=msg.tags,
                    uniq_key=msg.properties["UNIQ_KEY"],
                    store_timestamp_ms=res.store_timestamp_ms,
                    consumable=msg.sys_flag == 0,
                )
            )
        assert store.wait_dispatched(written[-1].commit_offset + 1)
    return BrokerStore(config, written)


# --------------------------------------------------------------------------- data source
CLIENT_METADATA = (("x-mq-client-id", "tests@1@0@pipeline"),)
_topic_names = itertools.count()


@pytest.fixture(scope="session")
def gannet_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    """One in-process broker on an ephemeral 127.0.0.1 port for the data-source tests."""
    root = tmp_path_factory.mktemp("source-broker")
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.ASYNC_FLUSH)
    running = threads.start(BrokerConfig(store=store, listen_port=0))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def gannet_admin(gannet_broker: threads.BrokerThread) -> Iterator[admin_pb2_grpc.AdminStub]:
    with grpc.insecure_channel(gannet_broker.endpoint) as channel:
        yield admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture(scope="session")
def gannet_spark(spark: object) -> object:
    """The session Spark with ``format("gannet")`` registered."""
    import gannet.pipeline

    gannet.pipeline.register(spark)
    return spark


def new_topic(
    admin: admin_pb2_grpc.AdminStub,
    queues: int = 3,
    kind: admin_pb2.MessageType = admin_pb2.NORMAL,
) -> str:
    name = f"DS-{next(_topic_names)}"
    admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=name, queue_nums=queues, message_type=kind),
        metadata=CLIENT_METADATA,
        timeout=10,
    )
    return name


def settle(broker: threads.BrokerThread) -> None:
    """Wait until every appended record is dispatched (consume queues, index)."""
    store = broker.broker.store
    assert store.wait_dispatched(store.commitlog.max_offset(), timeout_s=10)
