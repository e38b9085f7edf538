"""mqadmin's admin requests on the remoting port, over real sockets: topic stats, consume stats,
subscription groups, connection lists, offset resets, topic deletion, runtime info, and their
refusals (missing header fields, unknown topics and groups, fields Gannet cannot set)."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import pytest

from gannet.node.broker import threads
from gannet.node.remoting import codes, messages
from gannet.node.remoting.codec import Command
from gannet.node.store.configs import fastjson as strict_fastjson

from .client import RawClient

pytestmark = pytest.mark.timeout(120)
BROKER = "broker-a"
_names = iter(range(1_000_000))


def name(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


def _queue_keys(text: str) -> str:
    """fastjson's MessageQueue map keys (``{{"brokerName":..}:v}``) as ``"topic|broker|q"``."""

    def key(match: re.Match[str]) -> str:
        fields = json.loads(match.group(1))
        return json.dumps(f"{fields['topic']}|{fields['brokerName']}|{fields['queueId']}") + ":"

    return re.sub(r"(\{\"brokerName\":[^{}]*\}):", key, text)


def parse(data: bytes) -> Any:
    """A body as fastjson writes it: bare integer keys and MessageQueue object keys read."""
    return strict_fastjson.loads(_queue_keys(data.decode()))


def body(command: Command) -> Any:
    """The body of a successful answer (:func:`parse`)."""
    assert command.code == codes.SUCCESS, (command.code, command.remark)
    return parse(command.body)


def send(client: RawClient, topic: str, queue_id: int, payload: bytes) -> None:
    properties = messages.format_properties({"UNIQ_KEY": messages.new_message_id()})
    ext = {"b": topic, "e": str(queue_id), "f": "0", "g": "0", "i": properties}
    answer = client.call(codes.SEND_MESSAGE_V2, ext, payload)
    assert answer.code == codes.SUCCESS, answer.remark


def wait_dispatched(client: RawClient, topic: str, queue_id: int, offset: int) -> None:
    """Long-poll the queue until the message at ``offset`` is there (dispatch follows a send)."""
    ext = {
        "consumerGroup": "RemAdminWaiter", "topic": topic, "queueId": str(queue_id),
        "queueOffset": str(offset), "maxMsgNums": "1", "sysFlag": "6", "commitOffset": "-1",
        "suspendTimeoutMillis": "10000", "subscription": "*", "expressionType": "TAG",
    }  # fmt: skip
    assert client.call(codes.PULL_MESSAGE, ext).code == codes.SUCCESS


def heartbeat(client: RawClient, client_id: str, group: str, topic: str, producer: str) -> None:
    data = {
        "clientID": client_id,
        "producerDataSet": [{"groupName": producer}],
        "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_ACTIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": topic, "subString": "TagA", "expressionType": "TAG",
                                     "tagsSet": ["TagA"], "subVersion": 7}],
        }],
    }  # fmt: skip
    request = Command(codes.HEART_BEAT, body=json.dumps(data).encode(), language="GO", version=9)
    assert client.response(client.send(request)).code == codes.SUCCESS


def group_config(**fields: object) -> bytes:
    """A SubscriptionGroupConfig as mqadmin updateSubGroup sends it (its defaults)."""
    config = {
        "consumeBroadcastEnable": False, "consumeEnable": True, "consumeFromMinEnable": False,
        "consumeMessageOrderly": False, "consumeTimeoutMinute": 15, "brokerId": 0,
        "groupRetryPolicy": {"type": "CUSTOMIZED"}, "groupSysFlag": 0,
        "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 16, "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1, "attributes": {},
    }  # fmt: skip
    config.update(fields)
    return json.dumps(config).encode()


