"""An in-process broker serving the remoting protocol and the name-server requests on ephemeral
ports (plus Pop with short long polls, for the official gRPC consumer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.store.config import FlushMode, StoreConfig

QUICK = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    root = tmp_path_factory.mktemp("remoting-broker")
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    config = BrokerConfig(
        store=store,
        listen_port=0,
        remoting_port=0,
        nameserver_port=0,
        auto_create_topics=True,
        auto_create_groups=True,
    )
    running = threads.start(config, pop=receiving.factory(QUICK))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def remoting_endpoint(broker: threads.BrokerThread) -> str:
    return f"127.0.0.1:{broker.broker.remoting_port}"


@pytest.fixture(scope="module")
def nameserver_endpoint(broker: threads.BrokerThread) -> str:
    return broker.broker.nameserver_endpoint
