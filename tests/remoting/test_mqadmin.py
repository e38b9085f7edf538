"""mqadmin (rocketmq-tools 5.3.3, unchanged) against a 3-member Raft group with a follower's
address as its name server, in one JVM (``e2e/clients/mqadmin/MqAdminChecks.java``):
updateTopic, topicList, topicRoute, clusterList, brokerStatus, updateSubGroup,
producerConnection, consumerConnection, consumerProgress (the offsets a consumer committed),
topicStatus, queryMsgByKey, queryMsgByUniqueKey, resetOffsetByTime, deleteSubGroup and
deleteTopic. The writes reach the leader (sent to the routes' brokerId 0 or forwarded by the
member asked) and every member applies them; every member answers the name-server reads alike.
Then the topic updateTopic created is used by the official Python gRPC producer through the
follower."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from gannet.node.broker.serving import BrokerConfig
from gannet.node.store.message_store import MessageStore
from tests.replication.test_remoting_routes import RemotingCluster, _serving_routes

from . import java_programs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CHECKS = (
    "updateTopic", "topicList", "topicRoute", "clusterList", "brokerStatus", "updateSubGroup",
    "producerConnection", "consumerConnection", "consumerProgress", "topicStatus",
    "queryMsgByKey", "queryMsgByUniqueKey", "resetOffsetByTime", "consumerProgress after reset",
    "deleteSubGroup", "deleteTopic",
)  # fmt: skip


class AdminCluster(RemotingCluster):
    def config(self, node_id: int) -> BrokerConfig:
        # the checks' producer sends to a topic nobody created, as to a RocketMQ broker
        return dataclasses.replace(super().config(node_id), auto_create_topics=True)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AdminCluster]:
    made = AdminCluster(tmp_path, 3)
    made.start_all()
    yield made
    made.stop_all()


def _applied(store: MessageStore, topic: str, group: str) -> bool:
    """The checks' deletes reached ``store`` (its group's retry topic goes with the group)."""
    gone = (topic, f"%RETRY%{group}")
    return all(store.topic_configs.get(t) is None for t in gone) and (
        store.group_configs.get(group) is None
    )


def test_mqadmin_everyday_commands_against_a_follower(
    cluster: AdminCluster, tmp_path: Path
) -> None:
    java_programs.lib(java_programs.MQADMIN)
    leader = cluster.leader()
    _serving_routes(cluster, leader, list(cluster.nodes))
    follower = next(n for n in cluster.nodes if n != leader)
    kept, topic, group = "MqaKept", "MqaTopic", "MqaGroup"
    logs = tmp_path / "logs"
    logs.mkdir()
    code, lines = java_programs.run(
        java_programs.MQADMIN, logs, cluster.remoting(follower), kept, topic, group
    )
    failed = [line for line in lines if line.startswith("FAIL ")]
    passed = {line[3:] for line in lines if line.startswith("ok ")}
    report = "\n".join(lines[-200:])
    assert not failed, report
    assert code == 0, report
    assert set(CHECKS) <= passed, sorted(set(CHECKS) - passed)
    for node_id, running in cluster.nodes.items():  # every member applied the writes
        store = running.broker.store
        cluster.wait(node_id, functools.partial(_applied, store, topic, group))
        config = store.topic_configs.get(kept)
        assert config is not None
        assert config.write_queue_nums == 4
    # the topic mqadmin created serves the official gRPC client (through the follower)
    endpoint = cluster.nodes[follower].endpoint
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (kept,))
    producer.startup()
    try:
        message = Message()
        message.topic, message.body = kept, b"over gRPC"
        producer.send(message)
    finally:
        producer.shutdown()
    store = cluster.nodes[leader].broker.store
    assert store.dispatch_caught_up()  # the acknowledged send is in its queue
    assert sum(store.max_offset_in_queue(kept, q) for q in range(4)) == 1