def test_topic_stats_name_each_queue_with_offsets_and_last_store_time(
    remoting_endpoint: str,
) -> None:
    topic = name("RemAdmT")
    with RawClient(remoting_endpoint) as rc:
        send(rc, topic, 1, b"one")
        send(rc, topic, 1, b"two")
        wait_dispatched(rc, topic, 1, 1)
        stats = body(rc.call(codes.GET_TOPIC_STATS_INFO, {"topic": topic}))
        table = stats["offsetTable"]
        assert sorted(table) == sorted(f"{topic}|{BROKER}|{q}" for q in range(8))
        one = table[f"{topic}|{BROKER}|1"]
        assert (one["minOffset"], one["maxOffset"]) == (0, 2)
        assert one["lastUpdateTimestamp"] > 1_700_000_000_000
        assert table[f"{topic}|{BROKER}|0"] == {
            "lastUpdateTimestamp": 0, "maxOffset": 0, "minOffset": 0,
        }  # fmt: skip
        unknown = rc.call(codes.GET_TOPIC_STATS_INFO, {"topic": name("RemAdmNone")})
        assert unknown.code == codes.TOPIC_NOT_EXIST
        assert "does not exist" in (unknown.remark or "")
        missing = rc.call(codes.GET_TOPIC_STATS_INFO, {})
        assert (missing.code, missing.remark) == (
            codes.SYSTEM_ERROR,
            "header field topic is missing",
        )


def test_subscription_groups_created_listed_refused_and_deleted(remoting_endpoint: str) -> None:
    group = name("RemAdmG")
    with RawClient(remoting_endpoint) as rc:
        config = group_config(groupName=group, consumeMessageOrderly=True, retryMaxTimes=5)
        created = rc.call(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config)
        assert created.code == codes.SUCCESS, created.remark
        listed = body(rc.call(codes.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))["subscriptionGroupTable"]
        assert (listed[group]["consumeMessageOrderly"], listed[group]["retryMaxTimes"]) == (True, 5)
        disabled = group_config(groupName=group, consumeEnable=False, retryMaxTimes=7)
        assert rc.call(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=disabled).code == 0
        one = body(rc.call(codes.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group}))
        assert (one["consumeEnable"], one["consumeMessageOrderly"], one["retryMaxTimes"]) == (
            False, False, 7,
        )  # fmt: skip
        two_queues = group_config(groupName=group, retryQueueNums=2, brokerId=1)
        refused = rc.call(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=two_queues)
        assert refused.code == codes.SYSTEM_ERROR
        assert "retryQueueNums 2" in (refused.remark or "")
        assert "brokerId 1" in (refused.remark or "")
        junk = rc.call(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b"{not json")
        assert junk.code == codes.SYSTEM_ERROR
        assert "not a SubscriptionGroupConfig" in (junk.remark or "")
        huge = group_config(groupName=group, retryMaxTimes=2**40)
        too_many = rc.call(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=huge)
        assert (too_many.code, too_many.remark) == (
            codes.SYSTEM_ERROR, f"retryMaxTimes {2**40} is outside 0..{2**31 - 1}",
        )  # fmt: skip
        unnamed = rc.call(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group_config())
        assert "no groupName" in (unnamed.remark or "")
        keep = rc.call(codes.DELETE_SUBSCRIPTIONGROUP, {"groupName": group, "cleanOffset": "false"})
        assert keep.code == codes.SYSTEM_ERROR
        assert "-r true" in (keep.remark or "")
        delete = {"groupName": group, "cleanOffset": "true"}
        assert rc.call(codes.DELETE_SUBSCRIPTIONGROUP, delete).code == codes.SUCCESS
        assert rc.call(codes.DELETE_SUBSCRIPTIONGROUP, delete).code == codes.SUCCESS  # gone: done
        gone = rc.call(codes.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group})
        assert gone.code == codes.SUBSCRIPTION_GROUP_NOT_EXIST


