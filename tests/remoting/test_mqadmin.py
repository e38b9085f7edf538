"""mqadmin (rocketmq-tools 5.3.3, unchanged) against a broker's name-server and remoting ports, in
one JVM (``e2e/clients/mqadmin/MqAdminChecks.java``): updateTopic, topicList, topicRoute,
clusterList, brokerStatus, updateSubGroup, producerConnection, consumerConnection,
consumerProgress (the offsets a consumer committed), topicStatus, queryMsgByKey,
queryMsgByUniqueKey, resetOffsetByTime, deleteSubGroup and deleteTopic; then the topic
updateTopic created is used by the official Python gRPC producer."""

from __future__ import annotations

from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from gannet.node.broker import threads

from . import java_programs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CHECKS = (
    "updateTopic", "topicList", "topicRoute", "clusterList", "brokerStatus", "updateSubGroup",
    "producerConnection", "consumerConnection", "consumerProgress", "topicStatus",
    "queryMsgByKey", "queryMsgByUniqueKey", "resetOffsetByTime", "consumerProgress after reset",
    "deleteSubGroup", "deleteTopic",
)  # fmt: skip


def test_mqadmin_everyday_commands(
    broker: threads.BrokerThread, nameserver_endpoint: str, tmp_path: Path
) -> None:
    java_programs.lib(java_programs.MQADMIN)
    kept, topic, group = "MqaKept", "MqaTopic", "MqaGroup"
    code, lines = java_programs.run(
        java_programs.MQADMIN, tmp_path, nameserver_endpoint, kept, topic, group
    )
    failed = [line for line in lines if line.startswith("FAIL ")]
    passed = {line[3:] for line in lines if line.startswith("ok ")}
    report = "\n".join(lines[-200:])
    assert not failed, report
    assert code == 0, report
    assert set(CHECKS) <= passed, sorted(set(CHECKS) - passed)
    store = broker.broker.store
    assert store.topic_configs.get(topic) is None  # deleteTopic
    assert store.topic_configs.get(f"%RETRY%{group}") is None  # deleteSubGroup deletes it too
    assert store.group_configs.get(group) is None  # deleteSubGroup
    config = store.topic_configs.get(kept)
    assert config is not None
    assert config.write_queue_nums == 4
    # the topic mqadmin created serves the official gRPC client
    producer = Producer(ClientConfiguration(broker.endpoint, Credentials()), (kept,))
    producer.startup()
    try:
        message = Message()
        message.topic, message.body = kept, b"over gRPC"
        producer.send(message)
    finally:
        producer.shutdown()
    assert store.dispatch_caught_up()  # the acknowledged send is in its queue
    assert sum(store.max_offset_in_queue(kept, q) for q in range(4)) == 1
