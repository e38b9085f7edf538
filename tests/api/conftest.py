"""Fixtures for the API tests: an in-process broker on an ephemeral 127.0.0.1 port."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import service_pb2_grpc

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    root = tmp_path_factory.mktemp("broker")
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    running = threads.start(BrokerConfig(store=store, listen_port=0))
    yield running
    running.stop()


@contextlib.contextmanager
def pop_broker(root: Path, *pop_args: Any) -> Iterator[threads.BrokerThread]:
    """An in-process broker (sync flush, store under ``root``) serving Pop built by
    ``receiving.factory(*pop_args)``; stopped on exit."""
    store = StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)
    running = threads.start(
        BrokerConfig(store=store, listen_port=0), pop=receiving.factory(*pop_args)
    )
    try:
        yield running
    finally:
        running.stop()


CLIENT_ID = (("x-mq-client-id", "tests@1@0@api"),)


class _WithClientId(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds the x-mq-client-id header every RocketMQ client sends (the broker requires it)."""

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return details._replace(metadata=[*(details.metadata or ()), *CLIENT_ID])

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._details(details), requests)


@pytest.fixture(scope="module")
def raw_channel(broker: threads.BrokerThread) -> Iterator[grpc.Channel]:
    """A channel without the client-id header."""
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    with grpc.insecure_channel(broker.endpoint, options=options) as ch:
        yield ch


@pytest.fixture(scope="module")
def channel(raw_channel: grpc.Channel) -> grpc.Channel:
    return grpc.intercept_channel(raw_channel, _WithClientId())


@pytest.fixture(scope="module")
def admin(channel: grpc.Channel) -> admin_pb2_grpc.AdminStub:
    return admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def messaging(channel: grpc.Channel) -> service_pb2_grpc.MessagingServiceStub:
    return service_pb2_grpc.MessagingServiceStub(channel)


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture
def make_topic(admin: admin_pb2_grpc.AdminStub):
    def make(kind: admin_pb2.MessageType = admin_pb2.NORMAL, queues: int = 4) -> str:
        name = unique("T")
        admin.CreateTopic(
            admin_pb2.CreateTopicRequest(name=name, queue_nums=queues, message_type=kind)
        )
        return name

    return make


def settle(broker: threads.BrokerThread) -> None:
    """Wait until every appended record is dispatched (consume queues, index) — no sleeping."""
    store = broker.broker.store
    assert store.wait_dispatched(store.commitlog.max_offset(), timeout_s=10)


@pytest.fixture(autouse=True)
def no_server_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Bad input must never surface as a logged server error."""
    yield
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith(("gannet", "grpc"))
    ]
    assert errors == []