def test_consume_stats_and_reset_by_time_notify_the_consumers(remoting_endpoint: str) -> None:
    topic, group = name("RemAdmT"), name("RemAdmG")
    with RawClient(remoting_endpoint) as rc, RawClient(remoting_endpoint) as consumer:
        created = rc.call(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group_config(
            groupName=group))  # fmt: skip
        assert created.code == codes.SUCCESS, created.remark
        for i in range(3):
            send(rc, topic, 2, f"m{i}".encode())
        wait_dispatched(rc, topic, 2, 2)
        commit = {"consumerGroup": group, "topic": topic, "queueId": "2", "commitOffset": "2"}
        assert rc.call(codes.UPDATE_CONSUMER_OFFSET, commit).code == codes.SUCCESS
        stats = body(rc.call(codes.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic}))
        queue = stats["offsetTable"][f"{topic}|{BROKER}|2"]
        assert (queue["brokerOffset"], queue["consumerOffset"]) == (3, 2)
        assert queue["lastTimestamp"] > 1_700_000_000_000  # the store time of message 1
        other = body(rc.call(codes.GET_CONSUME_STATS, {"consumerGroup": group, "topic": "RemNo"}))
        assert other["offsetTable"] == {}
        unknown = rc.call(codes.GET_CONSUME_STATS, {"consumerGroup": name("RemAdmNone")})
        assert unknown.code == codes.SUBSCRIPTION_GROUP_NOT_EXIST
        heartbeat(consumer, "cons-1", group, topic, "RemAdmP")
        reset = {"group": group, "topic": topic, "timestamp": "0", "isForce": "true"}
        done = rc.call(codes.INVOKE_BROKER_TO_RESET_OFFSET, reset)
        assert body(done)["offsetTable"][f"{topic}|{BROKER}|2"] == 0
        notice = consumer.read()  # the connected consumer is told where to continue
        assert (notice.code, notice.is_oneway) == (codes.RESET_CONSUMER_CLIENT_OFFSET, True)
        assert (notice.ext["topic"], notice.ext["group"]) == (topic, group)
        assert parse(notice.body)["offsetTable"][f"{topic}|{BROKER}|2"] == 0
        stats = body(rc.call(codes.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic}))
        assert stats["offsetTable"][f"{topic}|{BROKER}|2"]["consumerOffset"] == 0
        one_queue = {**reset, "queueId": "2", "offset": "1"}
        done = rc.call(codes.INVOKE_BROKER_TO_RESET_OFFSET, one_queue)
        assert body(done)["offsetTable"] == {f"{topic}|{BROKER}|2": 1}
        to_end = rc.call(codes.INVOKE_BROKER_TO_RESET_OFFSET, {**reset, "timestamp": "-1"})
        assert body(to_end)["offsetTable"][f"{topic}|{BROKER}|2"] == 3  # skip accumulated
        no_group = rc.call(codes.INVOKE_BROKER_TO_RESET_OFFSET, {**reset, "group": "RemNoG"})
        assert no_group.code == codes.SUBSCRIPTION_GROUP_NOT_EXIST
        no_topic = rc.call(codes.INVOKE_BROKER_TO_RESET_OFFSET, {**reset, "topic": "RemNoT"})
        assert no_topic.code == codes.TOPIC_NOT_EXIST
        bad = rc.call(codes.INVOKE_BROKER_TO_RESET_OFFSET, {**reset, "timestamp": "soon"})
        assert "timestamp = 'soon' is not a number" in (bad.remark or "")


