"""Fixtures for the security tests: a broker with an auth file, signed admin channels."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol import auth
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

ADMIN = ("root", "root-secret")
PUB_A = ("pub-a", "pub-a-secret")
SUB_A = ("sub-a", "sub-a-secret")
TOPIC_A = "TopicA"
TOPIC_B = "TopicB"
GROUP_A = "GroupA"
QUICK = receiving.ReceiveLimits(polling_ms_min=0, polling_ms_max=200)

ACCOUNTS = {
    "accounts": [
        {
            "access_key": ADMIN[0],
            "secret_key": ADMIN[1],
            "allow": [{"actions": ["pub", "sub", "admin"], "topics": ["*"], "groups": ["*"]}],
        },
        {
            "access_key": PUB_A[0],
            "secret_key": PUB_A[1],
            "allow": [{"actions": ["pub"], "topics": ["Topic[A]"]}],
        },
        {
            "access_key": SUB_A[0],
            "secret_key": SUB_A[1],
            "allow": [{"actions": ["sub"], "topics": [TOPIC_A], "groups": ["Group*"]}],
        },
    ]
}


def write_accounts(path: Path) -> Path:
    path.write_text(json.dumps(ACCOUNTS))
    return path


class Signed(auth.SigningInterceptor):
    """The admin clients' signing interceptor plus the client id v2 calls need."""

    def metadata(self) -> list[tuple[str, str]]:
        return [*super().metadata(), ("x-mq-client-id", "security-tests@1@0@x")]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[threads.BrokerThread]:
    """A broker requiring signatures, with TopicA, TopicB and GroupA created by the admin."""
    root = tmp_path_factory.mktemp("secured")
    store = StoreConfig.for_tests(root / "store", flush_mode=FlushMode.SYNC_FLUSH)
    config = BrokerConfig(
        store=store, listen_port=0, auth_file=write_accounts(root / "accounts.json")
    )
    running = threads.start(config, pop=receiving.factory(QUICK))
    with grpc.insecure_channel(running.endpoint) as raw:
        admin = admin_pb2_grpc.AdminStub(grpc.intercept_channel(raw, Signed(*ADMIN)))  # type: ignore[no-untyped-call]
        for topic in (TOPIC_A, TOPIC_B):
            admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=2), timeout=10)
        admin.CreateGroup(admin_pb2.CreateGroupRequest(name=GROUP_A), timeout=10)
    yield running
    running.stop()


def denials(broker: threads.BrokerThread) -> dict[str, int]:
    authenticator = broker.broker.authenticator
    assert authenticator is not None
    return dict(authenticator.denials_total)
