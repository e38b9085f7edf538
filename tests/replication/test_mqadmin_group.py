"""mqadmin (rocketmq-tools 5.3.3, unchanged; ``e2e/clients/mqadmin/MqAdminChecks.java``, one JVM)
against a 3-member Raft group, with a follower's address as its name server: the admin writes
(updateTopic, updateSubGroup, resetOffsetByTime, deleteSubGroup, deleteTopic) reach the leader
and every member applies them; the reads (topicList, topicRoute, clusterList, brokerStatus,
consumerConnection, consumerProgress, topicStatus, queries) are answered alike by whichever
member the tool asks."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from gannet.node.broker.serving import BrokerConfig
from gannet.node.store.message_store import MessageStore
from tests.remoting import java_programs

from .test_remoting_routes import RemotingCluster, _serving_routes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CHECKS = (
    "updateTopic", "updateSubGroup", "topicList", "topicRoute", "clusterList", "brokerStatus",
    "producerConnection", "consumerConnection", "consumerProgress", "topicStatus",
    "queryMsgByKey", "queryMsgByUniqueKey", "resetOffsetByTime", "consumerProgress after reset",
    "deleteSubGroup", "deleteTopic",
)  # fmt: skip


class AdminCluster(RemotingCluster):
    def config(self, node_id: int) -> BrokerConfig:
        # the checks' producer sends to a topic nobody created, as to a RocketMQ broker
        return dataclasses.replace(super().config(node_id), auto_create_topics=True)


def _deleted(store: MessageStore, topic: str) -> bool:
    return store.topic_configs.get(topic) is None


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AdminCluster]:
    made = AdminCluster(tmp_path, 3)
    made.start_all()
    yield made
    made.stop_all()


def test_mqadmin_against_a_follower_of_a_group(cluster: AdminCluster, tmp_path: Path) -> None:
    java_programs.lib(java_programs.MQADMIN)
    leader = cluster.leader()
    _serving_routes(cluster, leader, list(cluster.nodes))
    follower = next(n for n in cluster.nodes if n != leader)
    kept, topic, group = "MqgKept", "MqgTopic", "MqgGroup"
    logs = tmp_path / "logs"
    logs.mkdir()
    code, lines = java_programs.run(
        java_programs.MQADMIN, logs, cluster.remoting(follower), kept, topic, group
    )
    failed = [line for line in lines if line.startswith("FAIL ")]
    passed = {line[3:] for line in lines if line.startswith("ok ")}
    report = "\n".join(lines[-300:])
    assert not failed, report
    assert code == 0, report
    assert set(CHECKS) <= passed, sorted(set(CHECKS) - passed)
    for node_id in cluster.nodes:  # the writes reached every member
        store = cluster.nodes[node_id].broker.store
        cluster.wait(node_id, functools.partial(_deleted, store, topic))
        config = store.topic_configs.get(kept)
        assert config is not None
        assert config.write_queue_nums == 4
        assert store.group_configs.get(group) is None