def test_connection_lists_come_from_heartbeats(remoting_endpoint: str) -> None:
    group, topic, producer = name("RemAdmG"), name("RemAdmT"), name("RemAdmP")
    with RawClient(remoting_endpoint) as rc:
        with RawClient(remoting_endpoint) as client:
            heartbeat(client, "client-9", group, topic, producer)
            consumers = body(rc.call(codes.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}))
            [connection] = consumers["connectionSet"]
            assert (connection["clientId"], connection["language"], connection["version"]) == (
                "client-9", "GO", 9,
            )  # fmt: skip
            assert connection["clientAddr"].startswith("127.0.0.1:")
            assert consumers["consumeType"] == "CONSUME_ACTIVELY"
            assert consumers["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
            assert consumers["subscriptionTable"][topic]["subString"] == "TagA"
            producers = body(
                rc.call(codes.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": producer})
            )
            assert [c["clientId"] for c in producers["connectionSet"]] == ["client-9"]
            who = body(rc.call(codes.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}))
            assert group in who["groupList"]
            gone = {"clientID": "client-9", "producerGroup": producer}
            assert client.call(codes.UNREGISTER_CLIENT, gone).code == codes.SUCCESS
            no_producer = rc.call(codes.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": producer})
            assert no_producer.code == codes.SYSTEM_ERROR
        # the client's connection closed: its consumer group is offline
        offline = rc.call(codes.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        assert offline.code == codes.CONSUMER_NOT_ONLINE
        assert group in (offline.remark or "")


def test_delete_topic_runtime_info_and_topic_configs(remoting_endpoint: str) -> None:
    topic = name("RemAdmT")
    with RawClient(remoting_endpoint) as rc:
        send(rc, topic, 0, b"x")
        configs = body(rc.call(codes.GET_ALL_TOPIC_CONFIG))["topicConfigTable"]
        assert configs[topic]["writeQueueNums"] == 8
        assert rc.call(codes.DELETE_TOPIC_IN_BROKER, {"topic": topic}).code == codes.SUCCESS
        assert rc.call(codes.GET_TOPIC_CONFIG, {"topic": topic}).code == codes.TOPIC_NOT_EXIST
        # mqadmin then deletes at each name server, and at other members: already gone is done
        assert rc.call(codes.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}).code == codes.SUCCESS
        assert rc.call(codes.DELETE_TOPIC_IN_BROKER, {"topic": topic}).code == codes.SUCCESS
        assert rc.call(codes.DELETE_TOPIC_IN_BROKER, {}).code == codes.SYSTEM_ERROR
        table = body(rc.call(codes.GET_BROKER_RUNTIME_INFO))["table"]
        assert table["brokerVersionDesc"].startswith("Gannet ")
        assert int(table["commitLogMaxOffset"]) > 0
        assert 0 < float(table["commitLogDiskRatio"]) < 1
        assert int(table["earliestMessageTimeStamp"]) > 1_700_000_000_000
        assert table["gannetBrokerName"] == BROKER


def test_a_pull_at_an_offset_just_sent_to_waits_for_its_dispatch(
    broker: threads.BrokerThread, remoting_endpoint: str
) -> None:
    """A send is answered before dispatch may have put its message in the consume queue; a
    pull at that message's offset must not be answered PULL_OFFSET_MOVED (it was, under load:
    "offset 1 is outside 0..0")."""
    topic = name("RemAdmLag")
    dispatch = broker.broker.store.dispatch
    replies: list[Command] = []
    ext = {
        "consumerGroup": "RemAdminLag", "topic": topic, "queueId": "1", "queueOffset": "1",
        "maxMsgNums": "1", "sysFlag": "2", "subscription": "*", "expressionType": "TAG",
    }  # fmt: skip
    with RawClient(remoting_endpoint) as rc, RawClient(remoting_endpoint) as puller:
        send(rc, topic, 0, b"other queue")  # the topic exists
        wait_dispatched(rc, topic, 0, 0)
        caller = threading.Thread(
            target=lambda: replies.append(puller.call(codes.PULL_MESSAGE, ext))
        )
        with dispatch.paused():  # queue 1 stays empty
            send(rc, topic, 1, b"first")  # answered OK, not dispatched
            send(rc, topic, 1, b"second")
            caller.start()
            deadline = time.monotonic() + 15
            # Release dispatch once the pull waits for it (or has been answered already).
            while not replies and dispatch._dispatched_waiters == 0:
                assert time.monotonic() < deadline, "the pull neither answered nor waited"
                time.sleep(0.01)
        caller.join(timeout=15)
    assert [r.code for r in replies] == [codes.SUCCESS], [(r.code, r.remark) for r in replies]
